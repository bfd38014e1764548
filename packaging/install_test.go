package packaging

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/appliance/store"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

const (
	unitPath      = "/lib/systemd/system/sosappliance.service"
	wantsLink     = "/etc/systemd/system/multi-user.target.wants/sosappliance.service"
	dshState      = "/var/lib/systemd/deb-systemd-helper-enabled/sosappliance.service.dsh-also"
	stateFile     = StateDir + "/state.db"
	operatorLine  = "\n# edited by the operator\n"
	dpkgLockTries = 60
)

var (
	pskFormat  = regexp.MustCompile(`^[0-9a-f]{64}\n$`)
	dpkgLocked = regexp.MustCompile(`locked by another process|unable to lock|unable to acquire the dpkg`)
)

// TestDebInstallLifecycle installs, reinstalls, removes and purges the host
// architecture's .deb on this machine with dpkg, checking what each step
// leaves behind. It only ever touches a sosappliance package it installed
// itself, and always purges it at the end.
func TestDebInstallLifecycle(t *testing.T) {
	version, pkgs := builtPackages(t)
	testsupport.Require(t, os.Geteuid() == 0, "installing a .deb needs root")
	testsupport.RequireBinaries(t, "dpkg", "dpkg-query", "systemd-analyze")
	for _, dep := range []string{"nftables", "iproute2"} {
		testsupport.Require(t, dpkgStatus(t, dep) == "installed", "%s (a dependency of the package) is not installed", dep)
	}
	if s := dpkgStatus(t, PackageName); s != "not-installed" {
		testsupport.Require(t, false, "a sosappliance package is already on this machine (dpkg status %s); this test installs and purges its own and leaves that one alone", s)
	}
	for _, dir := range []string{ConfigDir, StateDir} {
		if _, err := os.Lstat(dir); err == nil {
			testsupport.Require(t, false, "%s exists without the package; purging would delete it, so this test does not run", dir)
		}
	}

	var deb string
	for _, p := range pkgs {
		if p.format == "deb" && p.arch == runtime.GOARCH {
			deb = p.path
		}
	}
	testsupport.Require(t, deb != "", "no package is built for this machine's architecture %s", runtime.GOARCH)

	t.Cleanup(func() {
		if s := dpkgStatus(t, PackageName); s != "not-installed" {
			if out, err := dpkg("--purge", PackageName); err != nil {
				t.Errorf("cleanup: dpkg --purge: %v\n%s", err, out)
			}
		}
		// Checked absent before the test; whatever is left is ours.
		os.RemoveAll(ConfigDir)
		os.RemoveAll(StateDir)
	})

	mustDpkg(t, "--install", deb)
	if s := dpkgStatus(t, PackageName); s != "installed" {
		t.Fatalf("after dpkg --install the status is %q", s)
	}
	if got := strings.TrimSpace(run(t, "dpkg-query", "-W", "-f=${Version}", PackageName)); got != version+"-1" {
		t.Errorf("installed version %s, want %s-1", got, version)
	}
	checkMode(t, BinaryPath, 0o755)
	checkMode(t, ConfigDir, 0o755|os.ModeDir)
	checkMode(t, StateDir, 0o750|os.ModeDir)
	checkMode(t, ConfigPath, 0o644)
	checkMode(t, PSKPath, 0o600)
	psk := readFile(t, PSKPath)
	if !pskFormat.Match(psk) {
		t.Errorf("%s holds %q, want 64 hex digits and a newline", PSKPath, psk)
	}
	if st, err := os.Stat(PSKPath); err == nil {
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 0 || sys.Gid != 0 {
			t.Errorf("%s is owned by %d:%d, want root", PSKPath, sys.Uid, sys.Gid)
		}
	}
	if !bytes.Equal(readFile(t, ConfigPath), sourceFile(t, "sos.hcl.example")) {
		t.Errorf("%s is not the example configuration", ConfigPath)
	}

	// The shipped example is valid, and the unit file passes systemd's own
	// checks (ExecStart, ExecReload binaries, directives, man page).
	if out := run(t, BinaryPath, "validate", "-c", ConfigPath); !strings.Contains(out, "is valid") {
		t.Errorf("validate: %s", out)
	}
	verify := exec.Command("systemd-analyze", "verify", unitPath)
	if out, err := verify.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitPath, err, out)
	}
	// Installing must not enable (or start) the service.
	if _, err := os.Lstat(wantsLink); err == nil {
		t.Errorf("installing enabled the service: %s exists", wantsLink)
	}
	if _, err := exec.LookPath("man"); err == nil {
		if out := run(t, "man", "-w", PackageName); strings.TrimSpace(out) != ManPath {
			t.Errorf("man -w sosappliance = %q, want %s", out, ManPath)
		}
	}

	// Reinstalling over an edited configuration keeps the operator's file
	// and the key (postinst runs as for an upgrade).
	edited := append(readFile(t, ConfigPath), operatorLine...)
	writeFile(t, ConfigPath, edited, 0o644)
	mustDpkg(t, "--install", deb)
	if !bytes.Equal(readFile(t, ConfigPath), edited) {
		t.Error("reinstalling replaced the operator's sos.hcl")
	}
	if !bytes.Equal(readFile(t, PSKPath), psk) {
		t.Error("reinstalling replaced the pre-shared key")
	}

	// Remove: the program goes (rolling back a state database that
	// records nothing), configuration, key and state stay.
	lineage := stateLineage(t, stateFile)
	mustDpkg(t, "--remove", PackageName)
	if s := dpkgStatus(t, PackageName); s != "config-files" {
		t.Errorf("after dpkg --remove the status is %q, want config-files", s)
	}
	for _, gone := range []string{BinaryPath, unitPath, ManPath} {
		if _, err := os.Lstat(gone); err == nil {
			t.Errorf("dpkg --remove left %s", gone)
		}
	}
	if !bytes.Equal(readFile(t, ConfigPath), edited) {
		t.Error("dpkg --remove did not keep the edited sos.hcl")
	}
	if !bytes.Equal(readFile(t, PSKPath), psk) {
		t.Error("dpkg --remove did not keep the pre-shared key")
	}
	if got := stateLineage(t, stateFile); got != lineage {
		t.Errorf("dpkg --remove did not keep the state store: its lineage is %s, was %s", got, lineage)
	}

	// Purge: nothing of the package is left.
	mustDpkg(t, "--purge", PackageName)
	checkPurged(t)

	// Purging straight from installed runs prerm, postrm remove and postrm
	// purge in one go, and must leave the same nothing.
	mustDpkg(t, "--install", deb)
	if !pskFormat.Match(readFile(t, PSKPath)) {
		t.Errorf("fresh install after purge: bad key %q", readFile(t, PSKPath))
	}
	if bytes.Equal(readFile(t, PSKPath), psk) {
		t.Error("fresh install after purge reused the purged key")
	}
	mustDpkg(t, "--purge", PackageName)
	checkPurged(t)
}

// stateLineage opens (or makes) the state database at path, as the
// daemon would, and returns its lineage.
func stateLineage(t *testing.T, path string) string {
	t.Helper()
	st, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	return st.Lineage()
}

func checkPurged(t *testing.T) {
	t.Helper()
	if s := dpkgStatus(t, PackageName); s != "not-installed" {
		t.Errorf("after dpkg --purge the status is %q", s)
	}
	for _, gone := range []string{ConfigDir, StateDir, BinaryPath, unitPath, dshState, wantsLink} {
		if _, err := os.Lstat(gone); err == nil {
			t.Errorf("dpkg --purge left %s", gone)
		}
	}
}

// dpkgStatus is the package's dpkg status word (installed, config-files,
// ...) or "not-installed" when dpkg does not know it.
func dpkgStatus(t *testing.T, pkg string) string {
	t.Helper()
	out, err := exec.Command("dpkg-query", "-W", "-f=${db:Status-Status}", pkg).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 1 {
			return "not-installed"
		}
		t.Fatalf("dpkg-query %s: %v", pkg, err)
	}
	return strings.TrimSpace(string(out))
}

// dpkg runs dpkg, waiting while another process (apt on a shared machine)
// holds the dpkg lock.
func dpkg(args ...string) (string, error) {
	for attempt := 1; ; attempt++ {
		out, err := exec.Command("dpkg", args...).CombinedOutput()
		if err != nil && attempt < dpkgLockTries && dpkgLocked.Match(out) {
			time.Sleep(time.Second)
			continue
		}
		return string(out), err
	}
}

func mustDpkg(t *testing.T, args ...string) {
	t.Helper()
	out, err := dpkg(args...)
	if err != nil {
		t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("dpkg %s:\n%s", strings.Join(args, " "), out)
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Error(err)
		return
	}
	if got := st.Mode() & (os.ModeDir | os.ModePerm); got != want {
		t.Errorf("%s has mode %v, want %v", path, got, want)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

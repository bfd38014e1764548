package packaging

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

const rpmUnitPath = "/usr/lib/systemd/system/" + unitName

// TestRPMScriptletsInContainer installs, upgrades and erases the host
// architecture's .rpm with rpm inside a Debian container whose PID 1 is
// systemd, so the scriptlets' systemctl calls meet a real service manager.
// rpm runs with --nodeps: its database there is empty, the dependencies
// (nftables, iproute2) are installed by dpkg.
func TestRPMScriptletsInContainer(t *testing.T) {
	version, pkgs := builtPackages(t)
	old := hostPackage(t, pkgs, "rpm")
	newVersion := version + ".1"
	next := upgradeRPM(t, newVersion)
	c := bootContainer(t, "sosr")
	old, next = c.copyIn(t, old, "/root"), c.copyIn(t, next, "/root")
	rpmVersion := func() string {
		out, err := c.exec("rpm", "--query", "--queryformat=%{VERSION}-%{RELEASE}", PackageName)
		if err != nil {
			return "not installed"
		}
		return out
	}

	// Install: %post creates the key and the directories, reloads systemd
	// and starts nothing.
	out := c.run(t, "rpm", "--install", "--nodeps", old)
	t.Logf("rpm --install:\n%s", out)
	if !strings.Contains(out, "then 'systemctl enable --now sosappliance'") {
		t.Errorf("%%post did not print its first-install hint:\n%s", out)
	}
	if got := rpmVersion(); got != version+"-1" {
		t.Errorf("installed %s, want %s-1", got, version)
	}
	checkMode(t, c.path(ConfigDir), 0o755|os.ModeDir)
	checkMode(t, c.path(StateDir), 0o750|os.ModeDir)
	checkMode(t, c.path(ConfigPath), 0o644)
	checkMode(t, c.path(PSKPath), 0o600)
	psk := readFile(t, c.path(PSKPath))
	if !pskFormat.Match(psk) {
		t.Errorf("%s holds %q, want 64 hex digits and a newline", PSKPath, psk)
	}
	if st, err := os.Stat(c.path(PSKPath)); err == nil {
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 0 || sys.Gid != 0 {
			t.Errorf("%s is owned by %d:%d, want root", PSKPath, sys.Uid, sys.Gid)
		}
	}
	if leftovers, _ := filepath.Glob(c.path(PSKPath + ".new.*")); len(leftovers) > 0 {
		t.Errorf("%%post left %q", leftovers)
	}
	if !bytes.Equal(readFile(t, c.path(ConfigPath)), sourceFile(t, "sos.hcl.example")) {
		t.Errorf("%s is not the example configuration", ConfigPath)
	}
	st := c.unit(t, unitName, "LoadState", "FragmentPath", "UnitFileState", "ActiveState")
	// Debian's /lib is /usr/lib, and systemd finds the unit under /lib first.
	fragment := strings.TrimSpace(c.run(t, "readlink", "--canonicalize", st["FragmentPath"]))
	if st["LoadState"] != "loaded" || fragment != rpmUnitPath || st["UnitFileState"] != "disabled" || st["ActiveState"] != "inactive" {
		t.Errorf("after rpm --install the unit is %v; want loaded from %s, disabled, inactive", st, rpmUnitPath)
	}

	// The operator makes the node an agent and enables the service.
	cfg := makeAgent(t, c)
	c.run(t, "systemctl", "enable", "--now", unitName)
	st = c.unit(t, unitName, "ActiveState", "MainPID")
	if st["ActiveState"] != "active" {
		t.Fatalf("systemctl enable --now: %v", st)
	}
	oldPID := st["MainPID"]
	if _, err := os.Stat(c.path(stateFile)); err != nil {
		t.Errorf("the running daemon has no state store: %v", err)
	}

	// Upgrade: the edited configuration (unchanged in the package, so no
	// .rpmnew either) and the key stay; %postun restarts the running
	// daemon with the new binary; the unit stays enabled.
	out = c.run(t, "rpm", "--upgrade", "--nodeps", next)
	t.Logf("rpm --upgrade:\n%s", out)
	if strings.Contains(out, "systemctl enable --now") {
		t.Errorf("%%post printed the first-install hint on upgrade:\n%s", out)
	}
	if got := rpmVersion(); got != newVersion+"-1" {
		t.Errorf("after upgrade %s is installed, want %s-1", got, newVersion)
	}
	if !bytes.Equal(readFile(t, c.path(ConfigPath)), cfg) {
		t.Error("the upgrade replaced the operator's sos.hcl")
	}
	if _, err := os.Lstat(c.path(ConfigPath + ".rpmnew")); err == nil {
		t.Error("the upgrade wrote sos.hcl.rpmnew for a file the package did not change")
	}
	if !bytes.Equal(readFile(t, c.path(PSKPath)), psk) {
		t.Error("the upgrade replaced the pre-shared key")
	}
	st = c.unit(t, unitName, "ActiveState", "MainPID", "UnitFileState")
	if st["ActiveState"] != "active" || st["MainPID"] == oldPID || st["UnitFileState"] != "enabled" {
		t.Errorf("after the upgrade the unit is %v; want active under a new MainPID (was %s), enabled", st, oldPID)
	}
	if got := c.run(t, "readlink", "/proc/"+st["MainPID"]+"/exe"); strings.TrimSpace(got) != BinaryPath {
		t.Errorf("the daemon runs %q, want the upgraded %s", got, BinaryPath)
	}
	if got := c.run(t, BinaryPath, "version"); got != "sosappliance "+newVersion+"\n" {
		t.Errorf("upgraded binary says %q", got)
	}

	// Erase: %preun stops and disables the daemon; the edited
	// configuration is saved as .rpmsave; key and state stay.
	out = c.run(t, "rpm", "--erase", PackageName)
	t.Logf("rpm --erase:\n%s", out)
	if got := rpmVersion(); got != "not installed" {
		t.Errorf("after rpm --erase, %s is installed", got)
	}
	st = c.unit(t, unitName, "ActiveState", "LoadState")
	if st["ActiveState"] != "inactive" || st["LoadState"] != "not-found" {
		t.Errorf("after rpm --erase the unit is %v; want inactive, not-found", st)
	}
	for _, gone := range []string{BinaryPath, rpmUnitPath, ManPath, ConfigPath, wantsLink} {
		if _, err := os.Lstat(c.path(gone)); err == nil {
			t.Errorf("rpm --erase left %s", gone)
		}
	}
	if !bytes.Equal(readFile(t, c.path(ConfigPath+".rpmsave")), cfg) {
		t.Error("rpm --erase did not save the edited sos.hcl as sos.hcl.rpmsave")
	}
	if !bytes.Equal(readFile(t, c.path(PSKPath)), psk) {
		t.Error("rpm --erase did not keep the pre-shared key")
	}
	if _, err := os.Stat(c.path(stateFile)); err != nil {
		t.Errorf("rpm --erase did not keep the state store: %v", err)
	}
}

// upgradeRPM builds the host architecture's .rpm again as version, newer
// than the one builtPackages made.
func upgradeRPM(t *testing.T, version string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	defer func() { t.Logf("built the upgrade package in %v", time.Since(start).Round(time.Second)) }()
	paths, err := Build(ctx, Options{RepoDir: "..", OutDir: t.TempDir(), Version: version,
		Arches: []string{runtime.GOARCH}, Formats: []string{"rpm"}})
	if err != nil {
		t.Fatalf("build the upgrade package: %v", err)
	}
	if len(paths) != 1 {
		t.Fatalf("built %q for the upgrade, want one package", paths)
	}
	return paths[0]
}

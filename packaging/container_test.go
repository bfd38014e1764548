package packaging

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// The Debian root the container tests boot is made once by debootstrap and
// kept between runs. Its directory name is the recipe's stamp: change the
// suite or the package list and bump debianRootVersion, and the next run
// builds a new root and removes the old one.
const (
	debianCacheDir    = "/var/cache/sosappliance-test"
	debianSuite       = "bookworm"
	debianRootVersion = "1"
	// systemd as PID 1; what the packages depend on (nftables, iproute2),
	// since the container has no network to fetch them later; rpm for the
	// rpm scriptlet test.
	debianInclude = "systemd,dbus,systemd-sysv,procps,nftables,iproute2,rpm"
	// debianMirror is used when apt's sources name no Debian mirror.
	debianMirror = "http://deb.debian.org/debian"
)

// containerHostname is the container's hostname and so the daemon's node
// name; testdata/container-agent.hcl gives that node its role.
const containerHostname = "sos-agent"

// container is a Debian system booted by systemd-nspawn with systemd as
// PID 1, on a throw-away overlay over the cached root, in its own network
// namespace with one veth (host0 inside).
type container struct {
	Name string // machine name; the host end of the veth is "ve-" + Name
	Root string // the overlay the container runs on, as the host sees it
	pid1 int    // the container's systemd, as the host sees it
}

// bootContainer boots a container and stops it, unmounts its overlay and
// removes its veth when the test ends, however it ends.
func bootContainer(t *testing.T, prefix string) *container {
	t.Helper()
	testsupport.RequireRoot(t, "systemd-nspawn", "debootstrap", "nsenter", "mount", "umount", "ip")
	lower := debianRoot(t)

	// nspawn names the host end of the veth "ve-" + machine name when that
	// fits in 15 bytes; keep it so, so that cleanup can find it.
	c := &container{Name: fmt.Sprintf("%s%d", prefix, os.Getpid()%100000)}
	if len(c.Name) > 12 {
		t.Fatalf("machine name %q is too long for a predictable veth name", c.Name)
	}
	dir := t.TempDir()
	c.Root = filepath.Join(dir, "root")
	for _, d := range []string{"upper", "work", "root"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, filepath.Join(dir, "upper"), filepath.Join(dir, "work"))
	if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", opts, c.Root).CombinedOutput(); err != nil {
		testsupport.RequireNoError(t, fmt.Errorf("overlay over the Debian root: %v: %s", err, out))
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(c.Root, 0); err != nil {
			t.Errorf("cleanup: unmount %s: %v", c.Root, err)
			_ = syscall.Unmount(c.Root, syscall.MNT_DETACH)
		}
	})

	// --register=no --keep-unit: the host has no systemd to register with.
	cmd := exec.Command("systemd-nspawn", "-D", c.Root, "--machine="+c.Name, "--hostname="+containerHostname,
		"--register=no", "--keep-unit", "--boot", "--console=passive", "--network-veth")
	// Should the test binary die without its cleanups (a -timeout panic),
	// nspawn still gets the SIGTERM that powers the container off.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	nspawn := testsupport.StartDaemon(t, cmd)
	t.Cleanup(func() {
		// SIGTERM asks the container to power off; nspawn then removes
		// the veth and its own mounts. If it does not, kill the lot.
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-nspawn.Done():
		case <-time.After(30 * time.Second):
			t.Errorf("cleanup: container %s did not power off; killing it", c.Name)
			if c.pid1 > 0 {
				_ = syscall.Kill(c.pid1, syscall.SIGKILL)
			}
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-nspawn.Done()
		}
		if exec.Command("ip", "link", "show", "ve-"+c.Name).Run() == nil {
			t.Errorf("cleanup: nspawn left the veth ve-%s; deleting it", c.Name)
			_ = exec.Command("ip", "link", "del", "ve-"+c.Name).Run()
		}
	})

	testsupport.Eventually(t, 30*time.Second, "container's systemd started", func() bool {
		select {
		case <-nspawn.Done():
			t.Fatalf("systemd-nspawn exited: %v\n%s", nspawn.Err(), nspawn.Output.String())
		default:
		}
		c.pid1 = childNamed(cmd.Process.Pid, "systemd")
		return c.pid1 > 0
	})
	testsupport.Eventually(t, 30*time.Second, "container's systemd listening", func() bool {
		_, err := c.exec("test", "-S", "/run/systemd/private")
		return err == nil
	})
	// is-system-running --wait returns once boot is over: "running", or
	// "degraded" if some unit of the minimal system failed, which is logged
	// but is none of this test's business.
	state, _ := c.exec("systemctl", "is-system-running", "--wait")
	if state = strings.TrimSpace(state); state != "running" {
		failed, _ := c.exec("systemctl", "--failed", "--no-legend")
		if state != "degraded" {
			t.Fatalf("container system is %q\n%s", state, failed)
		}
		t.Logf("container system is degraded:\n%s", failed)
	}
	return c
}

// childNamed returns the pid of a child of parent whose command is name,
// or 0.
func childNamed(parent int, name string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces, not ")".
		open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(string(stat[end+1:]))
		if len(fields) > 1 && string(stat[open+1:end]) == name && fields[1] == strconv.Itoa(parent) {
			return pid
		}
	}
	return 0
}

// exec runs a command inside the container, in all its namespaces, and
// returns its combined output.
func (c *container) exec(args ...string) (string, error) {
	// The bound only keeps a hung command from hanging the test.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(c.pid1), "-a", "--"}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "SYSTEMD_PAGER=", "TERM=dumb"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// run is exec that fails the test when the command fails.
func (c *container) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.exec(args...)
	if err != nil {
		t.Fatalf("in the container: %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// path is a path inside the container as the host sees it.
func (c *container) path(p string) string { return filepath.Join(c.Root, p) }

// copyIn copies a host file into the container and returns its path there.
func (c *container) copyIn(t *testing.T, src, dir string) string {
	t.Helper()
	dst := filepath.Join(dir, filepath.Base(src))
	writeFile(t, c.path(dst), readFile(t, src), 0o644)
	return dst
}

// unit reads properties of a unit with systemctl show.
func (c *container) unit(t *testing.T, name string, props ...string) map[string]string {
	t.Helper()
	out := c.run(t, "systemctl", "show", name, "--property="+strings.Join(props, ","))
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	return got
}

// debianRoot returns the cached Debian root, building it with debootstrap
// if this recipe's root is not there yet. The cache is shared by test
// binaries running at once: a lock held exclusively while building and
// shared while a test boots from the root keeps a rebuild from removing a
// root in use.
func debianRoot(t *testing.T) string {
	t.Helper()
	if err := os.MkdirAll(debianCacheDir, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(debianCacheDir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("debian-%s-minbase-v%s", debianSuite, debianRootVersion)
	root := filepath.Join(debianCacheDir, name)
	if _, err := os.Stat(filepath.Join(root, "etc/os-release")); err != nil {
		buildDebianRoot(t, root)
	} else {
		t.Logf("Debian root from the cache: %s", root)
	}
	// Other recipes' roots are stale; nobody holds them, since we hold the
	// lock exclusively.
	entries, _ := os.ReadDir(debianCacheDir)
	for _, e := range entries {
		if e.IsDir() && e.Name() != name {
			t.Logf("removing stale cached root %s", e.Name())
			os.RemoveAll(filepath.Join(debianCacheDir, e.Name()))
		}
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	return root
}

func buildDebianRoot(t *testing.T, root string) {
	t.Helper()
	mirror := aptDebianMirror(debianSuite)
	tmp := root + ".new"
	os.RemoveAll(tmp)
	start := time.Now()
	t.Logf("debootstrap %s from %s into %s (once; cached afterwards)", debianSuite, mirror, root)
	cmd := exec.Command("debootstrap", "--variant=minbase", "--include="+debianInclude, debianSuite, tmp, mirror)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		testsupport.RequireNoError(t, fmt.Errorf("debootstrap %s from %s: %v\n%s", debianSuite, mirror, err, lastLines(out, 20)))
	}
	// Without /etc/hostname the container keeps the hostname nspawn gives
	// it (debootstrap copies the host's). The downloaded .debs are not
	// needed again.
	os.Remove(filepath.Join(tmp, "etc/hostname"))
	debs, _ := filepath.Glob(filepath.Join(tmp, "var/cache/apt/archives/*.deb"))
	for _, d := range debs {
		os.Remove(d)
	}
	if err := os.Rename(tmp, root); err != nil {
		t.Fatal(err)
	}
	t.Logf("debootstrap took %v", time.Since(start).Round(time.Second))
}

// aptDebianMirror finds the Debian mirror apt is configured with for suite,
// in deb822 .sources files or one-line sources.list entries, so debootstrap
// uses the same (and, on a machine that reaches only that mirror, one that
// works).
func aptDebianMirror(suite string) string {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, stanza := range strings.Split(string(b), "\n\n") {
			fields := map[string]string{}
			for _, line := range strings.Split(stanza, "\n") {
				if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
					fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
				}
			}
			if strings.Contains(fields["types"], "deb") && hasWord(fields["suites"], suite) {
				if uris := strings.Fields(fields["uris"]); len(uris) > 0 {
					return uris[0]
				}
			}
		}
	}
	lists, _ := filepath.Glob("/etc/apt/sources.list.d/*.list")
	for _, f := range append([]string{"/etc/apt/sources.list"}, lists...) {
		file, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			// deb [options] URI suite components...
			fields := strings.Fields(sc.Text())
			if len(fields) > 0 && fields[0] == "deb" {
				fields = fields[1:]
				if len(fields) > 0 && strings.HasPrefix(fields[0], "[") {
					for len(fields) > 0 && !strings.HasSuffix(fields[0], "]") {
						fields = fields[1:]
					}
					fields = fields[min(1, len(fields)):]
				}
				if len(fields) >= 2 && fields[1] == suite {
					file.Close()
					return fields[0]
				}
			}
		}
		file.Close()
	}
	return debianMirror
}

func hasWord(list, word string) bool {
	for _, w := range strings.Fields(list) {
		if w == word {
			return true
		}
	}
	return false
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

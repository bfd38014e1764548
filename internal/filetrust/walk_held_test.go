package filetrust

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// Symlink loops and long chains end with an error, not a hang or a
// stack overflow: a link to itself, two links to each other, a link to
// itself with a trailing "/..", a chain of 41 (one over the kernel's 40)
// and one whose targets are long. A chain of 40 is followed, as the
// kernel does. Written by review (helper-89); it passed on 45557b1.
func TestSymlinkLoopsEndWithAnError(t *testing.T) {
	dir := walkTree(t)
	l := func(target, name string) string {
		p := filepath.Join(dir, name)
		testsupport.RequireNoError(t, os.Symlink(target, p))
		return p
	}
	self := l("self", "self")
	a := l("b", "a")
	l("a", "b")
	up := l("up/..", "up")
	long := l(strings.Repeat("./", 1000)+"long", "long")
	real := rootConfig(t, dir)
	prev := real
	for i := range 41 {
		prev = l(prev, "chain"+string(rune('A'+i/26))+string(rune('a'+i%26)))
	}
	for _, p := range []string{self, a, up, up + "/x", long, prev, self + "/", self + "/../sos.hcl"} {
		if err := Check("config file", p); err == nil {
			t.Errorf("Check(%s) accepted a symlink loop", p)
		}
	}
	forty := filepath.Join(dir, "forty")
	testsupport.RequireNoError(t, os.Symlink(filepath.Join(dir, "chainBm"), forty)) // 39 links below it
	if _, err := os.ReadFile(forty); err != nil {
		t.Fatalf("the kernel does not follow 40 links: %v", err)
	}
	if err := Check("config file", forty); err != nil {
		t.Errorf("a chain of 40 links, which the kernel follows, refused: %v", err)
	}
}

// Spellings of one path all resolve like the kernel's: "//", ".",
// ".." at "/", "..", after a symlink with a relative target, a trailing
// slash on a directory symlink. Each reaches user 65534's directory and
// is refused, or root's and is accepted. Written by review (helper-89);
// it passed on 45557b1.
func TestPathSpellings(t *testing.T) {
	dir := walkTree(t)
	real := rootConfig(t, dir) // dir/etc/sos.hcl
	etc := filepath.Dir(real)
	evil := filepath.Join(dir, "evil")
	mkdirOwned(t, filepath.Join(evil, "sub"), 0o755, nobody, nobody)
	mkdirOwned(t, evil, 0o755, nobody, nobody)
	testsupport.RequireNoError(t, os.WriteFile(filepath.Join(evil, "sos.hcl"), []byte("x"), 0o644))
	lib := filepath.Join(dir, "lib")
	mkdirOwned(t, lib, 0o755, 0, 0)
	// lib/rel -> ../evil/sub (relative), lib/etc -> ../etc
	testsupport.RequireNoError(t, os.Symlink("../evil/sub", filepath.Join(lib, "rel")))
	testsupport.RequireNoError(t, os.Symlink("../etc", filepath.Join(lib, "etc")))
	for _, tc := range []struct {
		path   string
		accept bool
	}{
		{"/" + real, true},
		{strings.ReplaceAll(real, "/", "//"), true},
		{strings.ReplaceAll(real, "/", "/./"), true},
		{"/../../.." + real, true},
		{lib + "/etc/sos.hcl", true},
		{lib + "/etc/./../etc//sos.hcl", true},
		{lib + "/etc/", true},
		{lib + "/rel/../sos.hcl", false},
		{lib + "/rel/../../etc/sos.hcl", false}, // through evil on the way
		{lib + "/rel/", false},
		{evil + "/../etc/sos.hcl", false},
	} {
		_, kerr := os.Stat(tc.path)
		err := Check("config file", tc.path)
		if (err == nil) != tc.accept {
			t.Errorf("Check(%s) = %v, want accepted %v (the kernel: %v)", tc.path, err, tc.accept, kerr)
		}
	}
	_ = etc
}

// A path longer than PATH_MAX, or one that becomes so through its
// links, is refused with an error (fail closed), and names with a
// newline are walked as any other. Written by review (helper-89); it
// passed on 45557b1.
func TestLongPathsAndOddNames(t *testing.T) {
	dir := walkTree(t)
	real := rootConfig(t, dir)
	long := strings.Repeat("/", 4100) + real[1:]
	if err := Check("config file", long); err != nil {
		t.Errorf("Check of %d slashes then the file refused: %v", 4100, err)
	}
	// 45 directories of 100-byte names, made one at a time from inside:
	// the path is longer than PATH_MAX. Refused, as from a working
	// directory there (the relative name the kernel could open).
	deep := dir
	t.Chdir(dir)
	for range 45 {
		name := strings.Repeat("d", 100)
		testsupport.RequireNoError(t, os.Mkdir(name, 0o755))
		testsupport.RequireNoError(t, os.Chown(name, nobody, nobody))
		testsupport.RequireNoError(t, os.Chdir(name))
		deep = deep + "/" + name
	}
	testsupport.RequireNoError(t, os.WriteFile("sos.hcl", []byte("x"), 0o644))
	if err := Check("config file", deep+"/sos.hcl"); err == nil {
		t.Errorf("Check of a %d-byte path accepted it", len(deep))
	}
	t.Setenv("PWD", "")
	if err := Check("config file", "sos.hcl"); err == nil {
		t.Errorf("Check(sos.hcl) from a %d-byte working directory of 65534's accepted it", len(deep))
	}
	nl := filepath.Join(dir, "a\nb")
	mkdirOwned(t, nl, 0o755, nobody, nobody)
	testsupport.RequireNoError(t, os.WriteFile(filepath.Join(nl, "sos.hcl"), []byte("x"), 0o644))
	if err := Check("config file", filepath.Join(nl, "sos.hcl")); err == nil {
		t.Errorf("a directory of 65534's with a newline in its name accepted")
	}
}

// Real layouts are taken: a config under a symlinked /etc (etc ->
// usr/etc, all root's), root's symlink in /tmp to it, a /run-like 0755
// tmpfs directory, a state database under /tmp/<root's 0700>/ and one
// whose directory is to be made under a /var/lib-like 0755. Written by
// review (helper-89); it passed on 45557b1.
func TestRealLayoutsAreAccepted(t *testing.T) {
	dir := walkTree(t)
	usrEtc := filepath.Join(dir, "usr", "etc", "sosappliance")
	mkdirOwned(t, usrEtc, 0o755, 0, 0)
	testsupport.RequireNoError(t, os.WriteFile(filepath.Join(usrEtc, "sos.hcl"), []byte("x"), 0o644))
	testsupport.RequireNoError(t, os.Symlink("usr/etc", filepath.Join(dir, "etc")))
	link, err := os.MkdirTemp("/tmp", "sostest-")
	testsupport.RequireNoError(t, err)
	t.Cleanup(func() { os.RemoveAll(link) })
	testsupport.RequireNoError(t, os.Chmod(link, 0o700))
	tmpLink := link + ".lnk"
	testsupport.RequireNoError(t, os.Symlink(filepath.Join(dir, "etc/sosappliance/sos.hcl"), tmpLink))
	t.Cleanup(func() { os.Remove(tmpLink) })
	varLib := filepath.Join(dir, "var", "lib")
	mkdirOwned(t, varLib, 0o755, 0, 0)
	run, err := os.MkdirTemp("/run", "sostest-") // as RuntimeDirectory= makes it: 0700 root
	testsupport.RequireNoError(t, err)
	t.Cleanup(func() { os.RemoveAll(run) })
	testsupport.RequireNoError(t, os.WriteFile(filepath.Join(run, "sos.hcl"), []byte("x"), 0o600))
	for _, tc := range []struct{ what, path string }{
		{"config file", filepath.Join(dir, "etc/sosappliance/sos.hcl")},
		{"config file", tmpLink},
		{"config file", filepath.Join(run, "sos.hcl")},
		{"state database", filepath.Join(link, "state.db")},
		{"state database", filepath.Join(varLib, "sosappliance", "state.db")},
	} {
		if err := Check(tc.what, tc.path); err != nil {
			t.Errorf("%s %s refused: %v", tc.what, tc.path, err)
		}
	}
	// This host's own: /etc, and Debian's key layout (0710
	// root:ssl-cert directory, 0640 root:ssl-cert key).
	if err := Check("config file", "/etc/hostname"); err != nil {
		t.Errorf("/etc/hostname refused: %v", err)
	}
	if key := "/etc/ssl/private/ssl-cert-snakeoil.key"; fileExists(key) {
		if err := CheckSecret("tls key_file", key); err != nil {
			t.Errorf("%s refused: %v", key, err)
		}
	}
}

func fileExists(path string) bool { _, err := os.Stat(path); return err == nil }

// Mounts: user 65534's directory bind-mounted over root's (in a mount
// namespace of the test's) is refused, what is under it being
// 65534's; a tmpfs of root's mounted on a mount point 65534 owns is
// accepted, and 65534 cannot change what is in it (it cannot unmount).
// Written by review (helper-89); it passed on 45557b1.
func TestMounts(t *testing.T) {
	testsupport.RequireRoot(t, "unshare", "mount")
	dir := walkTree(t)
	real := rootConfig(t, dir)
	evil := filepath.Join(dir, "evil")
	mkdirOwned(t, evil, 0o755, nobody, nobody)
	testsupport.RequireNoError(t, os.WriteFile(filepath.Join(evil, "sos.hcl"), []byte("x"), 0o644))
	point := filepath.Join(dir, "point")
	mkdirOwned(t, point, 0o755, nobody, nobody)
	self, err := os.Executable()
	testsupport.RequireNoError(t, err)
	script := "mount --bind " + evil + " " + filepath.Dir(real) + " && mount -t tmpfs -o mode=0755,uid=0 none " + point +
		" && echo root > " + point + "/sos.hcl && SOS_TEST_MOUNTS=" + dir + " " + self + " -test.run='^TestMountsInside$' -test.count=1"
	out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Errorf("in a mount namespace: %v\n%s", err, out)
	}
}

// TestMountsInside is TestMounts's check, run in its mount namespace.
func TestMountsInside(t *testing.T) {
	dir := os.Getenv("SOS_TEST_MOUNTS")
	if dir == "" {
		return // run by TestMounts only
	}
	if err := Check("config file", filepath.Join(dir, "etc", "sos.hcl")); err == nil {
		t.Errorf("a directory of 65534's bind-mounted over root's accepted")
	}
	p := filepath.Join(dir, "point", "sos.hcl")
	if err := Check("config file", p); err != nil {
		t.Errorf("root's tmpfs on 65534's mount point refused: %v", err)
	}
	if out, err := testsupport.AsOtherUser(t, "sh", "-c", "echo nobody > "+p+" || mv "+p+" "+p+".x || umount "+filepath.Dir(p)).CombinedOutput(); err == nil {
		t.Errorf("65534 changed root's tmpfs on its mount point: %s", out)
	}
}

// /proc/<pid>/root of a process of user 65534's in a user and mount
// namespace of its own, where it mounted a tmpfs over root's config
// directory and wrote its config: the kernel would read that, the walk
// follows readlink's "/" to root's file, but /proc/<pid> is 65534's
// (its mount namespace's root is 65534), so the path is refused.
// Written by review (helper-89); it passed on 45557b1.
func TestProcRootOfAnotherUsersMountNamespace(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv", "unshare", "mkfifo")
	dir := walkTree(t)
	real := rootConfig(t, dir)
	fifo := filepath.Join(dir, "ready")
	testsupport.RequireNoError(t, exec.Command("mkfifo", "-m", "0666", fifo).Run())
	ns := testsupport.AsOtherUser(t, "unshare", "-Urm", "sh", "-c",
		"mount -t tmpfs none "+filepath.Dir(real)+" && echo 'nobody was here' > "+real+" && echo ready > "+fifo+" && exec sleep 60")
	testsupport.RequireNoError(t, ns.Start())
	t.Cleanup(func() { _ = ns.Process.Kill(); _ = ns.Wait() })
	b, err := os.ReadFile(fifo)
	testsupport.Require(t, err == nil && strings.Contains(string(b), "ready"), "the namespace: %v %q", err, b)

	path := "/proc/" + strconv.Itoa(ns.Process.Pid) + "/root" + real
	got, _ := os.ReadFile(path)
	testsupport.Require(t, strings.Contains(string(got), "nobody"), "the kernel reads %q at %s", got, path)
	if err := Check("config file", path); err == nil {
		t.Errorf("Check(%s) accepted it; it reads %q", path, got)
	}
}

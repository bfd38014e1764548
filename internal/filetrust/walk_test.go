package filetrust

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// walkTree makes a temp dir that user 65534 can traverse (its
// parents up to the temp dir 0755) and returns it.
func walkTree(t *testing.T) string {
	t.Helper()
	testsupport.RequireRoot(t, "setpriv")
	dir := testsupport.SharedTempDir(t)
	return dir
}

// walkAsNobody runs script as uid/gid 65534 with no other groups.
func walkAsNobody(t *testing.T, script string) {
	t.Helper()
	out, err := testsupport.AsOtherUser(t, "sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("as user 65534: %s: %v\n%s", script, err, out)
	}
}

// mkdirOwned makes dir with mode and owner.
func mkdirOwned(t *testing.T, dir string, mode os.FileMode, uid, gid int) {
	t.Helper()
	testsupport.RequireNoError(t, os.MkdirAll(dir, 0o755))
	testsupport.RequireNoError(t, os.Chown(dir, uid, gid))
	testsupport.RequireNoError(t, os.Chmod(dir, mode))
}

// rootConfig makes root's real config (0644 in a root 0755 dir) and
// returns its path.
func rootConfig(t *testing.T, dir string) string {
	t.Helper()
	real := filepath.Join(dir, "etc", "sos.hcl")
	mkdirOwned(t, filepath.Dir(real), 0o755, 0, 0)
	testsupport.RequireNoError(t, os.WriteFile(real, []byte("root's config\n"), 0o644))
	testsupport.RequireNoError(t, os.Chmod(real, 0o644))
	return real
}

// hijacked: if Check accepted path, user 65534 then runs script and
// path no longer reads as root's content: the check let through a path
// that another user can redirect. It fails the test in that case.
func hijacked(t *testing.T, path, script string) {
	t.Helper()
	err := Check("config file", path)
	if err != nil {
		return // refused: held
	}
	walkAsNobody(t, script)
	got, _ := os.ReadFile(path)
	if strings.Contains(string(got), "nobody") {
		t.Errorf("Check(%s) accepted it, then user 65534 made it read %q: a path another user can redirect passed", path, got)
	} else {
		t.Errorf("Check(%s) accepted a path user 65534 can redirect (reads %q)", path, got)
	}
}

// A symlink in the middle of a chain, in a directory that user 65534
// owns, is neither the path's own directory nor the resolved one's, so
// Check never looks at it; 65534 repoints it to its own file.
// Found by review (helper-86); on d23a2ff Check accepts.
func TestSymlinkChainThroughAnotherUsersDirectory(t *testing.T) {
	dir := walkTree(t)
	real := rootConfig(t, dir)
	evil := filepath.Join(dir, "evil")
	mkdirOwned(t, evil, 0o755, nobody, nobody)
	middle := filepath.Join(evil, "link")
	testsupport.RequireNoError(t, os.Symlink(real, middle))
	testsupport.RequireNoError(t, os.Lchown(middle, nobody, nobody))
	cfgDir := filepath.Join(dir, "cfg")
	mkdirOwned(t, cfgDir, 0o755, 0, 0)
	path := filepath.Join(cfgDir, "sos.hcl")
	testsupport.RequireNoError(t, os.Symlink(middle, path))

	hijacked(t, path, "echo 'nobody was here' > "+evil+"/mine && ln -sfn "+evil+"/mine "+middle+".new && mv -T "+middle+".new "+middle)
}

// The same through directory symlinks: cfg -> evil/dlink -> etc, with
// evil user 65534's. The lexical walk stats cfg (following it to etc),
// the resolved walk starts at etc: evil is not looked at.
// Found by review (helper-86); on d23a2ff Check accepts.
func TestDirectorySymlinkChainThroughAnotherUsersDirectory(t *testing.T) {
	dir := walkTree(t)
	real := rootConfig(t, dir)
	evil := filepath.Join(dir, "evil")
	mkdirOwned(t, evil, 0o755, nobody, nobody)
	dlink := filepath.Join(evil, "dlink")
	testsupport.RequireNoError(t, os.Symlink(filepath.Dir(real), dlink))
	testsupport.RequireNoError(t, os.Lchown(dlink, nobody, nobody))
	cfg := filepath.Join(dir, "cfg")
	testsupport.RequireNoError(t, os.Symlink(dlink, cfg))
	path := filepath.Join(cfg, "sos.hcl")

	hijacked(t, path, "mkdir "+evil+"/mine && echo 'nobody was here' > "+evil+"/mine/sos.hcl && ln -sfn "+evil+"/mine "+dlink+".new && mv -T "+dlink+".new "+dlink)
}

// In a sticky directory others can write (/tmp; or a 1775 directory of
// a group 65534 is in), the sticky bit keeps them from replacing root's
// file but not their own symlink: Check follows a symlink that 65534
// owns to a root file and never looks at the symlink's owner. In a
// world-writable one, fs.protected_symlinks=1 would keep root from
// following it (it is 0 on this machine); it does nothing in a
// group-writable one.
// Found by review (helper-86); on d23a2ff Check accepts both.
func TestAnotherUsersSymlinkInStickyDirectory(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode os.FileMode
		gid  int
	}{
		{"world-writable sticky, as /tmp", 0o777 | os.ModeSticky, 0},
		{"group-writable sticky, group 65534", 0o775 | os.ModeSticky, nobody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := walkTree(t)
			real := rootConfig(t, dir)
			shared := filepath.Join(dir, "shared")
			mkdirOwned(t, shared, tc.mode, 0, tc.gid)
			path := filepath.Join(shared, "sos.hcl")
			walkAsNobody(t, "ln -s "+real+" "+path)
			hijacked(t, path, "echo 'nobody was here' > "+shared+"/mine && ln -sfn "+shared+"/mine "+path+".new && mv -T "+path+".new "+path)
		})
	}
}

// A state database not made yet, named through root's symlink that
// dangles into a directory of user 65534's: Check looks only at the
// link's own directory, so the database would be made where 65534 can
// remove or swap it.
// Found by review (helper-86); on d23a2ff Check accepts.
func TestDanglingSymlinkIntoAnotherUsersDirectory(t *testing.T) {
	dir := walkTree(t)
	evil := filepath.Join(dir, "evil")
	mkdirOwned(t, evil, 0o755, nobody, nobody)
	lib := filepath.Join(dir, "lib")
	mkdirOwned(t, lib, 0o750, 0, 0)
	path := filepath.Join(lib, "state.db")
	testsupport.RequireNoError(t, os.Symlink(filepath.Join(evil, "state.db"), path))
	if err := Check("state database", path); err == nil {
		t.Errorf("Check(%s) accepted a missing database whose symlink leads into %s, owned by uid 65534", path, evil)
	}
}

// `..` after a symlink goes up from the link's target (the kernel's
// way), not lexically: a path cfg/link/../sos.hcl with link -> evil/sub
// is evil/sos.hcl. Written by review (helper-86); it passed on d23a2ff: EvalSymlinks resolves it so, and
// evil is checked.
func TestDotDotAfterSymlink(t *testing.T) {
	dir := walkTree(t)
	evil := filepath.Join(dir, "evil")
	mkdirOwned(t, filepath.Join(evil, "sub"), 0o755, nobody, nobody)
	mkdirOwned(t, evil, 0o755, nobody, nobody)
	testsupport.RequireNoError(t, os.WriteFile(filepath.Join(evil, "sos.hcl"), []byte("x"), 0o644))
	cfg := filepath.Join(dir, "cfg")
	mkdirOwned(t, cfg, 0o755, 0, 0)
	testsupport.RequireNoError(t, os.Symlink(filepath.Join(evil, "sub"), filepath.Join(cfg, "link")))
	path := cfg + "/link/../sos.hcl"
	if err := Check("config file", path); err == nil {
		t.Errorf("Check(%s) accepted a root file in a directory of uid 65534's", path)
	}
}

// A path relative to a working directory user 65534 owns. Written by review (helper-86); it passed.
func TestRelativePathInAnotherUsersWorkingDirectory(t *testing.T) {
	dir := walkTree(t)
	evil := filepath.Join(dir, "evil")
	mkdirOwned(t, evil, 0o755, nobody, nobody)
	testsupport.RequireNoError(t, os.WriteFile(filepath.Join(evil, "sos.hcl"), []byte("x"), 0o644))
	t.Chdir(evil)
	if err := Check("config file", "sos.hcl"); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("Check(sos.hcl) in a cwd of uid 65534's: %v", err)
	}
}

// A directory of root's, 0775 root:root, whose access ACL gives user
// 65534 rwx (the mask rwx): 65534 can replace the file in it (the
// attack mounted), and Check refuses it. Written by review (helper-86); it passed.
func TestDirectoryACL(t *testing.T) {
	dir := walkTree(t)
	sub := filepath.Join(dir, "sub")
	mkdirOwned(t, sub, 0o775, 0, 0)
	file := filepath.Join(sub, "sos.hcl")
	testsupport.RequireNoError(t, os.WriteFile(file, []byte("root's\n"), 0o644))
	const userObj, other, none = 0x01, 0x20, 0xffffffff
	setACL(t, sub, aclEntry{userObj, 7, none}, aclEntry{aclGroupObj, 5, none}, aclEntry{other, 5, none},
		aclEntry{aclUser, 7, nobody}, aclEntry{aclMask, 7, none})
	err := Check("config file", file)
	walkAsNobody(t, "echo 'nobody was here' > "+sub+"/x && mv -f "+sub+"/x "+file)
	if err == nil || !strings.Contains(err.Error(), "writable by user 65534 through its ACL") {
		t.Errorf("a directory whose ACL lets 65534 write (it replaced the file): %v", err)
	}
}

// What a normal install has, and what an operator does, is accepted:
// /etc/sosappliance (0755 root) with sos.hcl 0644; /var/lib/sosappliance
// 0750 with its database 0600, or not made yet; a config root keeps in
// /tmp; one a group manages read-only (0640 root:sosadmins, gid 65534
// here); a pipe. Written by review (helper-86); it passed.
func TestNormalInstallIsAccepted(t *testing.T) {
	dir := walkTree(t)
	etc := filepath.Join(dir, "etc", "sosappliance")
	mkdirOwned(t, etc, 0o755, 0, 0)
	cfg := filepath.Join(etc, "sos.hcl")
	testsupport.RequireNoError(t, os.WriteFile(cfg, []byte("x"), 0o644))
	lib := filepath.Join(dir, "var", "lib", "sosappliance")
	mkdirOwned(t, lib, 0o750, 0, 0)
	db := filepath.Join(lib, "state.db")
	testsupport.RequireNoError(t, os.WriteFile(db, []byte("x"), 0o600))
	grp := filepath.Join(dir, "grp")
	mkdirOwned(t, grp, 0o750, 0, nobody)
	grpCfg := filepath.Join(grp, "sos.hcl")
	testsupport.RequireNoError(t, os.WriteFile(grpCfg, []byte("x"), 0o640))
	testsupport.RequireNoError(t, os.Chown(grpCfg, 0, nobody))
	testsupport.RequireNoError(t, os.Chmod(grpCfg, 0o640))
	tmp, err := os.CreateTemp("/tmp", "walk-*.hcl")
	testsupport.RequireNoError(t, err)
	tmp.Close()
	t.Cleanup(func() { os.Remove(tmp.Name()) })
	for what, path := range map[string]string{
		"config file":               cfg,
		"state database":            db,
		"state database to be made": filepath.Join(lib, "new", "state.db"),
		"config in /tmp":            tmp.Name(),
		"group-managed 0640 config": grpCfg,
		"config through /proc/self": "/proc/self/root" + cfg,
	} {
		if err := Check(what, path); err != nil {
			t.Errorf("%s %s refused: %v", what, path, err)
		}
	}
}

// A refusal for a directory names no command, where one for the file
// does (chmod o-w FILE): "keep the file in directories only root can
// write" leaves the operator to work out chown root DIR, chmod g-w DIR
// or chmod o-w DIR (or +t). The directory's fix, like the file's, should
// be a command on the directory named.
// Found by review (helper-86); on d23a2ff no "chmod"/"chown" of the directory in the message.
func TestDirectoryRefusalNamesTheFix(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode os.FileMode
		uid  int
		gid  int
		want string
	}{
		{"another user's", 0o755, nobody, 0, "chown root "},
		{"another group can write", 0o775, 0, nobody, "chmod g-w "},
		{"every user can write", 0o777, 0, 0, "chmod o-w "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := walkTree(t)
			sub := filepath.Join(dir, "sub")
			mkdirOwned(t, sub, tc.mode, tc.uid, tc.gid)
			file := filepath.Join(sub, "sos.hcl")
			testsupport.RequireNoError(t, os.WriteFile(file, []byte("x"), 0o644))
			err := Check("config file", file)
			if err == nil || !strings.Contains(err.Error(), tc.want+sub) {
				t.Errorf("a directory %s: the message does not say %q:\n%v", tc.name, tc.want+sub, err)
			}
		})
	}
}

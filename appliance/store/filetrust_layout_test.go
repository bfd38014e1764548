package store

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// Open takes a state_path under /tmp/<root's 0700 directory>/, and one
// whose directory is not made yet under a root 0755 directory (the
// first run, /var/lib/sosappliance to be made): both are root's to
// keep. Written by review (helper-89); it passed on 45557b1.
func TestStateUnderRootsPrivateDirectoryIsAccepted(t *testing.T) {
	testsupport.RequireRoot(t)
	private, err := os.MkdirTemp("/tmp", "sostest-")
	testsupport.RequireNoError(t, err)
	t.Cleanup(func() { os.RemoveAll(private) })
	testsupport.RequireNoError(t, os.Chmod(private, 0o700))
	varLib := filepath.Join(testsupport.SharedTempDir(t), "var", "lib")
	testsupport.RequireNoError(t, os.MkdirAll(varLib, 0o755))
	for _, path := range []string{
		filepath.Join(private, "state.db"),
		filepath.Join(varLib, "sosappliance", "state.db"),
	} {
		s, err := Open(path, Options{})
		if err != nil {
			t.Errorf("Open(%s) refused: %v", path, err)
			continue
		}
		testsupport.RequireNoError(t, s.Close())
		if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("the state directory %s: %v %v", filepath.Dir(path), fi.Mode(), err)
		}
	}
}

// A state_path with ".." after a directory still to be made:
// shared/root/new/../../state.db, with shared sticky and open to every
// user (/tmp), root a directory of root's, new not made yet. The walk
// ends at the missing "new" and passes without looking at where the
// ".." lead (shared, where user 65534 put its own state.db). It holds
// all the same: Open's MkdirAll takes the lexical directory (shared),
// so "new" is never made, and the open fails; nobody else can make
// "new" in root's 0700 directory. Written by review (helper-89); it
// passed on 45557b1.
func TestStatePathDotDotAfterMissingDirectory(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv")
	dir := testsupport.SharedTempDir(t)
	shared := filepath.Join(dir, "shared")
	testsupport.RequireNoError(t, os.Mkdir(shared, 0o755))
	testsupport.RequireNoError(t, os.Chmod(shared, 0o777|os.ModeSticky))
	private := filepath.Join(shared, "root")
	testsupport.RequireNoError(t, os.Mkdir(private, 0o700))
	planted := filepath.Join(shared, "state.db")
	out, err := testsupport.AsOtherUser(t, "sh", "-c", "umask 0; : > "+planted).CombinedOutput()
	testsupport.Require(t, err == nil, "as 65534: %v %s", err, out)

	path := private + "/new/../../state.db"
	s, err := Open(path, Options{})
	if err != nil {
		return // refused: held
	}
	testsupport.RequireNoError(t, s.Close())
	var st syscall.Stat_t
	testsupport.RequireNoError(t, syscall.Stat(planted, &st))
	if st.Uid != 0 || st.Size > 0 {
		t.Errorf("Open(%s) accepted it and wrote root's state database into %s, user 65534's file (uid %d, %d bytes, mode %o)", path, planted, st.Uid, st.Size, st.Mode&0o777)
	}
}

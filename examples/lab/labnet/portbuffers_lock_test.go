package labnet

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// The lab runs as root and takes a lock while it raises the machine's
// socket buffer defaults: os.TempDir()/sosappliance-lab-sysctl.lock,
// opened with O_CREATE and no O_NOFOLLOW or O_EXCL, in /tmp where every
// user can make that name first. (Size 0 here: nothing is below it, so
// no sysctl is written.) Found by review (helper-90). Keep the lock in
// the lab's own state directory (/run/sosappliance-lab, 0700), or open it
// with O_NOFOLLOW and refuse one that is not root's.

// TestLabLockThroughTheirSymlink: another user's symlink at the lock's
// name makes the lab (root) create the file it points to: an empty file
// of root's wherever they like (/etc/nologin shuts every other user out).
// fs.protected_symlinks is 0 on this host, as on many.
func TestLabLockThroughTheirSymlink(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv")
	shared := testsupport.SharedTempDir(t)
	testsupport.RequireNoError(t, os.Chmod(shared, 0o777|os.ModeSticky))
	t.Setenv("TMPDIR", shared)
	private := t.TempDir()
	target := filepath.Join(private, "nologin")
	lock := filepath.Join(shared, "sosappliance-lab-sysctl.lock")
	if out, err := testsupport.AsOtherUser(t, "ln", "-s", target, lock).CombinedOutput(); err != nil {
		t.Fatalf("as another user: %v\n%s", err, out)
	}
	err := withSocketBufferDefaults(0, func() error { return nil })
	t.Logf("withSocketBufferDefaults: %v", err)
	if _, err := os.Lstat(target); err == nil {
		t.Errorf("the lab created %s, where another user's symlink %s pointed", target, lock)
	}
}

// TestLabLockHeldByAnotherUser: another user makes the lock file and
// holds it: every lab start waits for them for good (flock, no timeout).
func TestLabLockHeldByAnotherUser(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv", "perl")
	shared := testsupport.SharedTempDir(t)
	testsupport.RequireNoError(t, os.Chmod(shared, 0o777|os.ModeSticky))
	t.Setenv("TMPDIR", shared)
	lock := filepath.Join(shared, "sosappliance-lab-sysctl.lock")
	holder := testsupport.AsOtherUser(t, "perl", "-e", `open(F, ">>", $ARGV[0]) or die $!; flock(F, 2) or die $!; print "held\n"; $| = 1; sleep 120`, lock)
	var said testsupport.LockedBuffer
	holder.Stdout = &said
	testsupport.RequireNoError(t, holder.Start())
	released := false
	release := func() {
		if !released {
			released = true
			_ = holder.Process.Kill()
			_ = holder.Wait()
		}
	}
	t.Cleanup(release)
	testsupport.Eventually(t, 5*time.Second, "the other user's lock", func() bool { return said.String() != "" })
	done := make(chan error, 1)
	go func() { done <- withSocketBufferDefaults(0, func() error { return nil }) }()
	select {
	case err := <-done:
		t.Logf("withSocketBufferDefaults: %v", err)
	case <-time.After(10 * time.Second):
		t.Errorf("the lab still waits after 10 s on %s, a lock file another user made and holds", lock)
		release()
		<-done
	}
}

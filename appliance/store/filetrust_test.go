package store

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// The state_path is root's symlink (in a root 0750 directory) that
// dangles into a directory user 65534 owns: filetrust looks only at the
// link's own directory, so Open makes the database in 65534's directory,
// where 65534 can take it away (rollback then has nothing to restore)
// or put back an older copy of root's (still root's, so accepted: the
// old records are what rollback writes back).
// Found by review (helper-86); on d23a2ff Open accepts, and 65534 moves the database away.
func TestStateThroughSymlinkIntoAnotherUsersDirectory(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv")
	dir := testsupport.SharedTempDir(t)
	evil := filepath.Join(dir, "evil")
	testsupport.RequireNoError(t, os.Mkdir(evil, 0o755))
	testsupport.RequireNoError(t, os.Chown(evil, 65534, 65534))
	lib := filepath.Join(dir, "lib")
	testsupport.RequireNoError(t, os.Mkdir(lib, 0o750))
	path := filepath.Join(lib, "state.db")
	testsupport.RequireNoError(t, os.Symlink(filepath.Join(evil, "state.db"), path))

	s, err := Open(path, Options{})
	if err != nil {
		return // refused: held
	}
	testsupport.RequireNoError(t, s.Close())
	t.Errorf("Open(%s) made the state database in %s, a directory of uid 65534's", path, evil)
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"mv", filepath.Join(evil, "state.db"), filepath.Join(evil, "kept.db")).CombinedOutput()
	if err != nil {
		t.Fatalf("mv as 65534: %v %s", err, out)
	}
	if _, err := Open(path, Options{MustExist: true}); errors.Is(err, ErrNoDatabase) {
		t.Errorf("user 65534 took the state database away: rollback's Open now says %v", err)
	}
}

// A state_path in a sticky directory others can write (/tmp, /dev/shm)
// and not made yet: filetrust passes a missing file, and Open then
// creates it with bbolt's O_CREATE, which opens a file of someone
// else's put there in between (fs.protected_regular, 0 on this
// machine, is what would stop it). User 65534 puts its own empty file
// there in a loop; when Open lands on it, root's records are in a file
// 65534 owns and can rewrite, and apply and rollback write them back as
// root. A race; bounded to 1000 opens.
// Found by review (helper-86); on d23a2ff Open opens 65534's file.
func TestStateCreatedInStickyDirectoryRace(t *testing.T) {
	testsupport.RequireRoot(t, "setpriv", "perl")
	dir := testsupport.SharedTempDir(t)
	shared := filepath.Join(dir, "shared")
	testsupport.RequireNoError(t, os.Mkdir(shared, 0o755))
	testsupport.RequireNoError(t, os.Chmod(shared, 0o777|os.ModeSticky))
	path := filepath.Join(shared, "state.db")
	plant := testsupport.AsOtherUser(t, "perl", "-e", `
use Fcntl; my $p = $ARGV[0];
for my $i (1 .. 50_000_000) { if (sysopen(my $f, $p, O_CREAT|O_EXCL|O_WRONLY, 0666)) { close $f; unlink $p; } }`, path)
	testsupport.RequireNoError(t, plant.Start())
	t.Cleanup(func() { _ = plant.Process.Kill(); _ = plant.Wait() })

	for i := range 1000 {
		s, err := Open(path, Options{})
		if err != nil {
			continue // Check saw 65534's file: refused
		}
		testsupport.RequireNoError(t, s.Close())
		// A file root made stays (the sticky bit keeps 65534 from
		// removing it); one missing or 65534's now was 65534's.
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil || st.Uid != 0 {
			t.Errorf("open %d: the state database Open made and used was user 65534's file (now: uid %d, %v)", i+1, st.Uid, err)
			return
		}
		testsupport.RequireNoError(t, os.Remove(path))
	}
	t.Logf("1000 opens: none landed on 65534's file (the race held this time)")
}

// The state database's directory holds the agents' founded-<agent>
// files too, written as root. Before, a database in a sticky directory
// every user can write (/tmp, or a dir like it) was taken, and another
// user planted a symlink at founded-a1.new (root then truncated the file
// it named) or a FIFO at founded-a1 (the daemon's start blocked on it for
// good, status with it). Found by review (helper-90); Open now refuses
// such a directory.
func TestStateInASharedStickyDirectoryRefused(t *testing.T) {
	dir := testsupport.SharedTempDir(t)
	shared := filepath.Join(dir, "shared")
	testsupport.RequireNoError(t, os.Mkdir(shared, 0o755))
	testsupport.RequireNoError(t, os.Chmod(shared, 0o777|os.ModeSticky))
	path := filepath.Join(shared, "state.db")
	// Made by root before it became shared: Check alone takes it.
	testsupport.RequireNoError(t, os.WriteFile(path, nil, 0o600))
	testsupport.RequireNoError(t, os.Remove(path))
	s, err := Open(path, Options{})
	if err == nil {
		s.Close()
		t.Fatalf("a state database in %s (1777) was opened", shared)
	}
	if !strings.Contains(err.Error(), "is one every user can add files to") && !strings.Contains(err.Error(), "others can write (mode 1777") && !strings.Contains(err.Error(), "one others can write") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	// An existing database of root's there too (a missing name is
	// refused by the walk already).
	private := filepath.Join(dir, "private")
	testsupport.RequireNoError(t, os.Mkdir(private, 0o700))
	s, err = Open(filepath.Join(private, "state.db"), Options{})
	testsupport.RequireNoError(t, err)
	s.Close()
	testsupport.RequireNoError(t, os.Rename(filepath.Join(private, "state.db"), path))
	if s, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "is one every user can add files to") {
		if err == nil {
			s.Close()
		}
		t.Errorf("an existing state database in a shared sticky directory: %v, want a refusal naming the directory", err)
	}
}

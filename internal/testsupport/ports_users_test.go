package testsupport

// Port reservations shared between users (one directory for all).
//
// Found and written by review (helper-94).

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestPortReservationIgnoresTMPDIR: the lock directory was
// filepath.Join(os.TempDir(), ...), and os.TempDir is $TMPDIR when set.
// A user whose session sets TMPDIR (pam_tmpdir, a CI runner) and a root
// run under sudo (which drops TMPDIR: /tmp) use two directories, so
// both are handed the same port. Here the test reserves a port as
// FreePorts does, then reserves it again as a process with TMPDIR set
// would: the second must be refused.
func TestPortReservationIgnoresTMPDIR(t *testing.T) {
	port := FreePorts(t, 1)[0]
	t.Setenv("TMPDIR", t.TempDir())
	dir, err := portLockDir()
	if err != nil {
		t.Fatal(err)
	}
	lock, ok := reservePort(dir, port)
	if ok {
		defer releasePort(lock)
		t.Fatalf("port %d, reserved in %s, was reserved again in %s by a test whose TMPDIR is set: two tests hold the same port",
			port, filepath.Join("/tmp", "sosappliance-test-ports"), dir)
	}
}

// TestPortReservationOfAnotherUsersStaleFile (held): a lock file left
// by another user's killed test (theirs, mode 0644) reserves the port
// for this test, not for two: while held, a second take is refused;
// released, the port is free again.
func TestPortReservationOfAnotherUsersStaleFile(t *testing.T) {
	RequireRoot(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	const port = 20997
	name := filepath.Join(dir, strconv.Itoa(port))
	if err := os.WriteFile(name, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(name, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	first, ok := reservePort(dir, port)
	if !ok {
		t.Fatal("a stale lock file of another user made the port unreservable")
	}
	if second, ok := reservePort(dir, port); ok {
		releasePort(second)
		t.Fatal("the port was reserved twice through another user's stale lock file")
	}
	releasePort(first)
	again, ok := reservePort(dir, port)
	if !ok {
		t.Fatal("released, the port could not be reserved again")
	}
	releasePort(again)
}

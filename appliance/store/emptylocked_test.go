package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestEmptyFileBeingCreatedIsWaitedFor: bbolt makes a new
// database by creating the file, locking it, and only then writing its
// first pages: another process that opens the path meanwhile (the CLI's
// plan or status while the daemon makes the node's first database, two
// commands at once on a fresh node) finds a 0-byte file that is locked.
// checkFile looks before taking bbolt's lock and calls it damaged ("the
// file is empty ... restore it from a backup, or move it away"): moving
// it away would lose the database the other process is writing. Before
// the fix that Open waited for the lock like any other. Here the other
// process is stood in for by a lock on the empty file, released once a
// database is in it.
// Found by review (helper-67) of 6d9d916, which called such a file
// damaged; checkFile now waits for bbolt's lock first.
func TestEmptyFileBeingCreatedIsWaitedFor(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "model.db")
	m, err := Open(model, Options{})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	content, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(dir, "state.db")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(300 * time.Millisecond)
		f.WriteAt(content, 0)
		f.Sync()
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
	}()
	defer func() { <-done }()

	s, err := Open(path, Options{LockTimeout: 10 * time.Second})
	var corrupt *CorruptError
	if errors.As(err, &corrupt) {
		t.Fatalf("a state file another process is creating (0 bytes, locked) is called damaged instead of waited for: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Lineage() != m.Lineage() {
		t.Fatalf("lineage %s, want the creator's %s", s.Lineage(), m.Lineage())
	}
}

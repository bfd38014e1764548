package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFirstOpenWhoseFileIsRemovedWhileItWaits: a first open creates the
// file and waits for bbolt's lock while another first open, failed on a
// full disk, removes the file it began (removeUnfinished). The lock then
// landed on a file no name reached, and this process ran on a database
// no later command saw (noticed by review, helper-94; the removal is
// made here at the moment it would fall, after the file is opened and
// before it is locked). The open must end on the file the path names.
func TestFirstOpenWhoseFileIsRemovedWhileItWaits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	opens := 0
	testHookOpened = func(name string, locked bool) {
		if locked {
			return
		}
		opens++
		if opens == 1 {
			if err := os.Remove(name); err != nil {
				t.Errorf("remove %s: %v", name, err)
			}
		}
	}
	t.Cleanup(func() { testHookOpened = nil })
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	lineage := s.Lineage()
	if _, err := os.Stat(path); err != nil {
		s.Close()
		t.Fatalf("the open succeeded on a file its path no longer names: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	testHookOpened = nil
	again, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.Lineage() != lineage {
		t.Fatalf("the database at %s has lineage %s, the one the first open ran on %s", path, again.Lineage(), lineage)
	}
	if opens != 2 {
		t.Fatalf("bbolt opened the file %d times, want 2 (once removed, once kept)", opens)
	}
}

// TestOpenGivesUpWhenItsFileKeepsGoing: an open whose file is removed
// every time it waits for the lock gives up with an error that says so,
// and leaves nothing behind.
func TestOpenGivesUpWhenItsFileKeepsGoing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	testHookOpened = func(name string, locked bool) {
		if locked {
			return
		}
		if err := os.Remove(name); err != nil {
			t.Errorf("remove %s: %v", name, err)
		}
	}
	t.Cleanup(func() { testHookOpened = nil })
	s, err := Open(path, Options{})
	if err == nil {
		s.Close()
		t.Fatal("the open succeeded on a file removed each time")
	}
	t.Log(err)
	if want := "changed while this open waited for its lock (another open made, removed or replaced it), 3 times in a row"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %q does not name %s and say %q", err, path, want)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("%s: %v, want nothing left", path, err)
	}
}

// TestDatabaseReplacedWhileTheOpenWaitsIsCheckedAgain: the file at the
// path is replaced (a restore moved in place) while the open waits for
// bbolt's lock. The open goes on with the file the path names now, and
// checks it as it checked the first: an empty one, which bbolt would
// make a new database of, is refused as it would be at any open.
func TestDatabaseReplacedWhileTheOpenWaitsIsCheckedAgain(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	statedbApplied(t, path)
	empty := filepath.Join(dir, "restored")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	testHookOpened = func(name string, locked bool) {
		if _, err := os.Stat(empty); err == nil && !locked {
			if err := os.Rename(empty, name); err != nil {
				t.Errorf("rename: %v", err)
			}
		}
	}
	t.Cleanup(func() { testHookOpened = nil })
	s, err := Open(path, Options{})
	if err == nil {
		records, _ := s.Records()
		s.Close()
		t.Fatalf("the open succeeded on the empty file moved in place (%d records): the recorded originals are gone", len(records))
	}
	t.Log(err)
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("error does not name %s: %v", path, err)
	}
}

// TestPanicInOpenLetsGoOfTheLock: a panic while bbolt opens the file
// (bbolt reading a file another open left half made) is reported as
// damage by guarded, and left the file open and locked: every later open
// in this process, the daemon's next reload too, said the database was
// in use by this very process. The panic is made here just after the
// lock is taken.
func TestPanicInOpenLetsGoOfTheLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	statedbApplied(t, path)
	testHookOpened = func(name string, locked bool) {
		if locked {
			panic("made by the test")
		}
	}
	t.Cleanup(func() { testHookOpened = nil })
	if s, err := Open(path, Options{}); err == nil {
		s.Close()
		t.Fatal("the open succeeded through a panic")
	} else {
		t.Log(err)
	}
	testHookOpened = nil
	s, err := Open(path, Options{LockTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("the next open: %v", err)
	}
	s.Close()
}

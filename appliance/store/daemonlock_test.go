package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDaemonLockNamesItsHolder: an OFD lock names no process (fcntl and
// /proc/locks say pid -1), so the refusals said only that "a daemon"
// held the state database. They now name the holder's pid and command,
// found through /proc's fdinfo; a database nobody locks is taken.
func TestDaemonLockNamesItsHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	free, err := LockAgainstDaemon(path)
	if err != nil {
		t.Fatalf("unlocked database: %v", err)
	}
	free.Release()

	held, err := LockForDaemon(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	self := fmt.Sprintf("pid %d ", os.Getpid())
	_, err = LockAgainstDaemon(path)
	var dr *DaemonRunningError
	if !errors.As(err, &dr) || len(dr.Holders) != 1 || !strings.HasPrefix(dr.Holders[0], self) || !strings.Contains(err.Error(), "(sosappliance run, "+self) {
		t.Fatalf("rollback's lock under a daemon: %v (holders %q)", err, dr.Holders)
	}
	_, err = LockForDaemon(path, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "or a rollback, "+self) {
		t.Fatalf("second daemon's lock: %v", err)
	}
}

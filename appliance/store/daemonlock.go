package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// A running daemon opens the state database only for each convergence, so
// that the CLI can read it in between; the database's own lock says
// nothing about whether a daemon runs. A rollback made under a running
// daemon would be undone at its next drift check, with the records gone.
// So the daemon holds a lock of its own on a file beside the database, for
// as long as it runs, and rollback takes it shared for as long as it runs.

// DaemonLockPath is the file beside the state database at statePath that a
// running daemon holds locked.
func DaemonLockPath(statePath string) string { return statePath + ".daemon" }

// HeldLock is a lock taken on a daemon lock file.
type HeldLock struct{ f *os.File }

// Release gives the lock back. The file stays: removing it would let a
// second holder lock a name the first no longer sees.
func (l *HeldLock) Release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// DaemonRunningError reports a daemon running with the state database.
type DaemonRunningError struct {
	Path string // the state database
	PID  int    // 0 when it could not be found
}

func (e *DaemonRunningError) Error() string {
	who := "sosappliance run"
	if e.PID > 0 {
		who = fmt.Sprintf("sosappliance run (pid %d)", e.PID)
	}
	return fmt.Sprintf("%s is running with the state database %s: stop it first (systemctl stop sosappliance), "+
		"or it applies its file again at its next drift check, undoing the rollback", who, e.Path)
}

// LockForDaemon takes the lock a daemon holds while it runs with the state
// database at statePath, waiting up to timeout for a rollback or another
// daemon that holds it.
func LockForDaemon(statePath string, timeout time.Duration) (*HeldLock, error) {
	if err := os.MkdirAll(filepath.Dir(statePath), 0o700); err != nil {
		return nil, fmt.Errorf("state database directory: %w", err)
	}
	path := DaemonLockPath(statePath)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("daemon lock: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &HeldLock{f: f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("daemon lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			holder := "another process"
			if pid := lockHolder(path); pid > 0 {
				holder = fmt.Sprintf("pid %d", pid)
			}
			return nil, fmt.Errorf("the state database %s is in use by %s (another sosappliance run, or a rollback) after %s: "+
				"a second daemon on one state database would fight the first", statePath, holder, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// LockAgainstDaemon takes the daemon lock of the state database at
// statePath shared, without waiting: a *DaemonRunningError if a daemon
// runs with it. Holding it keeps a daemon from starting meanwhile. No
// lock file means no daemon ever ran there; nothing is held then.
func LockAgainstDaemon(statePath string) (*HeldLock, error) {
	path := DaemonLockPath(statePath)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &HeldLock{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("daemon lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &DaemonRunningError{Path: statePath, PID: lockHolder(path)}
		}
		return nil, fmt.Errorf("daemon lock %s: %w", path, err)
	}
	return &HeldLock{f: f}, nil
}

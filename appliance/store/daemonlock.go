package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// A running daemon opens the state database only for each convergence, so
// that the CLI can read it in between; the database's own lock says
// nothing about whether a daemon runs. A rollback made under a running
// daemon would be undone at its next drift check, with the records gone.
// So the daemon holds a lock on the database file itself for as long as it
// runs, and rollback takes it shared for as long as it runs: an open file
// description lock (fcntl F_OFD_SETLK), which bbolt's flock does not touch
// and closing another descriptor of the file does not drop. It needs no
// file of its own (a state_path made writable alone, as systemd's
// ReadWritePaths= does, is enough), and every path to the file, a
// symlink's too, finds it.

// HeldLock is a lock taken on a state database file.
type HeldLock struct{ f *os.File }

// Release gives the lock back.
func (l *HeldLock) Release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// DaemonRunningError reports a daemon running with the state database.
type DaemonRunningError struct {
	Path string // the state database
}

func (e *DaemonRunningError) Error() string {
	return fmt.Sprintf("a sosappliance daemon (sosappliance run) is running with the state database %s: stop it first "+
		"(systemctl stop sosappliance), or it applies its file again at its next drift check, undoing the rollback", e.Path)
}

// ofdLock takes a lock of typ (unix.F_RDLCK or F_WRLCK) on the whole of f
// without waiting; busy is true when another holds a conflicting one.
func ofdLock(f *os.File, typ int16) (busy bool, err error) {
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: 0, Len: 0}
	err = unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
		return true, nil
	}
	return false, err
}

// LockForDaemon takes the lock a daemon holds while it runs with the state
// database at statePath, which must exist, waiting up to timeout for a
// rollback or another daemon that holds it.
func LockForDaemon(statePath string, timeout time.Duration) (*HeldLock, error) {
	f, err := os.OpenFile(statePath, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("daemon lock: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		busy, err := ofdLock(f, unix.F_WRLCK)
		switch {
		case err != nil:
			f.Close()
			return nil, fmt.Errorf("daemon lock on %s: %w", statePath, err)
		case !busy:
			return &HeldLock{f: f}, nil
		case time.Now().After(deadline):
			f.Close()
			return nil, fmt.Errorf("the state database %s is in use by another sosappliance run, or a rollback, after %s: "+
				"a second daemon on one state database would fight the first", statePath, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// LockAgainstDaemon takes the daemon lock of the state database at
// statePath shared, without waiting: a *DaemonRunningError if a daemon
// runs with it. Holding it keeps a daemon from starting meanwhile. With no
// database there, nothing is held.
func LockAgainstDaemon(statePath string) (*HeldLock, error) {
	f, err := os.Open(statePath)
	if errors.Is(err, fs.ErrNotExist) {
		return &HeldLock{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("daemon lock: %w", err)
	}
	busy, err := ofdLock(f, unix.F_RDLCK)
	switch {
	case err != nil:
		f.Close()
		return nil, fmt.Errorf("daemon lock on %s: %w", statePath, err)
	case busy:
		f.Close()
		return nil, &DaemonRunningError{Path: statePath}
	}
	return &HeldLock{f: f}, nil
}

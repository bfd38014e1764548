package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
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
	// Holders are the processes /proc shows holding the lock ("pid 1234
	// sosappliance"); empty when /proc does not say.
	Holders []string
}

func (e *DaemonRunningError) Error() string {
	return fmt.Sprintf("a sosappliance daemon (sosappliance run%s) is running with the state database %s: stop it first "+
		"(systemctl stop sosappliance), or it applies its file again at its next drift check, undoing the rollback", holdersText(e.Holders), e.Path)
}

// Beside says what an apply beside the daemon would meet.
func (e *DaemonRunningError) Beside() string {
	return fmt.Sprintf("a sosappliance daemon (sosappliance run%s) converges this node with the state database %s: it applies the file it runs "+
		"at a reload (systemctl reload sosappliance) or its next drift check, undoing changes made beside it; to apply another file, stop it first "+
		"(systemctl stop sosappliance)", holdersText(e.Holders), e.Path)
}

func holdersText(holders []string) string {
	if len(holders) == 0 {
		return ""
	}
	return ", " + strings.Join(holders, ", ")
}

// maxLockScan bounds the descriptors lockHolders looks at.
const maxLockScan = 1 << 20

// lockHolders names the processes that hold an OFD lock on the file
// f has open, as /proc shows them: an OFD lock itself names no process
// (fcntl and /proc/locks give pid -1), but the descriptor's fdinfo of a
// process that holds one lists it. Best effort: what cannot be read is
// passed over.
func lockHolders(f *os.File) []string {
	var want unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &want); err != nil {
		return nil
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []string
	scanned := 0
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid <= 0 {
			continue
		}
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if scanned++; scanned > maxLockScan {
				return out
			}
			var st unix.Stat_t
			if unix.Stat(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()), &st) != nil || st.Dev != want.Dev || st.Ino != want.Ino {
				continue
			}
			info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
			if err != nil || !bytes.Contains(info, []byte("OFDLCK")) {
				continue
			}
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			out = append(out, strings.TrimSpace(fmt.Sprintf("pid %d %s", pid, strings.TrimSpace(string(comm)))))
			break
		}
	}
	return out
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
	f, err := openStateFile(statePath, os.O_RDWR, 0)
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
			holders := lockHolders(f)
			f.Close()
			return nil, fmt.Errorf("the state database %s is in use by another sosappliance run, or a rollback%s, after %s: "+
				"a second daemon on one state database would fight the first", statePath, holdersText(holders), timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// LockAgainstDaemon takes the daemon lock of the state database at
// statePath shared, without waiting: a *DaemonRunningError if a daemon
// runs with it. Holding it keeps a daemon from starting meanwhile. With no
// database there, nothing is held.
func LockAgainstDaemon(statePath string) (*HeldLock, error) {
	f, err := openStateFile(statePath, os.O_RDONLY, 0)
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
		holders := lockHolders(f)
		f.Close()
		return nil, &DaemonRunningError{Path: statePath, Holders: holders}
	}
	return &HeldLock{f: f}, nil
}

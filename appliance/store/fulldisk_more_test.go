package store

// removeUnfinished against what it must keep, and first opens that race
// on a full disk, made for real in a tmpfs of a private mount namespace.
//
// Found and written by review (helper-94).

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"golang.org/x/sys/unix"
)

// TestRemoveUnfinishedKeeps (held): what removeUnfinished is handed
// but must keep: a database (4 pages, through a symlink too), a short
// file another process holds bbolt's lock on (shared or exclusive), a
// FIFO, a directory. A short file nobody holds, through a symlink, is
// removed and the symlink left.
func TestRemoveUnfinishedKeeps(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "real.db")
	s, err := Open(db, Options{})
	testsupport.RequireNoError(t, err)
	s.Close()
	link := filepath.Join(dir, "link.db")
	testsupport.RequireNoError(t, os.Symlink(db, link))

	short := func(name string) string {
		p := filepath.Join(dir, name)
		testsupport.RequireNoError(t, os.WriteFile(p, make([]byte, 4096), 0o600))
		return p
	}
	lockedEx, lockedSh := short("ex.db"), short("sh.db")
	for p, how := range map[string]int{lockedEx: unix.LOCK_EX, lockedSh: unix.LOCK_SH} {
		f, err := os.Open(p)
		testsupport.RequireNoError(t, err)
		defer f.Close()
		testsupport.RequireNoError(t, unix.Flock(int(f.Fd()), how))
	}
	fifo := filepath.Join(dir, "fifo.db")
	testsupport.RequireNoError(t, syscall.Mkfifo(fifo, 0o600))
	sub := filepath.Join(dir, "dir.db")
	testsupport.RequireNoError(t, os.Mkdir(sub, 0o700))

	for _, p := range []string{db, link, lockedEx, lockedSh, sub} {
		removeUnfinished(p, 50*time.Millisecond)
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: removed: %v", p, err)
		}
	}
	if _, err := os.Stat(db); err != nil {
		t.Errorf("the database behind the symlink was removed: %v", err)
	}
	// A FIFO: os.Open blocks on one with no writer; a writer that
	// gives up at once bounds it.
	done := make(chan struct{})
	go func() { removeUnfinished(fifo, 50*time.Millisecond); close(done) }()
	if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
		w.Close()
	}
	<-done
	if _, err := os.Lstat(fifo); err != nil {
		t.Errorf("the FIFO was removed: %v", err)
	}

	unfinished := short("unfinished.db")
	ulink := filepath.Join(dir, "ulink.db")
	testsupport.RequireNoError(t, os.Symlink(unfinished, ulink))
	removeUnfinished(ulink, 50*time.Millisecond)
	if _, err := os.Lstat(unfinished); err == nil {
		t.Error("an unfinished file nobody holds was kept")
	}
	if _, err := os.Lstat(ulink); err != nil {
		t.Errorf("the symlink was removed: %v", err)
	}
}

// TestConcurrentFirstOpensOnAFullDisk: first opens of one state
// database race on a full filesystem (the daemon starting while an
// operator runs plan): each fails; once the room is back, the next open
// must succeed. Bounded: 300 rounds of 4 opens.
func TestConcurrentFirstOpensOnAFullDisk(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	disk := testsupport.Tmpfs(t, "128k")
	path := filepath.Join(disk, "state.db")
	for round := range 300 {
		free := testsupport.FillFS(t, disk, round%4)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := Open(path, Options{})
				if err == nil {
					s.Close()
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		left := "nothing"
		if fi, err := os.Stat(path); err == nil {
			left = fmt.Sprint(fi.Size(), " bytes")
		}
		free()
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("round %d (%d pages of room): the racing first opens (%v) left %s; open once the room is back: %v",
				round, round%4, errs, left, err)
		}
		s.Close()
		testsupport.RequireNoError(t, os.Remove(path))
	}
}

package store

// Written by review (helper-96): real processes against the open that
// takes bbolt's lock itself. Each passed on 6785037 but
// TestSecondProcessDuringAFirstOpenIsNotToldDamaged, a finding.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	bolterrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"
)

func openRaceCountFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	testsupport.RequireNoError(t, err)
	return len(ents)
}

// openRaceLetGo fails the test if this process still holds, maps or
// has open the file at path (when there is one).
func openRaceLetGo(t *testing.T, path, after string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		return
	}
	if n := openRaceFDsOn(t, fi); n != 0 {
		t.Errorf("after %s: %d descriptors still on %s", after, n, path)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	testsupport.RequireNoError(t, err)
	if bytes.Contains(maps, []byte(path)) {
		t.Errorf("after %s: %s is still mapped", after, path)
	}
	f, err := os.Open(path)
	testsupport.RequireNoError(t, err)
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Errorf("after %s: bbolt's lock on %s is still held: %v", after, path, err)
	}
}

// TestFailedOpensLetGoOfEverything (held): opens that fail on
// every path the commit added (the lock's timeout on a new file, errMoved
// three times, another open's unfinished file, a panic holding the lock,
// bbolt refusing the file after the hook, an empty existing file) leave
// no descriptor, mapping or lock behind, and their errors name the file.
func TestFailedOpensLetGoOfEverything(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { testHookOpened = nil })
	before := openRaceCountFDs(t)
	var heldByTest *os.File
	for round := range 5 {
		cases := []struct {
			name string
			prep func(path string)
			hook func(name string, locked bool)
			want string
		}{
			{"held by another open file description when the new file is opened", nil, func(name string, locked bool) {
				if locked {
					return
				}
				f, err := os.Open(name)
				if err != nil {
					t.Errorf("open %s: %v", name, err)
					return
				}
				if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
					t.Errorf("lock: %v", err)
				}
				heldByTest = f // let go of once the open has given up
			}, fmt.Sprintf("in use by pid %d", os.Getpid())},
			{"removed at each open", nil, func(name string, locked bool) {
				if !locked {
					os.Remove(name)
				}
			}, "3 times in a row"},
			{"panic holding the lock", func(path string) { statedbApplied(t, path) }, func(name string, locked bool) {
				if locked {
					panic("made by the test")
				}
			}, "made by the test"},
			{"bbolt refuses the new file after the hook", nil, func(name string, locked bool) {
				if locked {
					os.WriteFile(name, bytes.Repeat([]byte("junk"), 4*os.Getpagesize()), 0o600)
				}
			}, "invalid"},
			{"empty existing file", func(path string) { os.WriteFile(path, nil, 0o600) }, nil, "empty"},
		}
		for i, c := range cases {
			path := filepath.Join(dir, fmt.Sprintf("r%d-c%d.db", round, i))
			if c.prep != nil {
				c.prep(path)
			}
			testHookOpened = c.hook
			s, err := Open(path, Options{LockTimeout: 150 * time.Millisecond})
			testHookOpened = nil
			if err == nil {
				s.Close()
				t.Fatalf("%s: the open succeeded", c.name)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: error %q does not name %s and say %q", c.name, err, path, c.want)
			}
			if heldByTest != nil {
				heldByTest.Close()
				heldByTest = nil
			}
			openRaceLetGo(t, path, c.name)
		}
	}
	if after := openRaceCountFDs(t); after > before {
		t.Errorf("%d descriptors before 25 failed opens, %d after", before, after)
	}
}

// TestUnfinishedFileOfAnotherOpenIsReplaced (held): a first open
// that finds, holding the lock, a short file another open began is not
// refused: the file is removed and the open starts over.
func TestUnfinishedFileOfAnotherOpenIsReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	calls := 0
	testHookOpened = func(name string, locked bool) {
		if !locked {
			calls++
			if calls == 1 {
				os.WriteFile(name, make([]byte, 4096), 0o600)
			}
		}
	}
	t.Cleanup(func() { testHookOpened = nil })
	before := openRaceCountFDs(t)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if calls != 2 {
		t.Fatalf("bbolt opened the file %d times, want 2", calls)
	}
	if after := openRaceCountFDs(t); after > before {
		t.Errorf("%d descriptors before, %d after", before, after)
	}
}

// openRaceHolder is a second sosappliance process (holdChild) that has
// path open, or failed to.
type openRaceHolder struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	ready  chan bool
	stderr *testsupport.LockedBuffer
}

func openRaceStartHolder(t *testing.T, path string) *openRaceHolder {
	t.Helper()
	h := &openRaceHolder{cmd: testsupport.Command(t, holdChild, path), ready: make(chan bool, 1), stderr: &testsupport.LockedBuffer{}}
	var err error
	h.stdin, err = h.cmd.StdinPipe()
	testsupport.RequireNoError(t, err)
	out, err := h.cmd.StdoutPipe()
	testsupport.RequireNoError(t, err)
	h.cmd.Stderr = h.stderr
	testsupport.RequireNoError(t, h.cmd.Start())
	t.Cleanup(func() { h.cmd.Process.Kill(); h.cmd.Wait() })
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		h.ready <- line == "ready\n"
	}()
	return h
}

func (h *openRaceHolder) stop(t *testing.T) {
	t.Helper()
	h.stdin.Close()
	done := make(chan struct{})
	go func() { h.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("holder %d did not exit", h.cmd.Process.Pid)
	}
}

// TestReadOnlyVerifyAndOpenWhileAProcessHoldsIt (held): with a
// running process holding the database, Open says which pid holds it,
// and verify (read-only, now through openBolt) times out with
// ErrTimeout instead of hanging or failing otherwise.
func TestReadOnlyVerifyAndOpenWhileAProcessHoldsIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	statedbApplied(t, path)
	h := openRaceStartHolder(t, path)
	if !<-h.ready {
		t.Fatalf("the holder did not open the database: %s", h.stderr)
	}
	checked, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	before := openRaceCountFDs(t)
	for range 3 {
		if err := verify(path, 150*time.Millisecond, true, checked); !errors.Is(err, bolterrors.ErrTimeout) {
			t.Fatalf("verify while held: %v, want ErrTimeout", err)
		}
		_, err := Open(path, Options{LockTimeout: 150 * time.Millisecond})
		var inUse *InUseError
		if !errors.As(err, &inUse) || inUse.PID != h.cmd.Process.Pid {
			t.Fatalf("Open while held by pid %d: %v", h.cmd.Process.Pid, err)
		}
	}
	if after := openRaceCountFDs(t); after > before {
		t.Errorf("%d descriptors before, %d after", before, after)
	}
	h.stop(t)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestSymlinkedPathsAndSmallerPages (held): a path that is a
// symlink opens the database it leads to; a symlink turned to another
// database while the open waits for the lock opens that one, checked;
// an existing database of 1 KiB pages opens.
func TestSymlinkedPathsAndSmallerPages(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	sa, err := Open(a, Options{})
	testsupport.RequireNoError(t, err)
	la := sa.Lineage()
	sa.Close()
	sb, err := Open(b, Options{})
	testsupport.RequireNoError(t, err)
	lb := sb.Lineage()
	sb.Close()
	link := filepath.Join(dir, "state.db")
	testsupport.RequireNoError(t, os.Symlink(a, link))

	s, err := Open(link, Options{})
	if err != nil {
		t.Fatalf("open through a symlink: %v", err)
	}
	if s.Lineage() != la {
		t.Errorf("through the symlink: lineage %s, want %s", s.Lineage(), la)
	}
	s.Close()

	swapped := false
	testHookOpened = func(name string, locked bool) {
		if !locked && !swapped {
			swapped = true
			tmp := filepath.Join(dir, "tmp-link")
			os.Symlink(b, tmp)
			if err := os.Rename(tmp, name); err != nil {
				t.Errorf("swap the symlink: %v", err)
			}
		}
	}
	t.Cleanup(func() { testHookOpened = nil })
	s, err = Open(link, Options{})
	testHookOpened = nil
	if err != nil {
		t.Fatalf("open through a symlink swapped while it waited: %v", err)
	}
	if s.Lineage() != lb {
		t.Errorf("after the swap: lineage %s, want the one the symlink now leads to, %s", s.Lineage(), lb)
	}
	s.Close()

	small := filepath.Join(dir, "small.db")
	openRaceSmallPageDB(t, small)
	s, err = Open(small, Options{})
	if err != nil {
		t.Fatalf("open of a database of 1 KiB pages: %v", err)
	}
	s.Close()
}

// TestProcessesRacingFirstOpens (held): six sosappliance
// processes (holdChild) race the first open of one database, on a tmpfs
// with no room, a little, or enough. At most one of them holds a
// database, and it holds the file the path names; once they are gone
// and the room is back, the next open succeeds (nothing half made left).
func TestProcessesRacingFirstOpens(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	disk := testsupport.Tmpfs(t, "128k")
	path := filepath.Join(disk, "state.db")
	held := 0
	for round := range 36 {
		free := func() {}
		if leave := round % 6; leave < 5 {
			free = testsupport.FillFS(t, disk, leave)
		}
		var holders []*openRaceHolder
		for range 6 {
			holders = append(holders, openRaceStartHolder(t, path))
		}
		var ready []*openRaceHolder
		for _, h := range holders {
			select {
			case ok := <-h.ready:
				if ok {
					ready = append(ready, h)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("round %d: holder %d neither opened nor failed", round, h.cmd.Process.Pid)
			}
		}
		if len(ready) > 1 {
			t.Fatalf("round %d: %d processes hold the database at once", round, len(ready))
		}
		for _, h := range ready {
			held++
			named, err := os.Stat(path)
			if err != nil {
				t.Fatalf("round %d: pid %d holds a database and %s is gone: %v", round, h.cmd.Process.Pid, path, err)
			}
			fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", h.cmd.Process.Pid))
			on := false
			for _, fd := range fds {
				if st, err := os.Stat(fd); err == nil && os.SameFile(st, named) {
					on = true
				}
			}
			if !on {
				t.Fatalf("round %d: pid %d holds a database that is not the file %s names", round, h.cmd.Process.Pid, path)
			}
		}
		var errs []string
		for _, h := range holders {
			h.stop(t)
			if s := strings.TrimSpace(h.stderr.String()); s != "" {
				errs = append(errs, s)
			}
		}
		left := "nothing"
		if fi, err := os.Stat(path); err == nil {
			left = fmt.Sprint(fi.Size(), " bytes")
		}
		free()
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("round %d (%d pages of room): the racing processes (%q) left %s; open once the room is back: %v", round, round%6, errs, left, err)
		}
		s.Close()
		testsupport.RequireNoError(t, os.Remove(path))
	}
	t.Logf("%d of 36 rounds had a holder", held)
}

// TestSecondProcessDuringAFirstOpenIsNotToldDamaged: a second
// sosappliance process (holdChild) opens the database at the moment a
// first open has created the file and not yet locked it (in life a few
// microseconds, the daemon starting while an operator runs plan; here the
// hook stalls the first open there for 150 ms). The second process's
// checkFile found an empty file nobody held and called the database
// damaged ("restore it from a backup, or move it away"), when it was being
// made. It looks again before it says so, and then waits for the maker's
// lock: it holds the database once the first open lets go of it.
func TestSecondProcessDuringAFirstOpenIsNotToldDamaged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	var h *openRaceHolder
	testHookOpened = func(name string, locked bool) {
		if locked || h != nil {
			return
		}
		h = openRaceStartHolder(t, path)
		time.Sleep(150 * time.Millisecond)
	}
	t.Cleanup(func() { testHookOpened = nil })
	s, err := Open(path, Options{})
	testHookOpened = nil
	if err != nil {
		t.Fatalf("the first open: %v", err)
	}
	s.Close()
	held := <-h.ready
	h.stop(t)
	second := strings.TrimSpace(h.stderr.String())
	t.Logf("the second process: held %v, said %q", held, second)
	if strings.Contains(second, "damaged") {
		t.Fatalf("the second process was told a database being made is damaged: %s", second)
	}
	if !held {
		t.Fatalf("the second process did not open the database once the first let go of it: %s", second)
	}
}

package testsupport

// Port reservations (FreePorts) under contention.
//
// Found and written by review (helper-93).

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestPortReservationIsExclusiveUnderChurn (held): 16 goroutines take
// and give up the reservation of one port 2000 times each (each take
// its own open file, as another process's would be): never do two hold
// it at once, whatever the interleaving of one's open, flock and name
// check with another's remove-then-close; and no lock file is left.
func TestPortReservationIsExclusiveUnderChurn(t *testing.T) {
	dir := t.TempDir()
	const port = 20999
	var held, overlaps, taken atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				lock, ok := reservePort(dir, port)
				if !ok {
					continue
				}
				taken.Add(1)
				if held.Add(1) != 1 {
					overlaps.Add(1)
				}
				held.Add(-1)
				releasePort(lock)
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Errorf("the port was reserved twice at once %d times (of %d reservations)", overlaps.Load(), taken.Load())
	}
	if taken.Load() == 0 {
		t.Errorf("no goroutine ever reserved the port")
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left behind in the lock directory: %d files", len(left))
	}
}

// otherUserPortEnv names the port the child run of
// TestPortReservedByRootIsNotReservedByAnotherUser must find reserved.
const otherUserPortEnv = "SOSAPPLIANCE_TEST_OTHER_USER_PORT"

// TestPortReservedByRootIsNotReservedByAnotherUser: tests of this
// repository run as root (the namespace tests) and as a user (go test
// ./... from a shell) on the same machine at the same time. A root test
// reserves a port with FreePorts and has not bound it yet; a test of
// another user asks for a port the same way. The reservations lived in
// a directory per user (sosappliance-test-ports-<euid>), so the other
// user's test reserved that same port too, and one of the two daemons
// would fail "bind: address already in use", the failure FreePorts is
// there to end. Now one directory serves every user.
func TestPortReservedByRootIsNotReservedByAnotherUser(t *testing.T) {
	if p := os.Getenv(otherUserPortEnv); p != "" {
		port, _ := strconv.Atoi(p)
		dir, err := portLockDir()
		if err != nil {
			t.Fatal(err)
		}
		if lock, ok := reservePort(dir, port); ok {
			releasePort(lock)
			t.Fatalf("RESERVED-TOO: port %d reserved by this user while another holds it", port)
		}
		return
	}
	RequireRoot(t, "setpriv")
	port := FreePorts(t, 1)[0]
	shared := SharedTempDir(t)
	bin := filepath.Join(shared, "testsupport.test")
	copyExecutable(t, executable(t), bin)
	cmd := AsOtherUser(t, bin, "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), otherUserPortEnv+"="+strconv.Itoa(port))
	cmd.Dir = shared
	out, err := cmd.CombinedOutput()
	t.Logf("as another user: %v\n%s", err, out)
	if strings.Contains(string(out), "RESERVED-TOO") {
		t.Errorf("port %d, reserved by a root test, was reserved by another user's test as well", port)
	} else if err != nil {
		t.Fatalf("the other user's run failed: %v", err)
	}
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	RequireNoError(t, err)
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	RequireNoError(t, err)
	_, err = io.Copy(dst, src)
	RequireNoError(t, err)
	RequireNoError(t, dst.Close())
}

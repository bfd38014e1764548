package testsupport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// FreePorts picks n loopback ports for daemons the test starts (etcd,
// an OpenFlow controller a switch dials), free when it returns and
// reserved for the test's life.
//
// A port the kernel hands out for "127.0.0.1:0" comes from the
// ephemeral range, which every outgoing connection on the machine draws
// from too: between the pick and the daemon's bind, a client socket of
// any test could take it (a CI run failed so: etcd "bind: address
// already in use"). So the ports come from below that range, and each
// is reserved by an exclusive lock on a file of its own, held until the
// test ends, which the test processes of other packages running at the
// same time respect.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	return FreePortsWhere(t, n, func(port int) error {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			ln.Close()
		}
		return err
	})
}

// FreePortsWhere is FreePorts with free telling whether a port is free
// where the daemon will listen (another network namespace's loopback).
func FreePortsWhere(t testing.TB, n int, free func(port int) error) []int {
	t.Helper()
	lo, hi := reservablePorts()
	dir, err := portLockDir()
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries == 4000 {
			t.Fatalf("no free loopback port in %d-%d after %d tries (%d of %d found)", lo, hi-1, tries, len(out), n)
		}
		port := lo + rand.IntN(hi-lo)
		lock, ok := reservePort(dir, port)
		if !ok {
			continue
		}
		if free(port) != nil {
			releasePort(lock)
			continue
		}
		t.Cleanup(func() { releasePort(lock) })
		out = append(out, port)
	}
	return out
}

// reservablePorts is the range FreePorts picks from: 12,000 ports below
// the kernel's ephemeral range (10768-32767 with Linux's default
// 32768-60999), or above it when it starts too low for that.
func reservablePorts() (lo, hi int) {
	elo, ehi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			a, err1 := strconv.Atoi(f[0])
			b, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && a <= b {
				elo, ehi = a, b
			}
		}
	}
	const want, least = 12000, 4000
	switch {
	case elo-1024 >= least:
		return max(1024, elo-want), elo
	case 65535-ehi >= least:
		return ehi + 1, min(65536, ehi+1+want)
	default:
		// No room beside it: some of the race comes back.
		return 20000, 32768
	}
}

// portLockDir is the directory of the port locks, one for all users of
// the machine (tests run as root and as users at the same time): every
// user may add files to it, and only remove their own (sticky).
func portLockDir() (string, error) {
	// A fixed path: $TMPDIR differs between users (pam_tmpdir, sudo
	// drops it), and a directory of each would hand both the port.
	dir := "/tmp/sosappliance-test-ports"
	if err := os.Mkdir(dir, 0o700); err == nil {
		if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
			return "", err
		}
	} else if !errors.Is(err, os.ErrExist) {
		return "", err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		return "", fmt.Errorf("%s: not a directory every user can add to and only remove their own files from (mode 1777); remove it", dir)
	}
	return dir, nil
}

// reservePort takes the port's lock without waiting; false if another
// test (of this process or another, of any user) holds it. The lock is
// on the file the name holds after the lock is taken (releasePort
// removes it while locked: a reservation made on the removed file would
// hold nothing). A lock file is opened read-only, which is all a lock
// needs, so another user's (a killed test's, left behind) serves too.
func reservePort(dir string, port int) (*os.File, bool) {
	name := filepath.Join(dir, strconv.Itoa(port))
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		f, err = os.OpenFile(name, os.O_RDONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
		if err == nil {
			_ = f.Chmod(0o644) // whatever the umask: others open it too
		}
	}
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	held, err1 := f.Stat()
	now, err2 := os.Lstat(name)
	if err1 != nil || err2 != nil || !os.SameFile(held, now) || !held.Mode().IsRegular() {
		f.Close()
		return nil, false
	}
	return f, true
}

// releasePort gives the reservation up, leaving no file behind (but one
// of another user's, which the sticky directory keeps).
func releasePort(lock *os.File) {
	os.Remove(lock.Name())
	lock.Close()
}

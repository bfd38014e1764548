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

// reservablePorts is the range FreePorts picks from: the 12,000 ports
// below the kernel's ephemeral range (10000-32767 with Linux's default
// 32768-60999).
func reservablePorts() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 2048 {
				hi = v
			}
		}
	}
	return max(1024, hi-12000), hi
}

// portLockDir is the directory of the port locks, one for every user of
// the machine (its tests run as root or not).
func portLockDir() (string, error) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("sosappliance-test-ports-%d", os.Geteuid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || st == nil || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("%s: not a directory of this user's that only it can write; remove it", dir)
	}
	return dir, nil
}

// reservePort takes the port's lock without waiting; false if another
// test (of this process or another) holds it. The lock is on the file
// the name holds after the lock is taken (releasePort removes it while
// locked: a reservation made on the removed file would hold nothing).
func reservePort(dir string, port int) (*os.File, bool) {
	name := filepath.Join(dir, strconv.Itoa(port))
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	held, err1 := f.Stat()
	now, err2 := os.Lstat(name)
	if err1 != nil || err2 != nil || !os.SameFile(held, now) {
		f.Close()
		return nil, false
	}
	return f, true
}

// releasePort gives the reservation up, leaving no file behind.
func releasePort(lock *os.File) {
	os.Remove(lock.Name())
	lock.Close()
}

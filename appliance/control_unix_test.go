package appliance

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// processUmask reads the umask without setting it, which would race with
// the code under test.
func processUmask(t *testing.T) os.FileMode {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			if err != nil {
				t.Fatal(err)
			}
			return os.FileMode(m)
		}
	}
	t.Fatal("no Umask in /proc/self/status")
	return 0
}

// TestListenUnixPrivate creates private sockets over and over while another
// goroutine creates files: every socket is 0600 and answers, and every file
// gets the mode the process umask gives it, never the socket's. The loop runs
// until both sides have done hundreds of rounds, so they overlap whatever
// the scheduler does.
func TestListenUnixPrivate(t *testing.T) {
	umask := processUmask(t)
	want := 0o666 &^ umask
	dir := t.TempDir()
	var created atomic.Int64
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			p := filepath.Join(dir, fmt.Sprintf("file%d", n))
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
			if err != nil {
				done <- err
				return
			}
			st, err := f.Stat()
			f.Close()
			os.Remove(p)
			if err != nil {
				done <- err
				return
			}
			if st.Mode().Perm() != want {
				done <- fmt.Errorf("file created during a listen has mode %04o, want %04o (umask %04o)", st.Mode().Perm(), want, umask)
				return
			}
			created.Add(1)
		}
	}()
	sock := filepath.Join(dir, "control.sock")
	listens := 0
	for ; listens < 500 || created.Load() < 500; listens++ {
		select {
		case err := <-done:
			t.Fatalf("after %d listens: %v", listens, err)
		default:
		}
		ln, err := listenUnixPrivate(sock)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(sock)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
			t.Fatalf("socket is %v, want a socket of mode 0600", st.Mode())
		}
		if listens == 0 {
			go func() {
				if c, err := ln.Accept(); err == nil {
					c.Close()
				}
			}()
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatalf("socket does not answer: %v", err)
			}
			c.Close()
		}
		ln.Close()
		os.Remove(sock)
	}
	close(stop)
	if err := <-done; err != nil {
		t.Error(err)
	}
	t.Logf("%d listens while %d files were created", listens, created.Load())
	if got := processUmask(t); got != umask {
		t.Errorf("umask is %04o after the listens, was %04o", got, umask)
	}
}

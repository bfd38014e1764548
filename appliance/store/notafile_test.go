package store

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// Something other than a file at the state database's path: a FIFO held
// every command and the daemon's start for good (a read-only open of one
// waits for a writer, and none comes), and the rest reached bbolt. Each is
// now refused at once, naming what is there.
func TestNotAFileAtStatePathIsRefusedAtOnce(t *testing.T) {
	testsupport.RequireRoot(t) // mknod
	kinds := []struct {
		name, what string
		make       func(path string) error
	}{
		{"fifo", "a named pipe (FIFO)", func(path string) error { return syscall.Mkfifo(path, 0o600) }},
		{"chardev", "a character device", func(path string) error {
			return syscall.Mknod(path, syscall.S_IFCHR|0o600, int(1<<8|3)) // like /dev/null
		}},
		{"socket", "a socket", func(path string) error {
			l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
			if err == nil {
				l.SetUnlinkOnClose(false)
				t.Cleanup(func() { l.Close() })
			}
			return err
		}},
		{"directory", "a directory", func(path string) error { return os.Mkdir(path, 0o700) }},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			testsupport.RequireNoError(t, k.make(path))
			calls := []struct {
				name string
				call func() error
			}{
				{"Open", func() error {
					s, err := Open(path, Options{LockTimeout: time.Second})
					if err == nil {
						s.Close()
					}
					return err
				}},
				{"OpenExisting", func() error {
					s, err := Open(path, Options{LockTimeout: time.Second, MustExist: true})
					if err == nil {
						s.Close()
					}
					return err
				}},
				{"LockAgainstDaemon", func() error {
					h, err := LockAgainstDaemon(path)
					if err == nil {
						h.Release()
					}
					return err
				}},
				{"LockForDaemon", func() error {
					h, err := LockForDaemon(path, time.Second)
					if err == nil {
						h.Release()
					}
					return err
				}},
			}
			for _, c := range calls {
				done := make(chan error, 1)
				go func() { done <- c.call() }()
				var err error
				select {
				case err = <-done:
				case <-time.After(20 * time.Second):
					// Let a blocked FIFO open go: a writer opens it.
					if w, werr := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); werr == nil {
						w.Close()
					}
					t.Fatalf("%s on %s: still blocked after 20 s", c.name, k.name)
				}
				var nf *NotAFileError
				if !errors.As(err, &nf) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), k.what) {
					t.Errorf("%s on %s: %v, want an error naming %s and saying it is %s", c.name, k.name, err, path, k.what)
				}
			}
			if fi, err := os.Lstat(path); err != nil || fi.Mode().IsRegular() {
				t.Errorf("what was at %s changed: %v %v", path, fi, err)
			}
		})
	}
}

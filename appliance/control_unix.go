package appliance

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// listenUnixPrivate creates a unix socket at path that only its owner, root,
// can connect to, without changing the umask: that is process-wide, and
// files other goroutines create meanwhile would get the socket's mode.
//
// It binds, chmods the socket file to 0600, and only then listens. Between
// bind and chmod the file has the mode the umask gives it, but no one can
// use that window: a unix stream socket that is not listening refuses every
// connect at once (ECONNREFUSED) and queues none, a socket file cannot be
// opened, and connect checks write permission when it is called, so every
// connect that can succeed, after listen, meets mode 0600. Someone who can
// write to the directory could swap the file in the window, but could
// replace the socket at any time anyway; ListenControl makes that directory
// 0700.
func listenUnixPrivate(path string) (net.Listener, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close() // the listener holds its own descriptor
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return nil, &os.PathError{Op: "bind", Path: path, Err: err}
	}
	ln, err := listenBound(f, fd, path)
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	return ln, nil
}

func listenBound(f *os.File, fd int, path string) (net.Listener, error) {
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, err
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		return nil, os.NewSyscallError("listen", err)
	}
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listener on %s: %w", path, err)
	}
	return ln, nil
}

package appliance

import (
	"net"
	"os"
	"sync"
	"syscall"
)

// umaskMu serialises the process-wide umask change around socket creation.
var umaskMu sync.Mutex

func listenUnixPrivate(path string) (net.Listener, error) {
	umaskMu.Lock()
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	umaskMu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

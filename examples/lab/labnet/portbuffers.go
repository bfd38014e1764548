package labnet

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// switchPortBuffer is the kernel buffer of each socket the userspace
// switch reads and writes a port through.
//
// Open vSwitch's userspace datapath reads every port through an AF_PACKET
// socket that keeps the machine's default buffer (net.core.rmem_default,
// 208 KiB on Debian: a dozen 9000-byte frames). A burst from a host on a
// veth, which arrives at memory speed, overflows it whenever the switch
// is not scheduled at that moment, as on this 2-core machine it often is
// not: with 16 striped streams, 7 % of what an agent sent died there (`ss
// -0 -m` in the switch namespace shows the drops), before the emulated WAN
// and its one-BDP queue. A hardware switch port holds megabytes. The
// WAN emulator sizes its own sockets the same way (wanem.socketBufferBytes).
const switchPortBuffer = 8 << 20

// The defaults are not per network namespace (they are read-only inside
// one), and Open vSwitch sets no size of its own: a socket takes the
// default when it is created. withSocketBufferDefaults raises the
// machine's defaults only while fn runs (the lab adds the switch ports
// then) and puts them back, under a lock that labs in other processes
// share, so that one lab never restores a value another one set.
func withSocketBufferDefaults(size int, fn func() error) error {
	lockPath := filepath.Join(os.TempDir(), "sosappliance-lab-sysctl.lock")
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("socket buffer defaults: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("socket buffer defaults: lock %s: %w", lockPath, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing unlocks too
	var restore []func() error
	defer func() {
		for _, r := range restore {
			_ = r()
		}
	}()
	for _, name := range []string{"rmem_default", "wmem_default"} {
		path := filepath.Join("/proc/sys/net/core", name)
		raw, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("socket buffer defaults: %w", err)
		}
		old, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil {
			return fmt.Errorf("socket buffer defaults: %s: %q is not a number", path, raw)
		}
		if old >= size {
			continue
		}
		if err := os.WriteFile(path, []byte(strconv.Itoa(size)), 0o644); err != nil {
			return fmt.Errorf("socket buffer defaults: raise %s to %d: %w", path, size, err)
		}
		restore = append(restore, func() error { return os.WriteFile(path, raw, 0o644) })
	}
	return fn()
}

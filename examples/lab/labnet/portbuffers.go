package labnet

import (
	"context"
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
	// In /run, which only root writes: in /tmp another user could plant
	// a symlink there (root would create the file it names) or hold the
	// lock for good (helper-90).
	lockPath := "/run/sosappliance-lab-sysctl.lock"
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
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

// PortSocket is one of the switch daemon's AF_PACKET sockets as `ss -0 -m`
// shows it: the port it reads, its buffers, and how many frames the
// kernel dropped since the socket was opened because its receive buffer
// was full (sk_drops). These are receive-side drops only: the daemon
// sends every port's frames through one unbound socket of its own, whose
// losses would show in the interfaces' tx_dropped instead.
type PortSocket struct {
	Port                   string
	RecvBuffer, SendBuffer int
	Drops                  uint64
}

// SwitchPortSockets lists the switch daemon's port sockets (its unbound
// socket, "[0]:*", left out). Their drops are loss the lab adds on its
// own, before or after the emulated WAN, that no real switch port of the
// same load would: bench-wan reports them with each transfer
// (DropsSince between two listings).
func (l *Lab) SwitchPortSockets(ctx context.Context) ([]PortSocket, error) {
	out, err := l.Run(ctx, SwitchHost, "ss", "-H", "-0", "-a", "-m", "-p")
	if err != nil {
		return nil, fmt.Errorf("switch port sockets: %w", err)
	}
	return parsePortSockets(out)
}

// DropsSince counts the port sockets' drops between two listings. A port
// whose count went down, or that is new, had its socket opened again in
// between (the switch restarted, a port was added again): all of its
// drops are counted.
func DropsSince(before, after []PortSocket) uint64 {
	was := make(map[string]uint64, len(before))
	for _, s := range before {
		was[s.Port] = s.Drops
	}
	var sum uint64
	for _, s := range after {
		if old, ok := was[s.Port]; ok && s.Drops >= old {
			sum += s.Drops - old
		} else {
			sum += s.Drops
		}
	}
	return sum
}

// parsePortSockets reads `ss -H -0 -a -m -p` lines such as
//
//	p_raw UNCONN 0 0 *:a-agent * users:(("ovs-vswitchd",pid=7,fd=40)) skmem:(r0,rb8388608,t0,tb8388608,f0,w0,o176,bl0,d7832)
//
// keeping the ovs-vswitchd sockets bound to a port. The local address is
// protocol:interface ("*" for every protocol); an interface of "*" is
// the daemon's unbound socket.
func parsePortSockets(out string) ([]PortSocket, error) {
	var socks []PortSocket
	for line := range strings.SplitSeq(out, "\n") {
		if !strings.Contains(line, `"ovs-vswitchd"`) {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 5 {
			return nil, fmt.Errorf("switch port socket: cannot read %q", strings.TrimSpace(line))
		}
		i := strings.LastIndexByte(fields[4], ':')
		if i < 0 || i == len(fields[4])-1 {
			return nil, fmt.Errorf("switch port socket: no interface in %q", strings.TrimSpace(line))
		}
		if fields[4][i+1:] == "*" {
			continue // the unbound socket, [0]:*
		}
		s := PortSocket{Port: fields[4][i+1:]}
		_, mem, ok := strings.Cut(line, "skmem:(")
		mem, _, closed := strings.Cut(mem, ")")
		if !ok || !closed {
			return nil, fmt.Errorf("switch port socket %s: no skmem in %q", s.Port, strings.TrimSpace(line))
		}
		var seen int
		for kv := range strings.SplitSeq(mem, ",") {
			key := strings.TrimRight(kv, "-0123456789")
			if key != "rb" && key != "tb" && key != "d" {
				continue
			}
			n, err := strconv.ParseUint(kv[len(key):], 10, 63)
			if err != nil {
				return nil, fmt.Errorf("switch port socket %s: skmem %q: %w", s.Port, mem, err)
			}
			switch key {
			case "rb":
				s.RecvBuffer, seen = int(n), seen|1
			case "tb":
				s.SendBuffer, seen = int(n), seen|2
			case "d":
				s.Drops, seen = n, seen|4
			}
		}
		if seen != 7 {
			return nil, fmt.Errorf("switch port socket %s: skmem %q lacks rb, tb or d", s.Port, mem)
		}
		socks = append(socks, s)
	}
	return socks, nil
}

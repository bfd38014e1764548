package relay

import (
	"net"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// rcvWscale is the receive window scale a connection negotiated in its SYN
// (TCP_INFO tcpi_rcv_wscale, the high nibble of byte 6).
func rcvWscale(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ws int
	var ierr error
	_ = rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			ierr = err
			return
		}
		ws = int((*[8]byte)(unsafe.Pointer(info))[6] >> 4)
	})
	if ierr != nil {
		t.Fatal(ierr)
	}
	return ws
}

// TestPooledStreamWindowScale: with socket_buffer set, a pooled stream is
// dialed with its buffers in place before the SYN, as a fresh stream is,
// so its window scale fits socket_buffer. Found by review: the buffers
// came only at its BIND, after the SYN had fixed the scale (10 against 12
// for 256 MiB, a receive window capped at 63 MiB).
func TestPooledStreamWindowScale(t *testing.T) {
	const buf = 256 << 20
	p := startPair(t, pairOptions{socketBuffer: buf, pool: agentspec.Pool{MinIdle: 1, Max: 1}}, echo)
	testsupport.Eventually(t, 30*time.Second, "a pooled stream", func() bool { return onlyPool(t, p.a).Idle == 1 })
	var pool *streamPool
	for _, sp := range p.a.pools {
		pool = sp
	}
	got := pool.take(1)
	if len(got) != 1 {
		t.Fatal("no pooled stream")
	}
	defer got[0].conn.Close()
	pooled := rcvWscale(t, got[0].conn)

	rc := p.a.cfg.Load()
	d := net.Dialer{Control: rc.streamTuningFor(60000).control}
	c, err := d.Dial("tcp4", p.b.Addrs().Data.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fresh := rcvWscale(t, c.(*net.TCPConn))
	t.Logf("receive window scale: fresh stream %d, pooled stream %d (socket_buffer %d MiB)", fresh, pooled, buf>>20)
	if pooled < fresh {
		t.Errorf("a pooled stream's window scale %d is below a fresh stream's %d: its receive window is capped at %d MiB, socket_buffer is %d MiB",
			pooled, fresh, (65535<<pooled)>>20, buf>>20)
	}
}

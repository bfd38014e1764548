package relay

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// streamTuning is applied to every stream socket.
type streamTuning struct {
	sndbuf, rcvbuf int // bytes; <= 0 leaves the kernel's autotuning
	// notsentLowat is TCP_NOTSENT_LOWAT: a write waits while the socket
	// holds more unsent bytes than this, so data waits in the relay, where
	// the scheduler can still give it to another stream. Zero: unset.
	notsentLowat int
	congestion   string
	// keepalive is the idle time before TCP keepalive probes, so a dead
	// peer is noticed on an idle session. Zero: no keepalive.
	keepalive time.Duration
}

func (t streamTuning) control(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) { serr = t.apply(int(fd)) })
	if err != nil {
		return err
	}
	return serr
}

func (t streamTuning) apply(fd int) error {
	// SO_*BUFFORCE lifts the net.core.[rw]mem_max cap when we hold
	// CAP_NET_ADMIN; without it fall back to the capped option.
	for _, b := range []struct {
		size          int
		force, capped int
		name          string
	}{
		{t.sndbuf, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, "SO_SNDBUF"},
		{t.rcvbuf, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, "SO_RCVBUF"},
	} {
		if b.size <= 0 {
			continue
		}
		if err := setBuffer(fd, b.force, b.capped, b.size, true); err != nil {
			return fmt.Errorf("%s %d: %w", b.name, b.size, err)
		}
	}
	if t.notsentLowat > 0 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, t.notsentLowat); err != nil {
			return fmt.Errorf("TCP_NOTSENT_LOWAT %d: %w", t.notsentLowat, err)
		}
	}
	if t.congestion != "" {
		if err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, t.congestion); err != nil {
			return fmt.Errorf("TCP_CONGESTION %q: %w", t.congestion, err)
		}
	}
	// Not TCP_USER_TIMEOUT: since Linux 5.11 it also ends a connection
	// whose window stays closed, and a closed window is how a slow end
	// host legitimately holds the streams back for as long as it likes.
	if t.keepalive > 0 {
		idle := max(int(t.keepalive/time.Second), 1)
		for _, o := range []struct {
			level, opt, v int
			name          string
		}{
			{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1, "SO_KEEPALIVE"},
			{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, idle, "TCP_KEEPIDLE"},
			{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, max(idle/3, 1), "TCP_KEEPINTVL"},
			{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 3, "TCP_KEEPCNT"},
		} {
			if err := unix.SetsockoptInt(fd, o.level, o.opt, o.v); err != nil {
				return fmt.Errorf("%s %d: %w", o.name, o.v, err)
			}
		}
	}
	return nil
}

func tuneConn(c *net.TCPConn, t streamTuning) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	return t.control("", "", rc)
}

// checkCongestion fails early, at configuration time, for a congestion
// control the kernel does not offer.
func checkCongestion(name string) error {
	if name == "" {
		return nil
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("congestion control check: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, name); err != nil {
		return fmt.Errorf("congestion control %q: %w", name, err)
	}
	return nil
}

// transparentControl marks a socket IP_TRANSPARENT so it may accept
// connections to, or bind to, addresses that are not local: the TPROXY
// listener and the server-side connection from the client's address.
func transparentControl(network, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		if network == "tcp6" {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_TRANSPARENT, 1)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1)
		}
		if serr != nil {
			serr = fmt.Errorf("IP_TRANSPARENT (needs CAP_NET_ADMIN): %w", serr)
			return
		}
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

func network(a netip.Addr) string {
	if a.Unmap().Is4() {
		return "tcp4"
	}
	return "tcp6"
}

func listenTransparent(ctx context.Context, addr netip.AddrPort) (*net.TCPListener, error) {
	lc := net.ListenConfig{Control: transparentControl}
	nw := network(addr.Addr())
	if addr.Addr() == netip.IPv6Unspecified() {
		// [::] takes both families: TPROXY of IPv4 finds a dual-stack
		// socket too, and IPV6_TRANSPARENT covers both.
		nw = "tcp"
	}
	ln, err := lc.Listen(ctx, nw, addr.String())
	if err != nil {
		return nil, err
	}
	return ln.(*net.TCPListener), nil
}

func listenPlain(ctx context.Context, addr netip.AddrPort, t streamTuning) (*net.TCPListener, error) {
	// Buffers set on the listener are inherited by accepted streams and
	// are in place before the SYN-ACK, so the window scale fits them.
	lc := net.ListenConfig{Control: func(nw, a string, rc syscall.RawConn) error {
		return streamTuning{sndbuf: t.sndbuf, rcvbuf: t.rcvbuf}.control(nw, a, rc)
	}}
	ln, err := lc.Listen(ctx, network(addr.Addr()), addr.String())
	if err != nil {
		return nil, err
	}
	return ln.(*net.TCPListener), nil
}

// dialTransparent connects to server from the client's own address and
// port, so the server sees the client.
func dialTransparent(ctx context.Context, client, server netip.AddrPort) (*net.TCPConn, error) {
	d := net.Dialer{
		LocalAddr: net.TCPAddrFromAddrPort(client),
		Control:   transparentControl,
	}
	c, err := d.DialContext(ctx, network(server.Addr()), server.String())
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// dialPlain connects to server from an address of the agent.
func dialPlain(ctx context.Context, _, server netip.AddrPort) (*net.TCPConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network(server.Addr()), server.String())
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// reset closes a connection with an RST instead of a FIN (SO_LINGER 0), so
// the peer can never take a truncated transfer for a complete one.
func reset(c *net.TCPConn) {
	if c == nil {
		return
	}
	_ = c.SetLinger(0)
	_ = c.Close()
}

// socketError returns a pending error of the connection (SO_ERROR), such
// as ECONNRESET after a reset, without reading from it. It consumes the
// error; callers abort on it. An orderly close leaves no error.
func socketError(c *net.TCPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var soerr int
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		soerr, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
	}); err != nil {
		return err
	}
	if gerr != nil {
		return gerr
	}
	if soerr != 0 {
		return syscall.Errno(soerr)
	}
	return nil
}

// tcpCARecovery is TCP_CA_Recovery of tcpi_ca_state: fast recovery;
// tcpCALoss (TCP_CA_Loss, after an RTO) is above it.
const (
	tcpCARecovery = 3
	tcpCALoss     = 4
)

// lossState is how deep in loss recovery a stream is.
type lossState uint8

const (
	lossNone lossState = iota
	// lossFast: fast recovery (ca_state Recovery): selective ACKs repair
	// the loss within about a round trip, and what the stream is given
	// meanwhile arrives that much late, behind the repair.
	lossFast
	// lossTimeout: ca_state Loss or RTO retransmits outstanding: a
	// retransmission timed out, and the stream has stalled for a timeout
	// or more (or its peer stopped acknowledging).
	lossTimeout
)

// lossStateOf is the lossState of a stream whose TCP_INFO shows caState
// and rtoRetrans.
func lossStateOf(caState, rtoRetrans uint8) lossState {
	switch {
	case caState > tcpCARecovery || rtoRetrans > 0:
		return lossTimeout
	case caState == tcpCARecovery:
		return lossFast
	}
	return lossNone
}

// lossRecovery says whether a stream whose TCP_INFO shows caState and
// rtoRetrans is in loss recovery: fast recovery, Loss, or RTO
// retransmits outstanding.
func lossRecovery(caState, rtoRetrans uint8) bool {
	return lossStateOf(caState, rtoRetrans) != lossNone
}

// tcpInfo is what stats, the scheduler and the window read from TCP_INFO.
type tcpInfo struct {
	retransmits uint32
	rtt         time.Duration
	minRTT      time.Duration // tcpi_min_rtt
	cwnd        uint32
	caState     uint8  // tcpi_ca_state: Open, Disorder, CWR, Recovery, Loss
	rtoRetrans  uint8  // tcpi_retransmits: RTO retransmits outstanding
	notsent     uint32 // tcpi_notsent_bytes
	pacingRate  uint64 // tcpi_pacing_rate, bytes/s
	state       uint8  // tcpi_state: TCP_ESTABLISHED, TCP_CLOSE_WAIT, ...
	sndWnd      uint32 // tcpi_snd_wnd: the peer's receive window (Linux 6.2+; 0 before)
	delivered   uint32 // tcpi_delivered: segments delivered, SACKed ones included
	mss         uint32 // tcpi_snd_mss
	inFlight    uint32 // segments in flight: tcpi_unacked - sacked - lost + retrans
	unacked     uint32 // tcpi_unacked: segments sent and not acknowledged
	probes      uint8  // tcpi_probes: zero-window probes unanswered
	// lastAckRecv is tcpi_last_ack_recv: the time since an ACK last
	// arrived (window probes' answers included).
	lastAckRecv time.Duration
	bytesAcked  uint64 // tcpi_bytes_acked: bytes the peer's TCP acknowledged
}

func readTCPInfo(c *net.TCPConn) (tcpInfo, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return tcpInfo{}, false
	}
	var info *unix.TCPInfo
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || ierr != nil {
		return tcpInfo{}, false
	}
	return fromTCPInfo(info), true
}

// fromTCPInfo keeps what the relay reads of a socket's TCP_INFO.
func fromTCPInfo(info *unix.TCPInfo) tcpInfo {
	return tcpInfo{
		retransmits: info.Total_retrans,
		rtt:         time.Duration(info.Rtt) * time.Microsecond,
		minRTT:      time.Duration(info.Min_rtt) * time.Microsecond,
		cwnd:        info.Snd_cwnd,
		caState:     info.Ca_state,
		rtoRetrans:  info.Retransmits,
		notsent:     info.Notsent_bytes,
		pacingRate:  info.Pacing_rate,
		state:       info.State,
		sndWnd:      info.Snd_wnd,
		delivered:   info.Delivered,
		mss:         info.Snd_mss,
		inFlight:    info.Unacked - min(info.Unacked, info.Sacked+info.Lost) + info.Retrans,
		unacked:     info.Unacked,
		probes:      info.Probes,
		lastAckRecv: time.Duration(info.Last_ack_recv) * time.Millisecond,
		bytesAcked:  info.Bytes_acked,
	}
}

// tcpCloseWait is tcpi_state of a connection whose peer sent a FIN (and
// no reset since).
const tcpCloseWait = 8

// peerClosed reports whether the peer closed the connection with a FIN:
// after a reset, read returns the error once and then end of file too, but
// the connection is then in state CLOSE, not CLOSE_WAIT.
func peerClosed(c *net.TCPConn) bool {
	info, ok := readTCPInfo(c)
	return ok && info.state == tcpCloseWait
}

// bytesTaken is how far c's socket has taken writes, counted as
// tcpi_bytes_acked counts (the SYN is its first byte): acknowledged,
// then (read second, so that bytes acknowledged in between make the sum
// smaller, never larger) still queued. ok is false when the kernel does
// not say.
func bytesTaken(c *net.TCPConn) (n uint64, ok bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var outq int
	var ierr, qerr error
	if err := rc.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		outq, qerr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
	}); err != nil || ierr != nil || qerr != nil || outq < 0 {
		return 0, false
	}
	if info.Bytes_acked == 0 {
		// A connected socket's count is at least 1 (the SYN): 0 is a
		// kernel without tcpi_bytes_acked (before 4.1, as RHEL 7's),
		// whose FINs would all look early (finBefore).
		return 0, false
	}
	return info.Bytes_acked + uint64(outq), true
}

// finBefore reports whether the peer closed c with a FIN (and no reset
// since) before its TCP acknowledged the writes up to end (as bytesTaken
// counts).
// The FIN's own acknowledgment covers everything the peer had received
// when it sent it (a process that closes with bytes unread sends a reset,
// not a FIN), and a socket its process closed answers later data with a
// reset, never an ACK: the bytes beyond were never read by the peer's
// process.
func finBefore(c *net.TCPConn, end uint64) bool {
	info, ok := readTCPInfo(c)
	return ok && info.state == tcpCloseWait && info.bytesAcked < end
}

// tcpEstablished is tcpi_state of an open connection.
const tcpEstablished = 1

// peerGaveUp reports whether the peer closed or reset c: its state is no
// longer ESTABLISHED (CLOSE_WAIT after a FIN, CLOSE after a reset), though
// what it sent before may still be read.
func peerGaveUp(c *net.TCPConn) bool {
	info, ok := readTCPInfo(c)
	return ok && info.state != tcpEstablished
}

// endedByFin reports whether the end of file a read of c returned is the
// peer's FIN rather than a reset. A reset's error is returned once, to the
// first call that looks: when a write on c took it, the reader sees only
// end of file. While this side has not half-closed (wroteFin false), the
// state tells them apart: CLOSE_WAIT after a FIN, CLOSE after a reset.
// Once it has, a clean close ends in CLOSE too, but then nothing writes to
// c any more and the reader gets a reset's error itself. The state is read
// first: this side's half-close, which sets wroteFin before it starts, may
// move it out of CLOSE_WAIT right after the look (read the other way
// round, a clean end could pass for a reset).
func endedByFin(c *net.TCPConn, wroteFin *atomic.Bool) bool {
	return peerClosed(c) || wroteFin.Load()
}

// onSocket runs fn on a connected stream's file descriptor.
func onSocket(c *net.TCPConn, fn func(fd int) error) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// setMaxPacingRate sets SO_MAX_PACING_RATE (bytes/s; noPacingCap for
// none) on a connected stream.
func setMaxPacingRate(c *net.TCPConn, v uint64) error {
	return onSocket(c, func(fd int) error {
		return unix.SetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE, v)
	})
}

// maxPacingRate reads a stream's SO_MAX_PACING_RATE.
func maxPacingRate(c *net.TCPConn) (uint64, error) {
	var v uint64
	err := onSocket(c, func(fd int) (err error) {
		v, err = unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE)
		return err
	})
	return v, err
}

// setBuffer sets a socket buffer with its SO_*BUFFORCE option (which
// lifts the net.core maximum with CAP_NET_ADMIN) or, where that is not
// allowed and fallback holds, with the capped option; the kernel doubles
// v for its bookkeeping.
func setBuffer(fd, force, capped, v int, fallback bool) error {
	err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, v)
	if err == nil || !fallback {
		return err
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, capped, v)
}

// setSendBuffer sets a connected stream's send buffer (setBuffer).
func setSendBuffer(c *net.TCPConn, v int, fallback bool) error {
	return onSocket(c, func(fd int) error {
		return setBuffer(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, v, fallback)
	})
}

// setNotsentLowat sets TCP_NOTSENT_LOWAT on a connected stream.
func setNotsentLowat(c *net.TCPConn, v int) error {
	return onSocket(c, func(fd int) error {
		return unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, v)
	})
}

// sendQueue is a stream socket's send side: TCP_INFO and SIOCOUTQ (bytes
// written and not yet acknowledged by the peer's TCP, sent or not).
type sendQueue struct {
	tcpInfo
	outq int
}

func readSendQueue(c *net.TCPConn) (sendQueue, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return sendQueue{}, false
	}
	var info *unix.TCPInfo
	var outq int
	var ierr, qerr error
	if err := rc.Control(func(fd uintptr) {
		// The queue first: bytes written after it only make the
		// caller's count of acknowledged bytes smaller (see sendView).
		outq, qerr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || ierr != nil || qerr != nil {
		return sendQueue{}, false
	}
	return sendQueue{tcpInfo: fromTCPInfo(info), outq: outq}, true
}

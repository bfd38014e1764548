// Package sockowner finds which user owns the other end of a TCP
// connection that comes from this node, with the kernel's socket
// diagnostics (NETLINK_SOCK_DIAG): the connection's peer socket is the one
// whose local address is the connection's remote address and whose remote
// address is the connection's local address.
//
// The lookup is one request for one socket (no dump): a hash lookup in the
// kernel, two system calls here. It answers for the network namespace the
// Prober was made in: a peer in another namespace (a container, another
// host) is not found, whatever its address.
package sockowner

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Prober looks up peer sockets in the network namespace it was made in.
// It is safe for concurrent use.
type Prober struct {
	mu     sync.Mutex
	fd     int
	buf    []byte
	seq    uint32
	routes *netlink.Handle // route lookups, in the Prober's namespace
	// listing bounds the listings of the node's sockets.
	listing budget
}

// New opens a socket-diagnostics netlink socket in the calling thread's
// network namespace (make it on the thread that made the listener when
// that thread is in another namespace).
func New() (*Prober, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("socket diagnostics: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("socket diagnostics: %w", err)
	}
	tv := unix.Timeval{Sec: 1}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("socket diagnostics: %w", err)
	}
	routes, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("route lookups: %w", err)
	}
	return &Prober{fd: fd, buf: make([]byte, 1<<16), routes: routes}, nil
}

// Close closes the netlink socket.
func (p *Prober) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		return nil
	}
	err := unix.Close(p.fd)
	p.fd = -1
	p.routes.Close()
	return err
}

// ErrLocalPeerNotFound: the connection comes from an address of this
// node (a packet from another host with such a source is dropped), yet
// no socket here has its other end: whom it belongs to is unknown.
var ErrLocalPeerNotFound = errors.New("socket diagnostics: the connection comes from an address of this node, but no socket here is its other end")

// ErrBusy: the connection needs a listing of the node's sockets, and
// more than ListingsPerSecond were asked for (one costs milliseconds: the
// kernel walks its whole table). Only a peer of this node bound to a
// device needs one, so a flood of such connections (a local user's) is
// what meets it.
var ErrBusy = errors.New("socket diagnostics: too many connections from this node whose other end must be looked for on every device")

// ListingsPerSecond bounds the listings of the node's sockets a Prober
// makes, with bursts of as many.
const ListingsPerSecond = 20

// budget is a token bucket of listings.
type budget struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// take takes a token at now, if there is one.
func (b *budget) take(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last.IsZero() {
		b.tokens = ListingsPerSecond
	} else {
		b.tokens = min(ListingsPerSecond, b.tokens+now.Sub(b.last).Seconds()*ListingsPerSecond)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// ErrPeerGone: the other end is on this node but closed (time-wait, or
// no longer any process's): whose it was is not known.
var ErrPeerGone = errors.New("socket diagnostics: the other end of the connection is closed")

// PeerOwner returns the uid owning the TCP socket at the other end of the
// connection whose local address is local and remote address is remote,
// and whether such a socket is on this node (in the Prober's namespace).
// An IPv4 address mapped into IPv6 (a dual-stack listener's view of an
// IPv4 client) is looked up as IPv4, then as it is.
//
// The kernel's one-socket lookup misses a socket bound to a device
// (SO_BINDTODEVICE, which any user may set; an IPv6 link-local
// connection's zone). So when it finds nothing and the remote address is
// one this node receives as its own (the kernel's route to it is local or
// anycast: interface addresses, local routes, IPv6 anycast), the node's
// sockets are listed, filtered in the kernel by the two ports, whatever
// their device; a peer not among them is ErrLocalPeerNotFound, never "not
// on this node".
func (p *Prober) PeerOwner(local, remote netip.AddrPort) (uid uint32, found bool, err error) {
	return p.peerOwner(local, remote, nil)
}

// PeerOwnerOf is PeerOwner for the TCP connection c. Before it lists the
// node's sockets, it checks that c is still established: the other end
// of one reset or closed already is nobody's to serve (ErrPeerGone), and
// a flood of such connections would otherwise cost a listing each.
func (p *Prober) PeerOwnerOf(c *net.TCPConn) (uid uint32, found bool, err error) {
	local, _ := c.LocalAddr().(*net.TCPAddr)
	remote, _ := c.RemoteAddr().(*net.TCPAddr)
	if local == nil || remote == nil {
		return 0, false, errors.New("socket diagnostics: a connection without addresses")
	}
	return p.peerOwner(local.AddrPort(), remote.AddrPort(), func() error {
		raw, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var info *unix.TCPInfo
		var ierr error
		if err := raw.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
			return err
		}
		if ierr != nil {
			return ierr
		}
		// CLOSE_WAIT: the peer half-closed after its request and
		// waits for the answer.
		if info.State != unix.BPF_TCP_ESTABLISHED && info.State != unix.BPF_TCP_CLOSE_WAIT {
			return ErrPeerGone
		}
		return nil
	})
}

func (p *Prober) peerOwner(local, remote netip.AddrPort, established func() error) (uid uint32, found bool, err error) {
	pairs := []endpoints{{remote, local}}
	if remote.Addr().Is4In6() && local.Addr().Is4In6() {
		pairs = []endpoints{{netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port()), netip.AddrPortFrom(local.Addr().Unmap(), local.Port())}, {remote, local}}
	}
	for _, e := range pairs {
		if uid, found, err = p.lookup(e.peer, e.self); found || err != nil {
			return uid, found, err
		}
	}
	own, err := p.receivesAsOwn(remote.Addr())
	if err != nil || own == notOurs {
		return 0, false, err
	}
	if established != nil {
		if err := established(); err != nil {
			return 0, false, err
		}
	}
	if !p.listing.take(time.Now()) {
		return 0, false, ErrBusy
	}
	// An IPv4 connection's other end may be an IPv6 socket (connected
	// to a mapped address): listings are by family.
	listed := pairs
	if e := pairs[0]; len(pairs) == 1 && e.peer.Addr().Is4() {
		listed = append(listed, endpoints{netip.AddrPortFrom(netip.AddrFrom16(e.peer.Addr().As16()), e.peer.Port()),
			netip.AddrPortFrom(netip.AddrFrom16(e.self.Addr().As16()), e.self.Port())})
	}
	for _, e := range listed {
		if uid, found, err = p.listPeer(e.peer, e.self); found || err != nil {
			return uid, found, err
		}
	}
	if own == maybeOurs {
		return 0, false, nil
	}
	return 0, false, ErrLocalPeerNotFound
}

// endpoints are a connection's two ends: the peer's socket's local end
// and its remote end (ours).
type endpoints struct{ peer, self netip.AddrPort }

// ownership is what this node's routes and addresses say of a remote
// address.
type ownership int

const (
	notOurs   ownership = iota
	maybeOurs           // an interface holds it, but the route is not local
	ours                // loopback, or the kernel's route to it is local or anycast
)

// receivesAsOwn says whether this node takes packets to a as its own:
// the kernel's route to a is of type local or anycast (asked on a's
// zone's interface, for a link-local address: another link may hold the
// same one). An address an interface holds whose route is not local (the
// node's own on another of its links, one in a VRF's table, one whose
// duplicate address detection failed) is maybeOurs: a peer not found
// there is another host.
func (p *Prober) receivesAsOwn(a netip.Addr) (ownership, error) {
	zone := a.Zone()
	a = a.Unmap().WithZone("")
	if a.IsLoopback() {
		return ours, nil
	}
	var opts *netlink.RouteGetOptions
	if zone != "" {
		ifc, err := net.InterfaceByName(zone)
		if idx, nerr := strconv.Atoi(zone); nerr == nil && err != nil {
			ifc, err = net.InterfaceByIndex(idx)
		}
		if err != nil {
			// The link is gone (the zone is then its number): whose
			// the address was is not known.
			return notOurs, fmt.Errorf("socket diagnostics: the interface of %s%%%s: %w", a, zone, err)
		}
		opts = &netlink.RouteGetOptions{OifIndex: ifc.Index}
	}
	routes, err := p.routes.RouteGetWithOptions(net.IP(a.AsSlice()), opts)
	if err != nil && !errors.Is(err, unix.ENETUNREACH) && !errors.Is(err, unix.EHOSTUNREACH) {
		return notOurs, fmt.Errorf("socket diagnostics: the route to %s: %w", a, err)
	}
	for _, r := range routes {
		if r.Type == unix.RTN_LOCAL || r.Type == unix.RTN_ANYCAST {
			return ours, nil
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return notOurs, fmt.Errorf("socket diagnostics: this node's addresses: %w", err)
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if b, ok := netip.AddrFromSlice(n.IP); ok && b.Unmap() == a {
				return maybeOurs, nil
			}
		}
	}
	return notOurs, nil
}

// The kernel's structures (linux/inet_diag.h, linux/sock_diag.h).
const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	reqLen           = 56 // struct inet_diag_req_v2
	msgLen           = 72 // struct inet_diag_msg
	noCookie         = ^uint32(0)
	reqBytecode      = 1  // INET_DIAG_REQ_BYTECODE
	bcSrcEq          = 11 // INET_DIAG_BC_S_EQ
	bcDstEq          = 12 // INET_DIAG_BC_D_EQ
	tcpTimeWait      = 6  // TCP_TIME_WAIT
	tcpListen        = 10 // TCP_LISTEN
	tcpNewSynRecv    = 12 // TCP_NEW_SYN_RECV
)

// lookup asks for the TCP socket whose local end is src and remote end
// is dst, bound to no device.
func (p *Prober) lookup(src, dst netip.AddrPort) (uint32, bool, error) {
	if !src.IsValid() || !dst.IsValid() || src.Addr().Is4() != dst.Addr().Is4() {
		return 0, false, fmt.Errorf("socket diagnostics: addresses %s and %s are not of one family", src, dst)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	req := p.request(family(src), unix.NLM_F_REQUEST)
	putID(req[unix.NLMSG_HDRLEN+8:], src, dst)
	var uid uint32
	found := false
	err := p.exchange(req, func(m []byte) error {
		// The kernel falls back to a listening socket of src: not it.
		if a, ok := answerOf(m); ok && a.matches(src, dst) {
			uid, found = a.uid, true
			return a.gone()
		}
		return nil
	})
	if errors.Is(err, unix.ENOENT) {
		return 0, false, nil
	}
	return uid, found, err
}

// listPeer lists the TCP sockets whose local port is src's and remote
// port dst's, whatever device they are bound to, and finds the one of
// src and dst among them.
func (p *Prober) listPeer(src, dst netip.AddrPort) (uint32, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	req := p.request(family(src), unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	// The filter (linux/inet_diag.h): the local port equal, then the
	// remote port equal; a failed test jumps past the end (no match).
	bc := make([]byte, 16)
	ne := binary.NativeEndian
	bc[0], bc[1] = bcSrcEq, 8
	ne.PutUint16(bc[2:], 20)
	ne.PutUint16(bc[6:], src.Port())
	bc[8], bc[9] = bcDstEq, 8
	ne.PutUint16(bc[10:], 12)
	ne.PutUint16(bc[14:], dst.Port())
	attr := make([]byte, 4+len(bc))
	ne.PutUint16(attr[0:], uint16(len(attr)))
	ne.PutUint16(attr[2:], reqBytecode)
	copy(attr[4:], bc)
	req = append(req, attr...)
	ne.PutUint32(req[0:], uint32(len(req)))
	var uid uint32
	found := false
	err := p.exchange(req, func(m []byte) error {
		if a, ok := answerOf(m); ok && !found && a.matches(src, dst) {
			uid, found = a.uid, true
			return a.gone()
		}
		return nil
	})
	return uid, found, err
}

// request is a socket-diagnostics request of the given flags for TCP
// sockets of every state but listening.
func (p *Prober) request(fam uint8, flags uint16) []byte {
	p.seq++
	req := make([]byte, unix.NLMSG_HDRLEN+reqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], sockDiagByFamily)
	ne.PutUint16(req[6:], flags)
	ne.PutUint32(req[8:], p.seq)
	r := req[unix.NLMSG_HDRLEN:]
	r[0] = fam
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], ^uint32(0)&^(1<<tcpListen))
	return req
}

// exchange sends req and hands each answer of it to each until the
// answer ends (one message, or NLMSG_DONE for a dump) or each returns an
// error. An error message of the kernel's is returned as its errno.
func (p *Prober) exchange(req []byte, each func(msg []byte) error) error {
	if p.fd < 0 {
		return errors.New("socket diagnostics: closed")
	}
	seq := binary.NativeEndian.Uint32(req[8:])
	dump := binary.NativeEndian.Uint16(req[6:])&unix.NLM_F_DUMP != 0
	if err := unix.Sendto(p.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("socket diagnostics: %w", err)
	}
	var first error
	for {
		n, _, err := unix.Recvfrom(p.fd, p.buf, 0)
		if err != nil {
			return fmt.Errorf("socket diagnostics: %w", err)
		}
		msgs, err := parse(p.buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.seq != seq {
				continue // an answer to an earlier request that timed out
			}
			switch m.typ {
			case unix.NLMSG_DONE:
				return first
			case unix.NLMSG_ERROR:
				if len(m.data) < 4 {
					return errors.New("socket diagnostics: short error message")
				}
				errno := -int32(binary.NativeEndian.Uint32(m.data))
				if errno == 0 {
					continue // an acknowledgement
				}
				if unix.Errno(errno) == unix.ENOENT {
					return unix.ENOENT
				}
				return fmt.Errorf("socket diagnostics: %w", unix.Errno(errno))
			case sockDiagByFamily:
				if err := each(m.data); err != nil && first == nil {
					first = err
				}
				if !dump {
					return first
				}
			}
		}
	}
}

// answer is what an inet_diag_msg says of one socket.
type answer struct {
	state        uint8
	sport, dport uint16
	src, dst     netip.Addr
	uid, inode   uint32
}

// answerOf reads an inet_diag_msg; ok is false for one too short.
func answerOf(m []byte) (answer, bool) {
	if len(m) < msgLen {
		return answer{}, false
	}
	a := answer{state: m[1], sport: binary.BigEndian.Uint16(m[4:]), dport: binary.BigEndian.Uint16(m[6:]),
		uid: binary.NativeEndian.Uint32(m[64:]), inode: binary.NativeEndian.Uint32(m[68:])}
	if m[0] == unix.AF_INET {
		a.src, a.dst = netip.AddrFrom4([4]byte(m[8:12])), netip.AddrFrom4([4]byte(m[24:28]))
	} else {
		a.src, a.dst = netip.AddrFrom16([16]byte(m[8:24])), netip.AddrFrom16([16]byte(m[24:40]))
	}
	return a, true
}

// matches says whether a is the socket whose local end is src and remote
// end dst (not a listening socket of src).
func (a answer) matches(src, dst netip.AddrPort) bool {
	return a.state != tcpListen && a.sport == src.Port() && a.dport == dst.Port() &&
		a.src == src.Addr().WithZone("") && a.dst == dst.Addr().WithZone("")
}

// gone is ErrPeerGone for a socket no process holds any more (time-wait,
// an orphan: the kernel reports them as root's) or one not yet accepted
// on the other side, else nil.
func (a answer) gone() error {
	if a.state == tcpTimeWait || a.state == tcpNewSynRecv || a.inode == 0 {
		return ErrPeerGone
	}
	return nil
}

func family(a netip.AddrPort) uint8 {
	if a.Addr().Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// putID writes a struct inet_diag_sockid: ports and addresses in network
// order, no device, no cookie.
func putID(b []byte, src, dst netip.AddrPort) {
	binary.BigEndian.PutUint16(b[0:], src.Port())
	binary.BigEndian.PutUint16(b[2:], dst.Port())
	s, d := src.Addr().As16(), dst.Addr().As16()
	if src.Addr().Is4() {
		s4, d4 := src.Addr().As4(), dst.Addr().As4()
		s, d = [16]byte{}, [16]byte{}
		copy(s[:], s4[:])
		copy(d[:], d4[:])
	}
	copy(b[4:], s[:])
	copy(b[20:], d[:])
	binary.NativeEndian.PutUint32(b[36:], 0)
	binary.NativeEndian.PutUint32(b[40:], noCookie)
	binary.NativeEndian.PutUint32(b[44:], noCookie)
}

type message struct {
	typ  uint16
	seq  uint32
	data []byte
}

// parse splits a netlink datagram into its messages.
func parse(b []byte) ([]message, error) {
	var out []message
	for len(b) >= unix.NLMSG_HDRLEN {
		l := binary.NativeEndian.Uint32(b[0:])
		if l < unix.NLMSG_HDRLEN || int(l) > len(b) {
			return nil, fmt.Errorf("socket diagnostics: message of %d bytes in %d", l, len(b))
		}
		out = append(out, message{
			typ:  binary.NativeEndian.Uint16(b[4:]),
			seq:  binary.NativeEndian.Uint32(b[8:]),
			data: b[unix.NLMSG_HDRLEN:l],
		})
		b = b[min(len(b), int((l+unix.NLMSG_ALIGNTO-1)&^(unix.NLMSG_ALIGNTO-1))):]
	}
	return out, nil
}

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
	"sync"

	"golang.org/x/sys/unix"
)

// Prober looks up peer sockets in the network namespace it was made in.
// It is safe for concurrent use.
type Prober struct {
	mu  sync.Mutex
	fd  int
	buf []byte
	seq uint32
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
	return &Prober{fd: fd, buf: make([]byte, 8192)}, nil
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
	return err
}

// ErrLocalPeerNotFound: the connection comes from an address of this
// node (a packet from another host with such a source is dropped), yet
// no socket here has its other end: whom it belongs to is unknown.
var ErrLocalPeerNotFound = errors.New("socket diagnostics: the connection comes from an address of this node, but no socket here is its other end")

// PeerOwner returns the uid owning the TCP socket at the other end of the
// connection whose local address is local and remote address is remote,
// and whether such a socket is on this node (in the Prober's namespace).
// An IPv4 address mapped into IPv6 (a dual-stack listener's view of an
// IPv4 client) is looked up as IPv4, then as it is.
//
// The kernel finds a socket bound to a device (SO_BINDTODEVICE, which
// any user may set; an IPv6 link-local connection's zone) only when asked
// with that device: when the remote address is one of this node's, the
// lookup is made again with each interface, and a peer still not found is
// ErrLocalPeerNotFound, never "not on this node".
func (p *Prober) PeerOwner(local, remote netip.AddrPort) (uid uint32, found bool, err error) {
	type pair struct{ peer, self netip.AddrPort }
	pairs := []pair{{remote, local}}
	if remote.Addr().Is4In6() && local.Addr().Is4In6() {
		pairs = []pair{{netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port()), netip.AddrPortFrom(local.Addr().Unmap(), local.Port())}, {remote, local}}
	}
	try := func(dif uint32) (uint32, bool, error) {
		for _, pr := range pairs {
			uid, found, err := p.lookup(pr.peer, pr.self, dif)
			if found || err != nil {
				return uid, found, err
			}
		}
		return 0, false, nil
	}
	if uid, found, err = try(0); found || err != nil {
		return uid, found, err
	}
	ours, err := isOwnAddress(remote.Addr())
	if err != nil {
		return 0, false, err
	}
	if !ours {
		return 0, false, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, false, fmt.Errorf("socket diagnostics: %w", err)
	}
	for _, ifc := range ifs {
		if uid, found, err = try(uint32(ifc.Index)); found || err != nil {
			return uid, found, err
		}
	}
	return 0, false, ErrLocalPeerNotFound
}

// isOwnAddress says whether a is a loopback address or one assigned to an
// interface of this network namespace.
func isOwnAddress(a netip.Addr) (bool, error) {
	a = a.Unmap().WithZone("")
	if a.IsLoopback() {
		return true, nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false, fmt.Errorf("socket diagnostics: this node's addresses: %w", err)
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if b, ok := netip.AddrFromSlice(n.IP); ok && b.Unmap() == a {
				return true, nil
			}
		}
	}
	return false, nil
}

// The kernel's structures (linux/inet_diag.h, linux/sock_diag.h).
const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	reqLen           = 56 // struct inet_diag_req_v2
	msgLen           = 72 // struct inet_diag_msg
	noCookie         = ^uint32(0)
	tcpListen        = 10 // TCP_LISTEN
)

// lookup asks for the TCP socket whose local end is src and remote end
// is dst, bound to no device or to device dif. An answer that is not
// that connection (the kernel falls back to a listening socket of src)
// is not it.
func (p *Prober) lookup(src, dst netip.AddrPort, dif uint32) (uint32, bool, error) {
	if !src.IsValid() || !dst.IsValid() || src.Addr().Is4() != dst.Addr().Is4() {
		return 0, false, fmt.Errorf("socket diagnostics: addresses %s and %s are not of one family", src, dst)
	}
	family := uint8(unix.AF_INET6)
	if src.Addr().Is4() {
		family = unix.AF_INET
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		return 0, false, errors.New("socket diagnostics: closed")
	}
	p.seq++
	seq := p.seq
	req := make([]byte, unix.NLMSG_HDRLEN+reqLen)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], sockDiagByFamily)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(req[8:], seq)
	r := req[unix.NLMSG_HDRLEN:]
	r[0] = family
	r[1] = unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(r[4:], ^uint32(0)) // every state
	putID(r[8:], src, dst, dif)
	if err := unix.Sendto(p.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, false, fmt.Errorf("socket diagnostics: %w", err)
	}
	for {
		n, _, err := unix.Recvfrom(p.fd, p.buf, 0)
		if err != nil {
			return 0, false, fmt.Errorf("socket diagnostics: %w", err)
		}
		msgs, err := parse(p.buf[:n])
		if err != nil {
			return 0, false, err
		}
		for _, m := range msgs {
			if m.seq != seq {
				continue // an answer to an earlier request that timed out
			}
			switch m.typ {
			case unix.NLMSG_ERROR:
				if len(m.data) < 4 {
					return 0, false, errors.New("socket diagnostics: short error message")
				}
				errno := -int32(binary.NativeEndian.Uint32(m.data))
				if errno == 0 {
					continue // an acknowledgement
				}
				if unix.Errno(errno) == unix.ENOENT {
					return 0, false, nil
				}
				return 0, false, fmt.Errorf("socket diagnostics: %w", unix.Errno(errno))
			case sockDiagByFamily:
				if len(m.data) < msgLen {
					return 0, false, errors.New("socket diagnostics: short answer")
				}
				if m.data[1] == tcpListen || binary.BigEndian.Uint16(m.data[4:]) != src.Port() || binary.BigEndian.Uint16(m.data[6:]) != dst.Port() {
					return 0, false, nil
				}
				return binary.NativeEndian.Uint32(m.data[64:]), true, nil
			}
		}
	}
}

// putID writes a struct inet_diag_sockid: ports and addresses in network
// order, the device dif (0: none), no cookie.
func putID(b []byte, src, dst netip.AddrPort, dif uint32) {
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
	binary.NativeEndian.PutUint32(b[36:], dif)
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

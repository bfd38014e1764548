// Package sockowner finds which user owns the other end of a TCP
// connection that comes from this node, with the kernel's socket
// diagnostics (NETLINK_SOCK_DIAG): the connection's peer socket is the one
// whose local address is the connection's remote address and whose remote
// address is the connection's local address.
//
// The lookup is one request for one socket (no dump): a hash lookup in the
// kernel, two system calls here. A socket bound to a device is not found
// that way; for a peer from an address of this node it is looked for in a
// listing of the node's sockets (a dump, milliseconds), which answers many
// lookups at once (Begin, Finish). It answers for the network namespace
// the Prober was made in: a peer in another namespace (a container,
// another host) is not found, whatever its address.
package sockowner

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Prober looks up peer sockets in the network namespace it was made in.
// It is safe for concurrent use.
type Prober struct {
	// single asks for one socket, dumps lists sockets: a listing (which
	// may take tens of milliseconds on a node with many sockets) does not
	// hold up the one-socket lookups.
	single, dumps *diag
	routes        *netlink.Handle // route lookups, in the Prober's namespace
	closeOnce     sync.Once
	// listing bounds the listings of the node's sockets.
	listing budget
	// listings counts them.
	listings atomic.Uint64
}

// diag is a socket-diagnostics netlink socket, for one exchange at a time.
type diag struct {
	mu  sync.Mutex
	fd  int
	buf []byte
	seq uint32
}

// openDiag opens a socket-diagnostics netlink socket in the calling
// thread's network namespace.
func openDiag() (*diag, error) {
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
	return &diag{fd: fd, buf: make([]byte, 1<<16)}, nil
}

// close closes d; once closed, its exchanges fail.
func (d *diag) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	return err
}

// New opens the socket-diagnostics netlink sockets in the calling
// thread's network namespace (make it on the thread that made the
// listener when that thread is in another namespace).
func New() (*Prober, error) {
	single, err := openDiag()
	if err != nil {
		return nil, err
	}
	dumps, err := openDiag()
	if err != nil {
		single.close()
		return nil, err
	}
	routes, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		single.close()
		dumps.close()
		return nil, fmt.Errorf("route lookups: %w", err)
	}
	return &Prober{single: single, dumps: dumps, routes: routes}, nil
}

// Close closes the netlink sockets.
func (p *Prober) Close() error {
	var err error
	p.closeOnce.Do(func() {
		p.routes.Close()
		err = errors.Join(p.single.close(), p.dumps.close())
	})
	return err
}

// ErrLocalPeerNotFound: the connection comes from an address of this
// node (a packet from another host with such a source is dropped), yet
// no socket here has its other end: whom it belongs to is unknown.
var ErrLocalPeerNotFound = errors.New("socket diagnostics: the connection comes from an address of this node, but no socket here is its other end")

// ErrBusy: the connection needs a listing of the node's sockets, and the
// listings asked for are more than the budget (ListingsPerSecond turns
// of ListingTime) can make within ListingWait: one costs milliseconds,
// as the kernel walks its whole table, or more on a node that holds many
// sockets. One listing answers every lookup a Finish call is given, so a
// flood of connections that need one (a local user's, bound to a device)
// meets it only when several callers each wait for listings of their own,
// or when the node's sockets make every listing long.
var ErrBusy = errors.New("socket diagnostics: too many connections from this node whose other end must be looked for on every device")

// ListingsPerSecond bounds the listings of the node's sockets a Prober
// makes, with bursts of as many.
const ListingsPerSecond = 20

// ListingTime is the CPU time of listing that one turn of the budget
// pays for. A listing walks every TCP socket of the node in the kernel,
// and any user can heap sockets up (60,000 in TIME_WAIT made one take
// 26 ms), so one that takes longer takes as many more turns: listings
// then use at most ListingsPerSecond x ListingTime of each second (a
// fifth of one core), whatever the node holds.
const ListingTime = 10 * time.Millisecond

// ListingWait is how long a lookup waits for its turn to list before it
// gives up (ErrBusy).
const ListingWait = time.Second

// maxListed is how many ports one listing's filter names at most (12
// bytes each; the filter is a netlink attribute of at most 64 KiB). A
// call with more lists in parts, for one turn of the budget.
const maxListed = 1024

// budget is a token bucket of listings; a long one takes more (charge),
// and may leave the bucket below zero.
type budget struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// reserve takes a token at now, if need be one not there yet: it says
// how long to wait before using it, and false (taking nothing) when that
// would be longer than limit.
func (b *budget) reserve(now time.Time, limit time.Duration) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = b.level(now)
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
	wait := waitFor(b.tokens)
	if wait > limit {
		return 0, false
	}
	b.tokens--
	return wait, true
}

// level is the tokens at now (a full bucket before the first turn),
// with b.mu held; it changes nothing.
func (b *budget) level(now time.Time) float64 {
	switch {
	case b.last.IsZero():
		return ListingsPerSecond
	case now.After(b.last):
		return min(ListingsPerSecond, b.tokens+now.Sub(b.last).Seconds()*ListingsPerSecond)
	}
	return b.tokens
}

// waitFor is how long a turn waits with tokens in the bucket.
func waitFor(tokens float64) time.Duration {
	if tokens >= 1 {
		return 0
	}
	return time.Duration((1 - tokens) / ListingsPerSecond * float64(time.Second))
}

// Listings is how many listings of the node's sockets p made.
func (p *Prober) Listings() uint64 { return p.listings.Load() }

// charge takes from the bucket the turns beyond the one it took that a
// listing of took pays for (ListingTime).
func (b *budget) charge(took time.Duration) {
	extra := float64(took)/float64(ListingTime) - 1
	if extra <= 0 {
		return
	}
	b.mu.Lock()
	b.tokens -= extra
	b.mu.Unlock()
}

// NextListing is how long a listing asked for now would wait for its
// turn (0: none); it takes no turn.
func (p *Prober) NextListing() time.Duration {
	return p.listing.until(time.Now())
}

// until is how long a reservation at now would wait, taking nothing.
func (b *budget) until(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return waitFor(b.level(now))
}

// ErrAmbiguousPeer: the listing holds two sockets at the connection's
// other end, bound to different devices, of different users: which one
// it is is not known.
var ErrAmbiguousPeer = errors.New("socket diagnostics: two sockets of different owners on this node are the connection's other end")

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
// sockets connected to local's port are listed, whatever their device,
// and the one of the two ends looked for among them; a peer not among them is ErrLocalPeerNotFound, never "not
// on this node".
func (p *Prober) PeerOwner(local, remote netip.AddrPort) (uid uint32, found bool, err error) {
	l := p.begin(local, remote, nil)
	p.Finish([]*Lookup{l})
	return l.UID, l.Found, l.Err
}

// PeerOwnerOf is PeerOwner for the TCP connection c. Before it lists the
// node's sockets, it checks that c is still established: the other end
// of one reset or closed already is nobody's to serve (ErrPeerGone), and
// a flood of such connections would otherwise cost a listing each.
func (p *Prober) PeerOwnerOf(c *net.TCPConn) (uid uint32, found bool, err error) {
	l := p.Begin(c)
	p.Finish([]*Lookup{l})
	return l.UID, l.Found, l.Err
}

// A Lookup is one connection's owner lookup: Begin does what the
// kernel's one-socket lookup and this node's routes answer, and Finish
// what needs a listing of the node's sockets, for many lookups at once.
type Lookup struct {
	// UID, Found and Err are what PeerOwner would return, once Done.
	UID   uint32
	Found bool
	Err   error

	done bool
	// own says whether a peer not listed is another host's
	// (maybeOurs) or unknown (ours).
	own ownership
	// listed are the ends to look for in the listing, in order.
	listed []endpoints
	// established checks, before the listing, that the connection is
	// still there; nil for PeerOwner.
	established func() error
}

// Done says whether the lookup has its answer; one that has not needs
// Finish.
func (l *Lookup) Done() bool { return l.done }

func (l *Lookup) finish(uid uint32, found bool, err error) {
	l.UID, l.Found, l.Err, l.done = uid, found, err, true
}

// Begin starts the lookup PeerOwnerOf makes for c and does all of it
// that needs no listing of the node's sockets.
func (p *Prober) Begin(c *net.TCPConn) *Lookup {
	local, _ := c.LocalAddr().(*net.TCPAddr)
	remote, _ := c.RemoteAddr().(*net.TCPAddr)
	if local == nil || remote == nil {
		l := &Lookup{}
		l.finish(0, false, errors.New("socket diagnostics: a connection without addresses"))
		return l
	}
	return p.begin(local.AddrPort(), remote.AddrPort(), func() error {
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

func (p *Prober) begin(local, remote netip.AddrPort, established func() error) *Lookup {
	l := &Lookup{established: established}
	pairs := []endpoints{{remote, local}}
	if remote.Addr().Is4In6() && local.Addr().Is4In6() {
		pairs = []endpoints{{netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port()), netip.AddrPortFrom(local.Addr().Unmap(), local.Port())}, {remote, local}}
	}
	for _, e := range pairs {
		if uid, found, err := p.lookup(e.peer, e.self); found || err != nil {
			l.finish(uid, found, err)
			return l
		}
	}
	own, err := p.receivesAsOwn(remote.Addr())
	if err != nil || own == notOurs {
		l.finish(0, false, err)
		return l
	}
	l.own = own
	// An IPv4 connection's other end may be an IPv6 socket (connected
	// to a mapped address): listings are by family.
	l.listed = pairs
	if e := pairs[0]; len(pairs) == 1 && e.peer.Addr().Is4() {
		l.listed = append(l.listed, endpoints{netip.AddrPortFrom(netip.AddrFrom16(e.peer.Addr().As16()), e.peer.Port()),
			netip.AddrPortFrom(netip.AddrFrom16(e.self.Addr().As16()), e.self.Port())})
	}
	return l
}

// Finish finishes the lookups of ls that are not Done with one listing
// of the node's sockets for all of them (one per address family), of the
// sockets connected to the ports they were made to (a listener's, so one
// or a few), matched here by both ends. It waits for the listing
// budget's turn, up to ListingWait (past that they are ErrBusy), then
// checks that each connection is still established, then lists; a
// listing longer than ListingTime takes the turns it paid for.
func (p *Prober) Finish(ls []*Lookup) { p.FinishUnless(ls, nil) }

// ErrStopped: the lookup was stopped while it waited for its turn to
// list (FinishUnless).
var ErrStopped = errors.New("socket diagnostics: the lookup was stopped before its listing")

// FinishUnless is Finish, but stop closed while it waits for the listing
// budget's turn ends it without a listing: its lookups are ErrStopped (a
// listener closed meanwhile has no use for them).
func (p *Prober) FinishUnless(ls []*Lookup, stop <-chan struct{}) {
	var waiting []*Lookup
	for _, l := range ls {
		if !l.done {
			waiting = append(waiting, l)
		}
	}
	if len(waiting) == 0 {
		return
	}
	wait, ok := p.listing.reserve(time.Now(), ListingWait)
	if !ok {
		for _, l := range waiting {
			l.finish(0, false, ErrBusy)
		}
		return
	}
	turn := time.NewTimer(wait)
	select {
	case <-turn.C:
	case <-stop:
		turn.Stop()
		for _, l := range waiting {
			l.finish(0, false, ErrStopped)
		}
		return
	}
	live := make([]*Lookup, 0, len(waiting))
	for _, l := range waiting {
		if l.established != nil {
			if err := l.established(); err != nil {
				l.finish(0, false, err)
				continue
			}
		}
		live = append(live, l)
	}
	if len(live) == 0 {
		return
	}
	wanted, ambiguous := map[endpoints]bool{}, map[endpoints]bool{}
	found := map[endpoints]answer{}
	// The CPU time the listing took (listTo).
	var listed time.Duration
	defer func() { p.listing.charge(listed) }()
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		var ports []uint16
		for _, l := range live {
			for _, e := range l.listed {
				if family(e.peer) != fam {
					continue
				}
				wanted[e.key()] = true
				if !slices.Contains(ports, e.self.Port()) {
					ports = append(ports, e.self.Port())
				}
			}
		}
		for len(ports) > 0 {
			part := ports[:min(len(ports), maxListed)]
			ports = ports[len(part):]
			err := p.listTo(fam, part, &listed, func(a answer) {
				k := endpoints{netip.AddrPortFrom(a.src, a.sport), netip.AddrPortFrom(a.dst, a.dport)}
				if !wanted[k] {
					return
				}
				if f, ok := found[k]; !ok {
					found[k] = a
				} else if f.uid != a.uid || f.gone() != a.gone() {
					// Two sockets of these two ends (bound to two
					// devices: the same link-local address on two
					// links) that do not agree: whose it is is not
					// known.
					ambiguous[k] = true
				}
			})
			if err != nil {
				for _, l := range live {
					l.finish(0, false, err)
				}
				return
			}
		}
	}
	for _, l := range live {
		// Every end it may be (IPv4, and an IPv6 socket's view of it):
		// two sockets that do not agree make it ambiguous.
		var first *answer
		for _, e := range l.listed {
			a, ok := found[e.key()]
			switch {
			case ambiguous[e.key()] || ok && first != nil && (a.uid != first.uid || a.gone() != first.gone()):
				l.finish(0, false, ErrAmbiguousPeer)
			case ok && first == nil:
				first = &a
			}
		}
		switch {
		case l.done:
		case first != nil && l.established != nil && l.established() != nil:
			// Gone while it was listed: its other end may have left
			// the states listed, and a twin of it been found.
			l.finish(0, false, ErrPeerGone)
		case first != nil:
			l.finish(first.uid, true, first.gone())
		case l.own == maybeOurs:
			l.finish(0, false, nil)
		default:
			l.finish(0, false, ErrLocalPeerNotFound)
		}
	}
}

// endpoints are a connection's two ends: the peer's socket's local end
// and its remote end (ours).
type endpoints struct{ peer, self netip.AddrPort }

// key is e without zones, as a listing reports it.
func (e endpoints) key() endpoints {
	return endpoints{netip.AddrPortFrom(e.peer.Addr().WithZone(""), e.peer.Port()), netip.AddrPortFrom(e.self.Addr().WithZone(""), e.self.Port())}
}

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
	bcJmp            = 1  // INET_DIAG_BC_JMP
	bcSrcEq          = 11 // INET_DIAG_BC_S_EQ
	bcDstEq          = 12 // INET_DIAG_BC_D_EQ
	tcpEstablished   = 1  // TCP_ESTABLISHED
	tcpFinWait1      = 4  // TCP_FIN_WAIT1
	tcpFinWait2      = 5  // TCP_FIN_WAIT2
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
	d := p.single
	d.mu.Lock()
	defer d.mu.Unlock()
	req := d.request(family(src), unix.NLM_F_REQUEST)
	putID(req[unix.NLMSG_HDRLEN+8:], src, dst)
	var uid uint32
	found := false
	err := d.exchange(req, func(m []byte) error {
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

// listTo lists the TCP sockets of family fam whose remote port is one of
// ports, whatever device they are bound to, and hands each to each; it
// adds the CPU time it took to took (when not nil: its wall time would
// count another listing's turn, or another process's, on a busy node).
// It lists only the states the other end of a
// connection can be in while this end has not sent its FIN (peerStates):
// the connections looked for are established here, or closed by their
// peer only, and were not closed here yet (Finish checks that again
// after the listing). The other states' sockets, which any user can heap
// up (TIME_WAIT, bound and unconnected ones), would only make the
// listing longer. A socket in TIME_WAIT reached from FIN_WAIT2 by its
// timeout, with no process, is reported as FIN_WAIT2, and listed.
func (p *Prober) listTo(fam uint8, ports []uint16, took *time.Duration, each func(answer)) error {
	d := p.dumps
	d.mu.Lock()
	defer d.mu.Unlock()
	if took != nil {
		// The CPU time of the thread that lists: the kernel walks its
		// table in this thread's receive calls.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		began := threadCPU()
		defer func() { *took += threadCPU() - began }()
	}
	p.listings.Add(1)
	req := d.request(fam, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne := binary.NativeEndian
	ne.PutUint32(req[unix.NLMSG_HDRLEN+4:], peerStates)
	bc := portFilter(ports)
	attr := make([]byte, 4+len(bc))
	ne.PutUint16(attr[0:], uint16(len(attr)))
	ne.PutUint16(attr[2:], reqBytecode)
	copy(attr[4:], bc)
	req = append(req, attr...)
	ne.PutUint32(req[0:], uint32(len(req)))
	return d.exchange(req, func(m []byte) error {
		if a, ok := answerOf(m); ok && a.state != tcpListen {
			each(a)
		}
		return nil
	})
}

// threadCPU is the calling thread's user and system time.
func threadCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// portFilter is the kernel's filter (linux/inet_diag.h) of the sockets
// whose remote port is one of ports: for each port, a test of the remote
// port, then a jump to the end (a match); a failed test goes on to the
// next port's, or past the end (no match) after the last. The kernel
// checks a filter by following each test's success: each jump's goes on
// to the next port's test there, and it takes its "no" branch when run.
func portFilter(ports []uint16) []byte {
	total := 12*len(ports) - 4
	bc := make([]byte, total)
	ne := binary.NativeEndian
	for i, port := range ports {
		at := bc[12*i:]
		at[0], at[1] = bcDstEq, 8
		ne.PutUint16(at[2:], 12) // the next port's test, or past the end
		ne.PutUint16(at[6:], port)
		if i < len(ports)-1 {
			at[8], at[9] = bcJmp, 4
			ne.PutUint16(at[10:], uint16(total-12*i-8)) // the end
		}
	}
	return bc
}

// peerStates are the states listTo lists. (The client end of an
// accepted connection is never in SYN_RECV: that is a listener's side,
// which the kernel lists with NEW_SYN_RECV when asked for it.)
const peerStates = 1<<tcpEstablished | 1<<tcpFinWait1 | 1<<tcpFinWait2

// request is a socket-diagnostics request of the given flags for TCP
// sockets of every state but listening.
func (d *diag) request(fam uint8, flags uint16) []byte {
	d.seq++
	req := make([]byte, unix.NLMSG_HDRLEN+reqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], sockDiagByFamily)
	ne.PutUint16(req[6:], flags)
	ne.PutUint32(req[8:], d.seq)
	r := req[unix.NLMSG_HDRLEN:]
	r[0] = fam
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], ^uint32(0)&^(1<<tcpListen))
	return req
}

// exchange sends req and hands each answer of it to each until the
// answer ends (one message, or NLMSG_DONE for a dump) or each returns an
// error. An error message of the kernel's is returned as its errno.
func (d *diag) exchange(req []byte, each func(msg []byte) error) error {
	if d.fd < 0 {
		return errors.New("socket diagnostics: closed")
	}
	seq := binary.NativeEndian.Uint32(req[8:])
	dump := binary.NativeEndian.Uint16(req[6:])&unix.NLM_F_DUMP != 0
	if err := unix.Sendto(d.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("socket diagnostics: %w", err)
	}
	var first error
	for {
		n, _, err := unix.Recvfrom(d.fd, d.buf, 0)
		if err != nil {
			return fmt.Errorf("socket diagnostics: %w", err)
		}
		msgs, err := parse(d.buf[:n])
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

// Package connlimit bounds how many connections an HTTP server keeps open
// at once, in all and from one source.
//
// It is for the small HTTP servers a node runs beside its data path (the
// agent's health endpoint, the daemon's metrics): each accepted connection
// costs a goroutine, buffers and a file descriptor until its timeouts end
// it, so without a cap anyone who reaches the port can hold as many as the
// process may open files, and the relay's own listeners then fail to
// accept.
//
// Past a cap an old connection is closed to make room for the new one,
// never one whose request is being served (for up to servedGrace: a
// handler still writing after that waits on a client that does not read),
// so the controller's check and Prometheus's scrape are answered while a
// flood goes on:
//
//   - a source is an IPv4 address or an IPv6 /64 (one host's addresses);
//   - past a source's cap, one of that source's connections goes;
//   - past the total cap, one of the source that holds the most goes;
//   - of those, a connection that never completed a request goes first
//     (the oldest: a real client's request arrives right after it
//     connects), then an idle one that did (the newest: a long-lived
//     keep-alive such as Prometheus's stays), then one whose request has
//     been served for longer than servedGrace (the oldest);
//   - when every candidate is being served, the new connection is closed.
//
// A request counts as served from when its handler starts until it
// returns, which Track arranges for an http.Server.
//
// An allow list (Allow) goes before all of this: a connection from outside
// it is closed as it is accepted, before a byte is read or written, and
// takes no place. While there is one, a connection from this node (its
// peer socket is in the listener's network namespace, whatever the
// address) is accepted only from root or a user AllowUsers names: any
// local user can bind an allowed address, such as 127.0.0.1 or the
// node's own (package sockowner). The connections whose owner needs a
// listing of the node's sockets are looked up together, those that came
// by the listing's turn at once, beside Accept (lister).
package connlimit

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os/user"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sosappliance/sosappliance/internal/sockowner"
)

// Listener is a net.Listener that keeps at most total connections open,
// at most perSource of them from one source. Closing an accepted
// connection (as http.Server does at its timeouts) frees its place.
type Listener struct {
	net.Listener
	total, perSource int
	// grace is servedGrace; tests that must not depend on how fast the
	// machine serves set another before the first Accept. waitCap is
	// maxWaiting (tests set a smaller one).
	grace   time.Duration
	waitCap int

	mu    sync.Mutex
	order *list.List // of *conn, oldest first
	bySrc map[netip.Prefix]int

	// acceptMu lets one Accept run at a time. waiting are the
	// connections waiting for a listing of the node's sockets (lister,
	// which runs while listing is set), inFlight how many the lister is
	// listing, ready those admitted since that Accept has not returned
	// yet; closed says Close ran, and done is closed then.
	acceptMu sync.Mutex
	// recheckMu lets one recheck run at a time, so that its lookups
	// and its sweep see the same lists.
	recheckMu sync.Mutex
	readyMu   sync.Mutex
	waiting   batch
	listing   bool
	inFlight  int
	ready     []*conn
	closed    bool
	done      chan struct{}
	// listed is signalled when a listing is done (Accept waits for it
	// when full).
	listed chan struct{}

	// allow is the allow list (Allow); nil or empty allows any source.
	allow atomic.Pointer[[]netip.Prefix]
	// users are the uids other than root that AllowUsers admits from
	// this node while there is an allow list.
	users atomic.Pointer[[]uint32]

	*Counts
}

// Counts are what a Listener closed, by reason. Several listeners in turn
// (one replaced on a new address) may share one (WithCounts), so that the
// counts go on across them.
type Counts struct {
	evicted, refused, denied atomic.Uint64
}

// Evicted is how many connections were closed to make room; Refused how
// many new ones were closed because every candidate was being served;
// Denied how many were closed because the allow list did not admit their
// source (at accept, or when Allow narrowed it).
func (c *Counts) Evicted() uint64 { return c.evicted.Load() }
func (c *Counts) Refused() uint64 { return c.refused.Load() }
func (c *Counts) Denied() uint64  { return c.denied.Load() }

// New wraps ln; total and perSource are at least 1.
func New(ln net.Listener, total, perSource int) *Listener {
	return &Listener{
		Listener: ln, total: max(total, 1), perSource: max(perSource, 1), grace: servedGrace, waitCap: maxWaiting,
		order: list.New(), bySrc: map[netip.Prefix]int{}, Counts: &Counts{}, done: make(chan struct{}), listed: make(chan struct{}, 1),
	}
}

// The owners of this node's peers are found in the process's network
// namespace (where its listeners are), for every listener, by a prober
// opened when first needed and checked then on a loopback connection of
// its own (the kernel's tcp_diag could be missing: every lookup would
// then say "not on this node"). Without one no peer is known
// (ownerUnknown), and with an allow list set every connection is closed;
// opening it is tried again at most once a second.
var owner struct {
	mu     sync.Mutex
	p      *sockowner.Prober
	err    error
	tried  time.Time
	opened bool
}

func owners() (*sockowner.Prober, error) {
	owner.mu.Lock()
	defer owner.mu.Unlock()
	if owner.opened || time.Since(owner.tried) < time.Second {
		return owner.p, owner.err
	}
	owner.tried = time.Now()
	p, err := sockowner.New()
	if err == nil {
		if err = selfCheck(p); err != nil {
			p.Close()
			p = nil
		}
	}
	owner.p, owner.err, owner.opened = p, err, err == nil
	return p, err
}

// OwnerLookup says why the owners of this node's peers cannot be looked
// up (nil: they can); with an allow list set, every connection is then
// closed.
func OwnerLookup() error {
	_, err := owners()
	return err
}

// selfCheck looks up the other end of a loopback connection of this
// process; with no loopback to make one on (a namespace whose lo is
// down), it checks nothing.
func selfCheck(p *sockowner.Prober) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil
	}
	defer ln.Close()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		return nil
	}
	defer c.Close()
	local, remote := c.RemoteAddr().(*net.TCPAddr).AddrPort(), c.LocalAddr().(*net.TCPAddr).AddrPort()
	if _, found, err := p.PeerOwner(local, remote); err != nil || !found {
		return fmt.Errorf("the kernel's socket diagnostics did not find a connection of this process (is tcp_diag available?): %v", err)
	}
	return nil
}

// A connection's owner, when it is not a uid: its peer is not on this
// node, the lookup failed, or it was not looked up yet (only a
// connection an allow list admits by its address needs it).
const (
	ownerRemote   int64 = -1
	ownerUnknown  int64 = -2
	ownerUnlooked int64 = -3
)

// ownerOf is the uid owning c's peer socket when it is on this node.
func (l *Listener) ownerOf(c net.Conn) int64 {
	lk := l.begin(c)
	if lk == nil {
		return ownerUnknown
	}
	if p, _ := owners(); p != nil {
		p.Finish([]*sockowner.Lookup{lk})
	}
	return ownerFrom(lk)
}

// begin starts the lookup of c's owner (sockowner.Prober.Begin); nil
// when there is no prober or c is not a TCP connection (its owner is
// then unknown).
func (l *Listener) begin(c net.Conn) *sockowner.Lookup {
	tc, ok := c.(*net.TCPConn)
	p, _ := owners()
	if !ok || p == nil {
		return nil
	}
	return p.Begin(tc)
}

// ownerFrom is the owner a finished lookup found.
func ownerFrom(lk *sockowner.Lookup) int64 {
	switch {
	case lk == nil || !lk.Done() || lk.Err != nil:
		return ownerUnknown
	case !lk.Found:
		return ownerRemote
	}
	return int64(lk.UID)
}

// WithCounts makes l count into c instead of counts of its own; call it
// before the first Accept.
func (l *Listener) WithCounts(c *Counts) *Listener {
	l.Counts = c
	return l
}

// Track makes srv tell the listener which connections it is serving a
// request on (they are never closed to make room). Call it before
// srv.Serve(l).
func (l *Listener) Track(srv *http.Server) {
	prev := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prev != nil {
			ctx = prev(ctx, c)
		}
		if tc, ok := c.(*conn); ok && tc.l == l {
			ctx = context.WithValue(ctx, connKey{}, tc)
		}
		return ctx
	}
	h := srv.Handler
	if h == nil {
		h = http.DefaultServeMux
	}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tc, _ := r.Context().Value(connKey{}).(*conn)
		if tc != nil {
			tc.servingSince.Store(monotonic())
			defer func() {
				tc.answered.Store(true)
				tc.servingSince.Store(0)
			}()
		}
		h.ServeHTTP(w, r)
	})
}

type connKey struct{}

// servedGrace is how long a request being served keeps its connection
// from being closed to make room: the health and metrics answers are
// written in milliseconds, or into the socket's buffer, unless the client
// stops reading. After it, the connection goes only when no silent or
// idle one is left to close.
const servedGrace = time.Second

// epoch anchors the monotonic times the connections keep (a step of the
// wall clock changes no grace).
var epoch = time.Now()

// monotonic is the time since epoch, at least 1 (0 means none).
func monotonic() int64 { return int64(time.Since(epoch)) + 1 }

// Accept accepts a connection and makes room for it (see the package
// documentation); it closes the new one itself when there is none.
//
// A connection from this node whose owner only a listing of the node's
// sockets finds (one bound to a device, or link-local) waits for the
// listing beside Accept (lister), with every other such connection that
// comes before the listing's turn: a local user's flood of them costs
// one listing per turn, and Accept goes on meanwhile, so the clients
// the one-socket lookup finds (root's ordinary ones) do not wait for a
// listing, unless maxWaiting are held for one (full). The connections a
// listing admits are returned by the next calls of Accept, which runs
// one call at a time.
func (l *Listener) Accept() (net.Conn, error) {
	l.acceptMu.Lock()
	defer l.acceptMu.Unlock()
	for {
		if tc := l.nextReady(); tc != nil {
			return tc, nil
		}
		if l.full() {
			// The listing is behind: the connections that come
			// meanwhile wait in the listen queue, none refused.
			select {
			case <-l.listed:
			case <-l.done:
			}
			continue
		}
		c, err := l.Listener.Accept()
		if err != nil {
			if l.woken(err) {
				continue
			}
			return nil, err
		}
		owner, lk := l.ownerAtAccept(c)
		if lk == nil {
			if tc := l.admit(c, owner); tc != nil {
				return tc, nil
			}
			continue
		}
		if tc := l.awaitListing(c, lk); tc != nil {
			return tc, nil
		}
	}
}

// batch is connections whose owners one listing is to find.
type batch struct {
	conns []net.Conn
	lks   []*sockowner.Lookup
}

// maxWaiting bounds the connections waiting for a listing, being
// listed, or admitted by one and not yet returned: at it, Accept takes no
// more from the listen queue until a listing is done (full).
const maxWaiting = 1024

// full says whether the connections waiting for a listing, being listed
// or admitted by one and not returned yet are waitCap; never after Close.
func (l *Listener) full() bool {
	l.readyMu.Lock()
	defer l.readyMu.Unlock()
	return !l.closed && len(l.waiting.conns)+l.inFlight+len(l.ready) >= l.waitCap
}

// deadliner is a listener whose blocked Accept a deadline interrupts
// (net.TCPListener): the lister wakes Accept so.
type deadliner interface{ SetDeadline(time.Time) error }

// woken says whether err is the timeout of the deadline the lister set to
// wake Accept (wake); it clears that deadline.
func (l *Listener) woken(err error) bool {
	dl, ok := l.Listener.(deadliner)
	var ne net.Error
	if !ok || !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	return dl.SetDeadline(time.Time{}) == nil
}

// wake interrupts Accept's wait for the kernel's next connection, so that
// it returns those a listing admitted. Call it after queuing them (keep):
// Accept clears the deadline before it looks at the queue.
func (l *Listener) wake() {
	if dl, ok := l.Listener.(deadliner); ok {
		_ = dl.SetDeadline(time.Unix(1, 0))
	}
}

// ownerAtAccept is c's owner as far as it is known without a listing of
// the node's sockets, and the lookup that needs one (else nil). Only a
// connection whose address the allow list admits is looked up; for the
// rest the address decides.
func (l *Listener) ownerAtAccept(c net.Conn) (int64, *sockowner.Lookup) {
	if list := l.allow.Load(); list == nil || !listed(*list, addrOf(c)) {
		return ownerUnlooked, nil
	}
	lk := l.begin(c)
	switch {
	case lk == nil:
		return ownerUnknown, nil
	case lk.Done():
		return ownerFrom(lk), nil
	}
	return ownerUnlooked, lk
}

// awaitListing queues c, whose lookup lk needs a listing, for the lister,
// and starts it if it is not running. A listener that cannot be woken
// (not a deadliner), or one without a prober, finishes c's lookup here,
// alone, and returns c if admitted. After Close, c is closed.
func (l *Listener) awaitListing(c net.Conn, lk *sockowner.Lookup) *conn {
	p, _ := owners()
	if _, ok := l.Listener.(deadliner); !ok || p == nil {
		l.finish(p, batch{conns: []net.Conn{c}, lks: []*sockowner.Lookup{lk}})
		return l.nextReady()
	}
	l.readyMu.Lock()
	if l.closed {
		l.readyMu.Unlock()
		_ = c.Close()
		return nil
	}
	l.waiting.conns, l.waiting.lks = append(l.waiting.conns, c), append(l.waiting.lks, lk)
	start := !l.listing
	l.listing = true
	l.readyMu.Unlock()
	if start {
		go l.lister(p)
	}
	return nil
}

// lister finishes the lookups waiting for a listing, all of those that
// came by the listing's turn in one (sockowner.Prober.Finish), until none
// waits; after Close it closes them.
func (l *Listener) lister(p *sockowner.Prober) {
	for {
		l.awaitTurn(p)
		l.readyMu.Lock()
		b := l.waiting
		l.waiting = batch{}
		if len(b.conns) == 0 {
			l.listing = false
			l.readyMu.Unlock()
			return
		}
		l.inFlight = len(b.conns)
		l.readyMu.Unlock()
		l.finish(p, b)
		l.readyMu.Lock()
		l.inFlight = 0
		l.readyMu.Unlock()
		l.wake()
		select {
		case l.listed <- struct{}{}:
		default:
		}
	}
}

// awaitTurn waits, up to sockowner.ListingWait (the longest a lookup
// waits for its turn before it is ErrBusy), until the listing budget's
// next turn, or until Close.
func (l *Listener) awaitTurn(p *sockowner.Prober) {
	limit := time.NewTimer(sockowner.ListingWait)
	defer limit.Stop()
	for {
		next := p.NextListing()
		if next == 0 {
			return
		}
		turn := time.NewTimer(next)
		select {
		case <-turn.C:
		case <-limit.C:
			turn.Stop()
			return
		case <-l.done:
			turn.Stop()
			return
		}
	}
}

// finish finishes b's lookups with one listing (none without a prober:
// their owners are unknown), admits each connection of it or closes it,
// and keeps those admitted for Accept. After Close it closes them
// without a listing.
func (l *Listener) finish(p *sockowner.Prober, b batch) {
	if p != nil && !l.isClosed() {
		p.FinishUnless(b.lks, l.done)
	}
	for i, c := range b.conns {
		if l.isClosed() {
			// Closed before or during the listing: admitted now, one
			// would take the place of a connection Accept returned
			// before.
			closeAll(b.conns[i:])
			return
		}
		l.keep(l.admit(c, ownerFrom(b.lks[i])))
	}
}

// isClosed says whether Close ran.
func (l *Listener) isClosed() bool {
	l.readyMu.Lock()
	defer l.readyMu.Unlock()
	return l.closed
}

// closeAll closes cs.
func closeAll(cs []net.Conn) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// keep queues an admitted connection for Accept (nothing for nil); after
// Close it closes it instead.
func (l *Listener) keep(tc *conn) {
	if tc == nil {
		return
	}
	l.readyMu.Lock()
	closed := l.closed
	if !closed {
		l.ready = append(l.ready, tc)
	}
	l.readyMu.Unlock()
	if closed {
		_ = tc.Close()
	}
}

// nextReady is the oldest connection admitted and not yet returned by
// Accept, or nil. One closed meanwhile (to make room for another) is
// dropped.
func (l *Listener) nextReady() *conn {
	l.readyMu.Lock()
	defer l.readyMu.Unlock()
	for len(l.ready) > 0 {
		tc := l.ready[0]
		l.ready[0] = nil
		l.ready = l.ready[1:]
		l.mu.Lock()
		open := tc.elem != nil
		l.mu.Unlock()
		if open {
			return tc
		}
	}
	return nil
}

// Close closes the listener, the connections waiting for a listing, and
// those a listing admitted that Accept has not returned yet.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.readyMu.Lock()
	ready, waiting, closed := l.ready, l.waiting, l.closed
	l.ready, l.waiting, l.closed = nil, batch{}, true
	l.readyMu.Unlock()
	if !closed {
		close(l.done)
	}
	for _, tc := range ready {
		_ = tc.Close()
	}
	closeAll(waiting.conns)
	return err
}

// admit admits c, whose owner is owner (ownerUnlooked: admits looks it
// up if the allow list needs it), or closes it; it returns the admitted
// connection, or nil.
func (l *Listener) admit(c net.Conn, owner int64) *conn {
	addr := addrOf(c)
	src := SourceOf(addr)
	if list := l.allow.Load(); owner == ownerUnlooked && list != nil && listed(*list, addr) {
		// The list changed since the accept looked: look up now,
		// before l.mu (a listing may wait for its turn).
		owner = l.ownerOf(c)
	}
	tc := &conn{Conn: c, l: l, addr: addr, src: src, owner: owner}
	l.mu.Lock()
	// The lists are read under l.mu, which Allow and AllowUsers take to
	// store a new one, and again to close what it no longer admits: a
	// connection is either judged here by the new lists or in l.order
	// for their sweep, never left open past it.
	if !l.admits(tc) {
		l.mu.Unlock()
		l.denied.Add(1)
		_ = c.Close()
		return nil
	}
	var victim *conn
	full := false
	switch {
	case l.bySrc[src] >= l.perSource:
		full = true
		victim = l.victimLocked(func(x *conn) bool { return x.src == src })
	case l.order.Len() >= l.total:
		full = true
		victim = l.victimLocked(l.busiestLocked())
	}
	if full && victim == nil {
		l.mu.Unlock()
		l.refused.Add(1)
		_ = c.Close()
		return nil
	}
	if victim != nil {
		l.removeLocked(victim)
	}
	tc.elem = l.order.PushBack(tc)
	l.bySrc[src]++
	l.mu.Unlock()
	if victim != nil {
		l.evicted.Add(1)
		_ = victim.Conn.Close()
	}
	return tc
}

// victimLocked picks, among the connections in is that are not being
// served (served), the oldest that never completed a request and has none
// under way, else the newest idle one, else the oldest whose request has
// outlived servedGrace; nil when every one is being served.
func (l *Listener) victimLocked(in func(*conn) bool) *conn {
	var idle, stale *conn
	now := monotonic()
	for e := l.order.Front(); e != nil; e = e.Next() {
		c := e.Value.(*conn)
		if !in(c) || c.served(now) {
			continue
		}
		switch {
		case c.servingSince.Load() != 0:
			if stale == nil {
				stale = c
			}
		case !c.answered.Load():
			return c
		default:
			idle = c
		}
	}
	if idle != nil {
		return idle
	}
	return stale
}

// busiestLocked matches the connections of the sources that hold the
// most connections not being served.
func (l *Listener) busiestLocked() func(*conn) bool {
	count := map[netip.Prefix]int{}
	top := 0
	now := monotonic()
	for e := l.order.Front(); e != nil; e = e.Next() {
		c := e.Value.(*conn)
		if c.served(now) {
			continue
		}
		count[c.src]++
		top = max(top, count[c.src])
	}
	return func(c *conn) bool { return count[c.src] == top }
}

// Allow sets the allow list: from now on only connections from these
// prefixes are accepted, and the open ones from outside them are closed.
// No prefixes (nil or empty) allow any source. Addresses are compared
// unmapped (an IPv4 client of a dual-stack socket matches IPv4 prefixes).
// While the list is set, a peer on this node must be root's or a user's
// AllowUsers names.
func (l *Listener) Allow(prefixes []netip.Prefix) {
	list := slices.Clone(prefixes)
	l.recheck(func() { l.allow.Store(&list) })
}

// AllowUsers sets the users other than root whose connections from this
// node are accepted while there is an allow list, and closes the open
// ones it no longer admits.
func (l *Listener) AllowUsers(uids []uint32) {
	list := slices.Clone(uids)
	l.recheck(func() { l.users.Store(&list) })
}

// AllowFrom is Allow and AllowUsers at once: what neither list admits
// any longer is closed, and nothing both admit.
func (l *Listener) AllowFrom(prefixes []netip.Prefix, uids []uint32) {
	list, users := slices.Clone(prefixes), slices.Clone(uids)
	l.recheck(func() { l.allow.Store(&list); l.users.Store(&users) })
}

// recheck runs set under l.mu, looks up the owners of the open
// connections the new lists need (outside l.mu: a listing may wait for
// its turn), and closes those no longer admitted. A connection accepted
// from when set ran is judged by the new lists at its accept.
func (l *Listener) recheck(set func()) {
	l.recheckMu.Lock()
	defer l.recheckMu.Unlock()
	l.mu.Lock()
	set()
	l.mu.Unlock()
	l.lookUpOwners()
	var gone []*conn
	l.mu.Lock()
	for e := l.order.Front(); e != nil; {
		c := e.Value.(*conn)
		e = e.Next()
		if !l.admits(c) {
			l.removeLocked(c)
			gone = append(gone, c)
		}
	}
	l.mu.Unlock()
	for _, c := range gone {
		l.denied.Add(1)
		_ = c.Conn.Close()
	}
}

// lookUpOwners looks up, with one listing for all that need one, the
// owners of the open connections that the allow list admits by address
// and that were accepted without a lookup (before there was a list). One
// whose accept was under way is looked up by admits, alone.
func (l *Listener) lookUpOwners() {
	list := l.allow.Load()
	if list == nil || len(*list) == 0 {
		return
	}
	var cs []*conn
	l.mu.Lock()
	for e := l.order.Front(); e != nil; e = e.Next() {
		if c := e.Value.(*conn); c.owner == ownerUnlooked && listed(*list, c.addr) {
			cs = append(cs, c)
		}
	}
	l.mu.Unlock()
	if len(cs) == 0 {
		return
	}
	lks := make([]*sockowner.Lookup, len(cs))
	var need []*sockowner.Lookup
	for i, c := range cs {
		if lks[i] = l.begin(c.Conn); lks[i] != nil {
			need = append(need, lks[i])
		}
	}
	if p, _ := owners(); p != nil && len(need) > 0 {
		p.Finish(need)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, c := range cs {
		if c.owner == ownerUnlooked {
			c.owner = ownerFrom(lks[i]) // ownerUnknown for nil
		}
	}
}

// listed says whether a prefix of list holds addr.
func listed(list []netip.Prefix, addr netip.Addr) bool {
	return slices.ContainsFunc(list, func(p netip.Prefix) bool { return p.Contains(addr) })
}

// admits says whether the allow list admits c: its address, and, from
// this node, its owner (looked up now if it was not yet). Call it with
// l.mu held.
func (l *Listener) admits(c *conn) bool {
	list := l.allow.Load()
	if list == nil || len(*list) == 0 {
		return true
	}
	if !listed(*list, c.addr) {
		return false
	}
	if c.owner == ownerUnlooked {
		c.owner = l.ownerOf(c.Conn)
	}
	switch c.owner {
	case ownerRemote, 0:
		return true
	case ownerUnknown:
		return false
	}
	users := l.users.Load()
	return users != nil && slices.Contains(*users, uint32(c.owner))
}

// ResolveUsers turns user names and numeric uids into uids. Names that
// are not users of this node are returned apart (a config shared by
// several nodes may name a user some of them lack).
func ResolveUsers(names []string) (uids []uint32, unknown []string) {
	for _, n := range names {
		if id, err := strconv.ParseUint(n, 10, 32); err == nil {
			uids = append(uids, uint32(id))
			continue
		}
		u, err := user.Lookup(n)
		if err != nil {
			unknown = append(unknown, n)
			continue
		}
		id, err := strconv.ParseUint(u.Uid, 10, 32)
		if err != nil {
			unknown = append(unknown, fmt.Sprintf("%s (uid %q)", n, u.Uid))
			continue
		}
		uids = append(uids, uint32(id))
	}
	return uids, unknown
}

// Open is how many accepted connections are open.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.order.Len()
}

// removeLocked forgets c; it is a no-op for one already forgotten.
func (l *Listener) removeLocked(c *conn) {
	if c.elem == nil {
		return
	}
	l.order.Remove(c.elem)
	c.elem = nil
	Dec(l.bySrc, c.src)
}

// addrOf is a connection's remote address, unmapped and without a zone;
// the zero Addr for a connection that is not TCP.
func addrOf(c net.Conn) netip.Addr {
	ta, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	return ta.AddrPort().Addr().Unmap().WithZone("")
}

// SourceOf is the source an address counts against: the IPv4 address, or
// the /64 of an IPv6 address (one host may hold a whole /64). An
// IPv4-mapped address counts as the IPv4 address; a zone is dropped, so
// link-local peers of different interfaces share a source.
func SourceOf(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	a = a.Unmap().WithZone("")
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// AddressOf is one address as a prefix (/32, /128), unmapped and without
// its zone: the key of a cap per host address, which peers that share a
// /64 (agents or switches on one IPv6 LAN) do not share.
func AddressOf(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen())
}

// Dec takes one off counts[k] and deletes the key at zero, so a map of
// counts per source (or per peer) holds only those that count.
func Dec[K comparable](counts map[K]int, k K) {
	if counts[k]--; counts[k] <= 0 {
		delete(counts, k)
	}
}

// PerNetwork is the cap of one IPv4 address or IPv6 /64 (SourceOf) when
// perAddress caps each address (AddressOf) and total all: half the total,
// and never below perAddress. A host holding a /64 then takes at most
// half of what all may hold, whatever addresses it uses, while peers of
// one LAN keep their own per-address share.
func PerNetwork(perAddress, total int) int { return max(perAddress, total/2) }

// conn is an accepted connection that gives its place back when closed.
type conn struct {
	net.Conn
	l    *Listener
	addr netip.Addr
	src  netip.Prefix
	// owner is the uid owning the peer socket when it is on this node,
	// else ownerRemote or ownerUnknown.
	owner int64
	elem  *list.Element // nil once forgotten
	// servingSince is when the request being served on it started
	// (monotonic; 0: none; Track); answered says one was served.
	servingSince atomic.Int64
	answered     atomic.Bool
}

// served says whether a request is being served on c and has been for
// less than the grace (servedGrace) at now.
func (c *conn) served(now int64) bool {
	since := c.servingSince.Load()
	return since != 0 && now-since < int64(c.l.grace)
}

func (c *conn) Close() error {
	c.l.mu.Lock()
	c.l.removeLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// CloseWrite half-closes a TCP connection, as net/http does before it
// closes one after an error answer.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

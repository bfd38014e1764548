package relay

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

// poolKeepalive is the idle time before TCP keepalive probes on a pooled
// stream: the only traffic of an idle stream, one probe per stream every
// this long, so a pool can be left running.
const poolKeepalive = 60 * time.Second

// streamPool is a client-side agent's warm pool toward one peer agent:
// streams already open and authenticated (stripe "Pooled streams"),
// idle until a session binds them. It refills in the background up to its
// target, at least MinIdle and at most Max; a miss (a session that found
// it empty) raises the target toward Max, and idle streams beyond MinIdle
// that wait longer than IdleTimeout are closed, lowering it again.
type streamPool struct {
	a        *Agent
	peer     netip.AddrPort
	peerName string
	spec     agentspec.Pool

	mu      sync.Mutex
	idle    []*pooledStream
	opening int
	target  int
	wake    chan struct{}

	refills atomic.Uint64 // streams opened into the pool
	claims  atomic.Uint64 // streams taken from it by sessions
	misses  atomic.Uint64 // streams a session wanted and did not find
	died    atomic.Uint64 // idle streams found dead
	expired atomic.Uint64 // idle streams closed by the idle timeout
}

// pooledStream is one idle stream of a pool.
type pooledStream struct {
	conn    *net.TCPConn
	secrets *stripe.Secrets
	bind    *stripe.PoolStream
	since   time.Time
	// claimed is set by the session that takes the stream; the idle
	// watcher then stops without closing it.
	claimed atomic.Bool
	watched chan struct{} // closed when the idle watcher returned
}

// PoolStats is a snapshot of one pool.
type PoolStats struct {
	Peer     netip.AddrPort
	PeerName string
	Idle     int
	Opening  int
	Target   int
	MinIdle  int
	Max      int
	Refills  uint64
	Claims   uint64
	Misses   uint64
	Died     uint64
	Expired  uint64
}

// poolsOf groups the client-side routes with a pool by peer, each pool
// sized by the largest setting of its routes.
func poolsOf(routes []Whitelist) map[netip.AddrPort]*streamPool {
	out := make(map[netip.AddrPort]*streamPool)
	for _, w := range routes {
		if w.Pool.MinIdle <= 0 || !w.Peer.IsValid() {
			continue
		}
		spec := w.Pool.WithDefaults()
		p, ok := out[w.Peer]
		if !ok {
			out[w.Peer] = &streamPool{peer: w.Peer, peerName: w.PeerName, spec: spec, target: spec.MinIdle, wake: make(chan struct{}, 1)}
			continue
		}
		p.spec.MinIdle = max(p.spec.MinIdle, spec.MinIdle)
		p.spec.Max = max(p.spec.Max, spec.Max)
		p.spec.IdleTimeout = max(p.spec.IdleTimeout, spec.IdleTimeout)
		p.target = p.spec.MinIdle
	}
	return out
}

func (p *streamPool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run keeps the pool filled until the agent stops.
func (p *streamPool) run(stop <-chan struct{}) {
	defer p.a.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	tick := time.NewTicker(max(p.spec.IdleTimeout/4, 10*time.Millisecond))
	defer tick.Stop()
	var openers sync.WaitGroup
	defer func() {
		openers.Wait()
		p.closeAll()
	}()
	for {
		p.expire(time.Now())
		for !p.a.stopping.Load() && p.wantOne() {
			openers.Add(1)
			go func() {
				defer openers.Done()
				p.open(ctx)
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-tick.C:
		}
	}
}

// wantOne reserves the opening of one stream when the pool is below its
// target.
func (p *streamPool) wantOne() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle)+p.opening >= min(p.target, p.spec.Max) {
		return false
	}
	p.opening++
	return true
}

// open opens one pooled stream, within the agent's handshakes in flight
// toward the peer; a failure waits a backoff before the slot is given
// back, so an unreachable peer costs one attempt per backoff.
func (p *streamPool) open(ctx context.Context) {
	ps, err := p.handshake(ctx)
	if err == nil {
		p.mu.Lock()
		p.opening--
		p.idle = append(p.idle, ps)
		p.mu.Unlock()
		p.refills.Add(1)
		go p.watch(ps)
		return
	}
	if ctx.Err() == nil {
		p.a.limited.log(p.a.log, "pool-open", "relay: opening a pooled stream failed", "peer", p.peer, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(poolBackoff):
		}
	}
	p.mu.Lock()
	p.opening--
	p.mu.Unlock()
	p.poke()
}

// poolBackoff is the wait after a failed pooled stream before the next.
const poolBackoff = 500 * time.Millisecond

func (p *streamPool) handshake(ctx context.Context) (*pooledStream, error) {
	rc := p.a.cfg.Load()
	slots := p.a.slotsFor(p.peer)
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ctx, cancel := context.WithTimeout(ctx, rc.limits.PreAuthTimeout)
	defer cancel()
	d := net.Dialer{}
	c, err := d.DialContext(ctx, network(p.peer.Addr()), p.peer.String())
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", p.peer, err)
	}
	conn := c.(*net.TCPConn)
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	fail := func(err error) (*pooledStream, error) {
		_ = conn.Close()
		return nil, err
	}
	eph, err := stripe.NewEphemeral(rand.Reader)
	if err != nil {
		return fail(err)
	}
	pub := eph.Public()
	p.a.ownKeys.add(pub)
	defer p.a.ownKeys.remove(pub)
	hello := stripe.Hello{Mode: rc.mode, Initiator: rc.Name, Responder: p.peerName, Ephemeral: pub, Pool: true}
	hb, err := hello.Marshal(rc.key)
	if err != nil {
		return fail(err)
	}
	if _, err := conn.Write(hb[:]); err != nil {
		return fail(fmt.Errorf("send hello: %w", err))
	}
	var rb [stripe.ReplySize]byte
	if _, err := io.ReadFull(conn, rb[:]); err != nil {
		return fail(fmt.Errorf("read reply: %w", err))
	}
	reply, err := stripe.ParseReply(hb[:], rb[:], rc.key)
	if err != nil {
		return fail(fmt.Errorf("peer %s: %w", p.peer, err))
	}
	if reply.Status != stripe.StatusAccepted {
		return fail(fmt.Errorf("peer %s refused a pooled stream: %s", p.peer, reply.Status))
	}
	secrets, err := stripe.Finish(rc.key, eph, reply.Ephemeral, hb[:], rb[:])
	if err != nil {
		return fail(err)
	}
	confirm := secrets.Confirm()
	if _, err := conn.Write(confirm[:]); err != nil {
		return fail(fmt.Errorf("send confirm: %w", err))
	}
	_ = conn.SetDeadline(time.Time{})
	if err := keepIdle(conn); err != nil {
		return fail(err)
	}
	return &pooledStream{conn: conn, secrets: secrets, bind: secrets.PoolStream(), since: time.Now(), watched: make(chan struct{})}, nil
}

// keepIdle turns on the TCP keepalive of an idle pooled stream.
func keepIdle(c *net.TCPConn) error {
	return c.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: poolKeepalive, Interval: poolKeepalive / 4, Count: 4})
}

// watch waits on an idle stream: the responder sends nothing on it before
// a bind, so anything a read returns (end of file, reset, keepalive
// failure, bytes) means the stream is gone, unless a session claimed it.
func (p *streamPool) watch(ps *pooledStream) {
	defer close(ps.watched)
	var one [1]byte
	_, err := ps.conn.Read(one[:])
	if ps.claimed.Load() {
		return
	}
	if p.remove(ps) {
		p.died.Add(1)
		p.a.limited.log(p.a.log, "pool-died", "relay: an idle pooled stream died", "peer", p.peer, "err", err)
		reset(ps.conn)
		p.poke()
	}
}

func (p *streamPool) remove(ps *pooledStream) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, q := range p.idle {
		if q == ps {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			return true
		}
	}
	return false
}

// take claims up to n idle streams for a session, newest first (the
// oldest are the likeliest to have died unnoticed); a shortfall counts as
// misses and raises the target so the next session finds more.
func (p *streamPool) take(n int) []*pooledStream {
	p.mu.Lock()
	k := min(n, len(p.idle))
	got := make([]*pooledStream, 0, k)
	for range k {
		ps := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		got = append(got, ps)
	}
	if miss := n - k; miss > 0 {
		p.target = min(p.spec.Max, p.target+miss)
		p.misses.Add(uint64(miss))
	}
	p.mu.Unlock()
	for _, ps := range got {
		ps.claimed.Store(true)
		// Stop the watcher; the claimant owns the stream once it returned.
		_ = ps.conn.SetReadDeadline(time.Unix(1, 0))
		<-ps.watched
		_ = ps.conn.SetReadDeadline(time.Time{})
	}
	p.claims.Add(uint64(k))
	p.poke()
	return got
}

// expire closes idle streams beyond MinIdle that waited longer than
// IdleTimeout, and lowers the target with them.
func (p *streamPool) expire(now time.Time) {
	p.mu.Lock()
	var old []*pooledStream
	for len(p.idle) > p.spec.MinIdle && now.Sub(p.idle[0].since) >= p.spec.IdleTimeout {
		old = append(old, p.idle[0])
		p.idle = p.idle[1:]
	}
	if len(old) > 0 {
		p.target = max(p.spec.MinIdle, p.target-len(old))
	}
	p.mu.Unlock()
	for _, ps := range old {
		ps.claimed.Store(true)
		_ = ps.conn.Close()
		p.expired.Add(1)
	}
}

func (p *streamPool) closeAll() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, ps := range idle {
		ps.claimed.Store(true)
		_ = ps.conn.Close()
		<-ps.watched
	}
}

func (p *streamPool) stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStats{
		Peer: p.peer, PeerName: p.peerName, Idle: len(p.idle), Opening: p.opening, Target: p.target,
		MinIdle: p.spec.MinIdle, Max: p.spec.Max,
		Refills: p.refills.Load(), Claims: p.claims.Load(), Misses: p.misses.Load(),
		Died: p.died.Load(), Expired: p.expired.Load(),
	}
}

// admitPooled decides a pooled hello on the server side: its initiator
// must be the client-side agent of one of this agent's server-side
// entries, and that peer may hold at most MaxPooledPerPeer idle pooled
// streams here.
func (a *Agent) admitPooled(rc *runtimeConfig, h *stripe.Hello) stripe.Status {
	if a.ownKeys.contains(h.Ephemeral) {
		return stripe.StatusReflected
	}
	if h.Mode != rc.mode {
		return stripe.StatusModeMismatch
	}
	known := false
	for _, w := range rc.Server {
		known = known || w.PeerName == h.Initiator
	}
	if !known {
		return stripe.StatusUnknownInitiator
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.draining:
		return stripe.StatusShuttingDown
	case len(a.pooled[h.Initiator]) >= rc.limits.MaxPooledPerPeer:
		return stripe.StatusPoolRefused
	}
	return stripe.StatusAccepted
}

// holdPooled keeps an authenticated pooled stream of initiator idle, within
// the bound of its peer (checked again here: admission only answered the
// hello), until it ends. It holds a socket and this goroutine's stack and
// nothing else: no frame buffer until a bind.
func (a *Agent) holdPooled(rc *runtimeConfig, initiator string, c *net.TCPConn) {
	a.leavePreAuth(c)
	a.mu.Lock()
	conns := a.pooled[initiator]
	if a.draining || len(conns) >= rc.limits.MaxPooledPerPeer {
		a.mu.Unlock()
		a.reject(rejectSessionLimit, "relay: pooled stream beyond the peer's bound; reset", "initiator", initiator)
		reset(c)
		return
	}
	if conns == nil {
		conns = make(map[*net.TCPConn]struct{})
		a.pooled[initiator] = conns
	}
	conns[c] = struct{}{}
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(conns, c)
		if len(conns) == 0 {
			delete(a.pooled, initiator)
		}
		a.mu.Unlock()
	}()
	_ = c.SetDeadline(time.Time{})
	if err := keepIdle(c); err != nil {
		reset(c)
		return
	}
	var hdr [stripe.HeaderSize]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		// The client-side agent closed it (idle timeout, shutdown) or
		// it died.
		_ = c.Close()
		return
	}
	// This agent does not bind pooled streams to sessions yet.
	a.reject(rejectMismatch, "relay: frame on a pooled stream (binding is not supported yet); reset", "initiator", initiator)
	reset(c)
}

// PooledStreams counts the idle pooled streams the server side holds for
// each client-side agent.
func (a *Agent) PooledStreams() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]int, len(a.pooled))
	for who, conns := range a.pooled {
		out[who] = len(conns)
	}
	return out
}

// Pools is a snapshot of the client side's pools, one per peer.
func (a *Agent) Pools() []PoolStats {
	out := make([]PoolStats, 0, len(a.pools))
	for _, p := range a.pools {
		out = append(out, p.stats())
	}
	return out
}

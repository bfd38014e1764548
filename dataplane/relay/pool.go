package relay

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
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
	// quit stops this pool alone (a reload dropped it).
	quit chan struct{}
	// After a failed open the pool pauses, doubling the pause with each
	// failure in a row up to poolBackoffMax, and then probes with one
	// stream at a time until one opens: a far agent that refuses pooled
	// streams (or cannot parse a pooled hello) costs one handshake per
	// pause, not one per slot every poolBackoff.
	fails      int
	pauseUntil time.Time
	lastErr    error
	refused    stripe.Status // the far agent's last authenticated refusal; 0 if none
	// An idle stream that dies younger than streamProvenAfter (a path,
	// or a far agent, resetting each stream after its handshake) counts
	// like a failed open: young counts such pauses in a row and the pool
	// pauses as after failures. One that lived, or a claim, clears it.
	young   int
	youngAt time.Time // the last such death

	refills atomic.Uint64 // streams opened into the pool
	claims  atomic.Uint64 // streams taken from it by sessions
	misses  atomic.Uint64 // streams a session wanted and did not find
	died    atomic.Uint64 // idle streams found dead
	expired atomic.Uint64 // idle streams closed by the idle timeout
	// refounds counts sessions founded again after their first bind was
	// lost (see refound).
	refounds atomic.Uint64
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
	// rc is the configuration its handshake ran under.
	rc *runtimeConfig
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
	Refounds uint64
	// Failures counts failed opens in a row; DiedYoung the deaths in a
	// row of idle streams younger than streamProvenAfter (a path that
	// drops new connections; those that die together count once), after
	// which the pool pauses as after failures and then opens one stream
	// at a time until one has lived that long; RetryAt is when the pool
	// tries again (zero when it is not pausing); Refused is the far
	// agent's refusal ("" when it did not refuse) and LastError the last
	// failure.
	Failures  int
	DiedYoung int
	RetryAt   time.Time
	Refused   string
	LastError string
}

// poolsOf groups the client-side routes with a pool by peer, each pool
// sized by the largest setting of its routes.
func poolsOf(routes []Whitelist) map[netip.AddrPort]*streamPool {
	out := make(map[netip.AddrPort]*streamPool)
	for _, w := range routes {
		// A route spread over several far agents keeps a pool toward
		// each (sized by that agent's own pool block): a connection
		// claims from the one its bucket goes to.
		peers := w.Peers
		if len(peers) == 0 {
			peers = []agentspec.Peer{{Name: w.PeerName, Addr: w.Peer, Pool: w.Pool}}
		}
		for _, peer := range peers {
			if !peer.Addr.IsValid() || peer.Pool.MinIdle <= 0 {
				continue
			}
			spec := peer.Pool.WithDefaults()
			p, ok := out[peer.Addr]
			if !ok {
				out[peer.Addr] = &streamPool{peer: peer.Addr, peerName: peer.Name, spec: spec, target: spec.MinIdle,
					wake: make(chan struct{}, 1), quit: make(chan struct{})}
				continue
			}
			p.spec.MinIdle = max(p.spec.MinIdle, spec.MinIdle)
			p.spec.Max = max(p.spec.Max, spec.Max)
			p.spec.IdleTimeout = max(p.spec.IdleTimeout, spec.IdleTimeout)
			p.target = p.spec.MinIdle
		}
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
		case <-p.quit:
		case <-ctx.Done():
		}
		cancel()
	}()
	tick := time.NewTimer(p.tickEvery())
	defer tick.Stop()
	var openers sync.WaitGroup
	defer func() {
		openers.Wait()
		p.closeAll()
	}()
	resume := time.NewTimer(time.Hour)
	defer resume.Stop()
	for {
		now := time.Now()
		p.expire(now)
		for !p.a.stopping.Load() && p.wantOne(now) {
			openers.Add(1)
			go func() {
				defer openers.Done()
				p.open(ctx)
			}()
		}
		var resumed <-chan time.Time
		if d := p.paused(now); d > 0 {
			resume.Reset(d)
			resumed = resume.C
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-tick.C:
		case <-resumed:
		}
		if !tick.Stop() {
			select {
			case <-tick.C:
			default:
			}
		}
		tick.Reset(p.tickEvery())
		if resumed != nil && !resume.Stop() {
			select {
			case <-resume.C:
			default:
			}
		}
	}
}

// tickEvery is how often the pool looks for streams past the idle
// timeout.
func (p *streamPool) tickEvery() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(p.spec.IdleTimeout/4, 10*time.Millisecond)
}

// poolFor is the client side's pool toward peer, nil if none.
func (a *Agent) poolFor(peer netip.AddrPort) *streamPool {
	a.poolsMu.Lock()
	defer a.poolsMu.Unlock()
	return a.pools[peer]
}

// reconcilePools applies a reload's pools: a pool kept (same peer address
// and name) takes its new size at once, closing idle streams beyond a
// lower max, and all of them when the pre-shared key or the encryption
// changed (rekeyed); a new one starts; one the configuration dropped
// stops and closes its idle streams. Streams sessions claimed belong to
// them and live on.
func (a *Agent) reconcilePools(old, rc *runtimeConfig) {
	next := poolsOf(rc.Client)
	a.poolsMu.Lock()
	defer a.poolsMu.Unlock()
	for peer, p := range a.pools {
		if np, ok := next[peer]; ok && np.peerName == p.peerName {
			p.resize(np.spec)
			if !sameKey(old, rc, p.peerName, true) {
				// Its idle streams' keys come from the old pre-shared
				// key, pair key or encryption: new ones take their
				// place.
				p.dropIdle()
			}
			continue
		}
		close(p.quit)
		delete(a.pools, peer)
	}
	for peer, np := range next {
		if _, ok := a.pools[peer]; ok {
			continue
		}
		np.a = a
		a.pools[peer] = np
		if a.started {
			a.wg.Add(1)
			go np.run(a.stopped.Done())
		}
	}
}

// dropIdle closes every idle stream; the pool opens new ones.
func (p *streamPool) dropIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	p.closeExpired(idle)
	p.poke()
}

// closeExpired closes idle streams taken out of p.idle, counted as expired.
func (p *streamPool) closeExpired(streams []*pooledStream) {
	for _, ps := range streams {
		ps.claimed.Store(true)
		_ = ps.conn.Close()
		p.expired.Add(1)
	}
}

// resize gives a running pool its new size.
func (p *streamPool) resize(spec agentspec.Pool) {
	p.mu.Lock()
	p.spec = spec
	p.target = min(max(p.target, spec.MinIdle), spec.Max)
	var surplus []*pooledStream
	for len(p.idle) > spec.Max {
		surplus = append(surplus, p.idle[0])
		p.idle = p.idle[1:]
	}
	p.mu.Unlock()
	p.closeExpired(surplus)
	p.poke()
}

// wantOne reserves the opening of one stream when the pool is below its
// target and not pausing; after failures, one stream at a time, and
// after streams that died young, one stream at a time until one has
// lived streamProvenAfter.
func (p *streamPool) wantOne(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	probe := p.probe()
	if probe != nil && now.Sub(probe.since) >= streamProvenAfter {
		p.young, probe = 0, nil // the probe lived
	}
	if len(p.idle)+p.opening >= min(p.target, p.spec.Max) || now.Before(p.pauseUntil) || (p.fails+p.young > 0 && p.opening > 0) ||
		probe != nil {
		return false
	}
	p.opening++
	return true
}

// paused is how long the pool still waits before it tries again: the
// pause, or while its probe after young deaths is idle, until that
// stream has lived streamProvenAfter (wantOne).
func (p *streamPool) paused(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resumeAtLocked().Sub(now)
}

// resumeAtLocked is when the pool tries again (paused). p.mu held.
func (p *streamPool) resumeAtLocked() time.Time {
	at := p.pauseUntil
	if probe := p.probe(); probe != nil {
		if t := probe.since.Add(streamProvenAfter); t.After(at) {
			at = t
		}
	}
	return at
}

// probe is, after streams died young, the idle stream opened since the
// last of them (the newest), which must live streamProvenAfter before the
// pool opens more; nil if none. Streams older than the deaths prove
// nothing about the path now. p.mu held.
func (p *streamPool) probe() *pooledStream {
	if p.young == 0 || len(p.idle) == 0 {
		return nil
	}
	if ps := p.idle[len(p.idle)-1]; ps.since.After(p.youngAt) {
		return ps
	}
	return nil
}

// open opens one pooled stream, within the agent's handshakes in flight
// toward the peer; a failure waits a backoff before the slot is given
// back, so an unreachable peer costs one attempt per backoff.
func (p *streamPool) open(ctx context.Context) {
	ps, err := p.handshake(ctx)
	if err == nil {
		p.mu.Lock()
		p.opening--
		if !sameKey(ps.rc, p.a.cfg.Load(), p.peerName, true) {
			// A reload changed the key or the encryption during the
			// handshake, after its dropIdle (which takes p.mu after
			// storing the configuration): the stream's keys are the old
			// ones, and the far agent would refuse its bind.
			p.mu.Unlock()
			_ = ps.conn.Close()
			p.poke()
			return
		}
		p.idle = append(p.idle, ps)
		p.fails, p.lastErr, p.refused = 0, nil, 0
		if p.young == 0 {
			// After young deaths the pause stands: the stream that
			// just opened has yet to live (probe).
			p.pauseUntil = time.Time{}
		}
		p.mu.Unlock()
		p.refills.Add(1)
		go p.watch(ps)
		p.poke()
		return
	}
	if ctx.Err() != nil {
		p.mu.Lock()
		p.opening--
		p.mu.Unlock()
		return
	}
	var r refusal
	refused := errors.As(err, &r)
	p.mu.Lock()
	p.opening--
	// Opens that failed together (those in flight when the first
	// failed) count once.
	now := time.Now()
	if !now.Before(p.pauseUntil) {
		p.fails++
		p.pauseUntil = now.Add(min(poolBackoff<<min(p.fails-1, 16), poolBackoffMax))
	}
	pause := p.pauseUntil.Sub(now)
	p.lastErr = err
	if refused {
		p.refused = r.status
	}
	p.mu.Unlock()
	if refused {
		p.a.limited.log(p.a.log, "pool-refused", "relay: the far agent refuses pooled streams; the pool waits before it asks again",
			"peer", p.peer, "status", r.status, "retry_in", pause)
	} else {
		p.a.limited.log(p.a.log, "pool-open", "relay: opening a pooled stream failed; the pool waits before it tries again",
			"peer", p.peer, "err", err, "retry_in", pause)
	}
	p.poke()
}

// poolBackoff is the pause after the first failed pooled stream; it
// doubles with each failure in a row, up to poolBackoffMax.
const (
	poolBackoff    = 500 * time.Millisecond
	poolBackoffMax = 5 * time.Minute
)

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
	// The buffers go on before the SYN, as for a fresh stream, so that the
	// window scale fits them; the rest of the tuning waits for the bind,
	// which names the chunk size.
	t := rc.streamTuningFor(0)
	d := net.Dialer{Control: streamTuning{sndbuf: t.sndbuf, rcvbuf: t.rcvbuf}.control}
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
	hello := stripe.Hello{Mode: rc.mode, Initiator: rc.Name, Responder: p.peerName, Pool: true}
	secrets, err := p.a.initiate(conn, rc, p.peer, hello)
	if err != nil {
		return fail(err)
	}
	_ = conn.SetDeadline(time.Time{})
	if err := keepIdle(conn); err != nil {
		return fail(err)
	}
	return &pooledStream{conn: conn, secrets: secrets, bind: secrets.PoolStream(), since: time.Now(), watched: make(chan struct{}), rc: rc}, nil
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
	if lived, ok := p.remove(ps); ok {
		p.died.Add(1)
		reset(ps.conn)
		if pause := p.diedAfter(lived); pause > 0 {
			p.a.limited.log(p.a.log, "pool-died", "relay: an idle pooled stream died young; the pool waits before it opens another",
				"peer", p.peer, "lived", lived.Round(time.Millisecond), "retry_in", pause.Round(time.Millisecond), "err", err)
		} else {
			p.a.limited.log(p.a.log, "pool-died", "relay: an idle pooled stream died", "peer", p.peer, "err", err)
		}
		p.poke()
	}
}

// diedAfter counts an idle stream that died after lived; one that died
// young pauses the pool as a failed open does, and it returns the pause.
func (p *streamPool) diedAfter(lived time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if lived >= streamProvenAfter {
		p.young = 0
		return 0
	}
	// Streams that die together (during one pause) count once, as
	// failed opens do.
	now := time.Now()
	p.youngAt = now
	if !now.Before(p.pauseUntil) {
		p.young++
		p.pauseUntil = now.Add(min(poolBackoff<<min(p.young-1, 16), poolBackoffMax))
	}
	return p.pauseUntil.Sub(now)
}

// remove takes ps out of the idle streams and says how long it lived;
// false if a session claimed it first.
func (p *streamPool) remove(ps *pooledStream) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, q := range p.idle {
		if q == ps {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			return time.Since(ps.since), true
		}
	}
	return 0, false
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
	if k > 0 {
		p.young = 0 // they served
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
	if f := p.a.testClaimed.Load(); f != nil {
		(*f)(got)
	}
	// A stream whose FIN or reset came as it was claimed, after its
	// watcher's last look, died idle: a BIND on it would be answered by
	// its end of file, which the session could only take for the far
	// agent's end (its process ended), and abort.
	up := got[:0]
	for _, ps := range got {
		if peerGaveUp(ps.conn) {
			p.died.Add(1)
			reset(ps.conn)
			p.a.limited.log(p.a.log, "pool-died", "relay: an idle pooled stream died as a session claimed it", "peer", p.peer)
			continue
		}
		up = append(up, ps)
	}
	p.claims.Add(uint64(len(up)))
	p.poke()
	return up
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
	p.closeExpired(old)
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
	st := PoolStats{
		Peer: p.peer, PeerName: p.peerName, Idle: len(p.idle), Opening: p.opening, Target: p.target,
		MinIdle: p.spec.MinIdle, Max: p.spec.Max,
		Refills: p.refills.Load(), Claims: p.claims.Load(), Misses: p.misses.Load(),
		Died: p.died.Load(), Expired: p.expired.Load(), Refounds: p.refounds.Load(),
		Failures: p.fails, DiedYoung: p.young,
	}
	if p.fails > 0 || p.young > 0 {
		st.RetryAt = p.resumeAtLocked()
	}
	if p.fails > 0 {
		if p.lastErr != nil {
			st.LastError = p.lastErr.Error()
		}
	}
	if p.refused != 0 {
		st.Refused = p.refused.String()
	}
	return st
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
	if !admitsPooled(rc, h.Initiator) {
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

// admitsPooled says whether a server-side entry of rc admits sessions of
// initiator (several client-side agents of a site share one entry).
func admitsPooled(rc *runtimeConfig, initiator string) bool {
	return slices.ContainsFunc(rc.Server, func(w Whitelist) bool { return w.Admits(initiator) })
}

// reconcilePooledLocked closes, after a reload from old to rc, the idle
// pooled streams rc no longer admits: all of an initiator's when the key
// of its streams (the pre-shared key, or its pair key) or the encryption
// changed (their keys come from the old ones), those of an initiator no
// entry admits now, and those beyond a lower
// MaxPooledPerPeer. Their client-side agents see them end and open new
// ones under the new configuration. A stream whose BIND is being read is
// judged again by holdPooled. a.mu is held.
func (a *Agent) reconcilePooledLocked(old, rc *runtimeConfig) {
	closed, rekeyed := 0, 0
	for initiator, conns := range a.pooled {
		keep := rc.limits.MaxPooledPerPeer
		if !sameKey(old, rc, initiator, false) {
			keep = 0
			rekeyed += len(conns)
		}
		if !admitsPooled(rc, initiator) {
			keep = 0
		}
		for c := range conns {
			if keep > 0 {
				keep--
				continue
			}
			reset(c) // its holdPooled forgets it once a.mu is free
			closed++
		}
	}
	if closed > 0 {
		a.log.Info("relay: reload closed idle pooled streams it no longer admits", "streams", closed, "rekeyed", rekeyed)
	}
}

// holdPooled keeps an authenticated pooled stream of initiator idle, within
// the bound of its peer (checked again here: admission only answered the
// hello), until it ends. It holds a socket and this goroutine's stack and
// nothing else: no frame buffer until a bind.
func (a *Agent) holdPooled(rc *runtimeConfig, initiator string, c *net.TCPConn, secrets *stripe.Secrets) {
	a.leavePreAuth(c)
	a.mu.Lock()
	conns := a.pooled[initiator]
	if !sameKey(rc, a.cfg.Load(), initiator, false) {
		// A reload changed its key during the handshake, after
		// reconcilePooledLocked (both under a.mu): its keys are old.
		a.mu.Unlock()
		reset(c)
		return
	}
	if a.draining || len(conns) >= rc.limits.MaxPooledPerPeer {
		a.mu.Unlock()
		a.reject(rejectPoolLimit, "relay: pooled stream beyond the peer's bound; reset", "initiator", initiator)
		reset(c)
		return
	}
	if conns == nil {
		conns = make(map[*net.TCPConn]pooledState)
		a.pooled[initiator] = conns
	}
	conns[c] = pooledIdle
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
	// A BIND read before a drain began makes its session, and the drain
	// waits for it (and resets only the idle streams): the client side
	// sent its client's bytes after it. One read after is refused.
	a.mu.Lock()
	beforeDrain := !a.draining
	if beforeDrain {
		conns[c] = pooledBinding
	}
	a.mu.Unlock()
	// The BIND is judged by the configuration in force now, not the one
	// the stream was accepted under: a reload since may have revoked the
	// initiator, removed its routes, lowered the limits, or changed the
	// key or the encryption its keys come from.
	cur := a.cfg.Load()
	err := errors.New("the pre-shared key, the pair key or the encryption changed since its handshake")
	if sameKey(rc, cur, initiator, false) {
		if !admitsPooled(cur, initiator) {
			err = fmt.Errorf("agent %s is no longer a client side of this agent's routes", initiator)
		} else {
			err = a.acceptBind(cur, initiator, c, secrets, hdr, beforeDrain)
		}
	}
	a.mu.Lock()
	over := a.drainOver
	a.mu.Unlock()
	var refused bindRefused
	switch {
	case err == nil:
	case over:
		// The drain's deadline cut it, and counted it so.
		reset(c)
	case errors.As(err, &refused):
		// Authenticated and within the rules, but refused as a hello
		// would be (a limit, a whitelist changed by a reload).
		a.reject(rejectKindOf(stripe.Status(refused)), "relay: pooled stream's bind refused; reset",
			"initiator", initiator, "err", err)
		reset(c)
	case errors.Is(err, errSessionLimit):
		a.reject(rejectSessionLimit, "relay: pooled stream's bind refused; reset", "initiator", initiator, "err", err)
		reset(c)
	case a.stopping.Load():
		// The drain reset it as its BIND came.
		reset(c)
	default:
		a.counters.handshakeFailures.Add(1)
		a.limited.log(a.log, "bind", "relay: bad bind on a pooled stream; reset", "initiator", initiator, "err", err)
		reset(c)
	}
}

// bindRefused is admit's refusal of a BIND: the status a hello would have
// been answered with.
type bindRefused stripe.Status

func (r bindRefused) Error() string { return "refused: " + stripe.Status(r).String() }

// acceptBind reads the BIND whose header is hdr and attaches the pooled
// stream to its session: stream 0's bind creates the session and connects
// to the server at once; a later stream's bind, once its proof is checked
// under the session key, joins the running session as a replacement does.
func (a *Agent) acceptBind(rc *runtimeConfig, initiator string, c *net.TCPConn, secrets *stripe.Secrets, hdr [stripe.HeaderSize]byte, beforeDrain bool) error {
	_ = c.SetDeadline(time.Now().Add(rc.limits.PreAuthTimeout))
	pc, err := stripe.NewCodec(rc.mode, &secrets.Keys, false, 0, stripe.BindBodySize)
	if err != nil {
		return err
	}
	ps := secrets.PoolStream()
	h, err := stripe.ParseHeader(hdr[:])
	if err == nil {
		err = pc.CheckHeader(h)
	}
	if err != nil {
		return err
	}
	if h.Type != stripe.FrameBind || h.Seq != stripe.ControlSeq(ps.Generation()) {
		return fmt.Errorf("%s %#x on a pooled stream, want BIND", h.Type, h.Seq)
	}
	body := make([]byte, h.Length)
	if _, err := io.ReadFull(c, body); err != nil {
		return fmt.Errorf("reading bind: %w", err)
	}
	plain, err := pc.Open(h, hdr[:], body)
	if err != nil {
		return err
	}
	b, bound, err := ps.AcceptBind(plain)
	if err != nil {
		return err
	}
	if f := a.testBindFault.Load(); f != nil && (*f)(b.Stream) {
		return fmt.Errorf("test fault: pooled stream %d dies at its bind", b.Stream)
	}
	hello := stripe.Hello{
		Mode: rc.mode, Initiator: initiator, Responder: rc.Name, Session: b.Session,
		Stream: b.Stream, Streams: b.Streams, ChunkSize: b.ChunkSize, QueueLength: b.QueueLength,
		Client: b.Client, Server: b.Server, Join: b.Stream != 0,
	}
	if hello.Join {
		// A drain's deadline counts its session's first BIND, not it.
		a.mu.Lock()
		if conns := a.pooled[initiator]; conns != nil && conns[c] == pooledBinding {
			conns[c] = pooledJoinBind
		}
		a.mu.Unlock()
	}
	src := unmapAddrPort(c.RemoteAddr().(*net.TCPAddr).AddrPort()).Addr()
	var running *session
	if hello.Join {
		// Stream 0's bind travels on another connection.
		running = a.awaitSession(b.Session, initiator, joinGrace, rc.limits.PreAuthTimeout)
	}
	route, status, _ := a.admit(rc, &hello, src, false, beforeDrain)
	if status != stripe.StatusAccepted {
		return fmt.Errorf("session %s stream %d: %w", b.Session, b.Stream, bindRefused(status))
	}
	codec, err := stripe.NewCodec(rc.mode, &bound.Keys, false, b.Stream, route.ChunkSize)
	if err != nil {
		return err
	}
	if err := tuneConn(c, rc.streamTuningFor(route.ChunkSize)); err != nil {
		return err
	}
	_ = c.SetDeadline(time.Time{})
	if hello.Join {
		if running == nil {
			a.mu.Lock()
			running = a.byID[b.Session]
			a.mu.Unlock()
			if running == nil {
				return fmt.Errorf("session %s ended", b.Session)
			}
		}
		// As for a JOIN (serveStream): the session found may not be
		// the one admit checked.
		if st := running.joinable(&hello); st != stripe.StatusAccepted {
			return fmt.Errorf("session %s stream %d: the session changed during its bind: %s", b.Session, b.Stream, st)
		}
		running.mu.Lock()
		key := running.sessionKey
		running.mu.Unlock()
		if err := ps.VerifyBindProof(&key, &b); err != nil {
			// The BIND itself is authenticated (its MAC under the
			// pooled stream's secret): a proof under another session
			// key is its initiator's, made before it founded the
			// session again with a fresh stream 0 (refound). Refused
			// as a mismatch, as a hello for a changed session is, not
			// counted as a handshake failure; the initiator's stream
			// joins again under the new key.
			return fmt.Errorf("session %s stream %d: join proof under another session key (%v): %w",
				b.Session, b.Stream, err, bindRefused(stripe.StatusSessionMismatch))
		}
		if !running.waitEstablished(rc.limits.PreAuthTimeout) || !running.replaceStream(newStream(running, int(b.Stream), c, codec), rc.limits.PreAuthTimeout) {
			return errors.New("the session ended before its bound stream joined")
		}
		return nil
	}
	if f := a.testBindAdmitted.Load(); f != nil {
		(*f)()
	}
	return a.bindSession(rc, route, &hello, c, codec, bound.SessionKey, beforeDrain)
}

// bindSession creates a server-side session on its bound stream 0 and
// connects to the server at once: the streams still to come join as
// replacements, so the session never waits for them.
func (a *Agent) bindSession(rc *runtimeConfig, w Whitelist, h *stripe.Hello, c *net.TCPConn, codec *stripe.Codec, key *[32]byte, beforeDrain bool) error {
	a.mu.Lock()
	if _, ok := a.byID[h.Session]; ok {
		a.mu.Unlock()
		return fmt.Errorf("session %s exists already", h.Session)
	}
	if a.drainOver || a.draining && !beforeDrain {
		a.mu.Unlock()
		return fmt.Errorf("session %s: %w", h.Session, bindRefused(stripe.StatusShuttingDown))
	}
	// A late BIND: the session was settled here (founded and ended, or
	// its fresh stream 0 refused), or a fresh hello for it holds its
	// place. The client side gave up on this stream; it must not found
	// the session with bytes the client side sends again (settled.go).
	// Or the client side closed or reset the stream since it sent the
	// BIND (it gave up on it): the BIND and the frames behind it were
	// read from what the socket still held.
	if settled, _ := a.settled.get(h.Session, time.Now()); settled || a.pending[h.Session] != nil || peerGaveUp(c) {
		a.mu.Unlock()
		return fmt.Errorf("session %s: a late bind: %w", h.Session, bindRefused(stripe.StatusDuplicateStream))
	}
	// admit checked the limit when the BIND arrived; BINDs arriving
	// together all passed it before any of their sessions was here.
	if a.atSessionLimitLocked(rc.limits, h.Initiator) {
		a.mu.Unlock()
		return fmt.Errorf("session %s: %w", h.Session, errSessionLimit)
	}
	s, err := a.newReservedSession(rc, sessionParams{
		id: h.Session, side: serverSide, whitelist: w.Name, peer: h.Initiator,
		client: h.Client, server: h.Server,
		streams: w.Streams, chunkSize: w.ChunkSize, queueLength: w.QueueLength,
		mode: h.Mode, stallTimeout: rc.limits.StallTimeout, reconnectTimeout: rc.limits.ReconnectTimeout,
	})
	if err != nil {
		a.mu.Unlock()
		return err
	}
	a.sessions[s] = struct{}{}
	a.byPeer[s.peer]++
	a.byID[s.id] = s
	a.counters.sessionsStarted.Add(1)
	s.mu.Lock()
	s.streams[0] = newStream(s, 0, c, codec)
	s.sessionKey = *key
	// Not gathering: connectServer owns the session from here.
	s.joined = s.n
	s.mu.Unlock()
	// The BIND took the stream's Up control index 0.
	s.creditMu.Lock()
	s.credits.ResetStream(0, 1)
	s.creditMu.Unlock()
	a.mu.Unlock()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.connectServer(s, rc)
	}()
	return nil
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
	a.poolsMu.Lock()
	pools := make([]*streamPool, 0, len(a.pools))
	for _, p := range a.pools {
		pools = append(pools, p)
	}
	a.poolsMu.Unlock()
	out := make([]PoolStats, 0, len(pools))
	for _, p := range pools {
		out = append(out, p.stats())
	}
	return out
}

// bindPooled claims pooled streams for a new client-side session and
// BINDs them as its streams 0, 1, ...: no round trip, the session may
// start at once; its other streams are nil and join as replacements
// (supervise). It returns how many streams it bound; 0 leaves the session
// to open all its streams as before.
func (a *Agent) bindPooled(s *session, rc *runtimeConfig, pool *streamPool) int {
	claimed := pool.take(int(s.target.Load()))
	tuning := rc.streamTuningFor(s.chunkSize)
	var key *[32]byte
	bound := 0
	defer func() { s.fromPool = bound > 0 }()
	for _, ps := range claimed {
		if bound == int(s.target.Load()) {
			_ = ps.conn.Close()
			continue
		}
		st, k, err := a.bindOne(s, rc, ps, bound, key, tuning)
		if err != nil {
			pool.died.Add(1)
			a.limited.log(a.log, "pool-bind", "relay: binding a pooled stream failed", "peer", pool.peer, "err", err)
			reset(ps.conn)
			continue
		}
		if bound == 0 {
			key = k
			s.mu.Lock()
			s.sessionKey = *k
			s.mu.Unlock()
		}
		s.mu.Lock()
		s.streams[bound] = st
		s.mu.Unlock()
		bound++
	}
	return bound
}

// bindOne sends the BIND of pooled stream ps as stream index of s and
// returns the session's stream on it (and, for index 0, the session key).
func (a *Agent) bindOne(s *session, rc *runtimeConfig, ps *pooledStream, index int, key *[32]byte, tuning streamTuning) (*stream, *[32]byte, error) {
	b := stripe.Bind{
		Session: s.id, Stream: uint16(index), Streams: uint16(s.n),
		ChunkSize: uint32(s.chunkSize), QueueLength: uint32(s.queueLength), Client: s.client, Server: s.server,
	}
	gen := ps.bind.Generation()
	body, bound, err := ps.bind.NewBind(rand.Reader, b, key)
	if err != nil {
		return nil, nil, err
	}
	pc, err := stripe.NewCodec(rc.mode, &ps.secrets.Keys, true, 0, stripe.BindBodySize)
	if err != nil {
		return nil, nil, err
	}
	buf := make([]byte, pc.FrameBufferSize())
	copy(buf[stripe.HeaderSize:], body[:])
	frame, err := pc.Seal(buf, stripe.FrameBind, stripe.ControlSeq(gen), stripe.BindBodySize)
	if err != nil {
		return nil, nil, err
	}
	if err := tuneConn(ps.conn, tuning); err != nil {
		return nil, nil, err
	}
	taken, known := bytesTaken(ps.conn)
	_ = ps.conn.SetWriteDeadline(time.Now().Add(rc.limits.PreAuthTimeout))
	if _, err := ps.conn.Write(frame); err != nil {
		return nil, nil, fmt.Errorf("send bind: %w", err)
	}
	_ = ps.conn.SetWriteDeadline(time.Time{})
	codec, err := stripe.NewCodec(rc.mode, &bound.Keys, true, uint16(index), s.chunkSize)
	if err != nil {
		return nil, nil, err
	}
	st := newStream(s, index, ps.conn, codec)
	if known {
		st.bindEnd = taken + uint64(len(frame))
	}
	st.ctlSeq = 1 // the BIND counts as the stream's control frame 0, as a JOIN does
	return st, bound.SessionKey, nil
}

// joinGrace bounds how long a JOIN waits for the session it names to
// appear (its stream 0's BIND still on its way) before it is refused;
// see awaitSession for a fresh stream 0 still in its handshake.
const joinGrace = 500 * time.Millisecond

// awaitSession waits until the server side holds session id: at most d,
// and past that, up to limit, while a fresh stream of initiator's holds
// the session's place (a handshake under way: the confirm of its stream
// 0, which makes the session, may come after a JOIN that overtook it,
// when a segment of it was lost on a long path). limit is the waiting
// stream's own pre-auth time: fresh hellos sent again and again could
// keep a place held for ever.
func (a *Agent) awaitSession(id stripe.SessionID, initiator string, d, limit time.Duration) *session {
	now := time.Now()
	grace, hard := now.Add(d), now.Add(limit)
	for {
		a.mu.Lock()
		s, over := a.byID[id], a.drainOver
		p := a.pending[id]
		a.mu.Unlock()
		founding := p != nil && p.peer == initiator
		// (A drain makes the sessions of what it accepted before it:
		// their streams wait as ever, until it is over.)
		now := time.Now()
		if s != nil || over || now.After(hard) || !founding && now.After(grace) {
			return s
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A session bound from the pool starts before the far agent knows it: the
// BIND of its stream 0 founds it there. If that stream had died while idle
// and no reset reached this agent, or the far agent refused the BIND (a
// limit reached, a reload that changed the route), the far agent never
// founded the session: the binds of the other streams wait for it in vain
// and are refused, and so are their joins, as for an unknown session (a
// refusal that is authenticated, unlike a refused BIND, which only resets
// its stream). Until the far agent has sent anything on the session
// (heard), every byte the client sent is still retained here. So stream 0
// opens again with a fresh hello, whose answer is authenticated: accepted,
// it founds the session (a new session key), the retained frames go again
// and the other streams join under the new key; refused, the connection is
// carried direct with every byte read from it (abortToDirect), as a fresh
// connection refused would be. The far agent answers a session it founded
// (by a late BIND of stream 0, whose answers died with the stream given
// up here) as a duplicate, and refuses such a BIND once it refused the
// fresh hello (settled.go): neither way reaches the server twice.

// unfounded reports whether a join refused as an unknown session means
// the far agent never founded s (rather than lost it).
func (s *session) unfounded() bool {
	return s.fromPool && !s.heard.Load() && !s.foundedThere.Load()
}

// refound answers the loss of stream 0, or the refusal of stream i's
// join, in an unfounded session. For a stream other than 0 it takes
// stream 0 out, which may still look alive here and is the one whose bind
// never arrived or was refused, and returns an error, so that the slot
// tries again once stream 0 founded the session again. For stream 0 it
// sends a fresh hello.
func (s *session) refound(i int, rc *runtimeConfig) error {
	if i != 0 {
		s.mu.Lock()
		st0, again := s.streams[0], s.refoundings > 0
		s.mu.Unlock()
		// Once founded again, a refusal may have been on its way
		// before the new hello arrived: leave the new stream 0 alone.
		if st0 != nil && !again {
			st0.lose(&StreamError{Stream: 0, Op: "bind", Err: errors.New("the far agent never founded the session")})
		}
		return fmt.Errorf("stream %d: %w: waiting for stream 0 to found the session again", i, errUnknownSession)
	}
	a := s.agent
	st, err := a.openFirstStream(s, rc, s.peerAddr)
	var r refusal
	refused := errors.As(err, &r)
	if refused && (r.status == stripe.StatusDuplicateStream || r.status == stripe.StatusSessionMismatch) {
		// The far agent founded the session (its BIND of stream 0
		// arrived after all): stream 0 joins it from now on.
		s.foundedThere.Store(true)
	}
	if refused && settlesDirect(r.status) && !s.heard.Load() {
		// An authenticated refusal after the far agent looked the
		// session up: it holds no such session, never founded it, and
		// will not (settled.go).
		if s.abortToDirect(fmt.Errorf("the far agent refused to found the session again: %w", err)) {
			a.limited.log(a.log, "refound-direct", "relay: the far agent refused a pooled session; carrying it direct",
				append(s.logAttrs(), "err", err)...)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("founding the session again: %w", err)
	}
	s.mu.Lock()
	s.refoundings++
	s.mu.Unlock()
	if !s.attach(st, false) {
		reset(st.conn)
		return nil
	}
	if pool := a.poolFor(s.peerAddr); pool != nil {
		pool.refounds.Add(1)
	}
	a.limited.log(a.log, "refound", "relay: the far agent never founded a pooled session; founded it again with a fresh stream 0",
		s.logAttrs()...)
	return nil
}

// settlesDirect says whether a refusal of the fresh hello for stream 0 of
// an unfounded session sends its connection direct: one the far agent
// gives after looking the session up and settling its id (settled.go).
// Not a duplicate or a mismatch (the session was founded), a version
// refusal (not authenticated), nor a hello refused before the lookup
// (meant for another agent, or reflected).
func settlesDirect(st stripe.Status) bool {
	switch st {
	case stripe.StatusDuplicateStream, stripe.StatusSessionMismatch, stripe.StatusVersion, stripe.StatusWrongResponder, stripe.StatusReflected:
		return false
	}
	return true
}

// abortToDirect ends an unfounded session that the far agent refused to
// found: its streams go, but the end-host connection stays open, and once
// the session's goroutines are gone handOverDirect carries it direct. It
// reports whether this call ended the session.
func (s *session) abortToDirect(err error) bool {
	return s.end(AbortSetup, fmt.Errorf("%w; carried direct", err), true)
}

// handOverDirect carries the end-host connection of a session ended by
// abortToDirect direct, with every byte read from it first (finish, once
// the session's goroutines are gone). Nothing of the session reached the
// server, since the far agent refused its fresh stream 0 as a session it
// never founded (settled.go), and nothing was acknowledged, so every
// frame read is retained, from the first: the direct connection takes
// the connection up whole. It reports false when
// that does not hold (the far agent was heard from after all), and the
// connection is then reset, as any aborted session's; the direct path
// may refuse it too (goDirect resets it then).
func (s *session) handOverDirect() bool {
	a := s.agent
	if s.heard.Load() {
		return false // something may have reached the server
	}
	var up directUp
	var payloads [][]byte
	s.sendMu.Lock()
	for i, c := range s.retained {
		if c.seq != uint64(i) {
			s.sendMu.Unlock()
			return false
		}
		if c.sealed {
			// Sealed in place by the stream last given it: open it
			// again for its plaintext.
			if err := c.on.codec.Unseal(c.buf); err != nil {
				s.sendMu.Unlock()
				return false
			}
			c.sealed = false
		}
		if c.typ == stripe.FrameFin {
			up.fin = true
			break
		}
		payloads = append(payloads, c.payload())
	}
	// One allocation of the exact size: the reservation handed over
	// below covers it whole.
	up.data = slices.Concat(payloads...)
	s.sendMu.Unlock()
	_ = s.host.SetReadDeadline(time.Time{})
	s.mu.Lock()
	why := s.abortErr
	s.mu.Unlock()
	// The copy stays inside Limits.Memory until it is written: that much
	// of the session's reservation goes with it (the retained frames it
	// was copied from go back when the session ends).
	a.mu.Lock()
	up.reserved = min(int64(len(up.data)), s.reserved)
	s.reserved -= up.reserved
	a.mu.Unlock()
	// Registered now, while the session still is: a drain waiting for
	// the session then waits for the direct connection too.
	rc := a.cfg.Load()
	if !a.goDirect(rc, s.host, s.client, s.server, s.whitelist, why) {
		a.memReserved.Add(-up.reserved)
		return true // goDirect reset the connection
	}
	// finish runs on a goroutine of a.wg: adding to it is safe.
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.relayDirect(rc, s.host, s.server, up)
	}()
	return true
}

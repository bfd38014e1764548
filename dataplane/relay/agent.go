// Package relay is the sosappliance agent: it accepts steered client
// connections on a transparent (TPROXY) listener and stripes each over N
// authenticated TCP streams to the agent at the server's site, which
// reassembles the byte stream and delivers it to the server from the
// client's own address, in both directions. The wire protocol is in package
// stripe; this package owns sockets, sessions, scheduling, limits, stats and
// the health endpoint. Linux only.
package relay

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/connlimit"
)

// transparency is how the agent meets the kernel's transparent proxying:
// the TPROXY listener, the original destination of an accepted connection,
// and the connection to the server from the client's address. Loopback
// tests substitute plain sockets, since TPROXY needs a network namespace of
// its own.
type transparency struct {
	listen      func(ctx context.Context, addr netip.AddrPort) (*net.TCPListener, error)
	destination func(c *net.TCPConn) netip.AddrPort
	dial        func(ctx context.Context, client, server netip.AddrPort) (*net.TCPConn, error)
}

var kernelTransparency = transparency{
	listen: listenTransparent,
	destination: func(c *net.TCPConn) netip.AddrPort {
		// A TPROXY'd socket's local address is the original destination.
		return unmapAddrPort(c.LocalAddr().(*net.TCPAddr).AddrPort())
	},
	dial: dialTransparent,
}

// runtimeConfig is a validated Config with everything derived from it.
type runtimeConfig struct {
	Config
	limits Limits
	mode   stripe.Mode
	key    *stripe.HandshakeKey // the PSK's
	// pairTo and pairFrom, with per-agent keys (else nil), are the pair
	// keys of the streams this agent opens to each peer and of those each
	// opens to it (stripe.HandshakeKey.Pair), by the peer's name.
	pairTo, pairFrom map[string]*stripe.HandshakeKey
	tuning           streamTuning
}

// keyTo is the handshake key of the streams this agent opens to the
// agent named peer: the pair key with per-agent keys (nil for an agent
// without a public key), else the PSK's.
func (rc *runtimeConfig) keyTo(peer string) *stripe.HandshakeKey {
	if rc.pairTo == nil {
		return rc.key
	}
	return rc.pairTo[peer]
}

// keyFrom is the handshake key of the streams the agent named initiator
// opens to this one, as keyTo.
func (rc *runtimeConfig) keyFrom(initiator string) *stripe.HandshakeKey {
	if rc.pairFrom == nil {
		return rc.key
	}
	return rc.pairFrom[initiator]
}

// sameKey reports whether the streams with the agent named peer, opened
// under old, have the keys they would have under rc (to: the streams
// this agent opens; else those peer opens), and the same encryption: if
// not, their idle pooled streams are closed on a reload.
func sameKey(old, rc *runtimeConfig, peer string, to bool) bool {
	if old.mode != rc.mode {
		return false
	}
	if to {
		return old.keyTo(peer).Equal(rc.keyTo(peer))
	}
	return old.keyFrom(peer).Equal(rc.keyFrom(peer))
}

func compile(cfg Config) (*runtimeConfig, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkCongestion(cfg.Congestion); err != nil {
		return nil, err
	}
	mode, _ := cfg.Mode()
	key, err := stripe.NewHandshakeKey(cfg.PSK)
	if err != nil {
		return nil, err
	}
	var pairTo, pairFrom map[string]*stripe.HandshakeKey
	if len(cfg.AgentKey) > 0 {
		own, err := stripe.NewAgentKey(cfg.AgentKey)
		if err != nil {
			return nil, err
		}
		pairTo, pairFrom = map[string]*stripe.HandshakeKey{}, map[string]*stripe.HandshakeKey{}
		for name, pub := range cfg.PeerKeys {
			var p stripe.PublicKey
			copy(p[:], pub)
			if pairTo[name], err = key.Pair(own, p, cfg.Name, name); err != nil {
				return nil, fmt.Errorf("agent %s: %w", name, err)
			}
			if pairFrom[name], err = key.Pair(own, p, name, cfg.Name); err != nil {
				return nil, fmt.Errorf("agent %s: %w", name, err)
			}
		}
	}
	cfg.PSK, cfg.AgentKey = nil, nil // the keys hold what they need
	cfg.PeerKeys = maps.Clone(cfg.PeerKeys)
	cfg.Client = slices.Clone(cfg.Client)
	cfg.Server = slices.Clone(cfg.Server)
	cfg.RelayCPUs = slices.Clone(cfg.RelayCPUs)
	cfg.HealthAllow = slices.Clone(cfg.HealthAllow)
	cfg.HealthAllowUsers = slices.Clone(cfg.HealthAllowUsers)
	lim := limitsOf(cfg.Limits)
	return &runtimeConfig{
		Config: cfg,
		limits: lim,
		mode:   mode,
		key:    key, pairTo: pairTo, pairFrom: pairFrom,
		tuning: streamTuning{congestion: cfg.Congestion, keepalive: lim.StallTimeout},
	}, nil
}

// streamTuningFor is the tuning of a session's stream sockets: buffers
// per Config.SocketBuffer, and TCP_NOTSENT_LOWAT at its floor of two
// chunks (minLowat), so a socket holds little data it has not sent yet and
// the scheduler, not a socket queue, decides which stream carries a chunk.
// Housekeeping then sizes each stream's mark from its pacing rate
// (stream.tuneLowat).
func (rc *runtimeConfig) streamTuningFor(chunkSize int) streamTuning {
	t := rc.tuning
	if rc.SocketBuffer > 0 {
		t.sndbuf, t.rcvbuf = rc.SocketBuffer, rc.SocketBuffer
	}
	t.notsentLowat = minLowat(chunkSize)
	return t
}

// Agent is one running relay. Its methods are safe for concurrent use.
type Agent struct {
	far farHealth
	log *slog.Logger
	os  transparency
	cfg atomic.Pointer[runtimeConfig]

	mu       sync.Mutex
	started  bool
	draining bool
	tproxy   *listener
	data     *listener
	health   *healthServer
	// healthClosed counts what the health endpoint's listeners (one
	// replaced by the next on a new address) closed.
	healthClosed connlimit.Counts
	sessions     map[*session]struct{}
	byID         map[stripe.SessionID]*session // server side
	pinnedTo     []int
	unpinCPUs    func() error
	// Unauthenticated data-port connections, in accept order, and their
	// count per source address.
	preauth      map[*net.TCPConn]*preauthConn
	preauthOrder *list.List
	preauthBySrc map[netip.Prefix]int // by connlimit.AddressOf
	preauthByNet map[netip.Prefix]int // by connlimit.SourceOf
	// halfOpen counts server-side sessions still gathering streams, per
	// source address.
	halfOpen map[netip.Prefix]int
	// byPeer counts server-side sessions per client-side agent (its
	// name), for Limits.MaxSessionsPerPeer.
	byPeer map[string]int
	// pending are the places of the server-side sessions a fresh hello
	// was accepted for, until the session is made or the handshakes that
	// hold the place end (see reservePlaceLocked); pendingByPeer counts
	// them per client-side agent. They count against the session limits
	// as sessions do, so that a stream accepted in its reply is never
	// refused after its confirm for a limit another took meanwhile.
	pending       map[stripe.SessionID]*pendingPlace
	pendingByPeer map[string]int
	// settled are the session ids founded here and ended, or refused
	// at stream 0 (settled.go).
	settled settledIDs
	// founded, with Config.FoundedFile, records the sessions founded
	// here beyond the process (founded.go).
	founded *foundedFile
	// direct holds the connections carried direct (client -> server
	// connection, nil while dialing), so Shutdown can end them;
	// drainOver: Shutdown stopped waiting for them.
	direct    map[*net.TCPConn]*net.TCPConn
	drainOver bool
	// handshakeSlots bounds the handshakes in flight toward each peer.
	handshakeSlots map[netip.AddrPort]chan struct{}
	// pools are the client side's warm pools, by peer (guarded by
	// poolsMu: an Update resizes, adds and stops them); pooled holds the
	// server side's idle pooled streams by initiator, bounded by
	// MaxPooledPerPeer.
	poolsMu sync.Mutex
	pools   map[netip.AddrPort]*streamPool
	pooled  map[string]map[*net.TCPConn]pooledState
	cutLate atomic.Int64              // steered connections a drain's deadline cut (Shutdown)
	serving map[*net.TCPConn]struct{} // steered connections not yet a session or direct

	stopping    atomic.Bool  // draining, readable without mu
	memReserved atomic.Int64 // of Limits.Memory, by live sessions
	// testTrouble, set by tests before Start, stands in for TCP_INFO's
	// loss-recovery state of a stream (loopback has no loss).
	testTrouble func(stream int) lossState
	// testBindFault, set by tests before Start, makes the server side
	// reset a pooled stream as its BIND arrives, as if it had died idle.
	testBindFault atomic.Pointer[func(stream uint16) bool]
	// testBindAdmitted, set by tests, runs when admit has accepted a
	// pooled stream 0's BIND and before its session is created: BINDs
	// that arrive together, held there.
	testBindAdmitted atomic.Pointer[func()]
	// testJoinHold, set by tests, makes the server side hold every JOIN
	// hello until the channel is closed: a slow responder.
	testJoinHold atomic.Pointer[chan struct{}]
	// testPaceCeiling, set by tests, is a rate (bytes/s) no stream's
	// pacing cap exceeds: a path that limits each flow, which loopback
	// has not.
	testPaceCeiling atomic.Uint64
	// testPaceMinRTT, set by tests, replaces pacingMinRTT (ns): loopback
	// is a short path, and a test of the caps needs a long one.
	testPaceMinRTT atomic.Int64
	// testFinSettle, set by tests, replaces finSettle (ns).
	testFinSettle atomic.Int64
	// testFinishWrite, set by tests, runs as a writer of a complete
	// session starts its stream's end (the final ACK, the half-close).
	testFinishWrite atomic.Pointer[func(stream int, c *net.TCPConn)]
	// testDialed, set by tests, sees every session stream the client
	// side dials (to cap its rate, as a path would cap each stream).
	testDialed atomic.Pointer[func(c *net.TCPConn) error]
	// testDirectDialed, set by tests, sees each direct connection to a
	// server as it is dialed (to bound its send buffer).
	testDirectDialed atomic.Pointer[func(c *net.TCPConn)]
	// testJoinSent, set by tests, runs as a replacement's JOIN went; an
	// error fails the join there, as a cancel would.
	testJoinSent atomic.Pointer[func(c *net.TCPConn) error]
	// testClaimed, set by tests, sees the idle pooled streams a session
	// claimed, their watchers stopped, before they are checked.
	testClaimed atomic.Pointer[func(claimed []*pooledStream)]
	// testAbortSealed, set by tests, sees each ABORT frame sealed.
	testAbortSealed atomic.Pointer[func(st *stream)]
	// testJoinRefused, set by tests, runs as the client side takes up a
	// join the far agent refused as an unknown session.
	testJoinRefused atomic.Pointer[func(stream int)]
	wmem            wmemCache // see sendBufferFull
	ownKeys         ownKeys
	counters        counters
	recent          abortLog
	limited         limitedLog

	// stopped is cancelled once Shutdown stops waiting: everything still
	// running ends then (a dial to a server under way too).
	stopped context.Context
	stopAll context.CancelFunc
	wg      sync.WaitGroup
}

type listener struct {
	addr netip.AddrPort
	ln   *net.TCPListener
}

// New checks cfg and builds an agent; nothing listens until Start.
func New(cfg Config, log *slog.Logger) (*Agent, error) {
	rc, err := compile(cfg)
	if err != nil {
		return nil, fmt.Errorf("relay config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{
		log:      log,
		os:       kernelTransparency,
		sessions: make(map[*session]struct{}),
		byID:     make(map[stripe.SessionID]*session),

		preauth:        make(map[*net.TCPConn]*preauthConn),
		preauthOrder:   list.New(),
		preauthBySrc:   make(map[netip.Prefix]int),
		preauthByNet:   make(map[netip.Prefix]int),
		halfOpen:       make(map[netip.Prefix]int),
		byPeer:         make(map[string]int),
		pending:        make(map[stripe.SessionID]*pendingPlace),
		pendingByPeer:  make(map[string]int),
		direct:         make(map[*net.TCPConn]*net.TCPConn),
		handshakeSlots: make(map[netip.AddrPort]chan struct{}),
		pools:          poolsOf(rc.Client),
		pooled:         make(map[string]map[*net.TCPConn]pooledState),
		serving:        make(map[*net.TCPConn]struct{}),
	}
	a.stopped, a.stopAll = context.WithCancel(context.Background())
	for _, p := range a.pools {
		p.a = a
	}
	a.counters.init()
	a.cfg.Store(rc)
	return a, nil
}

// Start binds the listeners and the health endpoint, pins the CPUs and
// starts serving. ctx bounds the start only; the agent runs until Shutdown.
func (a *Agent) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		return errors.New("relay: already started")
	}
	rc := a.cfg.Load()
	// Before the listeners: no session is founded unrecorded.
	if rc.FoundedFile != "" && a.founded == nil {
		if err := a.openFoundedLocked(rc.FoundedFile); err != nil {
			return fmt.Errorf("relay: %w", err)
		}
	}
	fail := func(err error) error {
		a.closeListenersLocked()
		if a.founded != nil {
			// A candidate whose Start failed is dropped without
			// Shutdown.
			a.founded.close()
			a.founded = nil
		}
		return err
	}
	if err := a.reconcileListeners(ctx, rc); err != nil {
		return fail(err)
	}
	if err := a.pinLocked(rc.RelayCPUs); err != nil {
		return fail(err)
	}
	a.started = true
	a.wg.Add(1)
	go a.housekeeping()
	a.poolsMu.Lock()
	for _, p := range a.pools {
		a.wg.Add(1)
		go p.run(a.stopped.Done())
	}
	a.poolsMu.Unlock()
	a.log.Info("relay started", "transparent", rc.TransparentListen, "data", rc.DataListen,
		"health", rc.HealthListen, "encryption", rc.mode, "name", rc.Name, "client_routes", len(rc.Client), "server_routes", len(rc.Server))
	return nil
}

// Update applies a new configuration. Whitelist, PSK, encryption, limits
// and socket tuning take effect for new connections; live sessions keep
// what they started with. Listeners whose address is unchanged keep
// running; a changed one is bound before the old one closes, and if that
// fails the old configuration stays in force.
func (a *Agent) Update(cfg Config) error {
	rc, err := compile(cfg)
	if err != nil {
		return fmt.Errorf("relay config: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.draining {
		return errors.New("relay: shutting down")
	}
	old := a.cfg.Load()
	if a.started {
		// Pin first: a refused pin then leaves listeners and their allow
		// lists as they were, and listeners that cannot move put the old
		// pin back.
		if err := a.pinLocked(rc.RelayCPUs); err != nil {
			return err
		}
		if err := a.reconcileListeners(context.Background(), rc); err != nil {
			if perr := a.pinLocked(old.RelayCPUs); perr != nil {
				a.log.Error("relay: cannot restore the CPU pinning of the configuration kept", "cpus", old.RelayCPUs, "err", perr)
			}
			return err
		}
	}
	a.cfg.Store(rc)
	a.reconcilePools(old, rc)
	a.reconcilePooledLocked(old, rc)
	a.log.Info("relay configuration updated", "client_routes", len(rc.Client), "server_routes", len(rc.Server), "encryption", rc.mode)
	return nil
}

// reconcileListeners binds every listener whose address changed, and only
// when all binds succeeded closes the ones they replace.
func (a *Agent) reconcileListeners(ctx context.Context, rc *runtimeConfig) error {
	type change struct {
		slot *(*listener)
		next *listener
		kind string
	}
	var changes []change
	var fresh []*listener
	var freshHealth *healthServer
	fail := func(err error) error {
		for _, l := range fresh {
			_ = l.ln.Close()
		}
		if freshHealth != nil {
			freshHealth.close()
		}
		return err
	}
	plan := func(slot **listener, addr netip.AddrPort, kind string, listen func() (*net.TCPListener, error)) error {
		cur := *slot
		if cur != nil && cur.addr == addr {
			return nil
		}
		var next *listener
		if addr.IsValid() {
			ln, err := listen()
			if err != nil {
				return fmt.Errorf("relay: listen %s on %s: %w", kind, addr, err)
			}
			next = &listener{addr: addr, ln: ln}
			fresh = append(fresh, next)
		}
		changes = append(changes, change{slot, next, kind})
		return nil
	}
	if err := plan(&a.tproxy, rc.TransparentListen, "transparent", func() (*net.TCPListener, error) {
		return a.os.listen(ctx, rc.TransparentListen)
	}); err != nil {
		return fail(err)
	}
	if err := plan(&a.data, rc.DataListen, "data", func() (*net.TCPListener, error) {
		return listenPlain(ctx, rc.DataListen, streamTuning{sndbuf: max(rc.SocketBuffer, 0), rcvbuf: max(rc.SocketBuffer, 0)})
	}); err != nil {
		return fail(err)
	}
	healthChanged := (a.health == nil) != !rc.HealthListen.IsValid() ||
		(a.health != nil && a.health.addr != rc.HealthListen)
	if healthChanged && rc.HealthListen.IsValid() {
		h, err := startHealth(rc.HealthListen, rc.HealthAllow, a.healthUsers(rc.HealthAllowUsers, rc.HealthAllow), a)
		if err != nil {
			return fail(fmt.Errorf("relay: health endpoint on %s: %w", rc.HealthListen, err))
		}
		freshHealth = h
	}
	for _, c := range changes {
		if old := *c.slot; old != nil {
			_ = old.ln.Close()
		}
		*c.slot = c.next
		if c.next != nil {
			a.wg.Add(1)
			if c.kind == "transparent" {
				go a.acceptClients(c.next.ln)
			} else {
				go a.acceptStreams(c.next.ln)
			}
		}
	}
	if healthChanged {
		if a.health != nil {
			a.health.close()
		}
		a.health = freshHealth
	} else if a.health != nil {
		a.health.ln.AllowFrom(rc.HealthAllow, a.healthUsers(rc.HealthAllowUsers, rc.HealthAllow))
	}
	return nil
}

func (a *Agent) closeListenersLocked() {
	for _, l := range []*listener{a.tproxy, a.data} {
		if l != nil {
			_ = l.ln.Close()
		}
	}
	a.tproxy, a.data = nil, nil
	if a.health != nil {
		a.health.close()
		a.health = nil
	}
}

func (a *Agent) pinLocked(cpus []int) error {
	if slices.Equal(cpus, a.pinnedTo) {
		return nil
	}
	if a.unpinCPUs != nil {
		if err := a.unpinCPUs(); err != nil {
			return fmt.Errorf("relay: restore CPU affinity: %w", err)
		}
		a.unpinCPUs, a.pinnedTo = nil, nil
	}
	if len(cpus) == 0 {
		return nil
	}
	restore, err := pinProcess(cpus)
	if err != nil {
		return fmt.Errorf("relay: pin to CPUs %v: %w", cpus, err)
	}
	a.unpinCPUs, a.pinnedTo = restore, slices.Clone(cpus)
	return nil
}

// Addrs are the addresses the agent's listeners are bound to; with port 0
// in the configuration they carry the port the kernel chose.
type Addrs struct {
	Transparent, Data, Health netip.AddrPort
}

// Addrs reports the bound listener addresses.
func (a *Agent) Addrs() Addrs {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out Addrs
	if a.tproxy != nil {
		out.Transparent = unmapAddrPort(a.tproxy.ln.Addr().(*net.TCPAddr).AddrPort())
	}
	if a.data != nil {
		out.Data = unmapAddrPort(a.data.ln.Addr().(*net.TCPAddr).AddrPort())
	}
	if a.health != nil {
		out.Health = a.health.bound
	}
	return out
}

// Shutdown stops accepting, lets live sessions finish until ctx is done,
// then aborts (resets) the rest and waits for every goroutine. It returns
// an error naming how many sessions had to be aborted. The data listener
// stays open while sessions drain: it refuses new sessions and pooled
// streams (shutting down), but a live session's lost stream can still be
// replaced; without, a session whose final ACK went with a reset stream
// could not finish at its peer.
func (a *Agent) Shutdown(ctx context.Context) error {
	a.mu.Lock()
	if a.draining {
		a.mu.Unlock()
		return errors.New("relay: already shut down")
	}
	a.draining = true
	a.stopping.Store(true)
	data := a.data
	a.data = nil
	a.closeListenersLocked()
	a.data = data
	// The data port stays open until the drain is over: handshakes under
	// way finish there (a new session's hello gets an authenticated
	// refusal and goes direct at once; a live session's join is taken),
	// and sessions still setting up go on to finish with the others.
	// Idle pooled streams would only be bound to new sessions.
	for _, conns := range a.pooled {
		for c, state := range conns {
			if state == pooledIdle {
				reset(c)
			}
		}
	}
	a.mu.Unlock()

	aborted, cut := 0, 0
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
wait:
	for {
		a.mu.Lock()
		// What was accepted before the drain and is still being set
		// up becomes a session or direct connection to wait for too.
		n := len(a.sessions) + len(a.direct) + a.settingUpLocked()
		a.drainOver = n == 0
		a.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-poll.C:
		case <-ctx.Done():
			a.mu.Lock()
			a.drainOver = true
			for s := range a.sessions {
				if !s.established.Load() {
					if s.abortUnestablished(AbortShutdown, errors.New("agent shutting down: drain deadline passed")) {
						aborted++
					}
					continue
				}
				if s.isCompleted() {
					// Complete here, it waits only for the peer's
					// half-close. Its writers get abortGrace to send
					// the final ACK and FIN (they start at completion),
					// then it ends, counted as completed, its streams
					// closed: an ABORT or reset before that ACK could
					// end the peer's session as aborted.
					s.endStreams(abortGrace)
					continue
				}
				if s.abort(AbortShutdown, errors.New("agent shutting down: drain deadline passed")) {
					aborted++
				}
			}
			for host, far := range a.direct {
				reset(host)
				reset(far)
				aborted++
			}
			// What was still being set up is cut, counted once each:
			// hellos accepted and sessions' first BINDs (reset below;
			// the joins of these sessions count with them). A steered
			// connection still being set up counts as serveClient finds
			// the drain over (goDirect, a.cutLate).
			cut = len(a.pending)
			_, founding := a.bindingLocked()
			cut += founding
			a.mu.Unlock()
			break wait
		}
	}
	a.mu.Lock()
	a.closeListenersLocked()
	for c := range a.preauth {
		reset(c)
	}
	for _, conns := range a.pooled {
		for c := range conns {
			reset(c)
		}
	}
	a.mu.Unlock()
	a.stopAll()
	a.wg.Wait()
	if a.founded != nil {
		a.founded.close()
	}

	a.mu.Lock()
	var err error
	if a.unpinCPUs != nil {
		if uerr := a.unpinCPUs(); uerr != nil {
			err = fmt.Errorf("relay: restore CPU affinity: %w", uerr)
		}
		a.unpinCPUs, a.pinnedTo = nil, nil
	}
	a.mu.Unlock()
	cut += int(a.cutLate.Load())
	if aborted > 0 || cut > 0 {
		err = errors.Join(fmt.Errorf("relay: aborted %d sessions and cut %d connections still being set up at shutdown: %w", aborted, cut, ctx.Err()), err)
	}
	a.log.Info("relay stopped", "aborted", aborted, "cut", cut)
	return err
}

// housekeeping enforces the timeouts, computes throughput and trims the
// process's idle frame memory.
func (a *Agent) housekeeping() {
	defer a.wg.Done()
	const interval = 250 * time.Millisecond
	t := time.NewTicker(interval)
	defer t.Stop()
	grow := time.NewTicker(growthCheck)
	defer grow.Stop()
	var list []*session
	for {
		select {
		case <-a.stopped.Done():
			return
		case now := <-grow.C:
			list = a.sessionList(list, growthCheckSessions)
			for _, s := range list {
				s.growTick(now)
			}
		case now := <-t.C:
			list = a.sessionList(list, math.MaxInt)
			notePeerWindows(list)
			rc := a.cfg.Load()
			for _, s := range list {
				s.tick(now, rc.limits)
				s.growTick(now)
			}
			frames.trim(now)
		}
	}
}

// sessionList refills list with the agent's sessions, or empties it when
// there are more than most.
func (a *Agent) sessionList(list []*session, most int) []*session {
	a.mu.Lock()
	defer a.mu.Unlock()
	list = list[:0]
	if len(a.sessions) <= most {
		for s := range a.sessions {
			list = append(list, s)
		}
	}
	return list
}

// acceptLoop runs accept until the listener closes. Temporary errors (out
// of file descriptors) back off instead of spinning.
func (a *Agent) acceptLoop(ln *net.TCPListener, kind string, handle func(*net.TCPConn)) {
	defer a.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			a.limited.log(a.log, "accept-"+kind, "relay: accept failed", "listener", kind, "err", err)
			select {
			case <-time.After(backoff):
			case <-a.stopped.Done():
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		handle(c)
	}
}

func (a *Agent) acceptClients(ln *net.TCPListener) {
	a.acceptLoop(ln, "transparent", func(c *net.TCPConn) {
		// A drain waits for the connections accepted before it until
		// each is a session or carried direct (or reset).
		// (register and trackDirect take it out as it becomes one.)
		a.mu.Lock()
		if a.drainOver {
			// Accepted as the drain, which had nothing left, closed
			// the listener.
			a.mu.Unlock()
			a.reject(rejectShuttingDown, "relay: connection refused; reset", "client", c.RemoteAddr())
			reset(c)
			return
		}
		a.serving[c] = struct{}{}
		a.mu.Unlock()
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer func() {
				a.mu.Lock()
				delete(a.serving, c)
				a.mu.Unlock()
			}()
			a.serveClient(c)
		}()
	})
}

func (a *Agent) acceptStreams(ln *net.TCPListener) {
	a.acceptLoop(ln, "data", a.admitPreAuth)
}

// pooledState is where a server-side pooled stream stands (a.pooled).
type pooledState uint8

const (
	pooledIdle     pooledState = iota
	pooledBinding              // its BIND is being handled
	pooledJoinBind             // the BIND is of a stream other than 0: a join
)

// bindingLocked counts the pooled streams whose BIND is being handled,
// and of those the ones that may found a session (not known to be a
// join). a.mu is held.
func (a *Agent) bindingLocked() (binding, founding int) {
	for _, conns := range a.pooled {
		for _, state := range conns {
			if state != pooledIdle {
				binding++
			}
			if state == pooledBinding {
				founding++
			}
		}
	}
	return binding, founding
}

// settingUpLocked counts what a drain waits for besides sessions and
// direct connections: steered connections not yet either, places kept
// for accepted hellos, and pooled streams whose BIND is being handled.
// a.mu is held.
func (a *Agent) settingUpLocked() int {
	binding, _ := a.bindingLocked()
	return len(a.serving) + len(a.pending) + binding
}

// register adds the session of the steered connection host if the
// session limit allows.
func (a *Agent) register(s *session, lim Limits, host *net.TCPConn) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.draining {
		return errShuttingDown
	}
	if len(a.sessions) >= lim.MaxSessions {
		return errSessionLimit
	}
	delete(a.serving, host)
	a.sessions[s] = struct{}{}
	a.counters.sessionsStarted.Add(1)
	return nil
}

func (a *Agent) unregister(s *session) {
	a.mu.Lock()
	a.leaveHalfOpenLocked(s)
	if s.reserved > 0 {
		a.memReserved.Add(-s.reserved)
		s.reserved = 0
	}
	if _, ok := a.sessions[s]; ok && s.side == serverSide {
		connlimit.Dec(a.byPeer, s.peer)
	}
	delete(a.sessions, s)
	if a.byID[s.id] == s {
		delete(a.byID, s.id)
		a.settled.add(s.id, true, time.Now())
	}
	a.mu.Unlock()
}

var (
	errShuttingDown = errors.New("agent shutting down")
	errSessionLimit = errors.New("session limit reached")
)

func unmapAddrPort(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

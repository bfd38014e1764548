package relay

import (
	"container/list"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/connlimit"
)

// preauthConn is one data-port connection that has not finished its
// handshake. The agent keeps them in accept order so that at a cap the
// oldest is evicted: an idle connection waits out its timeout, a genuine
// handshake takes one round trip, so eviction of the oldest lets genuine
// peers in while a flood of idle connections only evicts itself.
type preauthConn struct {
	conn *net.TCPConn
	// src is its address (connlimit.AddressOf), net its IPv4 address or
	// IPv6 /64 (connlimit.SourceOf).
	src, net netip.Prefix
	elem     *list.Element
}

// admitPreAuth registers an accepted data-port connection, evicting the
// oldest unauthenticated one from the same address, from the same IPv6
// /64, or from anywhere, when a cap is reached, and starts its handshake.
// The address cap is MaxPreAuthPerSource; a /64 (one host may use all its
// addresses) holds at most connlimit.PerNetwork of MaxPreAuthPerSource and
// MaxPreAuth, half of all, so that peers on one IPv6 LAN keep their
// per-address share and a host holding a /64 cannot take every place.
func (a *Agent) admitPreAuth(c *net.TCPConn) {
	rc := a.cfg.Load()
	addr := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
	src, srcNet := connlimit.AddressOf(addr), connlimit.SourceOf(addr)
	a.mu.Lock()
	if a.drainOver {
		// Draining, the data listener stays open for the joins of live
		// sessions (admitHello refuses the rest) until the drain is over.
		a.mu.Unlock()
		reset(c)
		return
	}
	oldest := func(match func(*preauthConn) bool) *preauthConn {
		for e := a.preauthOrder.Front(); e != nil; e = e.Next() {
			if p := e.Value.(*preauthConn); match(p) {
				return p
			}
		}
		return nil
	}
	var victim *preauthConn
	switch {
	case a.preauthBySrc[src] >= rc.limits.MaxPreAuthPerSource:
		victim = oldest(func(p *preauthConn) bool { return p.src == src })
	case a.preauthByNet[srcNet] >= connlimit.PerNetwork(rc.limits.MaxPreAuthPerSource, rc.limits.MaxPreAuth):
		victim = oldest(func(p *preauthConn) bool { return p.net == srcNet })
	case len(a.preauth) >= rc.limits.MaxPreAuth:
		victim = a.preauthOrder.Front().Value.(*preauthConn)
	}
	if victim != nil {
		a.dropPreAuthLocked(victim)
	}
	p := &preauthConn{conn: c, src: src, net: srcNet}
	p.elem = a.preauthOrder.PushBack(p)
	a.preauth[c] = p
	a.preauthBySrc[src]++
	a.preauthByNet[srcNet]++
	a.mu.Unlock()
	if victim != nil {
		a.reject(rejectPreAuthEvicted, "relay: unauthenticated connection cap reached; oldest evicted",
			"evicted", victim.conn.RemoteAddr().String(), "new", c.RemoteAddr().String())
		reset(victim.conn)
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.serveStream(c, rc)
	}()
}

func (a *Agent) dropPreAuthLocked(p *preauthConn) {
	delete(a.preauth, p.conn)
	a.preauthOrder.Remove(p.elem)
	connlimit.Dec(a.preauthBySrc, p.src)
	connlimit.Dec(a.preauthByNet, p.net)
}

// leavePreAuth ends a connection's unauthenticated phase; it is a no-op for
// one already evicted.
func (a *Agent) leavePreAuth(c *net.TCPConn) {
	a.mu.Lock()
	if p, ok := a.preauth[c]; ok {
		a.dropPreAuthLocked(p)
	}
	a.mu.Unlock()
}

// serveStream runs the responder handshake of one incoming stream and, if
// it authenticates, hands the stream to its session.
func (a *Agent) serveStream(c *net.TCPConn, rc *runtimeConfig) {
	authenticated := false
	defer func() {
		if !authenticated {
			a.leavePreAuth(c)
		}
	}()
	remote := c.RemoteAddr().String()
	src := unmapAddrPort(c.RemoteAddr().(*net.TCPAddr).AddrPort()).Addr()
	_ = c.SetDeadline(time.Now().Add(rc.limits.PreAuthTimeout))
	// helloValid: the hello carried the key's MAC, so a hang-up after it
	// is a key holder's (or a replay's) and no proof of an attack.
	helloValid := false
	fail := func(msg string, err error) {
		if a.stopping.Load() {
			reset(c)
			return
		}
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			a.counters.preauthTimeouts.Add(1)
			a.limited.log(a.log, "preauth-timeout", "relay: handshake timed out; reset", "remote", remote)
		case helloValid && hungUp(err):
			// Typically a client-side agent that gave up a stream it no
			// longer needs: its session completed or aborted while the
			// handshake ran. Counted apart from handshake failures.
			a.counters.hellosAbandoned.Add(1)
			a.limited.log(a.log, "handshake-abandoned", "relay: peer hung up after a valid hello ("+msg+"); reset",
				"remote", remote, "err", err)
		default:
			a.counters.handshakeFailures.Add(1)
			a.limited.log(a.log, "handshake", "relay: "+msg+"; reset", "remote", remote, "err", err)
		}
		reset(c)
	}
	var hb [stripe.HelloSize]byte
	if _, err := io.ReadFull(c, hb[:stripe.PreambleSize]); err != nil {
		if errors.Is(err, io.EOF) {
			// Closed before saying anything: a client-side agent that
			// gave up on its other streams, or a port scan.
			_ = c.Close()
			return
		}
		fail("reading hello", err)
		return
	}
	if v, err := stripe.PeekVersion(hb[:stripe.PreambleSize]); errors.Is(err, stripe.ErrVersion) {
		// An agent of another protocol version: say so, in a form it
		// reads whole, instead of closing silently.
		refusal := stripe.VersionRefusal()
		_, _ = c.Write(refusal[:])
		a.reject(rejectVersion, "relay: stream refused: peer speaks another protocol version",
			"remote", remote, "version", v, "want", stripe.Version)
		// Read what is left of its hello first: closing with unread data
		// would reset the connection and discard the refusal at the peer.
		_ = c.CloseWrite()
		_, _ = io.CopyN(io.Discard, c, 4096)
		_ = c.Close()
		return
	} else if err != nil {
		fail("bad hello", err)
		return
	}
	if _, err := io.ReadFull(c, hb[stripe.PreambleSize:]); err != nil {
		fail("reading hello", err)
		return
	}
	// With per-agent keys the initiator's name, read before the MAC,
	// chooses the key that checks it.
	initiator, err := stripe.HelloInitiator(hb[:])
	if err != nil {
		fail("bad hello", err)
		return
	}
	key := rc.keyFrom(initiator)
	if key == nil {
		fail("bad hello", fmt.Errorf("%w: agent %q has no public key here (per-agent keys)", stripe.ErrMAC, initiator))
		return
	}
	hello, err := stripe.ParseHello(hb[:], key)
	if err != nil {
		fail("bad hello from a peer that names itself "+strconv.Quote(initiator), helloDiagnosis(rc, hb[:], key, err))
		return
	}
	helloValid = true
	if hold := a.testJoinHold.Load(); hold != nil && hello.Join {
		select {
		case <-*hold:
		case <-a.stopped.Done():
		}
	}
	if hello.Join && hello.Stream != 0 {
		// A session bound from a pool starts before its other streams
		// join: their JOIN may overtake the BIND of its stream 0 (on
		// another connection). Give the BIND a moment before refusing,
		// and a fresh stream 0 (whose confirm makes the session; the
		// JOINs go once it is written) its handshake's time. A JOIN of
		// stream 0 itself waits for nothing: the initiator
		// gave up the stream that carried that BIND before it sent the
		// JOIN. (This agent's client side sends one only for a session
		// it heard from or was told was founded; an older one, refused
		// at once, sends its fresh hello half a second sooner: refound,
		// pool.go. A late BIND and that hello are decided as always,
		// whichever comes second refused: settled.go.)
		a.awaitSession(hello.Session, hello.Initiator, joinGrace, rc.limits.PreAuthTimeout)
	}
	route, status, place := a.admit(rc, &hello, src, true, false)
	if place != nil {
		// admit kept the session's place for this stream until join
		// makes the session (then this is a no-op) or the handshake ends.
		defer a.releasePlace(hello.Session, place)
	}
	reply := stripe.Reply{Status: status}
	var eph *stripe.Ephemeral
	if status == stripe.StatusAccepted {
		if eph, err = stripe.NewEphemeral(rand.Reader); err != nil {
			fail("ephemeral key", err)
			return
		}
		reply.Ephemeral = eph.Public()
	}
	rb := reply.Marshal(hb[:], key)
	if _, err := c.Write(rb[:]); err != nil {
		fail("writing reply", err)
		return
	}
	if status != stripe.StatusAccepted {
		a.reject(rejectKindOf(status), "relay: stream refused", "remote", remote, "initiator", hello.Initiator,
			"session", hello.Session, "client", hello.Client, "server", hello.Server, "reason", status)
		// The refusal is authenticated; close gracefully so it arrives.
		_ = c.Close()
		return
	}
	secrets, err := stripe.Finish(key, eph, hello.Ephemeral, hb[:], rb[:])
	if err != nil {
		fail("key agreement", err)
		return
	}
	var cb [stripe.ConfirmSize]byte
	if _, err := io.ReadFull(c, cb[:]); err != nil {
		fail("reading confirm", err)
		return
	}
	if err := secrets.VerifyConfirm(cb[:]); err != nil {
		fail("bad confirm", err)
		return
	}
	if hello.Pool {
		authenticated = true
		a.holdPooled(rc, hello.Initiator, c, secrets)
		return
	}
	codec, err := stripe.NewCodec(hello.Mode, &secrets.Keys, false, hello.Stream, route.ChunkSize)
	if err != nil {
		fail("building codec", err)
		return
	}
	var running *session
	if hello.Join {
		// A replacement stream: it stays unauthenticated (counted, under
		// the pre-auth deadline) until its JOIN proves the session key.
		a.mu.Lock()
		running = a.byID[hello.Session]
		a.mu.Unlock()
		if running == nil {
			// The session ended after admit found it, so the peer holds
			// an acceptance and its confirm proved the key: a late join
			// (the client side's session completed meanwhile), refused
			// as a join for an unknown session is, not a handshake
			// failure.
			if !a.stopping.Load() {
				a.reject(rejectMismatch, "relay: replacement stream's session ended during its handshake; reset",
					"remote", remote, "session", hello.Session, "stream", hello.Stream, "err", errUnknownSession)
			}
			reset(c)
			return
		}
		// The session holding the id now may not be the one admit
		// checked: the initiator picks ids, and one that ended while the
		// confirm was held back may have been opened again in another
		// shape, which this stream's index and codec do not fit.
		if st := running.joinable(&hello); st != stripe.StatusAccepted {
			a.reject(rejectMismatch, "relay: replacement stream's session changed during its handshake; reset",
				"remote", remote, "session", hello.Session, "stream", hello.Stream, "status", st)
			reset(c)
			return
		}
		if err := readJoin(c, codec, secrets, running); err != nil {
			fail("bad join", err)
			return
		}
	}
	_ = c.SetDeadline(time.Time{})
	opts := rc.streamTuningFor(route.ChunkSize)
	if err := tuneConn(c, opts); err != nil {
		fail("tuning stream socket", err)
		return
	}
	authenticated = true
	a.leavePreAuth(c)
	if running != nil {
		started, displaced := true, false
		if !running.established.Load() {
			started, displaced = running.waitJoin(int(hello.Stream), c, rc.limits.PreAuthTimeout)
		}
		if displaced {
			return // a later join for its slot took its place, and reset it
		}
		if !started || !running.replaceStream(newStream(running, int(hello.Stream), c, codec), rc.limits.PreAuthTimeout) {
			a.reject(rejectMismatch, "relay: replacement stream's session ended; reset", "session", hello.Session, "stream", hello.Stream)
			reset(c)
		}
		return
	}
	var sessionKey *[32]byte
	if hello.Stream == 0 {
		k := secrets.SessionKey()
		sessionKey = &k
	}
	a.join(rc, route, &hello, src, c, codec, sessionKey)
}

// hungUp reports whether err is the peer closing or resetting the
// connection, not a fault in what it sent.
func hungUp(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// lookupServer finds the server-side entry of a session.
func lookupServer(rc *runtimeConfig, h *stripe.Hello) (Whitelist, bool) {
	return lookup(rc.Server, h.Client.Addr(), h.Server)
}

// admit decides a hello: refusals are answered with a MAC'd status. The
// session's shape is the server side's own whitelist entry; a hello that
// announces another is refused, so a peer never chooses what this agent
// allocates. With reserve, a hello accepted for a session not made yet
// keeps its place under the session limits (reservePlaceLocked) until
// the caller's releasePlace; a BIND, whose session is made at once, does
// not.
//
// A fresh stream 0 (hello or BIND) of a session id this agent holds or
// founded before is answered as for the session (StatusDuplicateStream
// once it started) before anything else, and one it refuses settles the
// id as refused, both under a.mu: see settled.go.
// beforeDrain admits as if no drain had begun: a pooled stream's BIND
// read before it (holdPooled).
func (a *Agent) admit(rc *runtimeConfig, h *stripe.Hello, src netip.Addr, reserve, beforeDrain bool) (Whitelist, stripe.Status, *pendingPlace) {
	if h.Responder != rc.Name {
		return Whitelist{}, stripe.StatusWrongResponder, nil
	}
	if h.Pool {
		return Whitelist{}, a.admitPooled(rc, h), nil
	}
	if a.ownKeys.contains(h.Ephemeral) {
		return Whitelist{}, stripe.StatusReflected, nil
	}
	if h.Join || h.Stream != 0 {
		if !h.Join && a.foundedBefore(h.Session) {
			// A fresh stream other than 0 would gather the session
			// again, and its stream 0 then join it.
			return Whitelist{}, stripe.StatusDuplicateStream, nil
		}
		return a.admitHello(rc, h, src, reserve, beforeDrain)
	}
	if st, known := a.knownSession(h, false); known {
		return Whitelist{}, st, nil
	}
	w, st, p := a.admitHello(rc, h, src, reserve, beforeDrain)
	if st != stripe.StatusAccepted {
		// Settled as refused, unless a late BIND founded it meanwhile:
		// then the answer is the session's.
		if known, ok := a.knownSession(h, true); ok {
			return Whitelist{}, known, nil
		}
	}
	return w, st, p
}

// foundedBefore reports whether a session of id was founded here and
// has ended (or was founded by this agent's previous process).
func (a *Agent) foundedBefore(id stripe.SessionID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, founded := a.settled.get(id, time.Now())
	return founded
}

// knownSession answers a fresh stream 0 of a session id this agent holds
// and does not gather any more, or founded before, as a duplicate, and
// reports whether it did. With refused, an id it does not know is
// settled as refused: its caller refuses the hello.
func (a *Agent) knownSession(h *stripe.Hello, refused bool) (stripe.Status, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if s, ok := a.byID[h.Session]; ok {
		if s.joinable(h) != stripe.StatusAccepted {
			// Founded here, whatever the hello says of it (a mismatch
			// too: the initiator renamed since its BIND).
			return stripe.StatusDuplicateStream, true
		}
		return stripe.StatusAccepted, false // gathering: admitHello decides
	}
	if _, founded := a.settled.get(h.Session, now); founded {
		return stripe.StatusDuplicateStream, true
	}
	if refused {
		a.settled.add(h.Session, false, now)
	}
	return stripe.StatusAccepted, false
}

// admitHello is admit after the checks every hello takes first.
func (a *Agent) admitHello(rc *runtimeConfig, h *stripe.Hello, src netip.Addr, reserve, beforeDrain bool) (Whitelist, stripe.Status, *pendingPlace) {
	if h.Mode != rc.mode {
		return Whitelist{}, stripe.StatusModeMismatch, nil
	}
	w, ok := lookupServer(rc, h)
	if !ok {
		return Whitelist{}, stripe.StatusNotWhitelisted, nil
	}
	if !w.Admits(h.Initiator) {
		return Whitelist{}, stripe.StatusUnknownInitiator, nil
	}
	if int(h.Streams) != w.Streams || int(h.ChunkSize) != w.ChunkSize || int(h.QueueLength) != w.QueueLength {
		return Whitelist{}, stripe.StatusShapeMismatch, nil
	}
	if w.Streams > rc.limits.MaxStreams {
		return Whitelist{}, stripe.StatusStreamLimit, nil
	}
	initial := stripe.InitialFrames(w.Streams, w.ChunkSize)
	need := stripe.SessionFootprint(w.Streams, w.ChunkSize, initial)
	if stripe.SessionMemory(w.Streams, w.ChunkSize, initial) > rc.limits.SessionMemory {
		return Whitelist{}, stripe.StatusMemoryLimit, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.byID[h.Session]
	if a.draining && !beforeDrain && !h.Join {
		// Draining: only a live session's replacement streams (a join
		// of a session not here is refused as unknown, below: it may
		// have completed, which the initiator must hear).
		return Whitelist{}, stripe.StatusShuttingDown, nil
	}
	if ok {
		return w, s.joinable(h), nil
	}
	if h.Join {
		return Whitelist{}, stripe.StatusUnknownSession, nil
	}
	// A place kept for another stream of this session holds its session
	// limit, half-open slot and memory; one kept for another peer under
	// the same id is not this session's.
	p := a.pending[h.Session]
	if p != nil && p.peer != h.Initiator {
		return Whitelist{}, stripe.StatusSessionLimit, nil
	}
	switch {
	case p == nil && a.atSessionLimitLocked(rc.limits, h.Initiator):
		return Whitelist{}, stripe.StatusSessionLimit, nil
	case p == nil && a.halfOpen[connlimit.AddressOf(src)] >= rc.limits.MaxHalfOpenPerSource:
		return Whitelist{}, stripe.StatusSessionLimit, nil
	case p == nil && a.memReserved.Load() > rc.limits.Memory-need:
		return Whitelist{}, stripe.StatusMemoryLimit, nil
	}
	if !reserve {
		return w, stripe.StatusAccepted, nil
	}
	if p == nil {
		if !a.reserveMemory(need, rc.limits.Memory) {
			return Whitelist{}, stripe.StatusMemoryLimit, nil
		}
		p = &pendingPlace{peer: h.Initiator, mem: need, src: connlimit.AddressOf(src)}
		a.pending[h.Session] = p
		a.pendingByPeer[p.peer]++
		a.halfOpen[p.src]++
	}
	p.refs++
	return w, stripe.StatusAccepted, p
}

// pendingPlace is the place of a server-side session not made yet: refs
// counts the fresh streams of it whose handshake holds the place; mem is
// the session's memory, reserved from Limits.Memory with the place, and
// src the source address whose half-open slot (Agent.halfOpen) it holds.
// The session takes all of it over when it is made.
type pendingPlace struct {
	peer string
	refs int
	mem  int64
	src  netip.Prefix
}

// atSessionLimitLocked says whether a new server-side session of peer
// would pass max_sessions or sessions_per_peer, counting the sessions
// and the places kept for sessions about to be made. a.mu is held.
func (a *Agent) atSessionLimitLocked(lim Limits, peer string) bool {
	return len(a.sessions)+len(a.pending) >= lim.MaxSessions ||
		a.byPeer[peer]+a.pendingByPeer[peer] >= lim.MaxSessionsPerPeer
}

// releasePlace gives back one stream's hold on place, the place of
// session id admit kept for it; the place goes with the last hold. A
// place its session took over, or another place under the same id since,
// is not this one: then it does nothing.
func (a *Agent) releasePlace(id stripe.SessionID, place *pendingPlace) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending[id] != place {
		return
	}
	if place.refs--; place.refs <= 0 {
		a.dropPlaceLocked(id, place)
	}
}

// dropPlaceLocked ends a place, giving back what it still holds (a
// session taking it over clears mem and src first). a.mu is held.
func (a *Agent) dropPlaceLocked(id stripe.SessionID, p *pendingPlace) {
	a.memReserved.Add(-p.mem)
	p.mem = 0
	if p.src.IsValid() {
		connlimit.Dec(a.halfOpen, p.src)
		p.src = netip.Prefix{}
	}
	delete(a.pending, id)
	connlimit.Dec(a.pendingByPeer, p.peer)
}

// join attaches an authenticated stream to its session, creating the
// session on its first stream, and starts the session once its stream 0
// is in (the initiator opens the others as JOINs of the running
// session). A session whose fresh streams other than 0 came first
// gathers them, counted as half-open, until its stream 0 arrives.
func (a *Agent) join(rc *runtimeConfig, w Whitelist, h *stripe.Hello, src netip.Addr, c *net.TCPConn, codec *stripe.Codec, sessionKey *[32]byte) {
	a.mu.Lock()
	s, ok := a.byID[h.Session]
	if !ok {
		var err error
		// The place admit kept for the session becomes the session, its
		// memory and half-open slot with it: no limit refuses a stream
		// whose reply accepted it. Whatever the session does not take,
		// the place gives back as it ends.
		p := a.pending[h.Session]
		own := p != nil && p.peer == h.Initiator
		switch {
		case a.drainOver || a.draining && !own:
			// (A place kept before the drain makes its session, while
			// the drain waits.)
			err = errShuttingDown
		case p != nil && !own:
			err = errSessionLimit // another peer's place under this id
		case !own && (a.atSessionLimitLocked(rc.limits, h.Initiator) ||
			a.halfOpen[connlimit.AddressOf(src)] >= rc.limits.MaxHalfOpenPerSource):
			err = errSessionLimit
		}
		var held int64
		if own {
			held = p.mem
		}
		if err == nil {
			s, err = a.newSessionHolding(rc, sessionParams{
				id: h.Session, side: serverSide, whitelist: w.Name, peer: h.Initiator,
				client: h.Client, server: h.Server,
				streams: w.Streams, chunkSize: w.ChunkSize, queueLength: w.QueueLength,
				mode: h.Mode, stallTimeout: rc.limits.StallTimeout, reconnectTimeout: rc.limits.ReconnectTimeout,
			}, held)
		}
		var heldSrc netip.Prefix
		if own {
			if err == nil {
				heldSrc, p.src, p.mem = p.src, netip.Prefix{}, 0 // taken over
			}
			a.dropPlaceLocked(h.Session, p)
		}
		if err != nil {
			a.mu.Unlock()
			kind := rejectSessionLimit
			switch {
			case errors.Is(err, errShuttingDown):
				kind = rejectShuttingDown
			case errors.Is(err, errMemoryLimit):
				kind = rejectMemoryLimit
			}
			a.reject(kind, "relay: stream's session refused after the handshake; reset",
				"session", h.Session, "err", err)
			reset(c)
			return
		}
		if heldSrc.IsValid() {
			s.halfOpenSrc = heldSrc // the place's slot
		} else {
			s.halfOpenSrc = connlimit.AddressOf(src)
			a.halfOpen[s.halfOpenSrc]++
		}
		a.sessions[s] = struct{}{}
		a.byPeer[s.peer]++
		a.byID[s.id] = s
		a.counters.sessionsStarted.Add(1)
	}
	status := s.joinable(h)
	if status != stripe.StatusAccepted {
		a.mu.Unlock()
		a.reject(rejectKindOf(status), "relay: authenticated stream does not fit its session; reset",
			"session", h.Session, "stream", h.Stream, "reason", status)
		reset(c)
		return
	}
	s.mu.Lock()
	s.streams[h.Stream] = newStream(s, int(h.Stream), c, codec)
	if sessionKey != nil {
		s.sessionKey = *sessionKey
	}
	s.joined++
	if h.Stream == 0 {
		// A session starts on its stream 0: the others join the
		// running session (JOIN), so data flows before they are in.
		s.joined = s.n
	}
	complete := s.joined == s.n
	s.mu.Unlock()
	if complete {
		a.leaveHalfOpenLocked(s)
	}
	a.mu.Unlock()
	if complete {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.connectServer(s, rc)
		}()
	}
}

// leaveHalfOpenLocked ends a server-side session's gathering phase in the
// per-source count; idempotent.
func (a *Agent) leaveHalfOpenLocked(s *session) {
	if !s.halfOpenSrc.IsValid() {
		return
	}
	connlimit.Dec(a.halfOpen, s.halfOpenSrc)
	s.halfOpenSrc = netip.Prefix{}
}

var errMemoryLimit = errors.New("agent memory cap reached")

// newReservedSession reserves a session's footprint at its initial window
// from the agent-wide memory cap and builds it; a wider window reserves
// its growth first (growWindow), and the reservation is returned when the
// session finishes.
func (a *Agent) newReservedSession(rc *runtimeConfig, p sessionParams) (*session, error) {
	return a.newSessionHolding(rc, p, 0)
}

// newSessionHolding is newReservedSession for a session of which held
// bytes are reserved already (by the place admit kept): it reserves only
// the rest. Made, the session holds what it needs (a surplus of held is
// given back); on an error held stays the caller's to give back.
func (a *Agent) newSessionHolding(rc *runtimeConfig, p sessionParams, held int64) (*session, error) {
	initial := stripe.InitialFrames(p.streams, p.chunkSize)
	need := stripe.SessionFootprint(p.streams, p.chunkSize, initial)
	extra := need - held
	if extra > 0 && !a.reserveMemory(extra, rc.limits.Memory) {
		return nil, fmt.Errorf("%w: a session of %d streams x %d bytes, window %d frames, needs %d bytes, %d of %d reserved",
			errMemoryLimit, p.streams, p.chunkSize, initial, need, a.memReserved.Load(), rc.limits.Memory)
	}
	s, err := newSession(a, p, windowCapFor(p.streams, p.chunkSize, p.queueLength, rc.limits), rc.limits.SessionMemory)
	if err != nil {
		a.memReserved.Add(-max(extra, 0))
		return nil, err
	}
	if extra < 0 {
		a.memReserved.Add(extra)
	}
	s.reserved = need
	return s, nil
}

func (a *Agent) reserveMemory(n, limit int64) bool {
	for {
		cur := a.memReserved.Load()
		if n > limit-cur {
			return false
		}
		if a.memReserved.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// connectServer opens the connection to the server from the client's
// address once every stream of the session has joined, then relays.
func (a *Agent) connectServer(s *session, rc *runtimeConfig) {
	a.recordFounded(s)
	ctx, cancel := context.WithTimeout(s.ctx, rc.limits.PreAuthTimeout)
	defer cancel()
	host, err := a.os.dial(ctx, s.client, s.server)
	if err != nil {
		s.abort(AbortSetup, fmt.Errorf("connect to server %s from %s: %w", s.server, s.client, err))
		s.finishUnstarted()
		return
	}
	s.mu.Lock()
	aborted := s.aborted
	if !aborted {
		s.host = host
	}
	s.mu.Unlock()
	if aborted {
		reset(host)
		s.finishUnstarted()
		return
	}
	s.start()
}

// ownKeys remembers the ephemeral keys of this agent's handshakes in
// flight as initiator, so a hello of ours reflected back to our own data
// port is refused even before the names are compared. Keys leave when
// their handshake ends, so it holds at most the handshakes in flight.
type ownKeys struct {
	mu   sync.Mutex
	keys map[stripe.PublicKey]int
}

func (k *ownKeys) add(p stripe.PublicKey) {
	k.mu.Lock()
	if k.keys == nil {
		k.keys = make(map[stripe.PublicKey]int)
	}
	k.keys[p]++
	k.mu.Unlock()
}

func (k *ownKeys) remove(p stripe.PublicKey) {
	k.mu.Lock()
	connlimit.Dec(k.keys, p)
	k.mu.Unlock()
}

func (k *ownKeys) contains(p stripe.PublicKey) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.keys[p]
	return ok
}

// helloDiagnosis adds to a hello's failed check what the key it was
// checked with tells: with per-agent keys, a hello that the PSK's own key
// opens comes from an agent without them.
func helloDiagnosis(rc *runtimeConfig, hb []byte, key *stripe.HandshakeKey, err error) error {
	if !errors.Is(err, stripe.ErrMAC) || key == rc.key {
		return err
	}
	if _, perr := stripe.ParseHello(hb, rc.key); perr == nil {
		return fmt.Errorf("%w: the hello is authenticated by the PSK alone: per-agent keys are off at that agent", err)
	}
	if meant, nerr := stripe.HelloResponder(hb); nerr == nil && meant != rc.Name {
		return fmt.Errorf("%w: the hello names %q as its responder (unchecked): that agent's route for %s has this agent's address", err, meant, meant)
	}
	return fmt.Errorf("%w: not by this agent's pair key with it, nor by the PSK alone: another key (a public_key out of date on either side) or another PSK", err)
}

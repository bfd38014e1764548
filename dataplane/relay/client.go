package relay

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

// serveClient runs the client side of one steered connection: find its
// whitelist entry, open and authenticate the streams to the peer agent,
// then relay. When the streams cannot be had (the peer refuses, is
// unreachable, or a limit here is reached) the connection is carried
// direct instead, unaccelerated: nothing has been read from the client
// yet, so nothing is lost.
func (a *Agent) serveClient(host *net.TCPConn) {
	rc := a.cfg.Load()
	client := unmapAddrPort(host.RemoteAddr().(*net.TCPAddr).AddrPort())
	server := a.os.destination(host)
	w, ok := lookup(rc.Client, client.Addr(), server)
	if !ok {
		a.reject(rejectNotWhitelisted, "relay: steered connection matches no client-side whitelist entry; reset",
			"client", client, "server", server)
		reset(host)
		return
	}
	if len(w.Peers) > 0 {
		w.PeerName, w.Peer = farAgent(w, client, a.far.up(w.Peers, time.Now()))
	}
	if w.Streams > rc.limits.MaxStreams {
		a.reject(rejectStreamLimit, "relay: whitelist asks for more streams than the limit; carrying direct",
			"whitelist", w.Name, "streams", w.Streams, "limit", rc.limits.MaxStreams)
		a.carryDirect(rc, host, client, server, w.Name, errors.New("stream limit"))
		return
	}
	if need := stripe.SessionMemory(w.Streams, w.ChunkSize, stripe.InitialFrames(w.Streams, w.ChunkSize)); need > rc.limits.SessionMemory {
		a.reject(rejectMemoryLimit, "relay: session would exceed the session memory cap; carrying direct",
			"whitelist", w.Name, "need", need, "cap", rc.limits.SessionMemory)
		a.carryDirect(rc, host, client, server, w.Name, errors.New("session memory cap"))
		return
	}
	var id stripe.SessionID
	_, _ = rand.Read(id[:])
	s, err := a.newReservedSession(rc, sessionParams{
		id: id, side: clientSide, whitelist: w.Name, peer: w.PeerName, client: client, server: server,
		streams: w.Streams, chunkSize: w.ChunkSize, queueLength: w.QueueLength, mode: rc.mode,
		stallTimeout: rc.limits.StallTimeout, reconnectTimeout: rc.limits.ReconnectTimeout, peerAddr: w.Peer,
		autoStreams: w.AutoStreams,
	})
	if err != nil {
		a.reject(rejectMemoryLimit, "relay: connection not accelerated; carrying direct", "client", client,
			"server", server, "err", err)
		a.carryDirect(rc, host, client, server, w.Name, err)
		return
	}
	if err := a.register(s, rc.limits, host); err != nil {
		a.memReserved.Add(-s.reserved)
		s.cancel()
		if errors.Is(err, errShuttingDown) {
			// Accepted before the drain began: carried direct.
			if a.goDirect(rc, host, client, server, w.Name, err) {
				a.relayDirect(rc, host, server, directUp{})
			}
			return
		}
		a.reject(rejectSessionLimit, "relay: connection not accelerated; carrying direct", "client", client,
			"server", server, "err", err)
		a.carryDirect(rc, host, client, server, w.Name, err)
		return
	}
	if pool := a.poolFor(w.Peer); pool != nil && a.withinPeerShare(s, rc.limits) && a.bindPooled(s, rc, pool) > 0 {
		// Streams bound from the pool: start now; the others join the
		// running session as replacements do.
		s.mu.Lock()
		s.host = host
		s.mu.Unlock()
		s.start()
		return
	}
	st, err := a.openFirstStream(s, rc, w.Peer)
	if err != nil {
		if len(w.Peers) > 0 && !atItsLimits(err) {
			// The next connections of this bucket go to a live agent
			// of the far site. (A far agent that answered it is at its
			// limits is up: the controller's checks see it so, and its
			// site's switch goes on steering the bucket's replies to
			// it, so another agent would not get them: review,
			// helper-107.)
			a.far.markDown(w.PeerName, time.Now())
		}
		// s.host is still unset: the abort leaves the end-host
		// connection alone and the direct path takes it over.
		if !s.abort(AbortSetup, err) && s.abortedFor(AbortShutdown) {
			// A drain's deadline aborted it, counted as such: its
			// client is reset, not refused once more.
			s.finishUnstarted()
			reset(host)
			return
		}
		// Registered as direct before the session ends: a drain always
		// sees one or the other, and does not end in between.
		direct := a.goDirect(rc, host, client, server, w.Name, err)
		s.finishUnstarted()
		if direct {
			a.relayDirect(rc, host, server, directUp{})
		}
		return
	}
	s.mu.Lock()
	s.streams[0] = st
	s.host = host
	s.mu.Unlock()
	s.start()
}

// withinPeerShare says whether the far agent's sessions_per_peer (the
// deployment's limits, the same on both agents) leaves a place for s
// among this agent's sessions toward it. Beyond it, s opens a fresh
// stream 0 rather than binding pooled streams: the far agent's refusal
// of a hello is authenticated and comes at once, and the connection is
// carried direct, whole; a refused BIND only resets its stream, and the
// refusal is known one handshake later (refound, pool.go).
func (a *Agent) withinPeerShare(s *session, lim Limits) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for o := range a.sessions {
		if o.side == clientSide && o.peer == s.peer {
			n++
		}
	}
	return n <= lim.MaxSessionsPerPeer // s is among them
}

// directUp is what a connection carried direct had sent before it went
// direct: the bytes read from it (by a session the far agent then
// refused to found, see handOverDirect) and whether its FIN was read too.
// reserved is what the session handed over of its reservation from
// Limits.Memory with them, given back once they are written.
type directUp struct {
	data     []byte
	fin      bool
	reserved int64
}

// carryDirect relays a steered connection to its server over one plain
// TCP connection from this agent's own address: slow, but the client's
// connection works. It is counted and logged. The server sees the agent's
// address, not the client's (it cannot reply to the client's address
// without the far agent that would have answered for it).
func (a *Agent) carryDirect(rc *runtimeConfig, host *net.TCPConn, client, server netip.AddrPort, whitelist string, why error) {
	if a.goDirect(rc, host, client, server, whitelist, why) {
		a.relayDirect(rc, host, server, directUp{})
	}
}

// goDirect registers host as carried direct (trackDirect), counted and
// logged; refused, it resets host and counts the refusal. A drain lets
// connections go direct until it is over: every one here was accepted
// before it began (the drain closes the listeners and waits for them).
func (a *Agent) goDirect(rc *runtimeConfig, host *net.TCPConn, client, server netip.AddrPort, whitelist string, why error) bool {
	if err := a.trackDirect(host, rc.limits.MaxSessions); err != nil {
		reset(host)
		if errors.Is(err, errShuttingDown) {
			// The drain's deadline cut it (no connection or session of
			// it was counted there): counted in Shutdown's error.
			a.cutLate.Add(1)
			return false
		}
		a.reject(rejectSessionLimit, "relay: connection not carried direct either; reset", "client", client, "server", server,
			"why", why, "err", err)
		return false
	}
	a.counters.fallbacks.Add(1)
	a.limited.log(a.log, "fallback", "relay: carrying a connection direct, unaccelerated",
		"whitelist", whitelist, "client", client, "server", server, "why", why)
	return true
}

// relayDirect carries host, registered by goDirect, to server; up goes
// to the server first.
func (a *Agent) relayDirect(rc *runtimeConfig, host *net.TCPConn, server netip.AddrPort, up directUp) {
	defer a.untrackDirect(host)
	written := sync.OnceFunc(func() { a.memReserved.Add(-up.reserved) })
	defer written()
	// A drain's deadline resets host; Shutdown then cancels the dial.
	ctx, cancel := context.WithTimeout(a.stopped, rc.limits.PreAuthTimeout)
	c, err := new(net.Dialer).DialContext(ctx, network(server.Addr()), server.String())
	cancel()
	if err != nil {
		a.limited.log(a.log, "fallback-dial", "relay: direct connection to the server failed; reset",
			"server", server, "err", err)
		reset(host)
		return
	}
	far := c.(*net.TCPConn)
	if f := a.testDirectDialed.Load(); f != nil {
		(*f)(far)
	}
	// As a session's: should this process die, both ends see a reset.
	_ = host.SetLinger(0)
	_ = far.SetLinger(0)
	a.setDirectPeer(host, far)
	var wg sync.WaitGroup
	var failed sync.Once
	fail := func() { failed.Do(func() { reset(host); reset(far) }) }
	// shut[i]: the other pipe half-closed conns[i] (set before the call;
	// see endedByFin).
	conns := [2]*net.TCPConn{host, far}
	var shut [2]atomic.Bool
	// first goes to dst before what src sends; srcDone: src's FIN was
	// read already.
	pipe := func(dst, src int, first []byte, srcDone bool) {
		defer wg.Done()
		var err error
		if len(first) > 0 {
			_, err = conns[dst].Write(first)
			first = nil
			written()
		}
		if err == nil && !srcDone {
			_, err = io.Copy(conns[dst], conns[src])
			if err == nil && !endedByFin(conns[src], &shut[src]) {
				err = syscall.ECONNRESET // a write to src took its reset's error
			}
		}
		if err != nil {
			fail()
			return
		}
		shut[dst].Store(true)
		_ = conns[dst].CloseWrite()
	}
	wg.Add(2)
	data := up.data
	up.data = nil
	go pipe(1, 0, data, up.fin)
	go pipe(0, 1, nil, false)
	wg.Wait()
	_ = host.SetLinger(-1)
	_ = far.SetLinger(-1)
	_ = host.Close()
	_ = far.Close()
}

// trackDirect registers a direct connection so Shutdown can end it:
// none once a drain is over (errShuttingDown), nor more than limit
// (errSessionLimit).
func (a *Agent) trackDirect(host *net.TCPConn, limit int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.drainOver {
		return errShuttingDown
	}
	if len(a.direct) >= limit {
		return fmt.Errorf("%d direct connections: %w", len(a.direct), errSessionLimit)
	}
	delete(a.serving, host)
	a.direct[host] = nil
	return nil
}

func (a *Agent) setDirectPeer(host, far *net.TCPConn) {
	a.mu.Lock()
	if _, ok := a.direct[host]; ok {
		a.direct[host] = far
	}
	over := a.drainOver // Shutdown reset host while far was dialed
	a.mu.Unlock()
	if over {
		reset(far)
	}
}

func (a *Agent) untrackDirect(host *net.TCPConn) {
	a.mu.Lock()
	delete(a.direct, host)
	a.mu.Unlock()
}

// slotsFor is the semaphore of handshakes in flight toward one peer.
func (a *Agent) slotsFor(peer netip.AddrPort) chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	ch, ok := a.handshakeSlots[peer]
	if !ok {
		ch = make(chan struct{}, HandshakesInFlight)
		a.handshakeSlots[peer] = ch
	}
	return ch
}

// openFirstStream dials and authenticates stream 0 of a client-side
// session, which the session starts on: its other streams join the
// running session (supervise, JOIN), at most HandshakesInFlight
// handshakes at a time toward the peer, so data flows half a round trip
// after stream 0's handshake whatever the stream count.
func (a *Agent) openFirstStream(s *session, rc *runtimeConfig, peer netip.AddrPort) (*stream, error) {
	ctx, cancel := context.WithTimeout(s.ctx, rc.limits.PreAuthTimeout)
	defer cancel()
	slots := a.slotsFor(peer)
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return nil, &StreamError{Stream: 0, Op: "open", Err: context.Cause(ctx)}
	}
	st, err := a.openStream(ctx, s, rc, peer, 0, rc.streamTuningFor(s.chunkSize), false)
	<-slots
	if err != nil {
		return nil, &StreamError{Stream: 0, Op: "open", Err: err}
	}
	return st, nil
}

// initiate runs the initiator's side of a stream handshake on conn:
// the hello (with a fresh ephemeral key, which this agent refuses to meet
// as a responder while it is in flight), the reply, the confirm. It
// returns the stream's secrets; a refusal names the peer and the reason.
func (a *Agent) initiate(conn *net.TCPConn, rc *runtimeConfig, peer netip.AddrPort, hello stripe.Hello) (*stripe.Secrets, error) {
	eph, err := stripe.NewEphemeral(rand.Reader)
	if err != nil {
		return nil, err
	}
	key := rc.keyTo(hello.Responder)
	if key == nil {
		return nil, fmt.Errorf("agent %s has no public key (per-agent keys)", hello.Responder)
	}
	hello.Ephemeral = eph.Public()
	a.ownKeys.add(hello.Ephemeral)
	defer a.ownKeys.remove(hello.Ephemeral)
	hb, err := hello.Marshal(key)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(hb[:]); err != nil {
		return nil, fmt.Errorf("send hello: %w", err)
	}
	var rb [stripe.ReplySize]byte
	if _, err := io.ReadFull(conn, rb[:]); err != nil {
		if hungUp(err) {
			return nil, fmt.Errorf("read reply: peer %s closed the handshake without answering "+
				"(wrong pre-shared key, per-agent keys on one side only or with another public key, "+
				"the address of another agent than %s, or an agent of protocol version 1): %w", peer, hello.Responder, err)
		}
		return nil, fmt.Errorf("read reply: %w", err)
	}
	reply, err := stripe.ParseReply(hb[:], rb[:], key)
	if err != nil {
		if stripe.IsVersionRefusal(rb[:]) {
			return nil, fmt.Errorf("peer %s refused: %w", peer, refusal{stripe.StatusVersion})
		}
		return nil, fmt.Errorf("peer %s: %w", peer, err)
	}
	if reply.Status == stripe.StatusUnknownSession {
		return nil, fmt.Errorf("peer %s refused: %w", peer, errUnknownSession)
	}
	if reply.Status != stripe.StatusAccepted {
		return nil, fmt.Errorf("peer %s refused: %w", peer, refusal{reply.Status})
	}
	secrets, err := stripe.Finish(key, eph, reply.Ephemeral, hb[:], rb[:])
	if err != nil {
		return nil, err
	}
	confirm := secrets.Confirm()
	if _, err := conn.Write(confirm[:]); err != nil {
		return nil, fmt.Errorf("send confirm: %w", err)
	}
	return secrets, nil
}

// atItsLimits says whether err is a responder's refusal for its own
// limits (sessions, streams, memory): it is up and answering.
func atItsLimits(err error) bool {
	var r refusal
	if !errors.As(err, &r) {
		return false
	}
	switch r.status {
	case stripe.StatusSessionLimit, stripe.StatusStreamLimit, stripe.StatusMemoryLimit:
		return true
	}
	return false
}

// refusal is a responder's answer to a hello other than acceptance.
type refusal struct{ status stripe.Status }

func (r refusal) Error() string { return r.status.String() }

// openStream dials and authenticates stream index of s; join makes it a
// replacement of a lost stream of the running session (hello flag JOIN,
// then the JOIN frame).
func (a *Agent) openStream(ctx context.Context, s *session, rc *runtimeConfig, peer netip.AddrPort, index int, tuning streamTuning, join bool) (*stream, error) {
	d := net.Dialer{Control: tuning.control}
	c, err := d.DialContext(ctx, network(peer.Addr()), peer.String())
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", peer, err)
	}
	conn := c.(*net.TCPConn)
	if f := a.testDialed.Load(); f != nil {
		if err := (*f)(conn); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	// The context cancels the dial; the deadline bounds the handshake,
	// and closing the connection on cancel stops a sibling's wait early.
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	// A join that fails after its JOIN went is reset: the far agent may
	// have attached it, and a FIN there reads as the end of this agent's
	// process (its session aborts); a reset is a lost stream, replaced.
	// Any other failure closes with a FIN: before the hello, the far
	// agent takes it for a hang-up, not a failed handshake; and a fresh
	// stream 0 the far agent accepted ends the session it founded there
	// at once, where a reset would leave it (and its server connection)
	// waiting for a replacement until its reconnect timeout.
	joinSent := false
	fail := func(err error) (*stream, error) {
		if joinSent {
			reset(conn)
		} else {
			_ = conn.Close()
		}
		return nil, err
	}

	hello := stripe.Hello{
		Mode: rc.mode, Initiator: rc.Name, Responder: s.peer,
		Stream: uint16(index), Streams: uint16(s.n),
		ChunkSize: uint32(s.chunkSize), QueueLength: uint32(s.queueLength),
		Session: s.id, Client: s.client, Server: s.server, Join: join,
	}
	secrets, err := a.initiate(conn, rc, peer, hello)
	if err != nil {
		return fail(err)
	}
	codec, err := stripe.NewCodec(rc.mode, &secrets.Keys, true, uint16(index), s.chunkSize)
	if err != nil {
		return fail(err)
	}
	if join {
		s.mu.Lock()
		key := s.sessionKey
		s.mu.Unlock()
		if err := sendJoin(conn, codec, secrets, &key, s.id); err != nil {
			return fail(err)
		}
		joinSent = true
		if f := a.testJoinSent.Load(); f != nil {
			if err := (*f)(conn); err != nil {
				return fail(err)
			}
		}
	} else if index == 0 {
		s.mu.Lock()
		s.sessionKey = secrets.SessionKey()
		s.mu.Unlock()
	}
	// Once the cancel hook is disarmed nothing else touches the deadline.
	if !stop() {
		return fail(context.Cause(ctx))
	}
	_ = conn.SetDeadline(time.Time{})
	st := newStream(s, index, conn, codec)
	if join {
		st.ctlSeq = 1 // the JOIN took control index 0
	}
	return st, nil
}

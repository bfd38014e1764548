package relay

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

// admitPreAuth applies the cap on unauthenticated connections at accept
// time: beyond it a connection is reset before anything is read from it.
func (a *Agent) admitPreAuth(c *net.TCPConn) {
	rc := a.cfg.Load()
	if a.preauthCount.Add(1) > int64(rc.limits.MaxPreAuth) {
		a.preauthCount.Add(-1)
		a.reject(rejectPreAuthLimit, "relay: unauthenticated connection cap reached; reset",
			"remote", c.RemoteAddr().String(), "cap", rc.limits.MaxPreAuth)
		reset(c)
		return
	}
	a.mu.Lock()
	if a.draining {
		a.mu.Unlock()
		a.preauthCount.Add(-1)
		reset(c)
		return
	}
	a.preauth[c] = struct{}{}
	a.mu.Unlock()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.serveStream(c, rc)
	}()
}

func (a *Agent) leavePreAuth(c *net.TCPConn) {
	a.mu.Lock()
	delete(a.preauth, c)
	a.mu.Unlock()
	a.preauthCount.Add(-1)
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
	_ = c.SetDeadline(time.Now().Add(rc.limits.PreAuthTimeout))
	fail := func(msg string, err error) {
		if a.stopping.Load() {
			reset(c)
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			a.counters.preauthTimeouts.Add(1)
			a.limited.log(a.log, "preauth-timeout", "relay: handshake timed out; reset", "remote", remote)
		} else {
			a.counters.handshakeFailures.Add(1)
			a.limited.log(a.log, "handshake", "relay: "+msg+"; reset", "remote", remote, "err", err)
		}
		reset(c)
	}
	var hb [stripe.HelloSize]byte
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		if errors.Is(err, io.EOF) {
			// Closed before saying anything: a client-side agent that
			// gave up on its other streams, or a port scan.
			_ = c.Close()
			return
		}
		fail("reading hello", err)
		return
	}
	hello, err := stripe.ParseHello(hb[:], rc.key)
	if err != nil {
		fail("bad hello", err)
		return
	}
	status := a.admit(rc, &hello)
	var nonce stripe.Nonce
	_, _ = rand.Read(nonce[:])
	reply := stripe.Reply{Status: status, Nonce: nonce}
	rb := reply.Marshal(hb[:], rc.key)
	if _, err := c.Write(rb[:]); err != nil {
		fail("writing reply", err)
		return
	}
	if status != stripe.StatusAccepted {
		a.reject(rejectKindOf(status), "relay: stream refused", "remote", remote,
			"session", hello.Session, "client", hello.Client, "server", hello.Server, "reason", status)
		// The refusal is authenticated; close gracefully so it arrives.
		_ = c.Close()
		return
	}
	var cb [stripe.ConfirmSize]byte
	if _, err := io.ReadFull(c, cb[:]); err != nil {
		fail("reading confirm", err)
		return
	}
	if err := stripe.VerifyConfirm(hb[:], rb[:], cb[:], rc.key); err != nil {
		fail("bad confirm", err)
		return
	}
	keys, err := stripe.DeriveStreamKeys(rc.key, &hello, nonce)
	if err != nil {
		fail("deriving keys", err)
		return
	}
	codec, err := stripe.NewCodec(hello.Mode, &keys, false, hello.Stream, int(hello.ChunkSize))
	if err != nil {
		fail("building codec", err)
		return
	}
	_ = c.SetDeadline(time.Time{})
	opts := rc.tuning
	opts.sndbuf, opts.rcvbuf = rc.buffersFor(int(hello.ChunkSize), int(hello.QueueLength))
	if err := tuneConn(c, opts); err != nil {
		fail("tuning stream socket", err)
		return
	}
	authenticated = true
	a.leavePreAuth(c)
	a.join(rc, &hello, c, codec)
}

// admit decides a hello: refusals are answered with a MAC'd status.
func (a *Agent) admit(rc *runtimeConfig, h *stripe.Hello) stripe.Status {
	if h.Mode != rc.mode {
		return stripe.StatusModeMismatch
	}
	if _, ok := lookup(rc.Whitelist, h.Client.Addr(), h.Server); !ok {
		return stripe.StatusNotWhitelisted
	}
	if int(h.Streams) > rc.limits.MaxStreams {
		return stripe.StatusStreamLimit
	}
	if SessionMemory(int(h.Streams), int(h.ChunkSize), int(h.QueueLength)) > rc.limits.SessionMemory {
		return stripe.StatusMemoryLimit
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.draining {
		return stripe.StatusShuttingDown
	}
	if s, ok := a.byID[h.Session]; ok {
		return s.joinable(h)
	}
	if len(a.sessions) >= rc.limits.MaxSessions {
		return stripe.StatusSessionLimit
	}
	return stripe.StatusAccepted
}

// join attaches an authenticated stream to its session, creating the
// session on its first stream, and starts the session once all streams
// are in.
func (a *Agent) join(rc *runtimeConfig, h *stripe.Hello, c *net.TCPConn, codec *stripe.Codec) {
	a.mu.Lock()
	s, ok := a.byID[h.Session]
	if !ok {
		var err error
		switch {
		case a.draining:
			err = errShuttingDown
		case len(a.sessions) >= rc.limits.MaxSessions:
			err = errSessionLimit
		}
		if err == nil {
			s, err = newSession(a, sessionParams{
				id: h.Session, side: serverSide, client: h.Client, server: h.Server,
				streams: int(h.Streams), chunkSize: int(h.ChunkSize), queueLength: int(h.QueueLength),
				mode: h.Mode, stallTimeout: rc.limits.StallTimeout,
			})
		}
		if err != nil {
			a.mu.Unlock()
			kind := rejectSessionLimit
			if errors.Is(err, errShuttingDown) {
				kind = rejectShuttingDown
			}
			a.reject(kind, "relay: stream's session refused after the handshake; reset",
				"session", h.Session, "err", err)
			reset(c)
			return
		}
		if w, ok := lookup(rc.Whitelist, h.Client.Addr(), h.Server); ok {
			s.whitelist = w.Name
		}
		a.sessions[s] = struct{}{}
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
	s.joined++
	complete := s.joined == s.n
	s.mu.Unlock()
	a.mu.Unlock()
	if complete {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.connectServer(s, rc)
		}()
	}
}

// connectServer opens the connection to the server from the client's
// address once every stream of the session has joined, then relays.
func (a *Agent) connectServer(s *session, rc *runtimeConfig) {
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

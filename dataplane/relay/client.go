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
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

// serveClient runs the client side of one steered connection: find its
// whitelist entry, open and authenticate the streams to the peer agent,
// then relay.
func (a *Agent) serveClient(host *net.TCPConn) {
	rc := a.cfg.Load()
	client := unmapAddrPort(host.RemoteAddr().(*net.TCPAddr).AddrPort())
	server := a.os.destination(host)
	w, ok := lookup(rc.Whitelist, client.Addr(), server)
	if !ok || !w.Peer.IsValid() {
		a.reject(rejectNotWhitelisted, "relay: steered connection matches no whitelist entry with a peer; reset",
			"client", client, "server", server)
		reset(host)
		return
	}
	if w.Streams > rc.limits.MaxStreams {
		a.reject(rejectStreamLimit, "relay: whitelist asks for more streams than the limit; reset",
			"whitelist", w.Name, "streams", w.Streams, "limit", rc.limits.MaxStreams)
		reset(host)
		return
	}
	if need := SessionMemory(w.Streams, w.ChunkSize, w.QueueLength); need > rc.limits.SessionMemory {
		a.reject(rejectMemoryLimit, "relay: session would exceed the memory cap; reset",
			"whitelist", w.Name, "need", need, "cap", rc.limits.SessionMemory)
		reset(host)
		return
	}
	var id stripe.SessionID
	_, _ = rand.Read(id[:])
	s, err := newSession(a, sessionParams{
		id: id, side: clientSide, whitelist: w.Name, client: client, server: server,
		streams: w.Streams, chunkSize: w.ChunkSize, queueLength: w.QueueLength, mode: rc.mode,
		stallTimeout: rc.limits.StallTimeout,
	})
	if err != nil {
		a.log.Error("relay: session setup", "err", err)
		reset(host)
		return
	}
	if err := a.register(s, rc.limits); err != nil {
		kind := rejectSessionLimit
		if errors.Is(err, errShuttingDown) {
			kind = rejectShuttingDown
		}
		a.reject(kind, "relay: connection refused; reset", "client", client, "server", server, "err", err)
		reset(host)
		return
	}
	s.host = host
	if err := a.openStreams(s, rc, w.Peer); err != nil {
		s.abort(AbortSetup, err)
		s.finishUnstarted()
		return
	}
	s.start()
}

// openStreams dials and authenticates every stream of a client-side session
// in parallel; any failure fails them all.
func (a *Agent) openStreams(s *session, rc *runtimeConfig, peer netip.AddrPort) error {
	ctx, cancel := context.WithTimeout(s.ctx, rc.limits.PreAuthTimeout)
	defer cancel()
	tuning := rc.tuning
	tuning.sndbuf, tuning.rcvbuf = rc.buffersFor(s.chunkSize, s.queueLength)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := range s.n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := a.openStream(ctx, s, rc, peer, i, tuning)
			if err != nil {
				// The first failure is the cause; the others are mostly
				// the cancellation it triggers.
				mu.Lock()
				if first == nil {
					first = &StreamError{Stream: i, Op: "open", Err: err}
				}
				mu.Unlock()
				cancel()
				return
			}
			s.mu.Lock()
			s.streams[i] = st
			s.mu.Unlock()
		}()
	}
	wg.Wait()
	return first
}

func (a *Agent) openStream(ctx context.Context, s *session, rc *runtimeConfig, peer netip.AddrPort, index int, tuning streamTuning) (*stream, error) {
	d := net.Dialer{Control: tuning.control}
	c, err := d.DialContext(ctx, network(peer.Addr()), peer.String())
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", peer, err)
	}
	conn := c.(*net.TCPConn)
	// The context cancels the dial; the deadline bounds the handshake,
	// and closing the connection on cancel stops a sibling's wait early.
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var nonce stripe.Nonce
	_, _ = rand.Read(nonce[:])
	hello := stripe.Hello{
		Mode: rc.mode, Stream: uint16(index), Streams: uint16(s.n),
		ChunkSize: uint32(s.chunkSize), QueueLength: uint32(s.queueLength),
		Session: s.id, Client: s.client, Server: s.server, Nonce: nonce,
	}
	hb, err := hello.Marshal(rc.key)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	if _, err := conn.Write(hb[:]); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("send hello: %w", err)
	}
	var rb [stripe.ReplySize]byte
	if _, err := io.ReadFull(conn, rb[:]); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("read reply: %w", err)
	}
	reply, err := stripe.ParseReply(hb[:], rb[:], rc.key)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("peer %s: %w", peer, err)
	}
	if reply.Status != stripe.StatusAccepted {
		_ = conn.Close()
		return nil, fmt.Errorf("peer %s refused: %s", peer, reply.Status)
	}
	keys, err := stripe.DeriveStreamKeys(rc.key, &hello, reply.Nonce)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	codec, err := stripe.NewCodec(rc.mode, &keys, true, uint16(index), s.chunkSize)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	confirm := stripe.Confirm(hb[:], rb[:], rc.key)
	if _, err := conn.Write(confirm[:]); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("send confirm: %w", err)
	}
	// Once the cancel hook is disarmed nothing else touches the deadline.
	if !stop() {
		_ = conn.Close()
		return nil, context.Cause(ctx)
	}
	_ = conn.SetDeadline(time.Time{})
	return newStream(s, index, conn, codec), nil
}

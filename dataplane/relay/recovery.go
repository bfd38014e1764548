package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

// Replacement streams: the client side opens one for every lost stream,
// with exponential backoff per slot; the server side admits them
// (serveStream, joinRunning). See package stripe, "Lost streams".
const (
	joinBackoffMin = 50 * time.Millisecond
	joinBackoffMax = 2 * time.Second
)

// errUnknownSession is the far agent's refusal of a join: it does not
// hold the session (its process restarted), so the session cannot go on.
var errUnknownSession = errors.New(stripe.StatusUnknownSession.String())

type joinResult struct {
	index int
	err   error
}

// supervise lives as long as the session runs. At the client side it
// opens replacements for lost streams; at both it keeps the session's
// goroutine count above zero while no stream is up, so the session ends
// only by completing or aborting.
func (s *session) supervise() {
	defer s.wg.Done()
	// A complete session lingers until the peer is complete too (a FIN
	// on a stream), at most the reconnect timeout: the final ACK may have
	// been lost with a stream, and a replacement carries it again.
	var linger <-chan time.Time
	peerDone, completeCh := s.peerDone, s.completeCh
	if s.side == serverSide {
		for {
			select {
			case <-s.abortCh:
				return
			case <-peerDone:
				return
			case <-linger:
				return
			case <-completeCh:
				linger = time.After(s.reconnectTimeout)
				completeCh = nil
			}
		}
	}
	type slot struct {
		busy  bool
		fails int
		next  time.Time
	}
	slots := make([]slot, s.n)
	results := make(chan joinResult, s.n)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		wait := time.Duration(-1)
		s.mu.Lock()
		var free []int
		for i, st := range s.streams {
			if st == nil {
				free = append(free, i)
			}
		}
		s.mu.Unlock()
		for _, i := range free {
			sl := &slots[i]
			if sl.busy {
				continue
			}
			if d := sl.next.Sub(now); d > 0 {
				if wait < 0 || d < wait {
					wait = d
				}
				continue
			}
			sl.busy = true
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				results <- joinResult{i, s.rejoin(i)}
			}()
		}
		var tc <-chan time.Time
		if wait >= 0 {
			timer.Reset(wait)
			tc = timer.C
		}
		select {
		case <-s.abortCh:
			return
		case <-peerDone:
			return
		case <-linger:
			return
		case <-completeCh:
			linger = time.After(s.reconnectTimeout)
			completeCh = nil
			continue
		case <-s.lostWake:
		case <-tc:
		case r := <-results:
			sl := &slots[r.index]
			sl.busy = false
			if r.err == nil {
				sl.fails = 0
				continue
			}
			sl.next = time.Now().Add(min(joinBackoffMin<<min(sl.fails, 8), joinBackoffMax))
			sl.fails++
			s.agent.limited.log(s.agent.log, "join", "relay: replacement stream failed; retrying",
				append(s.logAttrs(), "stream", r.index, "retry_in", time.Until(sl.next).Round(time.Millisecond), "err", r.err)...)
		}
		if wait >= 0 && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// rejoin opens and authenticates a replacement for stream i and attaches
// it to the session.
func (s *session) rejoin(i int) error {
	a := s.agent
	rc := a.cfg.Load()
	ctx, cancel := context.WithTimeout(s.ctx, rc.limits.PreAuthTimeout)
	defer cancel()
	slots := a.slotsFor(s.peerAddr)
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	st, err := a.openStream(ctx, s, rc, s.peerAddr, i, rc.streamTuningFor(s.chunkSize), true)
	<-slots
	if err != nil {
		if errors.Is(err, errUnknownSession) {
			if s.isCompleted() {
				// The peer finished the session after it completed too.
				s.peerDoneOnce.Do(func() { close(s.peerDone) })
				return nil
			}
			if s.unfounded() {
				return s.refound(i, rc)
			}
			s.abort(AbortPeer, &StreamError{Stream: i, Op: "join", Err: err})
		}
		return err
	}
	if !s.attach(st, false) {
		reset(st.conn)
		return nil
	}
	return nil
}

// attach puts a replacement stream into its free slot and starts it.
// responder says the stream's JOIN took control index 0 of the peer's
// direction.
func (s *session) attach(st *stream, responder bool) bool {
	s.mu.Lock()
	if s.aborted || s.isPeerDone() || s.streams[st.index] != nil {
		s.mu.Unlock()
		return false
	}
	s.streams[st.index] = st
	s.reasm.ResetStream(st.index)
	s.live++
	s.noStreamsSince = time.Time{}
	st.running.Store(2)
	s.wg.Add(2)
	s.mu.Unlock()
	var next uint64
	if responder {
		next = 1
	}
	s.creditMu.Lock()
	s.credits.ResetStream(st.index, next)
	s.creditMu.Unlock()
	s.healthy.Add(1)
	s.streamsJoined.Add(1)
	s.agent.counters.streamsReplaced.Add(1)
	go st.writeLoop()
	go st.readLoop()
	return true
}

// sendJoin writes the JOIN frame, the first frame of a replacement stream.
func sendJoin(conn *net.TCPConn, codec *stripe.Codec, secrets *stripe.Secrets, key *[32]byte, id stripe.SessionID) error {
	var buf [stripe.HeaderSize + stripe.JoinBodySize + stripe.TagSize]byte
	proof := secrets.JoinProof(key, id)
	copy(buf[stripe.HeaderSize:], proof[:])
	frame, err := codec.Seal(buf[:], stripe.FrameJoin, stripe.ControlSeq(0), stripe.JoinBodySize)
	if err != nil {
		return err
	}
	if _, err := conn.Write(frame); err != nil {
		return fmt.Errorf("send join: %w", err)
	}
	return nil
}

// readJoin reads and checks the JOIN frame of a replacement stream for
// session s, within the handshake's deadline.
func readJoin(conn *net.TCPConn, codec *stripe.Codec, secrets *stripe.Secrets, s *session) error {
	var buf [stripe.HeaderSize + stripe.JoinBodySize + stripe.TagSize]byte
	frame := buf[:stripe.HeaderSize+stripe.JoinBodySize+codec.Overhead()]
	if _, err := io.ReadFull(conn, frame[:stripe.HeaderSize]); err != nil {
		return fmt.Errorf("reading join: %w", err)
	}
	h, err := stripe.ParseHeader(frame[:stripe.HeaderSize])
	if err != nil {
		return err
	}
	if h.Type != stripe.FrameJoin || h.Seq != stripe.ControlSeq(0) {
		return fmt.Errorf("%w: first frame of a replacement stream is %s seq %#x, want JOIN", stripe.ErrFrame, h.Type, h.Seq)
	}
	if err := codec.CheckHeader(h); err != nil {
		return err
	}
	if _, err := io.ReadFull(conn, frame[stripe.HeaderSize:]); err != nil {
		return fmt.Errorf("reading join: %w", err)
	}
	plain, err := codec.Open(h, frame[:stripe.HeaderSize], frame[stripe.HeaderSize:])
	if err != nil {
		return err
	}
	s.mu.Lock()
	key := s.sessionKey
	s.mu.Unlock()
	if err := secrets.VerifyJoin(&key, s.id, plain); err != nil {
		return fmt.Errorf("join proof: %w", err)
	}
	return nil
}

// replaceStream attaches a verified replacement at the server side. A
// stream still in the slot (the loss not noticed here yet) is lost now;
// its goroutines get the pre-auth timeout to return.
func (s *session) replaceStream(st *stream, timeout time.Duration) bool {
	s.mu.Lock()
	old := s.streams[st.index]
	s.mu.Unlock()
	if old != nil {
		old.lose(&StreamError{Stream: old.index, Op: "join", Err: errors.New("replaced by the peer's new stream")})
		select {
		case <-old.gone:
		case <-time.After(timeout):
			return false
		case <-s.abortCh:
			return false
		}
	}
	return s.attach(st, true)
}

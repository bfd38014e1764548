package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

// Replacement streams: the client side opens one for every lost stream,
// with exponential backoff per slot; the server side admits them
// (serveStream, joinRunning). See package stripe, "Lost streams".
const (
	joinBackoffMin = 50 * time.Millisecond
	joinBackoffMax = 2 * time.Second
	// streamProvenAfter is how long a stream must live to count as one
	// that worked. One that dies sooner (a path, or a far agent, that
	// resets each stream right after its handshake) counts as a failed
	// join for its slot's backoff, and does not restart the session's
	// reconnect timeout; for a warm pool it is a failed open.
	streamProvenAfter = time.Second
	// peerAbortGrace bounds how long a join refused as an unknown
	// session waits for the peer's ABORT (awaitPeerAbort).
	peerAbortGrace = 500 * time.Millisecond
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
// only by completing or aborting. It bounds the end of a complete session
// (endStreams).
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
				s.endStreams(s.stallTimeout)
				return
			case <-linger:
				s.endStreams(0)
				return
			case <-completeCh:
				linger = time.After(s.reconnectTimeout)
				completeCh = nil
			}
		}
	}
	// A slot's join that succeeded counts only once its stream has
	// lived streamProvenAfter (joined is when it attached).
	type slot struct {
		busy   bool
		fails  int
		next   time.Time
		joined time.Time
	}
	slots := make([]slot, s.n)
	results := make(chan joinResult, s.n)
	// Joins still waiting for a handshake slot when the session is done
	// need not run.
	joins, stopJoins := context.WithCancel(s.ctx)
	defer stopJoins()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		wait := time.Duration(-1)
		// The free slots below the target: lost streams, and streams
		// the session has not opened yet (those only while it is not
		// complete).
		target, complete := int(s.target.Load()), s.isCompleted()
		s.mu.Lock()
		var free []int
		for i, st := range s.streams[:target] {
			if st == nil && (s.slotUsed[i] || !complete) {
				free = append(free, i)
			}
		}
		s.mu.Unlock()
		for _, i := range free {
			sl := &slots[i]
			if sl.busy {
				continue
			}
			if !sl.joined.IsZero() {
				// The slot's last stream is gone.
				if lived := now.Sub(sl.joined); lived >= streamProvenAfter {
					sl.fails = 0
				} else {
					sl.next = now.Add(joinBackoff(sl.fails))
					sl.fails++
					s.agent.limited.log(s.agent.log, "join", "relay: replacement stream died young; retrying",
						append(s.logAttrs(), "stream", i, "lived", lived.Round(time.Millisecond), "retry_in", joinBackoff(sl.fails-1))...)
				}
				sl.joined = time.Time{}
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
				results <- joinResult{i, s.rejoin(joins, i)}
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
			s.endStreams(s.stallTimeout)
			return
		case <-linger:
			s.endStreams(0)
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
				sl.joined = time.Now()
				continue
			}
			sl.next = time.Now().Add(joinBackoff(sl.fails))
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

// joinBackoff is a slot's wait after fails failed joins in a row.
func joinBackoff(fails int) time.Duration {
	return min(joinBackoffMin<<min(fails, 8), joinBackoffMax)
}

// endStreams bounds the end of a complete session. The session ends
// once every stream's reader has seen the peer's half-close, but a stream
// that went silent (its path holds its frames: the peer's final ACK and
// FIN on it never come) has nothing outstanding once the data went on the
// others, so no stall timeout fires for it, and its reader would wait for
// ever. Once the peer is complete (or the linger is over), each stream
// still up gets grace to finish, then its reads and writes fail and it is
// closed with the session, which counts as completed: nothing of it was
// lost. No stream attaches after this (attach refuses once the peer is
// done).
func (s *session) endStreams(grace time.Duration) {
	s.peerDoneOnce.Do(func() { close(s.peerDone) })
	deadline := time.Now().Add(grace)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.endBy.IsZero() && s.endBy.Before(deadline) {
		// An earlier end stands (a drain's deadline, then the
		// supervisor waking on the peerDone that closed).
		return
	}
	s.endBy = deadline
	for _, st := range s.streams {
		if st != nil {
			_ = st.conn.SetDeadline(deadline)
		}
	}
}

// rejoin opens and authenticates stream i (a replacement, or one the
// session had not opened yet) as a JOIN and attaches it to the session.
func (s *session) rejoin(parent context.Context, i int) error {
	a := s.agent
	rc := a.cfg.Load()
	if i == 0 && s.unfounded() {
		// Stream 0 of a pooled session the far agent was never heard
		// on died: its BIND was refused (which only resets it) or lost
		// with it, or it founded the session and the stream died since.
		// A JOIN would be refused as an unknown session in the first
		// cases and a fresh hello sent then; send that fresh hello now,
		// a handshake (and the far agent's wait for a late BIND)
		// sooner. Its answer is authenticated: refused, the connection
		// goes direct; a duplicate (founded after all), stream 0 joins
		// the next time (foundedThere).
		return s.refound(0, rc)
	}
	slots := a.slotsFor(s.peerAddr)
	select {
	case slots <- struct{}{}:
	case <-parent.Done():
		return context.Cause(parent)
	}
	// The handshake's time runs from its slot: thousands of streams
	// wait their turn first.
	ctx, cancel := context.WithTimeout(parent, rc.limits.PreAuthTimeout)
	defer cancel()
	// Whether the far agent had founded the session when the hello went,
	// as far as this side knew: a refusal then may predate the founding.
	unfoundedAtHello := s.unfounded()
	st, err := a.openStream(ctx, s, rc, s.peerAddr, i, rc.streamTuningFor(s.chunkSize), true)
	<-slots
	if err != nil {
		if errors.Is(err, errUnknownSession) {
			if f := a.testJoinRefused.Load(); f != nil {
				(*f)(i)
			}
			if s.isCompleted() {
				// The peer finished the session after it completed too.
				s.peerDoneOnce.Do(func() { close(s.peerDone) })
				return nil
			}
			if s.unfounded() {
				return s.refound(i, rc)
			}
			if unfoundedAtHello {
				// Founded since the hello went (the fresh hello for
				// stream 0 was accepted, or the far agent was heard): the
				// far agent may have decided this refusal first. Try
				// again; if it lost the session, that join is refused too.
				return fmt.Errorf("stream %d: %w: decided before the far agent founded the session; trying again", i, errUnknownSession)
			}
			s.awaitPeerAbort(parent, peerAbortGrace)
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

// awaitPeerAbort waits, at most d, for the session to abort before a join
// refused as an unknown session aborts it. A far agent that aborted the
// session (its server unreachable, say) refuses the joins still in flight
// as unknown, and its ABORT, which names the real reason, comes on a
// stream that is up, on another connection than the refusal: it may come
// a moment later. Once no stream is up nothing can carry an ABORT (a far
// agent that restarted reset them all), so the wait ends there too.
func (s *session) awaitPeerAbort(parent context.Context, d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for {
		s.mu.Lock()
		live := s.live
		s.mu.Unlock()
		if live == 0 {
			return
		}
		select {
		case <-s.abortCh:
			return
		case <-parent.Done():
			return
		case <-deadline.C:
			return
		case <-poll.C:
		}
	}
}

// attach puts a replacement stream into its free slot and starts it.
// responder says the stream's JOIN took control index 0 of the peer's
// direction.
func (s *session) attach(st *stream, responder bool) bool {
	s.mu.Lock()
	if st.index < 0 || st.index >= len(s.streams) || s.aborted || s.isPeerDone() || s.streams[st.index] != nil {
		s.mu.Unlock()
		return false
	}
	s.streams[st.index] = st
	replacement := s.slotUsed[st.index]
	s.slotUsed[st.index] = true
	s.reasm.ResetStream(st.index)
	s.live++
	s.liveCount.Store(int32(s.live))
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
	if replacement {
		s.streamsJoined.Add(1)
		s.agent.counters.streamsReplaced.Add(1)
	}
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
	if st.index < 0 || st.index >= len(s.streams) {
		return false
	}
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

// Head-of-line reinjection. A frame stuck on a stream in loss recovery
// holds the peer's delivery, and so the credit of the whole session,
// until that stream's TCP has repaired the loss, while every other stream
// could carry it. The sender watches the oldest frames the peer has not
// acknowledged (the ACK is cumulative: the first of them is the one
// delivery waits for, the next ones wait behind it). A frame is taken
// back and sent again on a healthy stream, with FlagRetransmit, when
//   - its stream's TCP has not acknowledged it (it has not reached the far
//     agent: a frame the far agent's TCP holds arrives without help), and
//   - its stream is in loss recovery, the frame is overdue (all of it
//     left the socket longer ago than the stream's RTT plus holSlack; a
//     frame still queued in the socket is timed from its write) or still
//     unsent after holSlack, and the session would stall on it soon
//     (stallNear), or, on any stream, it is overdue twice over (still
//     queued: written four round trips ago).
//
// A stream in recovery repairs its loss within about a round trip, and
// while the peer's credit and the retention last the other streams go on
// sending, so a copy made then only spends the WAN on bytes that arrive
// anyway: traced at 16 stripes, 1.5-2.6 % of a session's bytes went twice.
//
// The copy that arrives second is a duplicate and is dropped after
// authentication. A frame is reinjected at most once, only the first
// holSpan unacknowledged frames are looked at, and a session reinjects at
// most a tenth of the payload it sent (plus holBudgetFrames frames); the
// frames and bytes are counted (HeadOfLineFrames, HeadOfLineBytes).
const (
	holProbeMin     = 2 * time.Millisecond
	holProbeMax     = 10 * time.Millisecond
	holSlackMin     = 40 * time.Millisecond
	holSpanMax      = 256
	holBudgetDiv    = 10
	holBudgetFrames = 16
)

// watchBlocking runs as long as the session does and looks for blocking
// frames about every sixteenth of a round trip.
func (s *session) watchBlocking() {
	defer s.wg.Done()
	t := time.NewTimer(holProbeMax)
	defer t.Stop()
	var scratch []holCandidate
	for {
		select {
		case <-t.C:
		case <-s.abortCh:
			return
		case <-s.completeCh:
			return
		}
		scratch = s.reinjectBlocking(time.Now(), scratch[:0])
		t.Reset(min(max(time.Duration(s.pathRTT.Load())/16, holProbeMin), holProbeMax))
	}
}

// sendView is what a stream's socket says of the frames given to it, in
// the stream's own byte count (stream.bytesSent).
type sendView struct {
	ok, troubled bool
	rtt          time.Duration
	acked        uint64 // the peer's TCP acknowledged every byte below
	sent         uint64 // every byte below left the socket at least once
}

func (st *stream) sendView() sendView {
	written := st.bytesSent.Load() // before the socket: see readSendQueue
	q, ok := readSendQueue(st.conn)
	if !ok {
		return sendView{}
	}
	v := sendView{ok: true, rtt: q.rtt, troubled: lossRecovery(q.caState, q.rtoRetrans),
		acked: written - min(written, uint64(q.outq)), sent: written - min(written, uint64(q.notsent))}
	if hook := st.s.agent.testTrouble; hook != nil && hook(st.index) != lossNone {
		// The hook stands for what loopback cannot show: a stream in
		// recovery, whose frames have not reached the far agent.
		v.troubled, v.acked = true, 0
	}
	return v
}

// holCandidate is a retained frame as reinjectBlocking found it under
// sendMu: on which stream, where in its bytes, and when it was written.
type holCandidate struct {
	c                *chunk
	st               *stream
	seq              uint64
	startOff, endOff uint64
	sentAt, leftAt   time.Time
}

// reinjectBlocking takes back the blocking frames (see above) and queues
// them for the healthy streams. It returns scratch for reuse.
func (s *session) reinjectBlocking(now time.Time, scratch []holCandidate) []holCandidate {
	s.sendMu.Lock()
	if len(s.resend) > 0 {
		// A writer that could take none of them did not pass the wake on.
		select {
		case s.resendWake <- struct{}{}:
		default:
		}
	}
	retained := len(s.retained)
	span := min(retained, max(2*s.n, 16), holSpanMax)
	for _, c := range s.retained[:span] {
		if c.on != nil && !c.busy && !c.hol && !c.ackedBy && c.sealed && now.Sub(c.sentAt) >= holSlackMin && !c.on.isLost() {
			scratch = append(scratch, holCandidate{c, c.on, c.seq, c.startOff, c.endOff, c.sentAt, c.leftAt})
		}
	}
	s.sendMu.Unlock()
	if len(scratch) == 0 || s.healthy.Load() <= 0 ||
		s.holBytes.Load() >= s.sentBytes.Load()/holBudgetDiv+uint64(holBudgetFrames*s.chunkSize) {
		return scratch
	}
	// One look at each stream's socket; a handful of streams at most hold
	// the oldest frames.
	type look struct {
		st *stream
		v  sendView
	}
	var looks [8]look
	seen := looks[:0]
	view := func(st *stream) (sendView, bool) {
		for _, l := range seen {
			if l.st == st {
				return l.v, true
			}
		}
		if len(seen) == cap(seen) {
			return sendView{}, false
		}
		v := st.sendView()
		seen = append(seen, look{st, v})
		return v, true
	}
	// Frames seen leaving their socket for the first time (stamped) and
	// frames to take back (picked) share scratch: picked from the front,
	// stamped from the back.
	picked, stamped := scratch[:0], len(scratch)
	near := s.stallNear(retained)
	for i := 0; i < stamped; i++ {
		c := scratch[i]
		v, ok := view(c.st)
		if !ok {
			continue
		}
		if c.leftAt.IsZero() && v.ok && c.endOff <= v.sent && c.endOff > v.acked {
			stamped--
			scratch[i], scratch[stamped] = scratch[stamped], c
			i-- // the swapped-in candidate is looked at next
			continue
		}
		if holDue(c, v, now, near) {
			picked = append(picked, c)
		}
	}
	if len(picked) == 0 && stamped == len(scratch) {
		return scratch
	}
	var frames, bytes uint64
	s.sendMu.Lock()
	for _, p := range scratch[stamped:] {
		if s.holdsLocked(p) {
			p.c.leftAt = now
		}
	}
	for _, p := range picked {
		c, st := p.c, p.st
		if !s.holdsLocked(p) || c.busy || c.hol || c.ackedBy || !c.sealed || st.isLost() {
			continue
		}
		if err := st.codec.Unseal(c.buf); err != nil {
			s.sendMu.Unlock()
			s.abort(AbortProtocol, &StreamError{Stream: st.index, Op: "unseal", Err: err})
			return scratch
		}
		c.on, c.sealed, c.resent, c.hol = nil, false, true, true
		s.resend = append(s.resend, c)
		frames++
		bytes += uint64(c.n)
	}
	if frames > 0 {
		slices.SortFunc(s.resend, func(a, b *chunk) int { return cmp.Compare(a.seq, b.seq) })
	}
	s.sendMu.Unlock()
	if frames > 0 {
		s.holFrames.Add(frames)
		s.holBytes.Add(bytes)
		s.agent.counters.holFrames.Add(frames)
		s.agent.counters.holBytes.Add(bytes)
		select {
		case s.resendWake <- struct{}{}:
		default:
		}
	}
	return scratch
}

// holDue tells whether a blocking candidate is to be taken back now (see
// above), by what its stream's socket says (v) and whether the session
// would stall on it soon (near).
//
// A frame waits in its socket behind the stream's other frames before it
// leaves: at 64 stripes of a 500 Mbit/s path a chunk of 60000 bytes takes
// about 60 ms to leave, so timing a frame from its write took a tenth of
// a 50 ms session's bytes for copies of frames that were merely queued.
// In flight is timed from leaving the socket (a frame seen to have left
// but not yet stamped has just left); still queued, from the write, with
// more patience.
func holDue(c holCandidate, v sendView, now time.Time, near bool) bool {
	if !v.ok || c.endOff <= v.acked {
		return false
	}
	age := now.Sub(c.sentAt)
	slack := max(v.rtt/8, holSlackMin)
	left, unsent := c.endOff <= v.sent, c.startOff >= v.sent
	since := age
	if left {
		since = 0
		if !c.leftAt.IsZero() {
			since = now.Sub(c.leftAt)
		}
	}
	overdue := since > v.rtt+slack
	return v.troubled && (overdue || unsent) && near ||
		left && since > 2*v.rtt+slack || !left && age > 4*v.rtt+slack
}

// holdsLocked tells whether the candidate's frame is still retained
// (an ACK may have freed it meanwhile, and its buffer may already hold
// the next chunk read from the end host: retained frames are consecutive,
// so its place tells) and on the stream, from the write, where it was
// found. The caller holds sendMu.
func (s *session) holdsLocked(p holCandidate) bool {
	c := p.c
	if len(s.retained) == 0 || p.seq < s.retained[0].seq || p.seq-s.retained[0].seq >= uint64(len(s.retained)) ||
		s.retained[p.seq-s.retained[0].seq] != c {
		return false
	}
	return c.on == p.st && c.sentAt.Equal(p.sentAt)
}

// stallNear tells whether the session runs out of room to send within
// about a round trip at its send rate: of the peer's credit, or, with its
// retention at the session's cap, of send buffers (retained frames are
// held). Without a measured rate and RTT it says yes.
func (s *session) stallNear(retained int) bool {
	rtt := time.Duration(s.pathRTT.Load())
	rate := math.Float64frombits(s.rateSent.Load())
	if rtt <= 0 || rate <= 0 {
		return true
	}
	soon := uint64(rate/8*rtt.Seconds()/float64(s.chunkSize)) + 1
	if s.creditFrames.Load() < s.dataSent.Load()+soon {
		return true
	}
	return s.retainFull.Load() && s.retainFrames.Load()-int64(retained) < int64(soon)
}

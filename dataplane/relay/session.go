package relay

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

type side uint8

const (
	clientSide side = iota
	serverSide
)

func (s side) String() string {
	if s == clientSide {
		return "client"
	}
	return "server"
}

const (
	// abortGrace is how long a stream may take to get its ABORT frame out
	// before it is reset anyway. Holding the resets back that long also
	// lets the peer find the failed stream itself (or read the ABORT)
	// before our resets hit its other streams, so both ends name the
	// stream that failed.
	abortGrace = 200 * time.Millisecond
	// pausedProbe is how often a paused reader, which reads nothing,
	// checks that its connection was not reset meanwhile.
	pausedProbe = 50 * time.Millisecond
	// Batching: a stream writer takes what is queued up to these bounds
	// and writes it with one writev; delivery to the end host likewise.
	maxWriteFrames   = 8
	maxWriteBytes    = 512 << 10
	maxDeliverFrames = 64
	// troubleProbe is how often a stream in loss recovery, which takes
	// no new chunks while a healthy stream can, checks whether it is
	// healthy again.
	troubleProbe = 5 * time.Millisecond
	// troubleRecheck is how long a writer trusts a healthy verdict before
	// it reads TCP_INFO again. Loss recovery lasts a round trip or more,
	// so a verdict this old is current on any WAN, and a stream that
	// entered recovery meanwhile takes at most a millisecond's batches
	// more (those its socket's TCP_NOTSENT_LOWAT lets through); reading
	// it for every batch cost a relay at 8 Gbit/s on loopback about 3 %
	// of its CPU (a getsockopt under the socket lock for every 256 KiB).
	troubleRecheck = time.Millisecond
	// creditFrameSize holds a sealed CREDIT frame.
	creditFrameSize = stripe.HeaderSize + stripe.CreditBodySize + stripe.TagSize
	// A stream's TCP_NOTSENT_LOWAT is what it sends in lowatTime at its
	// pacing rate, within [minLowat, maxLowat]: enough unsent data that
	// the socket does not run dry before its writer is back, and so
	// little that a chunk given to a stream leaves soon. A fixed mark
	// fits no stripe count: 1 MiB is 16 ms of a 500 Mbit/s stream but a
	// second of each of 64 streams sharing that path, and a lost segment
	// then holds a second's worth of later chunks behind it.
	lowatTime = 20 * time.Millisecond
	maxLowat  = 4 << 20
)

// The first flight: a session's first frames, one per stream, are cut to
// what the peer's receive window of a fresh or long idle stream takes in
// one round trip (Linux opens it at a few jumbo segments, 17-64 kB, and
// widens it only as data arrives). A full 60 kB chunk on such a stream
// arrives a round trip late, and with it the first byte, which the far end
// can deliver only once its whole frame opened; cut, the first chunks
// travel side by side on as many streams and all arrive after one round
// trip (a pooled session's first byte in one WAN round trip).
const (
	// defaultFirstWindow stands for the receive window when TCP_INFO does
	// not report it (kernels before 6.2): ten 1460-byte segments.
	defaultFirstWindow = 14600
	// firstFrameSlack leaves room in that window for the frame's header
	// and tag and the CREDIT and ACK frames that ride with it.
	firstFrameSlack = 4*stripe.HeaderSize + 4*stripe.TagSize + 2*stripe.CreditBodySize
	minFirstFrame   = 4096
)

// firstFrameFor sizes the first flight's frames from the smallest receive
// window the far end advertises on the session's streams.
func firstFrameFor(streams []*stream, chunkSize int) int {
	wnd := 0
	for _, st := range streams {
		if st == nil {
			continue
		}
		if info, ok := readTCPInfo(st.conn); ok && info.sndWnd > 0 && (wnd == 0 || int(info.sndWnd) < wnd) {
			wnd = int(info.sndWnd)
		}
	}
	if wnd == 0 {
		wnd = defaultFirstWindow
	}
	return min(chunkSize, max(wnd-firstFrameSlack, minFirstFrame))
}

// minLowat is the floor of a stream's TCP_NOTSENT_LOWAT: two chunks, at
// least 64 KiB.
func minLowat(chunkSize int) int { return max(2*chunkSize, 64<<10) }

// chunk is one frame buffer: header, body, room for the tag.
type chunk struct {
	buf   []byte
	n     int // plaintext body bytes
	typ   stripe.FrameType
	seq   uint64
	total uint64 // FIN: the byte count it announces

	// Send retention, guarded by session.sendMu: the stream the chunk
	// was last given to (nil while queued), whether that stream's writer
	// holds it now, whether buf holds it sealed (under on's key), whether
	// an ACK covered it while it was busy (the writer then frees it), and
	// whether it goes out again (FlagRetransmit).
	on      *stream
	busy    bool
	sealed  bool
	ackedBy bool
	resent  bool
	// Head-of-line reinjection (see watchBlocking), guarded by sendMu
	// like the fields above and written by a writer only while busy:
	// when its last write returned, when watchBlocking first saw all of
	// it leave the socket, and where it lies in that stream's bytes,
	// the streams that sealed it (none may seal it again: one key, one
	// nonce; one whose goroutines are gone leaves the list at the
	// frame's next seal), and
	// whether it was reinjected already (once at most).
	sentAt, leftAt   time.Time
	startOff, endOff uint64
	sealedOn         []*stream
	hol              bool

	slab *frameSlab // the buffer's slab (nil: Go heap); see frameMemory
}

// sealedBy reports whether st sealed the chunk before (under st's key).
func (c *chunk) sealedBy(st *stream) bool { return slices.Contains(c.sealedOn, st) }

// sealOn records that st sealed the chunk (its busy writer only). A
// stream whose goroutines are gone never seals again, so it leaves the
// list: a frame sent again over replacement after replacement (a peer's
// JOINs, or a path resetting stream after stream) names only streams that
// may still seal, not every stream it ever went on. Lost is not enough: a
// lost stream's writer may still be running.
func (c *chunk) sealOn(st *stream) {
	if c.sealedBy(st) {
		return
	}
	c.sealedOn = slices.DeleteFunc(c.sealedOn, func(x *stream) bool { return closed(x.gone) })
	c.sealedOn = append(c.sealedOn, st)
}

func (c *chunk) payload() []byte { return c.buf[stripe.HeaderSize : stripe.HeaderSize+c.n] }

type sessionParams struct {
	id        stripe.SessionID
	side      side
	whitelist string
	// peer is the agent at the other end (its handshake name).
	peer                            string
	client, server                  netip.AddrPort
	streams, chunkSize, queueLength int
	mode                            stripe.Mode
	stallTimeout                    time.Duration
	// reconnectTimeout aborts a session that has had no stream for that
	// long; peerAddr is where a client-side session opens replacements.
	reconnectTimeout time.Duration
	peerAddr         netip.AddrPort
	// autoStreams (client side): the whitelist's streams = "auto"; the
	// session starts with a few of its streams and opens more while they
	// raise its rate (autostreams.go).
	autoStreams bool
}

// session is one accelerated connection at one agent: the end-host leg and
// the N streams to the peer agent, in both directions. "send" is end host ->
// streams, "recv" is streams -> end host.
type session struct {
	agent *Agent
	sessionParams
	n       int
	started time.Time
	// firstFrame caps the payload of the first flight's frames (set by
	// start, before readHost runs).
	firstFrame int
	// fromPool: the client side bound the session's first streams from
	// its warm pool; heard: the far agent sent a frame on it; foundedThere:
	// the far agent answered a fresh hello for its stream 0 as a duplicate
	// (it founded the session). A pooled session the far agent never
	// heard from, nor said it founded, can be founded again (refound,
	// pool.go).
	fromPool     bool
	heard        atomic.Bool
	foundedThere atomic.Bool
	refoundings  int // guarded by mu

	ctx    context.Context
	cancel context.CancelFunc

	host    *net.TCPConn
	streams []*stream
	// slotUsed (guarded by mu) marks the stream slots that ever held a
	// stream: a stream joining a slot that never had one is the
	// session's own (opened after it started), not a replacement.
	slotUsed []bool
	// target is how many streams (slots 0 .. target-1) the client side
	// keeps open: all n, or with auto streams the count chosen so far;
	// auto is that choice's state, touched by housekeeping only.
	target atomic.Int32
	auto   *autoChoice

	sendPool *bufPool
	recvPool *bufPool
	sendq    chan *chunk

	// Flow control of the receive direction (guarded by mu): the window
	// in frames, its bound, the grant last announced, whether the sender
	// ran into the grant and whether delivery to the end host ran dry
	// (it waited for a frame) since the window's last growth check.
	// granted is also read without mu by the stream readers.
	window        int
	windowCap     int
	lastGrant     uint64
	windowLimited bool
	hostDrained   bool
	highest       uint64 // one past the highest DATA frame received
	// grants holds the last grants announced, with when, so the window's
	// growth check can tell the credit the sender held a round trip ago.
	grants    [grantHistory]grantAt
	grantsLen int
	// The credit's round trip (creditRTT): probeAt is when a grant went
	// to a sender that had used all it held, probeEdge that sender's old
	// grant; the first frame at or beyond it ends the sample.
	probeAt       time.Time
	probeEdge     uint64
	creditRTTs    [creditSamples]time.Duration
	creditLen     int
	creditRTT     atomic.Int64  // ns: creditRTTLocked as of the last sample
	granted       atomic.Uint64 // frames
	creditPending atomic.Uint64 // bytes: the credit the next CREDIT frame carries
	ctlWake       chan struct{}

	// Flow control of the send direction: what the peer allows.
	creditMu     sync.Mutex
	credits      *stripe.Credits
	creditFrames atomic.Uint64 // DATA frames the peer allows in all
	dataSent     atomic.Uint64 // DATA frames read from the end host
	creditWake   chan struct{}
	creditWaits  atomic.Uint64 // times the sender waited for credit
	// healthy counts the streams not in loss recovery (scheduler), of
	// liveCount, live's mirror for readers without mu.
	healthy, liveCount atomic.Int32

	// Send retention (guarded by sendMu): every frame read from the end
	// host and not yet acknowledged, in sequence order, and the frames to
	// send again after a stream was lost, in sequence order.
	sendMu     sync.Mutex
	retained   []*chunk
	resend     []*chunk
	resendWake chan struct{}
	// retainFrames is the retention the send pool allows and windowNow
	// the receive window, both in frames: their growths are decided under
	// agent.mu, so together they stay within sessionCap.
	retainFrames atomic.Int64
	windowNow    atomic.Int64
	retainFull   atomic.Bool
	sessionCap   int64
	framesQueued atomic.Uint64 // DATA and FIN frames read from the end host
	finSeq       atomic.Uint64 // our FIN's sequence, once sendFin
	finAcked     atomic.Bool   // the peer acknowledged our FIN
	// Acknowledgement of the receive direction: frames delivered, and
	// the most any ACK frame announced.
	ackPending atomic.Uint64
	ackSent    atomic.Uint64
	creditSent atomic.Uint64

	// Lost streams: the live count and since when it is zero, counted
	// from the first time it fell to zero after a stream last worked
	// (lived streamProvenAfter; streams that die young, reset on the
	// path after their handshake, do not restart the reconnect timeout),
	// whether one worked since (guarded by mu), the session key that
	// proves joins, and the supervisor's wake-up.
	live           int
	noStreamsSince time.Time
	streamWorked   bool
	lastLoss       error
	completed      bool
	completeCh     chan struct{}
	peerDone       chan struct{} // closed at the first FIN from the peer after completion
	peerDoneOnce   sync.Once
	endBy          time.Time // when endStreams has the streams end (mu)
	sessionKey     [32]byte
	lostWake       chan struct{}
	framesArrived  atomic.Uint64
	streamsLost    atomic.Uint64
	streamsJoined  atomic.Uint64
	resentFrames   atomic.Uint64
	resentBytes    atomic.Uint64
	duplicates     atomic.Uint64
	// Head-of-line reinjection: frames (and payload bytes) sent again on
	// a healthy stream while the stream carrying them was in loss
	// recovery, and when an ACK last moved (unix nanoseconds).
	holFrames   atomic.Uint64
	holBytes    atomic.Uint64
	lastAckMove atomic.Int64
	// pathRTT is the largest smoothed RTT of the streams, from
	// housekeeping (nanoseconds).
	pathRTT atomic.Int64
	// pacer caps the streams' pacing (housekeeping only); paceTotal is
	// the session's pacing rate and paceShare each stream's cap, in
	// bytes/s, 0 while none is set.
	pacer                stripePacer
	paceTotal, paceShare atomic.Uint64
	// gateWaits counts readHost's waits for the pacing rate;
	// lastGateWaits is housekeeping's last look.
	gateWaits     atomic.Uint64
	lastGateWaits uint64
	// probeSpreadDue: a start-up ran since spreadProbeRTT last scheduled
	// restarts (housekeeping only).
	probeSpreadDue bool
	// recovering is how many streams housekeeping last found in loss
	// recovery.
	recovering atomic.Int32
	// peerWindow is the largest receive window, in bytes, of this agent's
	// sessions with the same peer and side (the same path), from
	// housekeeping: a session limited by its window may grow to it.
	peerWindow atomic.Int64

	// mu guards the reassembler and the wait/wake state around it, the
	// join state, and the abort flag.
	mu          sync.Mutex
	reasm       *stripe.Reassembler[*chunk]
	hostWaiting bool
	hostWake    chan struct{}
	gapSince    time.Time
	joined      int
	aborted     bool
	depthMax    int
	// joinWaiting is, per stream slot, the replacement stream that waits
	// for the session to start (waitJoin): one per slot.
	joinWaiting map[int]*net.TCPConn

	established atomic.Bool
	abortCh     chan struct{}
	abortOnce   sync.Once
	abortKind   string
	abortErr    error
	abortedAt   time.Time
	// toDirect (guarded by mu, set with the abort): the far agent
	// refused to found this pooled session, so the end-host connection
	// is carried direct with what was read from it (abortToDirect).
	toDirect bool

	writersDone atomic.Int32
	sendFin     atomic.Bool // end host finished sending: FIN queued
	recvFin     atomic.Bool // peer's FIN delivered: end host half-closed
	// recvAcked: the ACK of the peer's FIN is pending for the writers
	// (set after recvFin; see checkComplete).
	recvAcked atomic.Bool
	// hostShut: the end host's connection is half-closed by this agent,
	// or about to be (set before the call; see endedByFin).
	hostShut atomic.Bool

	sentBytes      atomic.Uint64 // end host -> streams payload
	deliveredBytes atomic.Uint64 // streams -> end host payload
	stalls         atomic.Uint64

	// Touched by housekeeping only.
	lastProgress  time.Time
	lastSent      uint64
	lastDelivered uint64
	lastTick      time.Time
	stallCounted  time.Time
	rateSent      atomic.Uint64 // float64 bits, bit/s
	rateDelivered atomic.Uint64
	lastArrived   uint64    // frames read from the streams at the last tick
	checkArrived  uint64    // ... at the window's last growth check
	arrivalPeak   float64   // frames/s: the highest recent arrival rate, decaying
	lastGrowCheck time.Time // the window's last growth check
	wg            sync.WaitGroup
	finishOnce    sync.Once
	// unstartedOnce: an unstarted session can have two owners finishing
	// it (finishUnstarted); each stream gets one ABORT.
	unstartedOnce  sync.Once
	recvBudgetSize int64

	// Guarded by agent.mu: the source counted in agent.halfOpen while a
	// server-side session gathers streams, and the footprint reserved
	// from Limits.Memory.
	halfOpenSrc netip.Prefix
	reserved    int64
}

func newSession(a *Agent, p sessionParams, windowCap int, sessionCap int64) (*session, error) {
	window := stripe.InitialFrames(p.streams, p.chunkSize)
	if windowCap < window {
		return nil, fmt.Errorf("%w: window cap %d below the initial window %d", stripe.ErrInvalid, windowCap, window)
	}
	// One slot more than the window: the FIN may be numbered at the grant.
	reasm, err := stripe.NewReassembler[*chunk](p.streams, window+1)
	if err != nil {
		return nil, err
	}
	credits, err := stripe.NewCredits(p.streams, p.chunkSize)
	if err != nil {
		return nil, err
	}
	size := stripe.FrameBufferSize(p.chunkSize)
	n := int64(p.streams)
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{
		agent:         a,
		sessionParams: p,
		n:             p.streams,
		started:       time.Now(),
		ctx:           ctx,
		cancel:        cancel,
		streams:       make([]*stream, p.streams),
		slotUsed:      make([]bool, p.streams),
		sendPool:      newBufPool(size, stripe.SendBudget(n)),
		sessionCap:    sessionCap,
		resendWake:    make(chan struct{}, 1),
		completeCh:    make(chan struct{}),
		peerDone:      make(chan struct{}),
		lostWake:      make(chan struct{}, 1),
		recvPool:      newBufPool(size, stripe.RecvBudget(n, int64(window))),
		sendq:         make(chan *chunk, stripe.SendBudget(n)),
		reasm:         reasm,
		hostWake:      make(chan struct{}, 1),
		abortCh:       make(chan struct{}),
		window:        window,
		windowCap:     windowCap,
		lastGrant:     uint64(window),
		ctlWake:       make(chan struct{}, 1),
		credits:       credits,
		creditWake:    make(chan struct{}, 1),
	}
	s.granted.Store(uint64(window))
	s.retainFrames.Store(stripe.SendBudget(n))
	s.windowNow.Store(int64(window))
	s.creditFrames.Store(credits.Frames())
	s.healthy.Store(int32(p.streams))
	s.lastProgress, s.lastTick = s.started, s.started
	s.target.Store(int32(p.streams))
	if p.autoStreams && p.side == clientSide {
		s.target.Store(int32(min(autoFirstStreams, p.streams)))
		s.auto = &autoChoice{}
	}
	return s, nil
}

// windowCapFor is the largest receive window, in frames, a session of this
// shape may grow to under lim: what the session memory cap leaves once the
// fixed buffers are counted, at most MaxWindowFrames and, with a queue
// length, queue length x streams (never below the initial window).
func windowCapFor(streams, chunkSize, queueLength int, lim Limits) int {
	fixed := stripe.SessionMemory(streams, chunkSize, 0)
	room := lim.SessionMemory - fixed
	if room <= 0 {
		return 0
	}
	c := min(room/stripe.FrameSize(chunkSize), stripe.MaxWindowFrames)
	if queueLength > 0 {
		c = min(c, max(int64(queueLength)*int64(streams), int64(stripe.InitialFrames(streams, chunkSize))))
	}
	return int(c)
}

// grantHistory is how many announced grants a session remembers: with a
// grant every quarter window, several round trips' worth.
const grantHistory = 32

type grantAt struct {
	at    time.Time
	grant uint64 // frames
}

// grantBeforeLocked is the grant announced last at or before t: the
// credit a sender holds at t plus the credit's trip, or the initial
// window if none was announced by then.
func (s *session) grantBeforeLocked(t time.Time) uint64 {
	g := uint64(stripe.InitialFrames(s.n, s.chunkSize))
	for i := 0; i < min(s.grantsLen, grantHistory); i++ {
		e := s.grants[(s.grantsLen-1-i)%grantHistory]
		if !e.at.After(t) {
			return max(e.grant, g)
		}
	}
	if s.grantsLen > grantHistory {
		return s.grants[s.grantsLen%grantHistory].grant // older than all: a lower bound
	}
	return g
}

// grantLocked announces new credit once the grant can move by a quarter
// of the window: next undelivered frame + window.
func (s *session) grantLocked() {
	grant := s.reasm.Next() + uint64(s.window)
	if grant < s.lastGrant+uint64(max(s.window/4, 1)) {
		return
	}
	now := time.Now()
	if s.probeAt.IsZero() && s.highest >= s.lastGrant {
		s.probeAt, s.probeEdge = now, s.lastGrant
	}
	s.lastGrant = grant
	s.grants[s.grantsLen%grantHistory] = grantAt{now, grant}
	s.grantsLen++
	s.granted.Store(grant)
	s.creditPending.Store(grant * uint64(s.chunkSize))
	select {
	case s.ctlWake <- struct{}{}:
	default:
	}
}

const (
	// creditSamples is how many credit round trips creditRTT keeps.
	creditSamples = 8
	// creditQueueMost is the most of a credit round trip beyond twice the
	// path's RTT that is counted as one: the far agent's queue and its
	// streams' unsent data (lowatTime at their rate) are a few
	// milliseconds to tens of them. A longer sample is a sender whose end
	// host paused, not a round trip.
	creditQueueMost = 20 * time.Millisecond
)

// noteFrameLocked ends a credit round trip sample when a DATA frame at or
// beyond the probe's edge arrives at now.
func (s *session) noteFrameLocked(seq uint64, now time.Time) {
	if s.probeAt.IsZero() || seq < s.probeEdge {
		return
	}
	if d := now.Sub(s.probeAt); d <= 2*time.Duration(s.pathRTT.Load())+creditQueueMost {
		s.creditRTTs[s.creditLen%creditSamples] = d
		s.creditLen++
		s.creditRTT.Store(int64(s.creditRTTLocked()))
	}
	s.probeAt = time.Time{}
}

// creditRTTLocked is the median of the last credit round trips, or zero
// before the first: the time from a grant to a sender that had run out
// of credit until the first frame it allowed arrived. It is the round
// trip the credit makes, through the far agent's queue to its streams,
// their sockets, this agent's readers and the grant's own CREDIT frame,
// which on a short path is several of the streams' TCP round trips (on
// loopback, two machines' worth of goroutines on two cores: a median of
// 2 ms against a smoothed TCP RTT of 1 ms). Linux times its receive
// window the same way, from an advertised window to the data at its edge
// (tcp_rcv_rtt_measure). The median, not the least: the window is to
// cover the round trips credit takes, not the best of them.
func (s *session) creditRTTLocked() time.Duration {
	n := min(s.creditLen, creditSamples)
	if n == 0 {
		return 0
	}
	var v [creditSamples]time.Duration
	copy(v[:], s.creditRTTs[:n])
	slices.Sort(v[:n])
	return v[n/2]
}

// Receive window autotuning. The window grows while it is what limits
// the session: the sender used its credit, and delivery to the end host
// ran dry meanwhile (the end host took everything it was given, so it is
// not what holds the session back), checked at most once per round trip:
// the longer of the streams' smoothed RTT and the credit's own
// (creditRTTLocked), looked at every growthCheck.
// The receiver sees the sender use its credit in three ways: a frame at
// the grant arrives (the grant stood still, as it does while a loss holds
// delivery back); the frames received reach the grant announced a round
// trip before (a sender holds the credit announced half a round trip ago,
// and what it sends arrives half a round trip later); or at least half a
// window of frames arrived within a round trip (Linux autotunes a receive
// buffer on that evidence). Checking only for a frame at the current
// grant misses a sender waiting for credit: the grant moved on while the
// credit that stopped the sender was on its way.
// Each growth at most doubles the window and never takes it beyond
// growthRTTs x the highest recent arrival rate x the largest smoothed RTT
// of the streams, which is what the path carries plus room for the frames
// a loss holds back in the reorder window while it is repaired, plus what
// the sender's streams hold unsent (windowBound).
//
// A delivery rate is no measure of that: a lost frame stops delivery for
// a round trip or more, so the rate falls exactly when the sender runs
// into the grant, and a window sized from it settles far below the path
// (at 200 ms and 0.1 % loss, 140 frames of 60000 bytes for a 500 Mbit/s
// path). The arrival rate counts frames as the streams bring them, in any
// order, so it reaches the path's rate whenever the window lets it.
const (
	// growthCheck is how often housekeeping looks at the windows; each
	// check waits for a round trip's evidence, so on a long path this is
	// once a round trip, and on a short one a window that limits a
	// session from its start grows within milliseconds, not at the next
	// 250 ms tick.
	growthCheck = 10 * time.Millisecond
	// growthCheckSessions is the most sessions an agent looks at every
	// growthCheck; with more, every tick only (the walk is under the
	// agent's lock).
	growthCheckSessions = 1024
	growthRTTs          = 4
	// arrivalDecay is what the arrival rate's peak keeps per housekeeping
	// tick (a half-life of about 3.5 s at 250 ms).
	arrivalDecay = 0.95
	// The peak is one tick's rate, bursts included. A burst (a repaired
	// stream delivering a round trip of its frames at once) inflates it
	// and 64-stream windows overshoot (2,711 and 3,026 frames, 163 and
	// 182 MB, on the lab's 500 Mbit/s path); but a session limited by its
	// window arrives in bursts too, so smoothing the rate (the mean over a
	// second, the median of three ticks: both tried in the lab) kept those
	// windows at 530-1,030 frames, the sender always waiting for credit
	// and the session at 230-290 Mbit/s instead of about 400.
)

// windowBound is the most, in frames, a window grows to by the path: the
// growthRTTs round trips (rtt) at the arrival rate's peak (frames/s), plus
// what the sender's streams hold unsent in their sockets (at least
// minLowat each: the receiver does not see their marks), which the credit
// covers as well as what is in flight and held in the reorder window; or
// the largest window among sessions sharing the path (peerWindow, bytes).
//
// Without the unsent part a path whose round trip is short beside the
// streams' queues stayed window-limited. In the lab (64 stripes of 60000
// bytes, 500 Mbit/s, 50 ms: 7.7 MB unsent at the floor beside a 3.1 MB
// bandwidth-delay product) windows stopped at 23-45 MB, and the sender
// went on waiting for credit about eight times a second; with it they grew
// to 49-70 MB and the waits, over three 18 s transfers each, fell from
// 161-194 to 55-117.
func windowBound(peak float64, rtt time.Duration, streams, chunkSize int, peerWindow int64) float64 {
	unsent := float64(streams) * float64(minLowat(chunkSize)) / float64(chunkSize)
	return max(growthRTTs*peak*rtt.Seconds()+unsent, float64(peerWindow/int64(chunkSize)))
}

// noteArrivals updates the arrival rate's decaying peak; housekeeping only.
func (s *session) noteArrivals(dt float64) {
	arrived := s.framesArrived.Load()
	rate := float64(arrived-s.lastArrived) / dt
	s.lastArrived = arrived
	s.arrivalPeak = max(rate, s.arrivalPeak*arrivalDecay)
}

// growTick checks the receive window's growth; housekeeping runs it every
// growthCheck and at every tick. growWindow waits for a round trip since
// its last check, so most calls end after a few loads.
func (s *session) growTick(now time.Time) {
	if s.established.Load() {
		s.growWindow(now, max(time.Duration(s.pathRTT.Load()), time.Duration(s.creditRTT.Load())))
	}
}

// growWindow is the receive window's autotuning, from housekeeping; rtt
// is the longer of the largest smoothed RTT of the streams at the last
// tick and the credit's round trip. Until either is known (the first
// tick's srtt, the first credit sample) the window stays: a check every
// growthCheck would otherwise double it that often.
func (s *session) growWindow(now time.Time, rtt time.Duration) {
	if s.recvFin.Load() {
		return
	}
	arrived := s.framesArrived.Load()
	if s.lastGrowCheck.IsZero() {
		s.lastGrowCheck, s.checkArrived = now, arrived
		return
	}
	elapsed := now.Sub(s.lastGrowCheck)
	if rtt <= 0 || elapsed < rtt {
		return // gather a round trip's worth of evidence first
	}
	rate := float64(arrived-s.checkArrived) / elapsed.Seconds()
	turnover := rate * rtt.Seconds()
	s.lastGrowCheck, s.checkArrived = now, arrived
	s.mu.Lock()
	// A sender still at the grant, or a delivery still waiting, counts
	// as well as one that got there since the last check.
	limited := s.windowLimited || s.highest >= s.granted.Load() ||
		s.highest >= s.grantBeforeLocked(now.Add(-rtt*5/4))
	drained := s.hostDrained || s.hostWaiting
	window, capacity := s.window, s.windowCap
	s.windowLimited, s.hostDrained = false, false
	s.mu.Unlock()
	limited = limited || 2*turnover >= float64(window)
	if !limited || !drained || window >= capacity {
		return
	}
	// Sessions sharing the path may grow to the largest window among them
	// whatever their own arrival rate: the rate a session gets is bounded
	// by its window, so a session that started later (or lost more) would
	// otherwise stay below the one that grew first, for ever (the window
	// never shrinks). Four lab sessions of 16 stripes held windows of
	// 101, 250, 314 and 1,390 frames and got 30 to 78 Mbit/s each.
	// The tick's peak once there is one: a round trip's rate includes
	// bursts a quarter second's smooths (see arrivalDecay); before it,
	// this check's own.
	peak := s.arrivalPeak
	if peak == 0 {
		peak = rate
	}
	bound := windowBound(peak, rtt, s.n, s.chunkSize, s.peerWindow.Load())
	if bound <= float64(window) {
		return
	}
	next := min(2*window, int(min(bound, float64(stripe.MaxWindowFrames))), capacity)
	a := s.agent
	delta := stripe.SessionFootprint(s.n, s.chunkSize, next) - stripe.SessionFootprint(s.n, s.chunkSize, window)
	a.mu.Lock()
	// The retention beyond its base shares the session cap.
	extra := stripe.RetainFootprint(s.chunkSize, int(s.retainFrames.Load()-stripe.SendBudget(int64(s.n))))
	ok := s.reserved > 0 && stripe.SessionMemory(s.n, s.chunkSize, next)+extra <= s.sessionCap &&
		a.reserveMemory(delta, a.cfg.Load().limits.Memory)
	if ok {
		s.reserved += delta
		s.windowNow.Store(int64(next))
	}
	a.mu.Unlock()
	if !ok {
		return
	}
	s.mu.Lock()
	err := s.reasm.Grow(next+1, s.wakeStream)
	if err == nil {
		s.window = next
		s.recvPool.grow(stripe.RecvBudget(int64(s.n), int64(next)))
		s.grantLocked()
	}
	s.mu.Unlock()
	if err != nil {
		s.abort(AbortProtocol, err)
	}
}

// joinable says whether a hello fits this (server-side) session.
func (s *session) joinable(h *stripe.Hello) stripe.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	if int(h.Streams) != s.n || int(h.ChunkSize) != s.chunkSize || int(h.QueueLength) != s.queueLength ||
		h.Mode != s.mode || h.Client != s.client || h.Server != s.server || h.Initiator != s.peer {
		return stripe.StatusSessionMismatch
	}
	if h.Join {
		// A replacement joins a running session only; its JOIN frame
		// must still prove the session key.
		// A session still connecting to its server (all its streams in,
		// or bound from a pool) takes it once it starts (waitEstablished).
		if s.aborted || s.isPeerDone() || !s.established.Load() && s.joined < s.n {
			return stripe.StatusUnknownSession
		}
		return stripe.StatusAccepted
	}
	// A fresh stream attaches only while the session gathers: once its
	// stream 0 is in, the others must JOIN.
	if s.aborted || s.established.Load() || s.joined >= s.n || s.streams[h.Stream] != nil {
		return stripe.StatusDuplicateStream
	}
	return stripe.StatusAccepted
}

// waitEstablished waits, at most timeout, for the session to start; false
// if it did not (it aborted, or it is still connecting).
func (s *session) waitEstablished(timeout time.Duration) bool {
	return s.waitStarted(timeout, nil)
}

// waitStarted is waitEstablished that also gives up once still (when not
// nil) says no.
func (s *session) waitStarted(timeout time.Duration, still func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !s.established.Load() {
		if s.isAborted() || time.Now().After(deadline) || still != nil && !still() {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// waitJoin is waitEstablished for a replacement stream c of slot i that
// came while the session is still connecting to its server: c holds the
// slot's one place to wait, and a later one for the slot takes it, with
// c reset (the peer's later JOIN is the one it counts on). So a key
// holder's JOINs meanwhile hold at most one socket and goroutine per
// slot, not one per JOIN (review, helper-106). It says whether the
// session started, and whether c was displaced (and reset).
func (s *session) waitJoin(i int, c *net.TCPConn, timeout time.Duration) (started, displaced bool) {
	s.mu.Lock()
	if s.joinWaiting == nil {
		s.joinWaiting = map[int]*net.TCPConn{}
	}
	if old := s.joinWaiting[i]; old != nil {
		reset(old)
	}
	s.joinWaiting[i] = c
	s.mu.Unlock()
	holds := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.joinWaiting[i] == c
	}
	s.waitStarted(timeout, holds)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.joinWaiting[i] != c {
		return false, true
	}
	delete(s.joinWaiting, i)
	return s.established.Load() && !s.aborted, false
}

// start runs the relay goroutines of a session whose streams and end-host
// connection are all in place.
func (s *session) start() {
	s.mu.Lock()
	if s.aborted {
		s.mu.Unlock()
		s.finishUnstarted()
		return
	}
	s.established.Store(true)
	// Until the session ends gracefully, its end-host connection closes
	// with a reset: if this process dies, the kernel resets the end host
	// instead of sending a FIN it would take for a complete transfer.
	_ = s.host.SetLinger(0)
	// A session bound from a warm pool may start with streams missing;
	// they join as replacements.
	live := 0
	for i, st := range s.streams {
		if st != nil {
			live++
			s.slotUsed[i] = true
		}
	}
	s.live = live
	s.liveCount.Store(int32(live))
	s.healthy.Store(int32(live))
	// Once established, a replacement may attach (and start itself)
	// at any moment: start the streams present now.
	streams := append([]*stream(nil), s.streams...)
	s.mu.Unlock()
	s.firstFrame = firstFrameFor(streams, s.chunkSize)
	a := s.agent
	a.log.Debug("relay: session established", s.logAttrs()...)
	s.wg.Add(4 + 2*live)
	go s.readHost()
	go s.writeHost()
	go s.supervise()
	go s.watchBlocking()
	for _, st := range streams {
		if st == nil {
			continue
		}
		st.running.Store(2)
		go st.writeLoop()
		go st.readLoop()
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		s.wg.Wait()
		s.finish()
	}()
}

func (s *session) logAttrs() []any {
	return []any{"session", s.id, "side", s.side, "whitelist", s.whitelist,
		"client", s.client, "server", s.server, "streams", s.n}
}

// abort fails the session once: it records why, resets the end-host
// connection, tells every goroutine to stop, and bounds how long the
// streams may take to send ABORT. It reports whether this call aborted.
func (s *session) abort(kind string, err error) bool {
	return s.end(kind, err, false)
}

// end is abort; toDirect leaves the end-host connection open for the
// direct path instead of resetting it (abortToDirect).
func (s *session) end(kind string, err error, toDirect bool) bool {
	did := false
	s.abortOnce.Do(func() {
		did = true
		s.mu.Lock()
		s.aborted, s.toDirect = true, toDirect
		s.abortKind, s.abortErr, s.abortedAt = kind, err, time.Now()
		host := s.host
		streams := append([]*stream(nil), s.streams...)
		s.mu.Unlock()
		close(s.abortCh)
		s.cancel()
		if toDirect {
			// readHost returns at its next read, keeping what it read.
			_ = host.SetReadDeadline(time.Unix(1, 0))
		} else {
			reset(host)
		}
		now := time.Now()
		for _, st := range streams {
			if st != nil {
				_ = st.conn.SetReadDeadline(now)
				_ = st.conn.SetWriteDeadline(now.Add(abortGrace))
			}
		}
	})
	return did
}

// closed reports whether ch, a channel that is only ever closed, is.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (s *session) isAborted() bool { return closed(s.abortCh) }

// abortedFor reports whether the session aborted for reason kind.
func (s *session) abortedFor(kind string) bool {
	if !s.isAborted() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.abortKind == kind
}

// finish closes a session whose goroutines have all returned: gracefully
// if it completed, with resets if it aborted.
func (s *session) finish() {
	s.finishOnce.Do(func() {
		if s.isAborted() {
			s.mu.Lock()
			toDirect := s.toDirect
			s.mu.Unlock()
			if !toDirect || !s.handOverDirect() {
				reset(s.host)
			}
			if wait := abortGrace - time.Since(s.abortedAt); wait > 0 {
				time.Sleep(wait)
			}
			for _, st := range s.streams {
				if st != nil {
					reset(st.conn)
				}
			}
		} else {
			for _, st := range s.streams {
				if st != nil {
					_ = st.conn.Close()
				}
			}
			_ = s.host.SetLinger(-1) // the orderly close start turned off
			_ = s.host.Close()
		}
		s.mu.Lock()
		s.reasm.Drain(s.recvPool.put)
		s.mu.Unlock()
		s.returnRetained()
		s.cancel()
		s.agent.sessionEnded(s)
		s.sendPool.release()
		s.recvPool.release()
	})
}

// returnRetained puts back the frames a session still holds to send
// (queued, waiting to go again, or sent and not acknowledged) once its
// goroutines are gone, instead of leaving them to the garbage collector:
// the agent's memory cap stops counting them now, and a collector that
// sees 200 bytes of chunk for every 128 KiB buffer outside its heap
// would not hurry. Every frame not acknowledged is retained; one the ACK
// freed while it was queued is not, and goes back from its queue.
func (s *session) returnRetained() {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	for _, c := range s.retained {
		s.sendPool.put(c)
	}
	s.retained = nil
	for _, c := range s.resend {
		if c.ackedBy {
			s.sendPool.put(c)
		}
	}
	s.resend = nil
	for {
		select {
		case c, ok := <-s.sendq:
			if !ok {
				return
			}
			if c.ackedBy {
				s.sendPool.put(c)
			}
		default:
			return
		}
	}
}

// abortUnestablished aborts a session whose relay goroutines have not
// started. A server-side session still gathering streams has no other
// owner, so it is finished here; otherwise the goroutine setting the
// session up (dialing streams or the server) sees the abort and finishes it.
// It reports whether this call aborted.
func (s *session) abortUnestablished(kind string, err error) bool {
	s.mu.Lock()
	gathering := s.side == serverSide && s.joined < s.n
	s.mu.Unlock()
	if !s.abort(kind, err) {
		return false
	}
	if gathering {
		s.agent.wg.Add(1)
		go func() {
			defer s.agent.wg.Done()
			s.finishUnstarted()
		}()
	}
	return true
}

// finishUnstarted ends an aborted session that never ran its relay
// goroutines: tell the peer why on every stream that is up, then reset.
// Both the abort of a gathering session (abortUnestablished) and
// connectServer, when the session's last stream joined meanwhile, call
// it; the first call does it.
func (s *session) finishUnstarted() {
	if s.established.Load() {
		// start won the race with abort: the relay goroutines see the
		// abort and their runner finishes the session.
		return
	}
	s.unstartedOnce.Do(s.abortUnstarted)
}

// abortUnstarted is finishUnstarted's work, done once.
func (s *session) abortUnstarted() {
	s.mu.Lock()
	streams := append([]*stream(nil), s.streams...)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, st := range streams {
		if st == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.sendAbort()
		}()
	}
	wg.Wait()
	s.finish()
}

// readHost reads the end host and queues chunks for the stream writers;
// end of input becomes the FIN. Every chunk is retained until the peer
// acknowledges it. A paced session reads at no more than its pacing rate
// (see "Reads held to the rate" in pacing.go).
func (s *session) readHost() {
	defer s.wg.Done()
	var seq, total uint64
	var gate paceGate
	defer gate.stop()
	for {
		if s.isAborted() {
			// Not another read: what an aborted session has not read
			// stays in the socket for the direct path (abortToDirect).
			return
		}
		if !gate.wait(s.paceTotal.Load(), &s.gateWaits, s.abortCh) {
			return
		}
		for seq >= s.creditFrames.Load() {
			s.creditWaits.Add(1)
			select {
			case <-s.creditWake:
			case <-s.abortCh:
				return
			}
		}
		c, ok := s.getSendBuf()
		if !ok {
			return
		}
		size, first := s.chunkSize, total < uint64(s.n)*uint64(s.firstFrame)
		if first {
			size = s.firstFrame
		}
		buf := c.buf[stripe.HeaderSize : stripe.HeaderSize+size]
		n, err := s.host.Read(buf)
		if first && seq > 0 && err == nil && n < size {
			n, err = s.topUp(buf, n)
		}
		if n > 0 {
			gate.spend(n)
			c.typ, c.n, c.seq = stripe.FrameData, n, seq
			seq++
			s.retain(c)
			s.dataSent.Store(seq)
			s.framesQueued.Store(seq)
			total += uint64(n)
			s.sentBytes.Add(uint64(n))
			s.agent.counters.addSent(s.side, uint64(n))
			select {
			case s.sendq <- c:
			case <-s.abortCh:
				return
			}
		} else {
			s.sendPool.put(c)
		}
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) && !endedByFin(s.host, &s.hostShut) {
			// The end host reset, and a write to it took the error: its
			// sending was cut short, not finished.
			err = fmt.Errorf("end of file without a FIN: %w", syscall.ECONNRESET)
		}
		if errors.Is(err, io.EOF) {
			fin, ok := s.getSendBuf()
			if !ok {
				return
			}
			fin.typ, fin.n, fin.seq = stripe.FrameFin, stripe.FinBodySize, seq
			stripe.PutFinBody(fin.buf[stripe.HeaderSize:], total)
			s.retain(fin)
			s.finSeq.Store(seq)
			s.framesQueued.Store(seq + 1)
			s.sendFin.Store(true)
			select {
			case s.sendq <- fin:
			case <-s.abortCh:
				return
			}
			close(s.sendq)
			return
		}
		if !s.isAborted() {
			s.abort(AbortEndpoint, fmt.Errorf("%s read: %w", s.hostName(), err))
		}
		return
	}
}

// topUp fills a first-flight frame after the first (which leaves at once,
// for the first byte) with what the end host sends within coalesceWait:
// a frame takes one chunk of the peer's credit however little it holds,
// and an end host's burst arrives a segment per read, so frames sent as
// read would spend the first round trip's credit on a fraction of what
// the streams could carry.
func (s *session) topUp(buf []byte, n int) (int, error) {
	_ = s.host.SetReadDeadline(time.Now().Add(coalesceWait))
	defer s.host.SetReadDeadline(time.Time{})
	for n < len(buf) {
		m, err := s.host.Read(buf[n:])
		n += m
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// coalesceWait bounds how long a first-flight frame waits to fill.
const coalesceWait = time.Millisecond

// getSendBuf takes a frame buffer for the next chunk. When the pool is
// used up it first widens the retention (reserving it from the agent's
// memory cap), up to the session's cap; beyond that it waits for ACKs to
// free buffers.
func (s *session) getSendBuf() (*chunk, bool) {
	if c, ok := s.sendPool.tryGet(); ok {
		return c, true
	}
	s.growRetention()
	return s.sendPool.get(s.abortCh)
}

func (s *session) growRetention() {
	if s.retainFull.Load() {
		return // at the session cap; a wider window only narrows it
	}
	a := s.agent
	base := stripe.SendBudget(int64(s.n))
	a.mu.Lock()
	cur := s.retainFrames.Load()
	// What the session cap leaves beside the receive window.
	room := s.sessionCap - stripe.SessionMemory(s.n, s.chunkSize, int(s.windowNow.Load()))
	most := base + room/(stripe.FrameSize(s.chunkSize)+16)
	next := min(2*cur, most, stripe.MaxWindowFrames)
	if next <= cur {
		s.retainFull.Store(true)
	}
	ok := next > cur && s.reserved > 0
	if ok {
		delta := stripe.RetainFootprint(s.chunkSize, int(next-cur))
		if ok = a.reserveMemory(delta, a.cfg.Load().limits.Memory); ok {
			s.reserved += delta
			s.retainFrames.Store(next)
		}
	}
	a.mu.Unlock()
	if ok {
		s.sendPool.grow(next)
	}
}

// retain records a chunk read from the end host (readHost only, in
// sequence order).
func (s *session) retain(c *chunk) {
	c.on, c.busy, c.sealed, c.ackedBy, c.resent = nil, false, false, false, false
	sealed := c.sealedOn[:cap(c.sealedOn)]
	clear(sealed) // no stale stream stays reachable from a reused frame
	c.sentAt, c.leftAt, c.startOff, c.endOff, c.sealedOn, c.hol = time.Time{}, time.Time{}, 0, 0, sealed[:0], false
	s.sendMu.Lock()
	s.retained = append(s.retained, c)
	s.sendMu.Unlock()
}

// acknowledged frees the retained frames below acked (an ACK arrived).
// A frame a writer holds right now is freed by that writer.
func (s *session) acknowledged(acked uint64) {
	s.sendMu.Lock()
	k := 0
	for k < len(s.retained) && s.retained[k].seq < acked {
		c := s.retained[k]
		s.retained[k] = nil
		if c.busy || c.on == nil {
			// A writer holds it, or it waits in a queue (sendq, resend):
			// whoever meets it next frees it.
			c.ackedBy = true
		} else {
			s.sendPool.put(c)
		}
		k++
	}
	if k > 0 {
		s.retained = s.retained[k:]
		if len(s.retained) == 0 {
			s.retained = s.retained[:0:0]
		}
		s.lastAckMove.Store(time.Now().UnixNano())
	}
	s.sendMu.Unlock()
	if s.sendFin.Load() && acked > s.finSeq.Load() && !s.finAcked.Swap(true) {
		s.checkComplete()
	}
}

// checkComplete marks the session complete once both directions are
// finished: our FIN acknowledged, the peer's FIN delivered and its ACK
// pending. Writers then send their final ACK and half-close. Delivered
// alone is not enough: our FIN's ACK may complete the session, from a
// reader, between the two, and the writers would half-close every
// stream without the ACK of the peer's FIN, leaving the peer's session
// unfinished and each of its streams with a FIN it takes for the end of
// this agent's process (it aborted so once, in a loaded test run).
func (s *session) checkComplete() {
	if !s.finAcked.Load() || !s.recvAcked.Load() {
		return
	}
	s.mu.Lock()
	if !s.completed {
		s.completed = true
		close(s.completeCh)
	}
	s.mu.Unlock()
}

// writeHost delivers reassembled chunks to the end host in order, in
// batches, and half-closes toward it after the FIN. It acknowledges what
// it delivered (see package stripe, ACK).
func (s *session) writeHost() {
	defer s.wg.Done()
	batch := make([]*chunk, 0, maxDeliverFrames)
	iov := make([][]byte, 0, maxDeliverFrames)
	var bufs net.Buffers
	var delivered uint64
	var lastIdleAck time.Time
	var ackTimer *time.Timer
	defer func() {
		if ackTimer != nil {
			ackTimer.Stop()
		}
	}()
	for {
		batch, iov = batch[:0], iov[:0]
		fin := false
		s.mu.Lock()
		for i := 0; i < maxDeliverFrames && !fin; i++ {
			c, isFin, ok := s.reasm.Ready(i)
			if !ok {
				break
			}
			batch = append(batch, c)
			fin = isFin
		}
		if len(batch) == 0 {
			s.hostWaiting = true
			s.hostDrained = true
			s.mu.Unlock()
			var retry <-chan time.Time
			if s.ackPending.Load() > s.ackSent.Load() {
				// Delivery ran dry with frames not acknowledged: a
				// sender with little retention may wait for them.
				if now := time.Now(); now.Sub(lastIdleAck) >= idleAckSpacing {
					lastIdleAck = now
					s.wakeControl()
				} else {
					if ackTimer == nil {
						ackTimer = time.NewTimer(idleAckSpacing)
					} else {
						ackTimer.Reset(idleAckSpacing)
					}
					retry = ackTimer.C
				}
			}
			select {
			case <-s.hostWake:
				continue
			case <-retry:
				continue
			case <-s.abortCh:
				return
			}
		}
		s.mu.Unlock()

		var bytes uint64
		for _, c := range batch {
			if c.typ == stripe.FrameData {
				iov = append(iov, c.payload())
				bytes += uint64(c.n)
			}
		}
		var err error
		switch len(iov) {
		case 0:
		case 1:
			_, err = s.host.Write(iov[0])
		default:
			bufs = iov
			_, err = bufs.WriteTo(s.host)
		}
		if err != nil {
			if !s.isAborted() {
				s.abort(AbortEndpoint, fmt.Errorf("%s write: %w", s.hostName(), err))
			}
			return
		}
		delivered += bytes
		s.deliveredBytes.Add(bytes)
		s.agent.counters.addDelivered(s.side, bytes)
		if fin {
			if want := batch[len(batch)-1].total; want != delivered {
				s.abort(AbortProtocol, fmt.Errorf("peer's FIN announces %d bytes, %d were delivered", want, delivered))
				return
			}
			s.hostShut.Store(true)
			if err := s.host.CloseWrite(); err != nil {
				s.abort(AbortEndpoint, fmt.Errorf("%s half-close: %w", s.hostName(), err))
				return
			}
		}
		// Return the buffers before Advance frees their window slots:
		// otherwise readers could refill the window while these are still
		// out, and the receive budget (window + 2 x streams) would not
		// hold. Nothing reads a delivered chunk again; Advance only clears
		// the slots that still point at it.
		for _, c := range batch {
			s.recvPool.put(c)
		}
		s.mu.Lock()
		err = s.reasm.Advance(len(batch), s.wakeStream)
		if err == nil {
			err = s.updateGapLocked()
		}
		next := s.reasm.Next()
		ackStep := uint64(min(max(s.window/8, 1), maxAckStep))
		if !fin {
			s.grantLocked()
		}
		s.mu.Unlock()
		if err != nil {
			s.abort(AbortProtocol, err)
			return
		}
		if fin {
			// Before the ACK of the FIN can go out: once the peer has it,
			// the peer may complete and half-close, and its FIN must find
			// this direction finished here.
			s.recvFin.Store(true)
		}
		s.ackPending.Store(next)
		if fin {
			s.recvAcked.Store(true)
		}
		if fin || next-s.ackSent.Load() >= ackStep {
			s.wakeControl()
		}
		if fin {
			s.checkComplete()
			return
		}
	}
}

// finSettle bounds how long a stream's reader that met the peer's
// half-close waits for this side's completion once the peer's FIN is
// delivered (only two stores in writeHost stand between them).
const finSettle = time.Second

// idleAckSpacing is the least time between two ACKs sent because delivery
// ran dry. A WAN-bound transfer runs dry between nearly every pair of
// frames; an ACK each time would be a packet per frame on the reverse
// path, and a sender waiting on its retention loses at most this long.
const idleAckSpacing = 10 * time.Millisecond

// maxAckStep bounds how many frames delivery may move before it wakes a
// writer for an ACK: the sender judges a frame overdue by how long it
// stays unacknowledged (watchBlocking), so ACKs must not lag delivery by
// much more than the idle spacing. 16 frames of 60000 bytes are 15 ms of
// a 500 Mbit/s session.
const maxAckStep = 16

// wakeControl asks a writer to send control frames (CREDIT, ACK).
func (s *session) wakeControl() {
	select {
	case s.ctlWake <- struct{}{}:
	default:
	}
}

func (s *session) hostName() string {
	if s.side == clientSide {
		return "client " + s.client.String()
	}
	return "server " + s.server.String()
}

// wakeStream is called under mu for a stream the window reopened.
func (s *session) wakeStream(i int) {
	st := s.streams[i]
	if st != nil && st.paused {
		st.paused = false
		select {
		case st.wake <- struct{}{}:
		default:
		}
	}
}

// updateGapLocked tracks since when delivery has waited for a missing frame
// while later frames are held: the stall clock. The missing frame may
// still come on any stream (a retransmission), so a gap is never an error
// by itself; housekeeping acts on it after the stall timeout.
func (s *session) updateGapLocked() error {
	depth := s.reasm.Depth()
	if depth > s.depthMax {
		s.depthMax = depth
	}
	if _, _, ready := s.reasm.Ready(0); ready || depth == 0 {
		s.gapSince = time.Time{}
		return nil
	}
	if s.gapSince.IsZero() {
		s.gapSince = time.Now()
	}
	return nil
}

// deafStream is a stream whose TCP's timer has gone unanswered, while it
// held data for the peer, for longer than the stall timeout, and why.
type deafStream struct {
	st  *stream
	err error
}

// silenceError says why a stream whose TCP_INFO is info, unanswered for
// silence, is taken for lost.
func silenceError(info tcpInfo, silence time.Duration) error {
	what := fmt.Sprintf("%d segments unacknowledged", info.unacked)
	if info.unacked == 0 {
		what = fmt.Sprintf("%d bytes unsent behind a closed window, its probes unanswered,", info.notsent)
	}
	return fmt.Errorf("silent: %s and no ACK for %s (the path went silent)", what, silence.Round(time.Millisecond))
}

// unanswered is how long TCP's own timer has gone unanswered on the
// stream while it held data for the peer (sent and unacknowledged, or
// unsent behind a window the peer closed), as housekeeping sees it at its
// ticks: from the first tick that found the timer outstanding, and no
// longer than since the last ACK arrived. The timer is outstanding after
// a retransmission timeout (or in the Loss state, which a peer that
// shrank its window causes without counting one) until an ACK comes, or
// once two zero-window probes in a row went unanswered: a live peer
// answers every probe within a round trip, and one lost probe is not a
// dead path (the next comes only after a doubled gap, up to two minutes).
// Any tick that finds no timer outstanding starts the count again.
//
// A path that went silent (a NAT or firewall that lost its state, a
// link that drops everything) is found here and nowhere else when every
// stream of a session is on it: the receiver sees no gap (nothing
// arrives at all), keepalive never probes a connection with data
// waiting, and TCP itself gives up only after tcp_retries2 (some 15
// minutes, longer for zero-window probes). A slow end host or a stopped
// peer agent is not mistaken for it: its kernel answers the probes of the
// window it keeps closed. TCP_USER_TIMEOUT is not used for that reason
// (see streamTuning.apply). Housekeeping only.
func (st *stream) unanswered(now time.Time, info tcpInfo, ok bool) time.Duration {
	waiting := ok && (info.unacked > 0 || info.notsent > 0)
	timer := info.rtoRetrans > 0 || info.caState == tcpCALoss || info.probes >= 2
	if !waiting || !timer {
		st.timerSince = time.Time{}
		return 0
	}
	if st.timerSince.IsZero() {
		st.timerSince = now
	}
	return min(now.Sub(st.timerSince), info.lastAckRecv)
}

// tick enforces the timeouts and updates throughput; called by the agent's
// housekeeping goroutine only.
func (s *session) tick(now time.Time, lim Limits) {
	sent, delivered := s.sentBytes.Load(), s.deliveredBytes.Load()
	// rtt is the largest smoothed RTT of the streams at this tick.
	var rtt time.Duration
	var deaf []deafStream
	if dt := now.Sub(s.lastTick).Seconds(); dt > 0 {
		s.rateSent.Store(f64bits(float64(sent-s.lastSent) * 8 / dt))
		s.rateDelivered.Store(f64bits(float64(delivered-s.lastDelivered) * 8 / dt))
		// What TCP delivered and sent again on the streams (pacing).
		var tcpDelivered, segs, resentSegs, notsent, inflight uint64
		var minRTT time.Duration
		recovering, probing := 0, 0
		streams := s.establishedStreams()
		for _, st := range streams {
			bs, br := st.bytesSent.Load(), st.bytesRecv.Load()
			st.rateSent.Store(f64bits(float64(bs-st.prevSent) * 8 / dt))
			st.rateRecv.Store(f64bits(float64(br-st.prevRecv) * 8 / dt))
			st.prevSent, st.prevRecv = bs, br
			info, ok := readTCPInfo(st.conn)
			if d := st.unanswered(now, info, ok); d > s.stallTimeout {
				deaf = append(deaf, deafStream{st, silenceError(info, d)})
			}
			if st.lossState(info, ok) != lossNone {
				recovering++
			} else if ok && probingRTT(info) {
				probing++
			}
			if ok {
				st.tuneLowat(info)
				rtt = max(rtt, info.rtt)
				if info.minRTT > 0 && (minRTT == 0 || info.minRTT < minRTT) {
					minRTT = info.minRTT
				}
				if st.deliveredPrimed {
					// Segments, modulo 2^32.
					delivered := uint64(info.delivered - st.prevDelivered)
					segs += delivered
					resentSegs += uint64(info.retransmits - st.prevResent)
					tcpDelivered += delivered * uint64(info.mss)
				}
				st.prevDelivered, st.prevResent, st.deliveredPrimed = info.delivered, info.retransmits, true
				notsent += uint64(info.notsent)
				inflight += uint64(info.inFlight) * uint64(info.mss)
			}
		}
		s.recovering.Store(int32(recovering))
		if rtt > 0 {
			s.pathRTT.Store(int64(rtt))
		}
		if s.established.Load() {
			s.pace(now, streams, recovering+probing, pacingTick{bytes: tcpDelivered, segs: segs, resentSegs: resentSegs, dt: dt, inflight: inflight, minRTT: minRTT}, notsent, rtt)
		}
	}
	if dt := now.Sub(s.lastTick).Seconds(); dt > 0 && s.established.Load() {
		s.noteArrivals(dt)
		s.chooseStreams(now)
	}
	if sent != s.lastSent || delivered != s.lastDelivered {
		s.lastProgress = now
	}
	s.lastSent, s.lastDelivered, s.lastTick = sent, delivered, now

	if !s.established.Load() {
		// A server-side session still gathering streams; once all have
		// joined, connectServer owns it and bounds it with its own timeout.
		s.mu.Lock()
		joined, gathering := s.joined, s.side == serverSide && s.joined < s.n
		s.mu.Unlock()
		if gathering && now.Sub(s.started) > lim.PreAuthTimeout {
			s.abortUnestablished(AbortSetup, fmt.Errorf("only %d of %d streams joined within %s", joined, s.n, lim.PreAuthTimeout))
		}
		return
	}

	s.mu.Lock()
	gapSince := s.gapSince
	next := s.reasm.Next()
	depth := s.reasm.Depth()
	var suspects, silent []*stream
	if !gapSince.IsZero() && now.Sub(gapSince) > s.stallTimeout {
		var quiet []*stream
		for i, st := range s.streams {
			if st == nil || st.isLost() {
				continue
			}
			mute := st.lastRecv.Load() < gapSince.UnixNano()
			if mute {
				quiet = append(quiet, st)
			}
			if s.reasm.MayHoldNext(i) {
				suspects = append(suspects, st)
				if mute {
					silent = append(silent, st)
				}
			}
		}
		if len(suspects) == 0 {
			// The missing frame was sent again on a stream that had read
			// past it: suspect the streams silent since the wait began.
			suspects = quiet
		}
		// Give the replacements a stall timeout of their own.
		s.gapSince = now
	}
	noStreams := s.live == 0 && !s.noStreamsSince.IsZero() && now.Sub(s.noStreamsSince) > s.reconnectTimeout
	lastLoss := s.lastLoss
	s.mu.Unlock()
	if noStreams && !s.isCompleted() {
		s.abort(AbortStream, fmt.Errorf("all %d streams lost and none re-established within %s; last loss: %v",
			s.n, s.reconnectTimeout, lastLoss))
		return
	}
	if !gapSince.IsZero() && gapSince != s.stallCounted && now.Sub(gapSince) > time.Second {
		// A delivery wait longer than a second counts as one stall.
		s.stallCounted = gapSince
		s.stalls.Add(1)
	}
	if len(silent) > 0 {
		suspects = silent
	}
	for _, st := range suspects {
		st.lose(fmt.Errorf("stalled: frame %d missing for %s while %d later frames are held",
			next, now.Sub(gapSince).Round(time.Millisecond), depth))
	}
	for _, d := range deaf {
		d.st.lose(d.err)
	}
	if s.sendFin.Load() != s.recvFin.Load() && now.Sub(s.lastProgress) > lim.HalfClosedIdle {
		dir := "client"
		if s.sendFin.Load() == (s.side == serverSide) {
			dir = "server"
		}
		s.abort(AbortIdle, fmt.Errorf("half-closed by the %s and idle for %s", dir, now.Sub(s.lastProgress).Round(time.Second)))
	}
}

func (s *session) isPeerDone() bool { return closed(s.peerDone) }

func (s *session) isCompleted() bool { return closed(s.completeCh) }

// establishedStreams returns the live streams once the session started.
func (s *session) establishedStreams() []*stream {
	if !s.established.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*stream, 0, len(s.streams))
	for _, st := range s.streams {
		if st != nil {
			out = append(out, st)
		}
	}
	return out
}

// StreamError is a failure of one stream.
type StreamError struct {
	Stream int
	Op     string
	Err    error
}

func (e *StreamError) Error() string { return fmt.Sprintf("stream %d: %s: %v", e.Stream, e.Op, e.Err) }
func (e *StreamError) Unwrap() error { return e.Err }

// stream is one TCP connection of a session, full duplex.
type stream struct {
	s     *session
	index int
	conn  *net.TCPConn
	codec *stripe.Codec
	br    *bufio.Reader
	hdr   [stripe.HeaderSize]byte
	bulk  bool // reader only: see readFull
	wake  chan struct{}

	// Guarded by s.mu.
	paused bool

	born time.Time // when its handshake was done (see streamProvenAfter)
	// bindEnd, for a stream bound from the warm pool, is how many bytes
	// the far agent's TCP has acknowledged once it has the BIND (0: not
	// known). See finBefore.
	bindEnd uint64

	// Loss: dead closes once the stream is lost (lose); running counts
	// its reader and writer, and the last to return frees its slot and
	// closes gone.
	dead     chan struct{}
	loseOnce sync.Once
	running  atomic.Int32
	gone     chan struct{}
	// fin is how far the writer got with the stream's half-close (see
	// peerEnded).
	fin atomic.Int32

	// lowat is the stream's TCP_NOTSENT_LOWAT, set by housekeeping; a
	// writer takes at most that many bytes of chunks at a time.
	lowat atomic.Int64

	// Writer only.
	ctlSeq    uint64
	ctlBuf    [creditFrameSize]byte
	ackBuf    [creditFrameSize]byte
	lastAck   uint64
	inTrouble bool
	troubleAt time.Time // when troubled last read TCP_INFO
	troubles  atomic.Uint64

	bytesSent, bytesRecv   atomic.Uint64
	framesSent, framesRecv atomic.Uint64
	pauses                 atomic.Uint64
	lastRecv               atomic.Int64 // unix nanoseconds of the last frame read

	// Throughput, computed by housekeeping (which alone touches the
	// previous counts).
	prevSent, prevRecv uint64
	rateSent, rateRecv atomic.Uint64 // float64 bits, bit/s
	// Pacing (housekeeping only): TCP's delivered segments at the last
	// tick (once primed) and the pacing cap set on the socket, bytes/s
	// (0: none). See stripePacer.
	prevDelivered   uint32
	prevResent      uint32
	deliveredPrimed bool
	paceCap         float64
	// timerSince is since when housekeeping has found TCP's own timer
	// outstanding on the stream at every tick (zero: not at the last).
	// See unanswered.
	timerSince time.Time
	// sendCap is the send buffer start-up set on the socket, as given
	// to the kernel (0: none), and sendFull (with sendFallback) the one
	// to set again after it. See startupWindow.
	sendCap, sendFull int
	sendFallback      bool
	// ccScheduled and ccRestartAt: spreadProbeRTT scheduled the restart
	// of the stream's BBR, due then (housekeeping only; zero: not due);
	// ccRestarted is when it was done, in Unix nanoseconds (0: not yet).
	ccScheduled bool
	ccRestartAt time.Time
	ccRestarted atomic.Int64
}

func newStream(s *session, index int, conn *net.TCPConn, codec *stripe.Codec) *stream {
	st := &stream{
		s:     s,
		index: index,
		conn:  conn,
		codec: codec,
		br:    bufio.NewReaderSize(conn, stripe.StreamReadBuffer),
		wake:  make(chan struct{}, 1),
		dead:  make(chan struct{}),
		gone:  make(chan struct{}),
		born:  time.Now(),
	}
	st.lowat.Store(int64(minLowat(s.chunkSize)))
	st.lastRecv.Store(time.Now().UnixNano())
	return st
}

// tuneLowat sizes the stream's TCP_NOTSENT_LOWAT from its pacing rate
// (see lowatTime); housekeeping only. It changes the socket only when the
// mark moves by more than a quarter.
func (st *stream) tuneLowat(info tcpInfo) {
	want := int64(min(max(float64(info.pacingRate)*lowatTime.Seconds(), float64(minLowat(st.s.chunkSize))), maxLowat))
	cur := st.lowat.Load()
	if d := want - cur; d <= cur/4 && -d <= cur/4 {
		return
	}
	if setNotsentLowat(st.conn, int(want)) == nil {
		st.lowat.Store(want)
	}
}

// writeLoop takes whatever chunk is queued whenever this stream can take
// it, seals it and writes it; a slow stream simply takes fewer chunks.
// That is the scheduler: TCP_NOTSENT_LOWAT keeps a stream's write waiting
// while its socket holds unsent data above the mark, so only streams that
// would send a chunk at once pull one, and a stream in loss recovery pulls
// nothing new while a quarter of the streams is healthy. Frames to send
// again (after a stream was lost, or taken back from a stream in recovery:
// see watchBlocking) go first. Writers also carry the CREDIT and ACK
// frames of the receive direction, whichever is free first.
func (st *stream) writeLoop() {
	s := st.s
	batch := make([]*chunk, 0, maxWriteFrames)
	defer func() {
		st.writerExit(batch)
		s.wg.Done()
	}()
	iov := make([][]byte, 0, maxWriteFrames+2)
	var bufs net.Buffers
	var probe *time.Timer
	defer func() {
		if probe != nil {
			probe.Stop()
		}
	}()
	sendq := s.sendq
	for {
		if s.isAborted() {
			st.sendAbort()
			return
		}
		batch = batch[:0]
		// In recovery: new chunks, and chunks taken back from a stream in
		// recovery, are left to the healthy streams (holdBack).
		troubled := false
		if sendq != nil {
			if state := st.troubled(); state != lossNone {
				troubled = holdBack(state, int(s.healthy.Load()), int(s.liveCount.Load()), len(sendq), cap(sendq))
			}
		}
		batch = s.takeResend(st, batch, troubled)
		control := false
		if len(batch) == 0 {
			// One wait for both modes. A troubled writer takes no new
			// chunk and looks again shortly (frames of a lost stream,
			// which it may take, wake no troubled writer: at most a
			// probe late); the others take whatever comes first.
			take, resend, ctl := sendq, s.resendWake, s.ctlWake
			var again <-chan time.Time
			if troubled {
				if probe == nil {
					probe = time.NewTimer(troubleProbe)
				} else {
					probe.Reset(troubleProbe)
				}
				take, resend, ctl, again = nil, nil, nil, probe.C
			}
			var c *chunk
			var ok, took bool
			// A bulk session nearly always has a chunk queued: take it
			// without the full select, unless the stream is lost (its
			// writer leaves below instead of failing one more write).
			fast := take
			if st.isLost() {
				fast = nil
			}
			select {
			case c, ok = <-fast:
				took = true
			default:
				select {
				case c, ok = <-take:
					took = true
				case <-resend:
					continue
				case <-ctl:
					control = true
				case <-again:
					continue
				case <-s.completeCh:
					st.finishWrite()
					return
				case <-st.dead:
					return
				case <-s.abortCh:
					st.sendAbort()
					return
				}
			}
			if took && !ok {
				sendq = nil
			}
			if ok {
				batch = append(batch, c)
				bytes := c.n
				limit := min(int(st.lowat.Load()), maxWriteBytes)
				if c.typ == stripe.FrameData && c.seq < uint64(s.n) && !c.resent {
					// A first-flight frame travels alone: the next one
					// goes to the next stream, whose window is still open.
					limit = 0
				}
			gather:
				for len(batch) < maxWriteFrames && bytes < limit {
					select {
					case c, ok = <-sendq:
						if !ok {
							sendq = nil
							break gather
						}
						batch = append(batch, c)
						bytes += c.n
					default:
						break gather
					}
				}
				batch = s.claim(st, batch)
			}
		}
		iov = iov[:0]
		var wire uint64
		base := st.bytesSent.Load() // this writer alone adds to it
		// Control frames ride with whatever this writer sends.
		if credit := s.creditPending.Load(); credit > s.creditSent.Load() {
			frame, err := st.sealControl(st.ctlBuf[:], stripe.FrameCredit, credit)
			if err != nil {
				s.abort(AbortProtocol, &StreamError{Stream: st.index, Op: "seal", Err: err})
				return
			}
			iov = append(iov, frame)
			wire += uint64(len(frame))
			storeMax(&s.creditSent, credit)
		}
		if ack := s.ackPending.Load(); ack > st.lastAck && (ack > s.ackSent.Load() || control) {
			frame, err := st.sealControl(st.ackBuf[:], stripe.FrameAck, ack)
			if err != nil {
				s.abort(AbortProtocol, &StreamError{Stream: st.index, Op: "seal", Err: err})
				return
			}
			iov = append(iov, frame)
			wire += uint64(len(frame))
			st.lastAck = ack
			storeMax(&s.ackSent, ack)
		}
		if len(batch) == 0 && len(iov) == 0 {
			continue
		}
		for _, c := range batch {
			var flags uint8
			if c.resent {
				flags = stripe.FlagRetransmit
			}
			frame, err := st.codec.SealFlags(c.buf, c.typ, flags, c.seq, c.n)
			if err != nil {
				s.abort(AbortProtocol, &StreamError{Stream: st.index, Op: "seal", Err: err})
				return
			}
			// Only this writer touches a busy chunk's buffer and fields.
			c.sealed = true
			c.sealOn(st)
			c.startOff = base + wire
			iov = append(iov, frame)
			wire += uint64(len(frame))
			c.endOff = base + wire
		}
		var err error
		if len(iov) == 1 {
			_, err = st.conn.Write(iov[0])
		} else {
			bufs = iov
			_, err = bufs.WriteTo(st.conn)
		}
		if err != nil {
			st.lose(&StreamError{Stream: st.index, Op: "write", Err: err})
			return
		}
		s.written(batch, time.Now())
		st.bytesSent.Add(wire)
		st.framesSent.Add(uint64(len(batch)))
		batch = batch[:0]
	}
}

// sealControl seals a CREDIT or ACK frame with the stream's next control
// sequence.
func (st *stream) sealControl(buf []byte, typ stripe.FrameType, v uint64) ([]byte, error) {
	stripe.PutCreditBody(buf[stripe.HeaderSize:], v) // ACK's body has the same form
	frame, err := st.codec.Seal(buf, typ, stripe.ControlSeq(st.ctlSeq), stripe.CreditBodySize)
	if err == nil {
		st.ctlSeq++
	}
	return frame, err
}

func storeMax(a *atomic.Uint64, v uint64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// finishWrite ends a stream's sending once the session is complete: the
// final ACK on this stream (the peer's last frames may have gone on a
// stream that is lost since), then the half-close.
func (st *stream) finishWrite() {
	s := st.s
	if f := s.agent.testFinishWrite.Load(); f != nil {
		(*f)(st.index, st.conn)
	}
	if ack := s.ackPending.Load(); ack > st.lastAck {
		if frame, err := st.sealControl(st.ackBuf[:], stripe.FrameAck, ack); err == nil {
			if _, err := st.conn.Write(frame); err != nil {
				return
			}
			st.lastAck = ack
		}
	}
	st.fin.Store(finClosing)
	if err := st.conn.CloseWrite(); err != nil {
		st.fin.Store(finFailed)
		return
	}
	st.fin.Store(finClosed)
	s.writersDone.Add(1)
}

// The writer's half-close of a stream (stream.fin).
const (
	finNone    = iota // not tried
	finClosing        // CloseWrite running
	finClosed         // done
	finFailed         // CloseWrite failed (the connection was gone)
)

// peerEnded says whether the end of file the reader of a complete
// session's stream got is the peer's half-close, not a reset whose error
// a write took (endedByFin). The state first: this side's own half-close
// may move it out of CLOSE_WAIT right after this look, and it sets fin
// before it starts. Then it waits out the writer's half-close if that is
// running: the peer's FIN may answer it before it returns.
func (st *stream) peerEnded() bool {
	if peerClosed(st.conn) {
		return true
	}
	for range 100 {
		if st.fin.Load() != finClosing {
			break
		}
		time.Sleep(time.Millisecond)
	}
	f := st.fin.Load()
	return f == finClosed || f == finClosing
}

// claim marks chunks taken from the send queue as this writer's; chunks
// an ACK already covered (a confused peer) are freed, not sent.
func (s *session) claim(st *stream, batch []*chunk) []*chunk {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	out := batch[:0]
	for _, c := range batch {
		if c.ackedBy {
			s.sendPool.put(c)
			continue
		}
		c.on, c.busy = st, true
		out = append(out, c)
	}
	return out
}

// takeResend takes frames waiting to be sent again, up to a batch, in
// sequence order. It leaves a frame this stream sealed before (its key
// never seals one nonce twice) and, when troubled, frames taken back from
// a stream in recovery, to the other writers.
func (s *session) takeResend(st *stream, batch []*chunk, troubled bool) []*chunk {
	if st.isLost() {
		return batch // its frames go on the others (writerExit)
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if len(s.resend) == 0 {
		return batch
	}
	keep := s.resend[:0]
	took := 0
	for _, c := range s.resend {
		switch {
		case c.ackedBy:
			s.sendPool.put(c)
		case len(batch) >= maxWriteFrames || c.sealedBy(st) || c.hol && troubled:
			keep = append(keep, c)
		default:
			c.on, c.busy = st, true
			batch = append(batch, c)
			took++
		}
	}
	clear(s.resend[len(keep):])
	s.resend = keep
	if took > 0 && len(keep) > 0 {
		// More for the others; a writer that could take none wakes no
		// one (it would wake itself): watchBlocking wakes them again.
		select {
		case s.resendWake <- struct{}{}:
		default:
		}
	}
	return batch
}

// written releases a batch after its write at now: frames stay retained
// until acknowledged, unless an ACK came meanwhile.
func (s *session) written(batch []*chunk, now time.Time) {
	s.sendMu.Lock()
	for _, c := range batch {
		c.busy, c.sentAt, c.leftAt = false, now, time.Time{}
		if c.ackedBy {
			s.sendPool.put(c)
		}
	}
	s.sendMu.Unlock()
}

// writerExit runs when a stream's writer returns. If the stream was lost
// (and the session goes on), every retained frame it was given is
// unsealed and queued to be sent again on the other streams.
func (st *stream) writerExit(batch []*chunk) {
	s := st.s
	defer st.exited()
	if !st.isLost() {
		s.written(batch, time.Now())
		return
	}
	if !st.inTrouble {
		s.healthy.Add(-1)
	}
	st.inTrouble = true
	s.sendMu.Lock()
	for _, c := range batch {
		c.busy = false
		if c.ackedBy {
			s.sendPool.put(c)
		}
	}
	var again []*chunk
	var bytes uint64
	for _, c := range s.retained {
		if c.on != st {
			continue
		}
		if c.sealed {
			if err := st.codec.Unseal(c.buf); err != nil {
				s.sendMu.Unlock()
				s.abort(AbortProtocol, &StreamError{Stream: st.index, Op: "unseal", Err: err})
				return
			}
		}
		c.on, c.sealed, c.resent = nil, false, true
		again = append(again, c)
		bytes += uint64(c.n)
	}
	if len(again) > 0 {
		s.resend = append(s.resend, again...)
		slices.SortFunc(s.resend, func(a, b *chunk) int { return cmp.Compare(a.seq, b.seq) })
	}
	s.sendMu.Unlock()
	if len(again) > 0 {
		s.resentFrames.Add(uint64(len(again)))
		s.resentBytes.Add(bytes)
		s.agent.counters.resentFrames.Add(uint64(len(again)))
		s.agent.counters.resentBytes.Add(bytes)
		select {
		case s.resendWake <- struct{}{}:
		default:
		}
	}
}

// exited counts down the stream's goroutines; the last frees its slot.
func (st *stream) exited() {
	if st.running.Add(-1) != 0 {
		return
	}
	s := st.s
	s.mu.Lock()
	if s.streams[st.index] == st && st.isLost() {
		s.streams[st.index] = nil
	}
	s.mu.Unlock()
	close(st.gone)
	select {
	case s.lostWake <- struct{}{}:
	default:
	}
}

func (st *stream) isLost() bool { return closed(st.dead) }

// lose takes a stream out of its session: it resets the connection (so
// both its goroutines return and the peer sees the loss at once); the
// writer then queues the stream's unacknowledged frames for the other
// streams and, at the client side, the supervisor opens a replacement. A
// loss after the session aborted or completed changes nothing.
func (st *stream) lose(err error) {
	s := st.s
	st.loseOnce.Do(func() {
		if s.isAborted() || s.isPeerDone() {
			return
		}
		close(st.dead)
		reset(st.conn)
		now := time.Now()
		s.mu.Lock()
		s.live--
		s.liveCount.Store(int32(s.live))
		if now.Sub(st.born) >= streamProvenAfter {
			s.streamWorked = true
		}
		if s.live == 0 && (s.noStreamsSince.IsZero() || s.streamWorked) {
			s.noStreamsSince, s.streamWorked = now, false
		}
		s.lastLoss = err
		s.mu.Unlock()
		// The credit and ACK this stream carried last may be lost with
		// it: the next writer sends the current ones again (they are
		// cumulative, so a copy is harmless).
		s.creditSent.Store(0)
		s.ackSent.Store(0)
		s.wakeControl()
		s.streamsLost.Add(1)
		s.agent.counters.streamsLost.Add(1)
		s.agent.limited.log(s.agent.log, "stream-lost", "relay: stream lost; its frames go on the others",
			append(s.logAttrs(), "stream", st.index, "err", err)...)
	})
}

// troubled reports how deep in loss recovery the stream is (TCP_INFO
// ca_state Recovery; Loss, or RTO retransmits outstanding), and keeps
// the session's count of healthy streams.
func (st *stream) troubled() lossState {
	now := time.Now()
	if !st.inTrouble && now.Sub(st.troubleAt) < troubleRecheck {
		return lossNone
	}
	st.troubleAt = now
	info, ok := readTCPInfo(st.conn)
	state := st.lossState(info, ok)
	bad := state != lossNone
	if bad != st.inTrouble {
		st.inTrouble = bad
		if bad {
			st.s.healthy.Add(-1)
			st.troubles.Add(1)
		} else {
			st.s.healthy.Add(1)
		}
	}
	return state
}

// lossState is how deep in loss recovery TCP_INFO (ok: read) shows the
// stream.
func (st *stream) lossState(info tcpInfo, ok bool) lossState {
	if hook := st.s.agent.testTrouble; hook != nil {
		return hook(st.index)
	}
	if !ok {
		return lossNone
	}
	return lossStateOf(info.caState, info.rtoRetrans)
}

// sendAbort writes an ABORT frame with the session's reason, best effort
// and bounded by abortGrace.
func (st *stream) sendAbort() {
	s := st.s
	if st.isLost() {
		return
	}
	reason := "aborted"
	if s.abortErr != nil {
		reason = s.abortErr.Error()
	}
	buf := make([]byte, stripe.HeaderSize+stripe.MaxAbortReason+stripe.TagSize)
	n := stripe.PutAbortBody(buf[stripe.HeaderSize:], reason)
	frame, err := st.codec.Seal(buf, stripe.FrameAbort, stripe.AbortSeq, n)
	if err != nil {
		return
	}
	if f := s.agent.testAbortSealed.Load(); f != nil {
		(*f)(st)
	}
	_ = st.conn.SetWriteDeadline(time.Now().Add(abortGrace))
	if _, err := st.conn.Write(frame); err == nil {
		_ = st.conn.CloseWrite()
	}
}

// readLoop reads frames while the reorder window lets this stream be read,
// authenticates each and hands it to the reassembler.
func (st *stream) readLoop() {
	s := st.s
	defer s.wg.Done()
	defer st.exited()
	fail := func(kind, op string, err error) {
		if !s.isAborted() {
			s.abort(kind, &StreamError{Stream: st.index, Op: op, Err: err})
		}
	}
	// lost ends the stream, not the session: a connection failure.
	lost := func(op string, err error) {
		st.lose(&StreamError{Stream: st.index, Op: op, Err: err})
	}
	var probe *time.Timer
	defer func() {
		if probe != nil {
			probe.Stop()
		}
	}()
	for {
		s.mu.Lock()
		for !s.reasm.CanRead(st.index) {
			st.paused = true
			st.pauses.Add(1)
			s.mu.Unlock()
			if probe == nil {
				probe = time.NewTimer(pausedProbe)
			} else {
				probe.Reset(pausedProbe)
			}
		wait:
			for {
				select {
				case <-st.wake:
					break wait
				case <-s.abortCh:
					return
				case <-st.dead:
					return
				case <-probe.C:
					// A paused stream reads nothing, so a reset would go
					// unnoticed until the window moves; ask for its error.
					if err := socketError(st.conn); err != nil {
						lost("read", err)
						return
					}
					probe.Reset(pausedProbe)
				}
			}
			s.mu.Lock()
		}
		s.mu.Unlock()

		if err := st.readFull(st.hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				// Both directions may be finished with the goroutine that
				// finished the last one yet to say so.
				s.checkComplete()
				if !s.isCompleted() && s.recvFin.Load() && s.finAcked.Load() {
					// The peer's FIN is delivered and its ACK about to be
					// pending (recvAcked comes next in writeHost): the
					// peer may have completed on that ACK already. (Not
					// before it acknowledged our FIN: its final ACK,
					// which says so, comes before its half-close on every
					// stream. Waiting then would only hold a stream that
					// a reset ended, its slot with it, while the session
					// still sends.)
					settle := finSettle
					if d := s.agent.testFinSettle.Load(); d > 0 {
						settle = time.Duration(d)
					}
					select {
					case <-s.completeCh:
					case <-s.abortCh:
					case <-st.dead:
					case <-time.After(settle):
					}
				}
			}
			if errors.Is(err, io.EOF) && s.isCompleted() && st.peerEnded() {
				// The peer half-closed: it is complete too. (An end of
				// file after a reset whose error this stream's writer
				// took, writing the final ACK, is a lost stream: the
				// peer may wait for that ACK, and a replacement carries
				// it. Taken for the peer's end, the session ended here
				// and the replacement was refused as unknown, which
				// aborted the peer's session with all its data through.)
				s.peerDoneOnce.Do(func() { close(s.peerDone) })
				return
			}
			if errors.Is(err, io.EOF) && !s.isCompleted() && st.bindEnd > 0 && s.unfounded() && finBefore(st.conn, st.bindEnd) {
				// The far agent's FIN came before its TCP had this
				// pooled stream's BIND: its process ended with the stream
				// idle, and the BIND, arriving at a closed socket, was
				// never read. The session was not founded with it: a lost
				// stream, replaced (stream 0 founds the session again).
				lost("read", errors.New("the far agent closed the stream before its BIND arrived (its process ended)"))
				return
			}
			if errors.Is(err, io.EOF) && !s.isCompleted() && peerClosed(st.conn) {
				// An agent half-closes a stream only once its session
				// completed, after the final ACK on that stream, which
				// completes the session here too. A FIN before that is
				// the far agent's process ending (a network failure
				// resets or goes silent; after a reset a read sees end
				// of file too, but the connection is not in CLOSE_WAIT):
				// its session state is gone. So too in a pooled session
				// the far agent was never heard on: its process may have
				// founded the session and reached the server before it
				// ended, and founded again at its restart, which knows
				// nothing of it, the session would reach the server
				// twice. (A FIN that came before the BIND went is an idle
				// stream's death: take drops such a stream; one sent
				// before the BIND arrived is a lost stream, above.)
				fail(AbortPeer, "read", errors.New("the far agent closed the stream before the session finished (its process ended?)"))
				return
			}
			lost("read", err)
			return
		}
		h, err := stripe.ParseHeader(st.hdr[:])
		if err == nil {
			err = st.codec.CheckHeader(h)
		}
		if err != nil {
			fail(AbortProtocol, "read", err)
			return
		}
		switch h.Type {
		case stripe.FrameCredit, stripe.FrameAck:
			if err := st.readControl(h); err != nil {
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isConnError(err) {
					lost("read", err)
				} else {
					fail(AbortProtocol, "read", err)
				}
				return
			}
			s.heard.Store(true)
			continue
		case stripe.FrameJoin, stripe.FrameBind:
			fail(AbortProtocol, "read", fmt.Errorf("%s on a stream already attached", h.Type))
			return
		}
		if g := s.granted.Load(); (h.Type == stripe.FrameData && h.Seq >= g) || (h.Type == stripe.FrameFin && h.Seq > g) {
			fail(AbortProtocol, "read", fmt.Errorf("%s %d beyond the credit of %d frames", h.Type, h.Seq, g))
			return
		}
		if h.Type == stripe.FrameAbort {
			body := make([]byte, h.Length)
			if err := st.readFull(body); err != nil {
				lost("read", err)
				return
			}
			plain, err := st.codec.Open(h, st.hdr[:], body)
			if err != nil {
				fail(AbortProtocol, "read", err)
				return
			}
			fail(AbortPeer, "peer aborted", errors.New(stripe.ParseAbortBody(plain)))
			return
		}
		c, ok := s.recvPool.tryGet()
		if !ok {
			fail(AbortMemory, "read", fmt.Errorf("session memory cap of %d bytes reached", s.recvPool.budgetBytes()))
			return
		}
		body := c.buf[stripe.HeaderSize : stripe.HeaderSize+int(h.Length)]
		st.bulk = len(body) >= bulkFrame
		if err := st.readFull(body); err != nil {
			s.recvPool.put(c)
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			lost("read", err)
			return
		}
		plain, err := st.codec.Open(h, st.hdr[:], body)
		if err != nil {
			s.recvPool.put(c)
			fail(AbortProtocol, "read", err)
			return
		}
		s.heard.Store(true)
		c.typ, c.n, c.seq = h.Type, len(plain), h.Seq
		if h.Type == stripe.FrameFin {
			c.total, _ = stripe.ParseFinBody(plain)
		}
		st.bytesRecv.Add(uint64(stripe.HeaderSize) + uint64(h.Length))
		st.framesRecv.Add(1)
		s.framesArrived.Add(1)
		arrived := time.Now()
		st.lastRecv.Store(arrived.UnixNano())

		s.mu.Lock()
		accepted, err := s.reasm.Offer(st.index, h.Seq, h.Type == stripe.FrameFin, h.Flags&stripe.FlagRetransmit != 0, c)
		if err != nil || !accepted {
			s.mu.Unlock()
			s.recvPool.put(c)
			if err != nil {
				fail(AbortProtocol, "read", err)
				return
			}
			s.duplicates.Add(1)
			s.agent.counters.duplicates.Add(1)
			continue
		}
		if h.Type == stripe.FrameData {
			s.highest = max(s.highest, h.Seq+1)
			s.noteFrameLocked(h.Seq, arrived)
		}
		if h.Seq+1 >= s.granted.Load() {
			s.windowLimited = true
		}
		if s.hostWaiting && h.Seq == s.reasm.Next() {
			s.hostWaiting = false
			select {
			case s.hostWake <- struct{}{}:
			default:
			}
		}
		err = s.updateGapLocked()
		s.mu.Unlock()
		if err != nil {
			fail(AbortProtocol, "read", err)
			return
		}
	}
}

// isConnError reports a failure of the connection rather than of the
// peer's frames.
func isConnError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

// bulkFrame is the body size from which a stream reads past its read
// buffer (see readFull).
const bulkFrame = stripe.StreamReadBuffer / 2

// readFull reads exactly len(p) bytes of the stream. A stream whose last
// data frame was large (bulk) reads straight from the socket whenever its
// read buffer is empty: a frame's body then lands in its frame buffer
// at once instead of partly through the read buffer (a copy of up to
// StreamReadBuffer bytes per frame, about 1.7 % of a relay's CPU at 8
// stripes of 128 KiB on loopback), and its header is read alone, for the
// same two reads per frame. Small frames go through the buffer, which
// picks up several with one read.
func (st *stream) readFull(p []byte) error {
	var err error
	if st.bulk && st.br.Buffered() == 0 {
		_, err = io.ReadFull(st.conn, p)
	} else {
		_, err = io.ReadFull(st.br, p)
	}
	return err
}

// readControl reads, opens and applies a CREDIT or ACK frame.
func (st *stream) readControl(h stripe.Header) error {
	s := st.s
	var buf [stripe.CreditBodySize + stripe.TagSize]byte
	body := buf[:h.Length] // CheckHeader bounded the length
	if err := st.readFull(body); err != nil {
		return err
	}
	plain, err := st.codec.Open(h, st.hdr[:], body)
	if err != nil {
		return err
	}
	v, err := stripe.ParseCreditBody(plain) // ACK's body has the same form
	if err != nil {
		return err
	}
	st.lastRecv.Store(time.Now().UnixNano())
	if h.Type == stripe.FrameAck {
		s.creditMu.Lock()
		acked, err := s.credits.AcceptAck(st.index, h.Seq, v, s.framesQueued.Load())
		s.creditMu.Unlock()
		if err != nil {
			return err
		}
		s.acknowledged(acked)
		return nil
	}
	s.creditMu.Lock()
	frames, err := s.credits.Accept(st.index, h.Seq, v, s.dataSent.Load())
	if err == nil && frames > s.creditFrames.Load() {
		s.creditFrames.Store(frames)
	}
	s.creditMu.Unlock()
	if err != nil {
		return err
	}
	select {
	case s.creditWake <- struct{}{}:
	default:
	}
	return nil
}

// bufPool hands out a session's frame buffers up to a budget; the budget
// is what bounds a session's memory, and only a wider receive window
// raises it. Buffers are allocated on first use and recycled across
// sessions through a process-wide pool.
type bufPool struct {
	size      int
	allocated atomic.Int64
	mu        sync.Mutex
	budget    int64
	free      []*chunk
	avail     chan struct{} // a buffer came back
}

func newBufPool(size int, budget int64) *bufPool {
	return &bufPool{size: size, budget: budget, avail: make(chan struct{}, 1)}
}

func (p *bufPool) budgetBytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.budget * int64(p.size)
}
func (p *bufPool) bytes() int64 { return p.allocated.Load() * int64(p.size) }

func (p *bufPool) grow(budget int64) {
	p.mu.Lock()
	p.budget = max(p.budget, budget)
	p.mu.Unlock()
}

func (p *bufPool) tryGet() (*chunk, bool) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		c := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return c, true
	}
	if p.allocated.Load() >= p.budget {
		p.mu.Unlock()
		return nil, false
	}
	p.allocated.Add(1)
	p.mu.Unlock()
	return frames.get(p.size), true
}

// get blocks until a buffer is free or abort closes.
func (p *bufPool) get(abort <-chan struct{}) (*chunk, bool) {
	for {
		if c, ok := p.tryGet(); ok {
			return c, true
		}
		select {
		case <-p.avail:
		case <-abort:
			return nil, false
		}
	}
}

func (p *bufPool) put(c *chunk) {
	c.n, c.total = 0, 0
	p.mu.Lock()
	p.free = append(p.free, c)
	p.mu.Unlock()
	select {
	case p.avail <- struct{}{}:
	default:
	}
}

// release hands every returned buffer to the process-wide pool.
func (p *bufPool) release() {
	p.mu.Lock()
	free := p.free
	p.free = nil
	p.mu.Unlock()
	for _, c := range free {
		frames.put(c)
	}
}

// notePeerWindows gives every session the largest receive window (bytes)
// among the sessions with its peer and side; housekeeping only.
func notePeerWindows(list []*session) {
	type path struct {
		peer string
		side side
	}
	most := make(map[path]int64, 4)
	for _, s := range list {
		k := path{s.peer, s.side}
		most[k] = max(most[k], s.windowNow.Load()*int64(s.chunkSize))
	}
	for _, s := range list {
		s.peerWindow.Store(most[path{s.peer, s.side}])
	}
}

package relay

import (
	"context"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/connlimit"
)

// Why a session aborted; the keys of Totals.Aborts.
const (
	AbortStream   = "stream"   // every stream was lost and none came back within the reconnect timeout
	AbortProtocol = "protocol" // a frame failed authentication or broke the sequence rules
	AbortPeer     = "peer"     // the peer agent sent ABORT, closed its streams, or lost the session (join refused)
	AbortStall    = "stall"    // kept for the metrics' labels: a stall now replaces the stream, it aborts nothing
	AbortIdle     = "idle"     // half-closed and idle past the timeout
	AbortEndpoint = "endpoint" // the client or server connection failed
	AbortMemory   = "memory"   // the session memory cap was reached
	AbortSetup    = "setup"    // streams or the server connection could not be set up
	AbortShutdown = "shutdown" // the agent stopped before the session finished
)

// Why a connection or stream was refused; the keys of Totals.Rejected.
const (
	rejectNotWhitelisted = "not_whitelisted"
	rejectSessionLimit   = "session_limit"
	rejectStreamLimit    = "stream_limit"
	rejectMemoryLimit    = "memory_limit"
	rejectShuttingDown   = "shutting_down"
	rejectMismatch       = "session_mismatch"
	rejectModeMismatch   = "mode_mismatch"
	rejectVersion        = "version"
	rejectIdentity       = "identity" // wrong responder, unknown initiator, or our own key reflected
	rejectShape          = "shape"    // shape differs from the server side's whitelist
	rejectPreAuthEvicted = "preauth_evicted"
	rejectPoolLimit      = "pool_limit" // pooled streams beyond limits.pooled_per_peer, or turned off
)

var abortKinds = []string{AbortStream, AbortProtocol, AbortPeer, AbortStall, AbortIdle, AbortEndpoint, AbortMemory, AbortSetup, AbortShutdown}
var rejectKinds = []string{rejectNotWhitelisted, rejectSessionLimit, rejectStreamLimit, rejectMemoryLimit,
	rejectShuttingDown, rejectMismatch, rejectModeMismatch, rejectVersion, rejectIdentity,
	rejectShape, rejectPreAuthEvicted, rejectPoolLimit}

// RejectReasons are the keys of Totals.Rejected, in a fixed order.
func RejectReasons() []string { return slices.Clone(rejectKinds) }

func rejectKindOf(st stripe.Status) string {
	switch st {
	case stripe.StatusSessionLimit:
		return rejectSessionLimit
	case stripe.StatusStreamLimit:
		return rejectStreamLimit
	case stripe.StatusMemoryLimit:
		return rejectMemoryLimit
	case stripe.StatusNotWhitelisted:
		return rejectNotWhitelisted
	case stripe.StatusModeMismatch:
		return rejectModeMismatch
	case stripe.StatusShuttingDown:
		return rejectShuttingDown
	case stripe.StatusVersion:
		return rejectVersion
	case stripe.StatusWrongResponder, stripe.StatusUnknownInitiator, stripe.StatusReflected:
		return rejectIdentity
	case stripe.StatusShapeMismatch:
		return rejectShape
	case stripe.StatusPoolRefused:
		return rejectPoolLimit
	}
	return rejectMismatch
}

// Stats is a snapshot of an agent.
type Stats struct {
	Sessions []SessionStats
	Totals   Totals
	// RecentAborts are the last aborted sessions, newest last.
	RecentAborts []AbortRecord
	// PerAgentKeys: the streams are authenticated by per-agent pair keys,
	// not the PSK alone.
	PerAgentKeys bool
}

// SessionStats describes one live session.
type SessionStats struct {
	ID        string
	Whitelist string
	// Side is "client" at the client-side agent, "server" at the other.
	Side   string
	Client netip.AddrPort
	Server netip.AddrPort
	// State is "joining", "established", "half-closed" or "aborting".
	State       string
	Streams     int
	ChunkSize   int
	QueueLength int
	Started     time.Time
	Age         time.Duration
	// BytesUp is client -> server payload, BytesDown server -> client,
	// as relayed by this agent.
	BytesUp, BytesDown uint64
	// Throughput in bit/s over the last housekeeping interval.
	ThroughputUp, ThroughputDown float64
	// ReorderDepth is how many received frames wait for an earlier one;
	// ReorderDepthMax its high-water mark; ReorderWindow its bound.
	ReorderDepth, ReorderDepthMax, ReorderWindow int
	// Stalls counts delivery waits of more than a second for a missing
	// frame while later frames were held.
	Stalls uint64
	// Retransmits sums TCP_INFO total retransmits over the streams.
	Retransmits uint64
	// Window is the receive window in bytes of chunks (the credit it
	// grants beyond what it delivered), WindowMax the most it may grow to.
	Window, WindowMax int
	// CreditWaits counts the times the sending direction waited for the
	// peer's credit.
	CreditWaits uint64
	// PacingRate is the rate, in bit/s, the sending side paces the
	// session's streams at together (0: not paced: one stream, a path under
	// pacingMinRTT, or its pacing still starting up); StreamsRecovering how
	// many of its streams were in loss recovery at the last housekeeping.
	PacingRate        float64
	StreamsRecovering int
	// Memory is the frame-buffer memory the session holds (receive
	// window, send retention, read buffers); MemoryMax the most it may
	// hold: its session memory cap.
	Memory, MemoryMax int64
	// StreamsLive is how many of Streams are up now; StreamsLost,
	// StreamsReplaced, ReinjectedFrames/Bytes and DuplicatesDropped are
	// the session's share of the totals of the same names.
	StreamsLive, StreamsLost, StreamsReplaced uint64
	// StreamsChosen is how many of Streams the session keeps open: all
	// of them, or with AutoStreams (streams = "auto", client side) the
	// count chosen so far, and AutoState where that choice stands.
	StreamsChosen                                        int
	AutoStreams                                          bool
	AutoState                                            AutoState
	ReinjectedFrames, ReinjectedBytes, DuplicatesDropped uint64
	// HeadOfLineFrames and HeadOfLineBytes are the session's share of
	// the totals of the same names.
	HeadOfLineFrames, HeadOfLineBytes uint64
	PerStream                         []StreamStats
}

// StreamStats describes one stream of a session.
type StreamStats struct {
	Index                      int
	Local, Remote              netip.AddrPort
	BytesSent, BytesReceived   uint64  // frame bytes on the wire
	ThroughputSent             float64 // bit/s of frames, last interval
	ThroughputReceived         float64
	FramesSent, FramesReceived uint64
	Pauses                     uint64 // times the reorder window paused reading
	Troubles                   uint64 // times the scheduler found it in loss recovery
	Retransmits                uint32
	RTT                        time.Duration
	CongestionWindow           uint32 // segments
	WriteHalfClosed            bool
}

// Totals are agent-wide counters for metrics.
type Totals struct {
	SessionsActive    int
	StreamsActive     int
	PreAuthActive     int
	SessionsStarted   uint64
	SessionsCompleted uint64
	SessionsAborted   uint64
	// BytesUp/BytesDown count payload relayed by this agent, client ->
	// server and server -> client, over its lifetime.
	BytesUp, BytesDown uint64
	// Aborts counts aborted sessions by reason (Abort* constants).
	Aborts map[string]uint64
	// Rejected counts refused connections and streams by reason:
	// not_whitelisted, session_limit, stream_limit, memory_limit,
	// shutting_down, session_mismatch, mode_mismatch, version, identity,
	// shape, preauth_evicted.
	Rejected          map[string]uint64
	PreAuthTimeouts   uint64
	HandshakeFailures uint64
	// HandshakesAbandoned counts peers that hung up (closed or reset)
	// after a hello with a valid MAC, before the handshake finished: a
	// client-side agent giving up a stream it no longer needs, or a
	// replayed hello. Not counted in HandshakeFailures.
	HandshakesAbandoned uint64
	// Fallbacks counts steered connections carried direct, unaccelerated,
	// because their streams could not be opened.
	Fallbacks uint64
	// MemoryReserved is what live sessions reserved of MemoryLimit, with
	// the bytes a refused session handed to its direct connection until
	// they are written.
	MemoryReserved, MemoryLimit int64
	// StreamsLost counts streams lost (reset, failed, stalled) in live
	// sessions; StreamsReplaced the replacements that joined (at the
	// client side: opened, at the server side: admitted).
	StreamsLost, StreamsReplaced uint64
	// ReinjectedFrames and ReinjectedBytes count frames (and their
	// payload bytes) sent again after the stream carrying them was lost;
	// DuplicatesDropped the authenticated copies the receiver dropped.
	ReinjectedFrames, ReinjectedBytes, DuplicatesDropped uint64
	// HeadOfLineFrames and HeadOfLineBytes count frames (and their
	// payload bytes) sent again on a healthy stream while the stream
	// carrying them, alive, was in loss recovery and the peer's delivery
	// waited for them (head-of-line reinjection; bounded to a tenth of
	// what a session sends). The copy that arrives second is counted in
	// DuplicatesDropped at the peer.
	HeadOfLineFrames, HeadOfLineBytes uint64
	// HealthClosed counts the connections the health endpoint closed
	// (internal/connlimit).
	HealthClosed HTTPClosed
}

// HTTPClosed counts the connections a small HTTP server (the health
// endpoint, the daemon's metrics) closed unserved: Denied were from
// outside its allow list, Evicted made room for newer ones past its
// connection caps, Refused were new ones closed because every other was
// being served.
type HTTPClosed struct {
	Denied  uint64 `json:"denied"`
	Evicted uint64 `json:"evicted"`
	Refused uint64 `json:"refused"`
}

// HTTPClosedOf reads c.
func HTTPClosedOf(c *connlimit.Counts) HTTPClosed {
	return HTTPClosed{Denied: c.Denied(), Evicted: c.Evicted(), Refused: c.Refused()}
}

// Total is all of them.
func (h HTTPClosed) Total() uint64 { return h.Denied + h.Evicted + h.Refused }

// AbortRecord is one aborted session, kept for status output.
type AbortRecord struct {
	ID, Whitelist, Side string
	Client, Server      netip.AddrPort
	Reason              string // Abort* constant
	Error               string
	BytesUp, BytesDown  uint64
	At                  time.Time // when the session aborted (and reset its end host)
}

type counters struct {
	sessionsStarted   atomic.Uint64
	sessionsCompleted atomic.Uint64
	sessionsAborted   atomic.Uint64
	bytesUp           atomic.Uint64
	bytesDown         atomic.Uint64
	preauthTimeouts   atomic.Uint64
	handshakeFailures atomic.Uint64
	hellosAbandoned   atomic.Uint64
	fallbacks         atomic.Uint64
	streamsLost       atomic.Uint64
	streamsReplaced   atomic.Uint64
	resentFrames      atomic.Uint64
	resentBytes       atomic.Uint64
	duplicates        atomic.Uint64
	holFrames         atomic.Uint64
	holBytes          atomic.Uint64
	aborts            map[string]*atomic.Uint64
	rejected          map[string]*atomic.Uint64
}

func (c *counters) init() {
	c.aborts = make(map[string]*atomic.Uint64, len(abortKinds))
	for _, k := range abortKinds {
		c.aborts[k] = new(atomic.Uint64)
	}
	c.rejected = make(map[string]*atomic.Uint64, len(rejectKinds))
	for _, k := range rejectKinds {
		c.rejected[k] = new(atomic.Uint64)
	}
}

func (c *counters) addSent(sd side, n uint64) {
	if sd == clientSide {
		c.bytesUp.Add(n)
	} else {
		c.bytesDown.Add(n)
	}
}

func (c *counters) addDelivered(sd side, n uint64) {
	if sd == clientSide {
		c.bytesDown.Add(n)
	} else {
		c.bytesUp.Add(n)
	}
}

// reject counts a refusal and logs it, rate-limited per reason.
func (a *Agent) reject(kind, msg string, args ...any) {
	a.counters.rejected[kind].Add(1)
	a.limited.log(a.log, "reject-"+kind, msg, append(args, "reason", kind)...)
}

// endAttrs is what a session's last log line says of how it went, from
// its status at the end (ss), so that a slow or troubled transfer can be
// read from the log after it ended: its receive window and how deep its
// reorder buffer got, how often its sender waited for the peer's credit,
// the streams chosen (under streams = "auto"), lost and replaced, the
// bytes sent again (after a lost stream) or copied ahead of a stuck frame
// (head of line), and the frames it dropped as duplicates.
func endAttrs(ss SessionStats) []any {
	return []any{"window", ss.Window, "reorder_depth_max", ss.ReorderDepthMax, "credit_waits", ss.CreditWaits,
		"streams_chosen", ss.StreamsChosen, "streams_lost", ss.StreamsLost, "streams_replaced", ss.StreamsReplaced,
		"reinjected_bytes", ss.ReinjectedBytes, "head_of_line_bytes", ss.HeadOfLineBytes,
		"duplicates", ss.DuplicatesDropped}
}

// sessionEnded unregisters a finished session and accounts for it.
func (a *Agent) sessionEnded(s *session) {
	a.unregister(s)
	up, down := s.upDown()
	attrs := append(s.logAttrs(), "bytes_up", up, "bytes_down", down,
		"duration", time.Since(s.started).Round(time.Millisecond))
	attrs = append(attrs, endAttrs(s.stats(time.Now()))...)
	if !s.isAborted() {
		a.counters.sessionsCompleted.Add(1)
		a.log.Info("relay: session completed", attrs...)
		return
	}
	a.counters.sessionsAborted.Add(1)
	if c, ok := a.counters.aborts[s.abortKind]; ok {
		c.Add(1)
	}
	msg := ""
	if s.abortErr != nil {
		msg = s.abortErr.Error()
	}
	a.recent.add(AbortRecord{
		ID: s.id.String(), Whitelist: s.whitelist, Side: s.side.String(),
		Client: s.client, Server: s.server, Reason: s.abortKind, Error: msg,
		BytesUp: up, BytesDown: down, At: s.abortedAt,
	})
	level := slog.LevelWarn
	if s.abortKind == AbortShutdown {
		level = slog.LevelInfo
	}
	a.log.Log(context.Background(), level, "relay: session aborted", append(attrs, "reason", s.abortKind, "err", msg)...)
}

func (s *session) upDown() (up, down uint64) {
	if s.side == clientSide {
		return s.sentBytes.Load(), s.deliveredBytes.Load()
	}
	return s.deliveredBytes.Load(), s.sentBytes.Load()
}

// Stats returns a snapshot of the agent: live sessions with their streams
// (TCP_INFO is read now), totals and recent aborts.
func (a *Agent) Stats() Stats {
	a.mu.Lock()
	list := make([]*session, 0, len(a.sessions))
	for s := range a.sessions {
		list = append(list, s)
	}
	preauth := len(a.preauth)
	a.mu.Unlock()

	var st Stats
	st.PerAgentKeys = a.cfg.Load().pairTo != nil
	now := time.Now()
	for _, s := range list {
		ss := s.stats(now)
		st.Totals.StreamsActive += len(ss.PerStream)
		st.Sessions = append(st.Sessions, ss)
	}
	sort.Slice(st.Sessions, func(i, j int) bool {
		if !st.Sessions[i].Started.Equal(st.Sessions[j].Started) {
			return st.Sessions[i].Started.Before(st.Sessions[j].Started)
		}
		return st.Sessions[i].ID < st.Sessions[j].ID
	})
	c := &a.counters
	st.Totals.SessionsActive = len(list)
	st.Totals.PreAuthActive = preauth
	st.Totals.SessionsStarted = c.sessionsStarted.Load()
	st.Totals.SessionsCompleted = c.sessionsCompleted.Load()
	st.Totals.SessionsAborted = c.sessionsAborted.Load()
	st.Totals.BytesUp, st.Totals.BytesDown = c.bytesUp.Load(), c.bytesDown.Load()
	st.Totals.PreAuthTimeouts = c.preauthTimeouts.Load()
	st.Totals.HandshakeFailures = c.handshakeFailures.Load()
	st.Totals.HandshakesAbandoned = c.hellosAbandoned.Load()
	st.Totals.Fallbacks = c.fallbacks.Load()
	st.Totals.StreamsLost, st.Totals.StreamsReplaced = c.streamsLost.Load(), c.streamsReplaced.Load()
	st.Totals.ReinjectedFrames, st.Totals.ReinjectedBytes = c.resentFrames.Load(), c.resentBytes.Load()
	st.Totals.DuplicatesDropped = c.duplicates.Load()
	st.Totals.HeadOfLineFrames, st.Totals.HeadOfLineBytes = c.holFrames.Load(), c.holBytes.Load()
	st.Totals.MemoryReserved = a.memReserved.Load()
	st.Totals.HealthClosed = HTTPClosedOf(&a.healthClosed)
	st.Totals.MemoryLimit = a.cfg.Load().limits.Memory
	st.Totals.Aborts = make(map[string]uint64, len(c.aborts))
	for k, v := range c.aborts {
		st.Totals.Aborts[k] = v.Load()
	}
	st.Totals.Rejected = make(map[string]uint64, len(c.rejected))
	for k, v := range c.rejected {
		st.Totals.Rejected[k] = v.Load()
	}
	st.RecentAborts = a.recent.list()
	return st
}

func (s *session) stats(now time.Time) SessionStats {
	up, down := s.upDown()
	rateSent := math.Float64frombits(s.rateSent.Load())
	rateDelivered := math.Float64frombits(s.rateDelivered.Load())
	ss := SessionStats{
		ID: s.id.String(), Whitelist: s.whitelist, Side: s.side.String(),
		Client: s.client, Server: s.server,
		Streams: s.n, ChunkSize: s.chunkSize, QueueLength: s.queueLength,
		Started: s.started, Age: now.Sub(s.started),
		BytesUp: up, BytesDown: down,
		Stalls: s.stalls.Load(),
		Memory: s.sendPool.bytes() + s.recvPool.bytes(),
	}
	if s.side == clientSide {
		ss.ThroughputUp, ss.ThroughputDown = rateSent, rateDelivered
	} else {
		ss.ThroughputUp, ss.ThroughputDown = rateDelivered, rateSent
	}
	s.mu.Lock()
	ss.ReorderDepth, ss.ReorderDepthMax, ss.ReorderWindow = s.reasm.Depth(), s.depthMax, s.reasm.Window()
	ss.Window, ss.WindowMax = s.window*s.chunkSize, s.windowCap*s.chunkSize
	// The receive window and the send retention share the session cap.
	ss.MemoryMax = min(s.sessionCap, stripe.SessionMemory(s.n, s.chunkSize, s.windowCap)+
		stripe.RetainFootprint(s.chunkSize, stripe.MaxWindowFrames))
	ss.CreditWaits = s.creditWaits.Load()
	ss.PacingRate = 8 * float64(s.paceTotal.Load())
	ss.StreamsRecovering = int(s.recovering.Load())
	streams := make([]*stream, 0, len(s.streams))
	for _, st := range s.streams {
		if st != nil && !st.isLost() {
			streams = append(streams, st)
		}
	}
	s.mu.Unlock()
	ss.StreamsLive = uint64(len(streams))
	ss.StreamsChosen, ss.AutoStreams = int(s.target.Load()), s.autoStreams
	if s.auto != nil {
		ss.AutoState = AutoState(s.auto.state.Load())
	}
	ss.StreamsLost, ss.StreamsReplaced = s.streamsLost.Load(), s.streamsJoined.Load()
	ss.ReinjectedFrames, ss.ReinjectedBytes = s.resentFrames.Load(), s.resentBytes.Load()
	ss.DuplicatesDropped = s.duplicates.Load()
	ss.HeadOfLineFrames, ss.HeadOfLineBytes = s.holFrames.Load(), s.holBytes.Load()
	ss.Memory += int64(len(streams)) * stripe.StreamReadBuffer
	switch {
	case s.isAborted():
		ss.State = "aborting"
	case !s.established.Load():
		ss.State = "joining"
	case s.sendFin.Load() || s.recvFin.Load():
		ss.State = "half-closed"
	default:
		ss.State = "established"
	}
	writersDone := int(s.writersDone.Load()) >= s.n
	for _, st := range streams {
		sst := StreamStats{
			Index:              st.index,
			Local:              addrPortOf(st.conn.LocalAddr()),
			Remote:             addrPortOf(st.conn.RemoteAddr()),
			BytesSent:          st.bytesSent.Load(),
			BytesReceived:      st.bytesRecv.Load(),
			ThroughputSent:     math.Float64frombits(st.rateSent.Load()),
			ThroughputReceived: math.Float64frombits(st.rateRecv.Load()),
			FramesSent:         st.framesSent.Load(),
			FramesReceived:     st.framesRecv.Load(),
			Pauses:             st.pauses.Load(),
			Troubles:           st.troubles.Load(),
			WriteHalfClosed:    writersDone,
		}
		if info, ok := readTCPInfo(st.conn); ok {
			sst.Retransmits, sst.RTT, sst.CongestionWindow = info.retransmits, info.rtt, info.cwnd
			ss.Retransmits += uint64(info.retransmits)
		}
		ss.PerStream = append(ss.PerStream, sst)
	}
	return ss
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		return unmapAddrPort(t.AddrPort())
	}
	return netip.AddrPort{}
}

func f64bits(f float64) uint64 { return math.Float64bits(f) }

// abortLog keeps the last aborted sessions.
type abortLog struct {
	mu   sync.Mutex
	ring []AbortRecord
}

const abortLogSize = 32

func (l *abortLog) add(r AbortRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ring) == abortLogSize {
		copy(l.ring, l.ring[1:])
		l.ring = l.ring[:abortLogSize-1]
	}
	l.ring = append(l.ring, r)
}

func (l *abortLog) list() []AbortRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]AbortRecord(nil), l.ring...)
}

// limitedLog logs a recurring event at most once per interval per key, with
// the number of events it suppressed, so a flood of rejected connections
// cannot flood the log.
type limitedLog struct {
	mu   sync.Mutex
	last map[string]time.Time
	hush map[string]int
}

const limitedLogInterval = 5 * time.Second

func (l *limitedLog) log(log *slog.Logger, key, msg string, args ...any) {
	l.mu.Lock()
	if l.last == nil {
		l.last, l.hush = make(map[string]time.Time), make(map[string]int)
	}
	now := time.Now()
	if t, ok := l.last[key]; ok && now.Sub(t) < limitedLogInterval {
		l.hush[key]++
		l.mu.Unlock()
		return
	}
	suppressed := l.hush[key]
	l.last[key], l.hush[key] = now, 0
	l.mu.Unlock()
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	log.Warn(msg, args...)
}

package relay

import (
	"sync/atomic"
	"time"
)

// Auto streams: a whitelist with streams = "auto" sizes each session's
// stream count from what more streams do for it. The session's shape
// (the hello's stream count) is the whitelist's maximum; the client side
// starts with autoFirstStreams of them and doubles the count, by joins of
// the running session, while the session is limited by its streams (not
// by an end host) and the last doubling raised its rate by autoGain at
// least. A doubling that did not stops the growth: the count stays.
// A count's rate is its plateau: the rate is measured again, span after
// span, while it still rises by autoGain from one span to the next (the
// streams' congestion control is still starting up, which on a long path
// takes many round trips), at most autoSpans times.
const (
	// autoFirstStreams: 8, now that every count is paced (on a path of
	// pacingMinRTT or more, as every lab path is). Measured in
	// the lab (bench-wan, 500 Mbit/s, 200 ms, 0.1 %, 2 runs each), auto
	// got 455-466 Mbit/s starting at 8 and 424-438 starting at 4: from 4,
	// its first doubling came at 4-6 s, into the measured time.
	autoFirstStreams = 8
	autoGain         = 1.1
	autoSpans        = 8
	// A new count is given autoSettle round trips (at least
	// autoSettleMin) to ramp up before its rate is measured over
	// autoSpan round trips (at least autoSpanMin).
	autoSettle    = 3
	autoSettleMin = 250 * time.Millisecond
	autoSpan      = 4
	autoSpanMin   = time.Second
)

// AutoState says where a session's choice of its stream count stands,
// for status: why it has the count it has.
type AutoState int32

const (
	AutoJoining     AutoState = iota // streams of the count still joining
	AutoMeasuring                    // measuring the count's rate
	AutoHostLimited                  // an end host held the session back: measuring again
	AutoKept                         // more streams did not raise the rate: the count stays
	AutoAtMax                        // the whitelist's maximum
)

func (st AutoState) String() string {
	switch st {
	case AutoJoining:
		return "joining"
	case AutoMeasuring:
		return "measuring"
	case AutoHostLimited:
		return "held back by an end host"
	case AutoKept:
		return "kept: more streams did not raise the rate"
	case AutoAtMax:
		return "at the maximum"
	}
	return "unknown"
}

// autoChoice is the state of one session's choice; housekeeping only,
// but for state, which stats read.
type autoChoice struct {
	done bool
	// since is when every stream of the current count was up (zero:
	// some are still joining); markAt and markBytes start the current
	// measurement (zero: still settling).
	since, markAt time.Time
	markBytes     uint64
	// limited and ticks count the measurement's ticks at which the
	// streams, not an end host, held the session back; creditWaits is
	// the session's count of credit waits at the last tick.
	limited, ticks int
	creditWaits    uint64
	// rate is the session's rate at the previous count, bit/s; last the
	// rate of the current count's previous span, spans how many spans
	// it has measured.
	rate, last float64
	spans      int
	state      atomic.Int32 // AutoState
}

// chooseStreams runs one housekeeping step of the auto stream count.
func (s *session) chooseStreams(now time.Time) {
	au := s.auto
	if au == nil || au.done || !s.established.Load() {
		return
	}
	target := int(s.target.Load())
	if target >= s.n {
		au.done = true
		au.state.Store(int32(AutoAtMax))
		return
	}
	if s.sendFin.Load() && s.recvFin.Load() {
		// Both directions ended. (One alone does not end the choice: a
		// download after the request's half-close, or an upload after
		// the server's, gains from more streams as much.)
		au.done = true
		return
	}
	var rtt time.Duration
	live := 0
	for _, st := range s.establishedStreams() {
		if st.index >= target || st.isLost() {
			continue
		}
		live++
		if info, ok := readTCPInfo(st.conn); ok {
			rtt = max(rtt, info.rtt)
		}
	}
	moved := s.sentBytes.Load() + s.deliveredBytes.Load()
	switch {
	case live < target:
		au.since, au.markAt = time.Time{}, time.Time{}
		au.last, au.spans = 0, 0
		au.state.Store(int32(AutoJoining))
		return
	case au.since.IsZero():
		au.since = now
		if AutoState(au.state.Load()) == AutoJoining {
			au.state.Store(int32(AutoMeasuring))
		}
		return
	case au.markAt.IsZero():
		if now.Sub(au.since) >= max(autoSettle*rtt, autoSettleMin) {
			au.markAt, au.markBytes, au.limited, au.ticks = now, moved, 0, 0
		}
		return
	}
	au.ticks++
	waits := s.creditWaits.Load()
	if s.streamLimited() || waits != au.creditWaits {
		au.limited++
	}
	au.creditWaits = waits
	span := now.Sub(au.markAt)
	if span < max(autoSpan*rtt, autoSpanMin) {
		return
	}
	rate := float64(moved-au.markBytes) * 8 / span.Seconds()
	if 2*au.limited < au.ticks {
		// An end host held the session back most of the time: more
		// streams would not tell. Measure again.
		au.markAt, au.markBytes, au.limited, au.ticks = now, moved, 0, 0
		au.state.Store(int32(AutoHostLimited))
		return
	}
	au.state.Store(int32(AutoMeasuring))
	au.spans++
	if au.spans < autoSpans && (au.last == 0 || rate >= autoGain*au.last) {
		// Still rising: no plateau yet.
		au.last = rate
		au.markAt, au.markBytes, au.limited, au.ticks = now, moved, 0, 0
		return
	}
	rate = max(rate, au.last)
	au.last, au.spans = 0, 0
	a := s.agent
	if au.rate > 0 && rate < autoGain*au.rate {
		au.done = true
		au.state.Store(int32(AutoKept))
		a.log.Debug("relay: auto streams: more streams did not raise the rate; keeping them",
			append(s.logAttrs(), "chosen", target, "rate", rate, "before", au.rate)...)
		return
	}
	au.rate = rate
	next := min(2*target, s.n)
	s.target.Store(int32(next))
	au.since, au.markAt = time.Time{}, time.Time{}
	a.log.Debug("relay: auto streams: opening more", append(s.logAttrs(), "from", target, "to", next, "rate", rate)...)
	select {
	case s.lostWake <- struct{}{}:
	default:
	}
}

// streamLimited says whether, now, the session's streams rather than an
// end host hold it back: chunks read from the end host wait for a stream
// (send direction), or delivery to the end host waits for frames while
// frames arrive (receive direction). A wait for the peer's credit counts
// too (chooseStreams): the window follows the arrival rate, which more
// streams may raise; the gain rule stops the growth when they do not.
func (s *session) streamLimited() bool {
	if len(s.sendq) > 0 {
		return true
	}
	s.mu.Lock()
	waiting := s.hostWaiting
	s.mu.Unlock()
	return waiting && s.rateDelivered.Load() != 0
}

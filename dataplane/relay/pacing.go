package relay

import (
	"math"
	"time"
)

// Stripe pacing. Each stream's congestion control sees only its own
// share of the session, and with many streams their sum overshoots the
// path: a stream the scheduler leaves idle part of the time looks
// application-limited to BBR, whose start-up ignores such rounds, so most
// of a session's streams stay in start-up and pace at 2.89 times their
// share. With 16 and 64 streams on the lab's 500 Mbit/s path the streams
// paced at 1.1-2 Gbit/s together, all of them were often in loss
// recovery at once, and up to a fifth of what they sent was sent again.
//
// So the sending side of a session measures what its streams deliver
// together: the segments TCP counts delivered, selectively acknowledged
// ones included, over the last tick or round trip. (Cumulatively
// acknowledged bytes are no measure: a repaired loss releases a round
// trip of them at once, and one tick's overstated the path twofold.)
// Start-up ends once that rate stops growing, or once the streams send
// more than pacingStartupLoss of it again. From then on each stream's
// pacing rate (SO_MAX_PACING_RATE) is capped at its share of the best
// recent rate. The share cycles like BBR's probe: a tick at 1.25 times,
// one at 0.75, six at 1, so the session finds more room when the path has
// it and drains the queue it built; the cycle starts at its 0.75, which
// drains start-up's queue. Nothing is capped during start-up: the
// streams' own start-up finds the path. A session whose stream count
// grows beyond what it had (auto's next count) starts up again, its caps
// lifted, so the new count can show what it carries. Ticks at which the
// session had nothing waiting to send (the end host or the peer's credit
// held it back) do not lower the rate. The rate is shared among the
// streams not in loss recovery (streamShare).
//
// Measured in the lab (bench-wan, 500 Mbit/s, 200 ms, 0.1 %): 64 stripes
// went from 448-460 to 473-480 Mbit/s; pacing every session, with the
// share among the streams out of recovery, 8 went from 452-455 to
// 469-480 and 16 from 400-463 to 471-478 (3 runs). A session of one
// stream is not paced. Rates measured over a second, or a two-tick
// probe, settled too low and probed too slowly (331-406).
const (
	// pacingGrowth is what a tick's rate must exceed the best start-up
	// rate by to count as growth, and pacingFlatTicks how many ticks
	// without growth (and at least as many round trips) end start-up.
	pacingGrowth    = 1.25
	pacingFlatTicks = 3
	// pacingStartupLoss also ends start-up: the streams sent this share
	// of what they delivered again, over the span. Random loss on a long
	// path is well below it; a queue the streams overflowed is far above
	// (10-20 % with 64 streams in the lab).
	pacingStartupLoss = 0.02
	// The best rate is the highest over pacingWindowRTTs round trips,
	// at least pacingWindowMin.
	pacingWindowRTTs = 10
	pacingWindowMin  = 2 * time.Second
	// A rate is measured over the last pacingSpanMin or pacingSpanRTTs
	// round trips of ticks, whichever is longer, at most pacingSpanTicks
	// (on a path of a second or more, several ticks).
	pacingSpanMin   = 250 * time.Millisecond
	pacingSpanRTTs  = 1
	pacingSpanTicks = 32
	// pacingMinStreams is the fewest live streams a session paces: one
	// stream has nothing to share, and its own BBR leaves start-up.
	pacingMinStreams = 2
	// pacingMinShare is the least a stream is capped at, in bytes/s.
	pacingMinShare = 16 << 10
	// pacingRetune is the relative change of a stream's cap below which
	// the socket keeps the cap it has.
	pacingRetune = 0.05
)

// pacingGains is the probe cycle, one entry per housekeeping tick;
// pacingDrainPhase is its drain, where cruising starts.
var pacingGains = [...]float64{1.25, 0.75, 1, 1, 1, 1, 1, 1}

const pacingDrainPhase = 1

// noPacingCap is SO_MAX_PACING_RATE's "no cap".
const noPacingCap = math.MaxUint64

type rateSample struct {
	at   time.Time
	rate float64 // bytes/s
}

// pacingTick is one housekeeping tick's delivery.
type pacingTick struct {
	bytes, resent uint64  // delivered, and sent again
	dt            float64 // seconds
	appLimited    bool
}

// stripePacer decides a session's pacing; housekeeping only.
type stripePacer struct {
	peak     int       // the most live streams since the last start-up
	cruising bool      // start-up is over
	fullRate float64   // the best start-up rate
	flat     int       // ticks since start-up last grew
	grewAt   time.Time // when start-up last grew
	samples  []rateSample
	best     float64 // the best rate of the window, kept while no sample is in it
	phase    int
	ticks    [pacingSpanTicks]pacingTick
	nticks   int // ticks recorded in all
}

// tick records one housekeeping tick and returns, over the span, the
// delivery rate (bytes/s), the share of it sent again, and whether the
// session was held back by something other than its streams at any tick.
func (p *stripePacer) tick(d pacingTick, rtt time.Duration) (rate, resent float64, appLimited bool) {
	p.ticks[p.nticks%pacingSpanTicks] = d
	p.nticks++
	span := max(pacingSpanMin, pacingSpanRTTs*rtt).Seconds()
	var sum, again uint64
	var secs float64
	for i := 0; i < min(p.nticks, pacingSpanTicks) && secs < span; i++ {
		t := p.ticks[(p.nticks-1-i)%pacingSpanTicks]
		sum += t.bytes
		again += t.resent
		secs += t.dt
		appLimited = appLimited || t.appLimited
	}
	if secs <= 0 || sum == 0 {
		return 0, 0, true
	}
	return float64(sum) / secs, float64(again) / float64(sum), appLimited
}

// update takes one tick's delivery (bytes delivered and sent again over
// dt seconds, and whether the session was held back by something other
// than its streams) and the path's round trip. It returns the pacing
// rate all of the session's streams may use together, in bytes/s, or 0
// for no cap.
func (p *stripePacer) update(now time.Time, d pacingTick, rtt time.Duration) float64 {
	rate, resent, appLimited := p.tick(d, rtt)
	window := max(pacingWindowMin, pacingWindowRTTs*rtt)
	keep := p.samples[:0]
	for _, s := range p.samples {
		if now.Sub(s.at) <= window {
			keep = append(keep, s)
		}
	}
	p.samples = keep
	if !appLimited || rate > p.best {
		p.samples = append(p.samples, rateSample{now, rate})
	}
	if len(p.samples) > 0 {
		p.best = p.windowBest()
	}
	if !p.cruising {
		if appLimited {
			return 0
		}
		overflowed := resent > pacingStartupLoss && p.best > 0
		if !overflowed && (p.grewAt.IsZero() || rate >= pacingGrowth*p.fullRate) {
			p.fullRate = max(p.fullRate, rate)
			p.flat = 0
			p.grewAt = now
			return 0
		}
		p.flat++
		if !overflowed && (p.flat < pacingFlatTicks || now.Sub(p.grewAt) < pacingFlatTicks*rtt || p.best <= 0) {
			return 0
		}
		// The first tick drains the queue start-up built.
		p.cruising = true
		p.phase = pacingDrainPhase
	}
	total := pacingGains[p.phase] * p.best
	p.phase = (p.phase + 1) % len(pacingGains)
	return total
}

// noteStreams takes the tick's live stream count. More streams than the
// session had since its last start-up (auto's next count) may carry more
// than the best rate so far, so the pacer starts up again; a replacement
// of a lost stream only comes back to the count it had, and does not.
func (p *stripePacer) noteStreams(live int) (restarted bool) {
	if live <= p.peak {
		return false
	}
	restarted = p.peak > 0
	p.peak = live
	if restarted {
		p.cruising, p.fullRate, p.flat, p.grewAt = false, 0, 0, time.Time{}
	}
	return restarted
}

func (p *stripePacer) windowBest() float64 {
	b := 0.0
	for _, s := range p.samples {
		b = max(b, s.rate)
	}
	return b
}

// carriersOnly is the scheduler's rule: the streams in loss recovery get
// no new chunks while a quarter or more of the live streams is healthy.
// Below that the streams in recovery carry new chunks too: a loss burst
// in the WAN's queue can put nearly all streams in recovery at once, and
// the few left could not carry the session.
func carriersOnly(healthy, live int) bool {
	return live > 0 && 4*healthy >= live
}

// streamShare divides the session's pacing rate among the live streams
// that carry new chunks: those not in loss recovery, under the
// scheduler's rule (carriersOnly). A stream in recovery sends only what
// it holds, and with random loss on a long path one is nearly always in
// recovery: at 0.1 % on the lab's path, about one of a session's streams
// at a time. Dividing the rate among all of them left a fifth of it
// unused at 4 streams (356 Mbit/s paced against 428-464 unpaced) and
// held 16 at 442-452; divided among the carriers, 4 streams ran at
// 437-452 and 16 at 471-478. A stream in recovery keeps the same cap for
// its retransmissions and for when it is out.
func streamShare(total float64, live, recovering int) float64 {
	if total <= 0 || live <= 0 {
		return 0
	}
	carriers := live - min(max(recovering, 0), live)
	if carriers == 0 || !carriersOnly(carriers, live) {
		carriers = live
	}
	return max(total/float64(carriers), pacingMinShare)
}

// pace applies one tick of the session's pacing to its live streams;
// housekeeping only. recovering is how many of them are in loss
// recovery; d what TCP delivered on them and sent again since the last
// tick; notsent what their sockets hold unsent.
func (s *session) pace(now time.Time, streams []*stream, recovering int, d pacingTick, notsent uint64, rtt time.Duration) {
	if len(streams) == 0 || d.dt <= 0 || rtt <= 0 {
		return
	}
	s.pacer.noteStreams(len(streams))
	if len(streams) < pacingMinStreams {
		// One stream: nothing to share, no cap (and none left from when the
		// session had more).
		s.paceShare.Store(0)
		s.paceTotal.Store(0)
		for _, st := range streams {
			st.applyPacing(0)
		}
		return
	}
	// Nothing waiting to be sent: the end host (or the peer's credit),
	// not the streams, set this tick's rate.
	d.appLimited = len(s.sendq) == 0 && notsent < uint64(len(streams)*s.chunkSize)
	total := s.pacer.update(now, d, rtt)
	share := streamShare(total, len(streams), recovering)
	s.paceTotal.Store(uint64(total))
	s.paceShare.Store(uint64(share))
	for _, st := range streams {
		st.applyPacing(share)
	}
}

// applyPacing sets the stream's pacing cap to share bytes/s (0: none),
// when it moved by more than pacingRetune.
func (st *stream) applyPacing(share float64) {
	if ceiling := float64(st.s.agent.testPaceCeiling.Load()); ceiling > 0 && (share <= 0 || share > ceiling) {
		share = ceiling
	}
	cur := st.paceCap
	if share <= 0 {
		if cur == 0 {
			return
		}
		if setMaxPacingRate(st.conn, noPacingCap) == nil {
			st.paceCap = 0
		}
		return
	}
	if cur > 0 && math.Abs(share-cur) <= pacingRetune*cur {
		return
	}
	if setMaxPacingRate(st.conn, uint64(share)) == nil {
		st.paceCap = share
	}
}

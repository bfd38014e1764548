package relay

import (
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
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
// more than pacingStartupLoss of it again (by more than chance over the
// segments counted: overflowing). From then on each stream's
// pacing rate (SO_MAX_PACING_RATE) is capped at its share of the best
// recent rate. The share cycles like BBR's probe: a tick at 1.25 times,
// one at 0.75, six at 1, so the session finds more room when the path has
// it and drains the queue it built; a probe tick that ended held back
// built none, and its drain tick stays at 1. Cruising starts at the 0.75,
// held while the streams have more than the path's bandwidth-delay
// product in flight (at most pacingDrainTicks), to drain start-up's
// queue. No rate is capped during start-up: the streams' own start-up
// finds the path (a session of many streams has its bytes in flight
// bounded instead: "Start-up window" below). A session whose stream count
// grows beyond what it had (auto's next count) starts up again, its rate
// caps lifted (its bytes in flight bounded by the start-up window), so
// the new count can show what it carries. Ticks at which the
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
	// (10-20 % with 64 streams in the lab). The segments sent again must
	// also exceed that share of those delivered by pacingLossZ standard
	// deviations of a Poisson count, and number at least pacingOverflowMin
	// (overflowing): early in start-up a span delivers few segments, and
	// at 1 % random loss a few sent again are a share above 2 % by chance.
	// In the lab at 1 % (6 s transfers, 16 and 64 stripes alternating)
	// the share alone ended 6 of 35 start-ups of 16 stripes at 2.9-50
	// Mbit/s, with 2.1-10 % sent again (6 of about 63 segments at the
	// least), and those transfers carried as little as 7 Mbit/s: the
	// probe climbs by a quarter every two seconds. With this test none
	// of 21 did; every overflow it saw was 3.5 % or more.
	pacingStartupLoss = 0.02
	pacingLossZ       = 3
	pacingOverflowMin = 32
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
	// pacingDrainTicks bounds cruising's first drain, in ticks.
	pacingDrainTicks = 4
	// pacingQueueBDPs is what the streams may hold in flight, in the
	// path's bandwidth-delay products, before a cruising tick drains
	// instead (see "Standing queue").
	pacingQueueBDPs = 1.25
	// pacingMinRTT is the least round trip of a path whose sessions are
	// capped: see "Short paths".
	pacingMinRTT = 5 * time.Millisecond
)

// Short paths. A session whose streams' least RTT (their min_rtt) is
// below pacingMinRTT is not capped: the pacer still measures it and
// leaves start-up (its log line says capped=false), but the rate it
// would cap at is not applied; the start-up window below still bounds a
// session of many streams, or a start-up again at auto's next count, and
// the ProbeRTT spread still restarts the streams' BBR. What the
// caps prevent is a long path's loss: a queue the streams overflow
// together costs a round trip of segments on every stream, and on a
// 200 ms path their repair stalls the session for a fraction of a
// second. On a path of a millisecond the same repair takes a millisecond,
// while the pacer, which measures in 250 ms ticks and probes once in
// eight, is hundreds of round trips behind the rate the path, or the
// agents' cores, allow from one moment to the next; its caps then only
// hold back the moments the session could go faster. On loopback
// (BenchmarkRelay, 8 stripes, relay alone, 4 GiB transfers, where start-up
// ended after about two seconds) the caps took 8 % of the rate: uncapped
// it ran at 1.09x (12 interleaved rounds, quartiles 1.03-1.16) and 0.95x
// the CPU per GiB. Every path the lab measured pacing on is 50 ms or more.

// Reads held to the rate. Each stream's cap is its share of the rate
// among the streams that carry (streamShare), and a stream in loss
// recovery keeps its cap and is out of recovery again within the tick:
// the caps add up to more than the session's rate, and each stream's
// BBR, whose probing and bandwidth filter put it above its share, set
// the session's rate instead. On the lab's 500 Mbit/s, 200 ms path (a
// drop-tail queue of one bandwidth-delay product, 12.5 MB) 8 stripes at
// 0.1 % loss had caps of 90 Mbit/s each, 718 together, kept the WAN's
// queue at 10-12.4 MB and overflowed it every second or two: 3-8 % of
// their frames were dropped by the queue, against 0.1 % lost at random.
// So a paced session also reads from its end host at no more than its
// rate (paceGate, with paceBurst of slack): the caps share the rate out,
// the gate bounds their sum. A tick at which the gate held the reads
// back was not held back by the end host (appLimited). Tried instead:
// sharing the rate among all but the timed-out streams, which kept the
// caps' sum at the rate but left the share of the streams in fast
// recovery unused; at 1 % loss 4 stripes fell from 460-480 to 368-413
// Mbit/s.
//
// Standing queue. The best rate is the highest of a window of
// quarter-second rates, and their noise puts it above the path's (a
// cruising session on the lab's path paced at 502-523 Mbit/s); held to
// it, a session fills the WAN's queue by a few Mbit/s, which the probe
// cycle's drain, taking back only what its probe put in, leaves there
// until it overflows. So a cruising tick of gain 1 at which the streams
// hold more than pacingQueueBDPs of the path's bandwidth-delay product in
// flight (the best rate times the least RTT) drains instead, once per
// probe cycle: a queue that others keep full costs a session at most one
// drain tick in eight. The drain takes out what is in flight beyond one
// bandwidth-delay product over the tick, at the probe cycle's drain gain
// at most: on the lab's 200 ms path a tick carries about 1.25 BDPs, so
// its drains run at 0.75-0.8; on a 50 ms path, where it carries five, a
// drain at 0.75 took out more than the queue held and left the link idle
// for the rest of the tick: 4 stripes ran at 0.95x `iperf3 -P 4` (three
// runs, 0.950-0.955), 0.98x with this drain (0.979-0.986) and 0.99x with
// none, the WAN's queue dropping 1.2-1.8 % of their frames with this one.

// Start-up window. A stream left idle part of the time looks
// application-limited to its BBR, whose start-up then goes on for as long
// as the session's start-up does, pacing at 2.89 times the stream's
// share; while the peer's credit holds the session back, every stream
// waits in start-up. In the lab (64 stripes, 500 Mbit/s, 200 ms, a queue
// of one bandwidth-delay product) the far agent's window grew past the
// path's BDP plus its queue before the streams' rates levelled off, the
// streams then sent at up to 1.5 Gbit/s together, and all 64 were in
// loss recovery at once: the transfer stalled for a fraction of a second,
// in some runs the demo's slowest second.
//
// So while the session's pacing is in start-up, a session of
// startupMinStreams streams or more bounds what its streams hold in
// flight together at startupGain times its best delivery rate times the
// least RTT of its streams (their min_rtt), and never below the peer's
// initial window; each stream's share of it is its send buffer (the
// send buffer also holds the stream's unsent bytes, up to its
// TCP_NOTSENT_LOWAT). While the path has room the delivery rate, and the
// window with it, grows by up to startupGain each tick; once the path is
// full, the window is startupGain BDPs and the queue holds at most
// startupGain-1 of them. A stream in loss recovery fills its share with
// what it holds, and the other streams carry the new chunks. Once start-
// up is over the configured send buffer (or, under the kernel's
// autotuning, its maximum) comes back. In the lab demo (64 stripes, 3
// runs each, interleaved) the transfer went from 0.95-0.97x to
// 0.97-0.99x end-host parallel; at a gain of 2 the window reached the
// BDP plus the lab's queue and still overflowed it. Sessions of fewer
// streams are left alone: each stream's BBR sees more of the path, and
// bounding 4 and 8 stripes this way slowed their start-up (bench-wan, 2
// runs: 385 and 428 Mbit/s, where the tree without it had 438 and 471)
// from the first tick's low rate. A start-up again after auto's next
// count is bounded whatever the count: its best rate is already the
// path's, and the old streams' BBR, still in its start-up, and the new
// ones' would overflow a full path together.
const (
	startupGain       = 1.5
	startupMinStreams = 32
	// startupMinFrames is the least share of a stream, in chunks.
	startupMinFrames = 4
)

// pacingGains is the probe cycle, one entry per housekeeping tick;
// pacingDrainPhase is its drain, where cruising starts.
var pacingGains = [...]float64{1.25, 0.75, 1, 1, 1, 1, 1, 1}

const pacingDrainPhase = 1

// mbps is a rate in bytes/s as Mbit/s, rounded to one decimal, for logs.
func mbps(bytesPerSecond float64) float64 {
	return math.Round(bytesPerSecond*8/1e5) / 10
}

// noPacingCap is SO_MAX_PACING_RATE's "no cap".
const noPacingCap = math.MaxUint64

type rateSample struct {
	at   time.Time
	rate float64 // bytes/s
}

// pacingTick is one housekeeping tick's delivery.
type pacingTick struct {
	bytes            uint64  // delivered
	segs, resentSegs uint64  // delivered, and sent again, in segments
	dt               float64 // seconds
	appLimited       bool
	// inflight is what the streams' TCP has in flight at the tick, and
	// minRTT the least RTT any of them saw.
	inflight uint64
	minRTT   time.Duration
}

// stripePacer decides a session's pacing; housekeeping only.
type stripePacer struct {
	peak int // the most live streams since the last start-up
	// again: the current start-up is a restart (more streams once it
	// cruised), which the start-up window bounds whatever the count.
	again    bool
	cruising bool      // start-up is over
	fullRate float64   // the best start-up rate
	flat     int       // ticks since start-up last grew
	grewAt   time.Time // when start-up last grew
	samples  []rateSample
	best     float64 // the best rate of the window, kept while no sample is in it
	phase    int
	// draining: cruising began with the drain gain, held while the
	// streams have more than the path's BDP in flight (drainTicks).
	draining   bool
	drainTicks int
	// redrained: this probe cycle already drained a standing queue.
	redrained bool
	ticks     [pacingSpanTicks]pacingTick
	nticks    int // ticks recorded in all
	// ended is how the last start-up ended, for the log.
	ended startupEnd
}

// startupEnd is how a start-up ended: the best rate it cruises from and
// the span's rate (bytes/s), the share of it sent again, and whether that
// share (overflow) rather than a flat rate ended it.
type startupEnd struct {
	best, rate, resent float64
	overflowed         bool
}

// tick records one housekeeping tick and returns, over the span, the
// delivery rate (bytes/s), the share of its segments sent again, whether
// those show an overflow (overflowing), and whether the session was held
// back by something other than its streams at any tick.
func (p *stripePacer) tick(d pacingTick, rtt time.Duration) (rate, resent float64, overflow, appLimited bool) {
	p.ticks[p.nticks%pacingSpanTicks] = d
	p.nticks++
	span := max(pacingSpanMin, pacingSpanRTTs*rtt).Seconds()
	var sum, segs, again uint64
	var secs float64
	for i := 0; i < min(p.nticks, pacingSpanTicks) && secs < span; i++ {
		t := p.ticks[(p.nticks-1-i)%pacingSpanTicks]
		sum += t.bytes
		segs += t.segs
		again += t.resentSegs
		secs += t.dt
		appLimited = appLimited || t.appLimited
	}
	if secs <= 0 || sum == 0 {
		return 0, 0, false, true
	}
	if segs > 0 {
		resent = float64(again) / float64(segs)
	}
	return float64(sum) / secs, resent, overflowing(segs, again), appLimited
}

// overflowing says whether again segments sent again, of delivered, show
// a queue the streams overflowed rather than random loss: more than
// pacingStartupLoss of delivered by pacingLossZ standard deviations of a
// Poisson count at that share, and at least pacingOverflowMin.
func overflowing(delivered, again uint64) bool {
	expect := pacingStartupLoss * float64(delivered)
	return float64(again) > max(expect+pacingLossZ*math.Sqrt(expect), pacingOverflowMin)
}

// update takes one tick's delivery (bytes and segments delivered and
// segments sent again over dt seconds, and whether the session was held
// back by something other than its streams) and the path's round trip.
// It returns the pacing rate all of the session's streams may use
// together, in bytes/s, or 0 for no cap.
func (p *stripePacer) update(now time.Time, d pacingTick, rtt time.Duration) float64 {
	rate, resent, overflow, appLimited := p.tick(d, rtt)
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
		overflowed := overflow && p.best > 0
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
		// Cruising starts by draining the queue start-up built.
		p.cruising, p.draining, p.drainTicks = true, true, 0
		p.ended = startupEnd{best: p.best, rate: rate, resent: resent, overflowed: overflowed}
	}
	if p.draining {
		if p.drainTicks < 1 || p.drainTicks < pacingDrainTicks && p.inflightOver(d, 1) {
			p.drainTicks++
			return pacingGains[pacingDrainPhase] * p.best
		}
		p.draining = false
		p.phase = pacingDrainPhase + 1
	}
	gain := pacingGains[p.phase]
	if p.phase == 0 {
		p.redrained = false
	}
	if p.phase == pacingDrainPhase && d.appLimited {
		// The probe tick ended held back (by the peer's credit or the
		// end host): it put no surplus in the queue for the drain to
		// take out, and a drain would only leave the link idle.
		gain = 1
	}
	if gain == 1 && !p.redrained && p.inflightOver(d, pacingQueueBDPs) {
		// A queue stands: drain it (see "Standing queue").
		gain, p.redrained = p.queueDrainGain(d), true
	}
	p.phase = (p.phase + 1) % len(pacingGains)
	return gain * p.best
}

// queueDrainGain is the gain of a tick that drains a standing queue: it
// takes out what the streams hold in flight beyond the path's
// bandwidth-delay product over one tick like d, and no more than the
// probe cycle's drain does.
func (p *stripePacer) queueDrainGain(d pacingTick) float64 {
	excess := float64(d.inflight) - p.best*d.minRTT.Seconds()
	return max(pacingGains[pacingDrainPhase], 1-excess/(p.best*max(d.dt, pacingSpanMin.Seconds())))
}

// inflightOver says whether the streams had more than bdps of the path's
// bandwidth-delay product (the best rate times the least RTT) in flight
// at the tick d: a queue stands on the path.
func (p *stripePacer) inflightOver(d pacingTick, bdps float64) bool {
	return d.minRTT > 0 && float64(d.inflight) > bdps*p.best*d.minRTT.Seconds()
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
		// Streams joining a new session bring it to its count during
		// its first start-up; only auto's next count comes once it
		// cruised.
		p.again = p.again || p.cruising
		p.cruising, p.draining, p.fullRate, p.flat, p.grewAt = false, false, 0, 0, time.Time{}
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

// pacingMinRTT is pacingMinRTT, or what a test set instead.
func (a *Agent) pacingMinRTT() time.Duration {
	if v := a.testPaceMinRTT.Load(); v != 0 {
		return time.Duration(v)
	}
	return pacingMinRTT
}

// carriersOnly is the scheduler's rule: the streams in loss recovery get
// no new chunks while a quarter or more of the live streams is healthy.
// Below that the streams in recovery carry new chunks too: a loss burst
// in the WAN's queue can put nearly all streams in recovery at once, and
// the few left could not carry the session.
func carriersOnly(healthy, live int) bool {
	return live > 0 && 4*healthy >= live
}

// holdBack is the scheduler's rule for a stream in loss recovery (state):
// whether it takes no new chunks, given healthy of the session's live
// streams out of recovery and queued of the send queue's capacity
// waiting for a stream.
//
// A stream whose retransmission timed out (lossTimeout) stalls for a
// timeout or more, and a chunk given to it would hold the receiver's
// delivery that long: it takes nothing new while a quarter of the streams
// is healthy (carriersOnly). A stream in fast recovery (lossFast) delays
// what it is given by about a round trip, which the receive window
// absorbs; it takes nothing new only while the healthy streams keep the
// send queue under half full. At 1 % random loss on the lab's 200 ms path
// nearly every stream is in fast recovery nearly all the time (6-8 of 8
// when sampled): the two or three healthy ones of the moment, whose
// congestion windows are sized for their share, could not carry the
// session, and leaving the rest idle held 8 stripes at 403-431 Mbit/s
// (6 runs) against 449-473 for iperf3 -P 8; with this rule 463-471 (3
// runs), and 466-483 (4 runs) with its first form, which let timed-out
// streams take chunks too (bench-wan --loss 0.01; 4 stripes 324-434 to
// 415-471, 16 stripes 440-472 to 462-489; at 0.1 % loss no change beyond
// the runs' spread; examples/lab/results/
// bench-wan-2026-12-04-fastrecovery-ab.csv).
func holdBack(state lossState, healthy, live, queued, capacity int) bool {
	if state == lossNone || !carriersOnly(healthy, live) {
		return false
	}
	return state == lossTimeout || 2*queued < capacity
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
// recovery or in BBR's ProbeRTT (see spreadProbeRTT): not carriers for
// streamShare; d what TCP delivered on them and sent again since the
// last tick; notsent what their sockets hold unsent.
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
			st.applySendCap(0)
		}
		return
	}
	// Nothing waiting to be sent: the end host (or the peer's credit),
	// not the streams, set this tick's rate.
	gated := s.gateWaits.Load()
	d.appLimited = len(s.sendq) == 0 && notsent < uint64(len(streams)*s.chunkSize) && gated == s.lastGateWaits
	s.lastGateWaits = gated
	cruised := s.pacer.cruising
	total := s.pacer.update(now, d, rtt)
	// A short path is not capped: see "Short paths".
	short := d.minRTT > 0 && d.minRTT < s.agent.pacingMinRTT()
	if e := s.pacer.ended; !cruised && s.pacer.cruising {
		// A session that cruises far below its path's rate is slow for as
		// long as the probe takes to climb; this line says where it began.
		by := "flat rate"
		if e.overflowed {
			by = "overflow"
		}
		s.agent.log.Info("relay: pacing start-up over", append(s.logAttrs(),
			"live_streams", len(streams), "best_mbps", mbps(e.best), "rate_mbps", mbps(e.rate),
			"resent", math.Round(e.resent*1e4)/1e4, "by", by, "capped", !short)...)
	}
	s.spreadProbeRTT(now, streams)
	if short {
		total = 0
	}
	share := streamShare(total, len(streams), recovering)
	s.paceTotal.Store(uint64(total))
	s.paceShare.Store(uint64(share))
	for _, st := range streams {
		st.applyPacing(share)
	}
	per := 0
	if s.pacer.peak >= startupMinStreams || s.pacer.again {
		per = s.pacer.startupWindow(d.minRTT, int(stripe.InitialCredit(s.n, s.chunkSize))) / len(streams)
	}
	if per > 0 {
		per = max(per, startupMinFrames*s.chunkSize)
	}
	for _, st := range streams {
		st.applySendCap(per)
	}
}

// startupWindow is what the session's streams may hold in flight
// together during start-up, in bytes (0: no cap): startupGain x the best
// rate x the path's least RTT, never below floor (the receiver's initial
// window). See "Start-up window" above.
func (p *stripePacer) startupWindow(minRTT time.Duration, floor int) int {
	if p.cruising || p.best <= 0 || minRTT <= 0 {
		return 0
	}
	return max(int(startupGain*p.best*minRTT.Seconds()), floor)
}

// applySendCap sets the stream's send buffer to hold about per bytes in
// flight (0: the configured buffer again), when it moved by more than
// pacingRetune; housekeeping only. A buffer the kernel autotunes comes
// back at the autotuning's maximum (sendBufferFull): a limit, not memory
// taken, as TCP_NOTSENT_LOWAT keeps the unsent part small and the
// congestion window the rest.
func (st *stream) applySendCap(per int) {
	cur := st.sendCap
	if per == 0 {
		if cur != 0 && setSendBuffer(st.conn, st.sendFull, st.sendFallback) == nil {
			st.sendCap = 0
		}
		return
	}
	full, fallback := st.sendFull, st.sendFallback
	if cur == 0 {
		// The buffer to come back to is the one the socket has now.
		full, fallback = st.s.sendBufferFull()
		if full <= 0 {
			return
		}
	}
	// The buffer holds the unsent bytes too (up to the stream's
	// TCP_NOTSENT_LOWAT), and the kernel counts each buffer's overhead
	// against it and doubles what it is given.
	v := min(max((per+per/8+int(st.lowat.Load()))/2, 1), full)
	if cur > 0 && math.Abs(float64(v-cur)) <= pacingRetune*float64(cur) {
		return
	}
	if setSendBuffer(st.conn, v, fallback) == nil {
		st.sendCap, st.sendFull, st.sendFallback = v, full, fallback
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

// sendBufferFull is what a stream's send buffer is once start-up is
// over: the configured one (set as the agent tunes its sockets, falling
// back to SO_SNDBUF, capped at net.core.wmem_max, without CAP_NET_ADMIN),
// or, for the kernel's autotuning, its maximum (net.ipv4.tcp_wmem's third
// field), as autotuning cannot be restored once a buffer was set, and
// only with SO_SNDBUFFORCE (fallback false): capped at wmem_max it could
// be far below what autotuning gives. 0 if neither is known.
// Housekeeping only.
func (s *session) sendBufferFull() (size int, fallback bool) {
	if conf := s.agent.cfg.Load().SocketBuffer; conf > 0 {
		return conf, true
	}
	return s.agent.wmem.max(time.Now()), false
}

// wmemRefresh is how long the agent keeps net.ipv4.tcp_wmem's maximum
// before it reads it again: the host's tuning may raise it while the
// agent runs, and a session that starts later should see that.
const wmemRefresh = 10 * time.Second

// wmemCache is the autotuning's maximum send buffer as sendBufferFull
// gives it (half of tcp_wmem's third field, as the kernel doubles what it
// is given), read at most once per wmemRefresh for the whole agent.
type wmemCache struct {
	mu   sync.Mutex
	at   time.Time
	size int // 0: unknown
	// read returns the sysctl's text; nil reads /proc.
	read func() ([]byte, error)
}

func (w *wmemCache) max(now time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.at.IsZero() && now.Sub(w.at) < wmemRefresh {
		return w.size
	}
	read := w.read
	if read == nil {
		read = func() ([]byte, error) { return os.ReadFile("/proc/sys/net/ipv4/tcp_wmem") }
	}
	w.at, w.size = now, 0
	if b, err := read(); err == nil {
		if f := strings.Fields(string(b)); len(f) == 3 {
			if v, err := strconv.Atoi(f[2]); err == nil && v > 0 {
				w.size = max(v/2, 1)
			}
		}
	}
	return w.size
}

// paceGate holds a session's reads from its end host to its pacing rate
// (readHost only).
type paceGate struct {
	rate  uint64    // bytes/s the debt was taken at
	next  time.Time // when the bytes read so far are paid for
	timer *time.Timer
}

// paceBurst is how far ahead of the rate a session may read.
const paceBurst = 5 * time.Millisecond

// wait blocks until the bytes read so far fit the rate (bytes/s, 0: no
// pacing); false once abort closed.
func (g *paceGate) wait(rate uint64, waits *atomic.Uint64, abort <-chan struct{}) bool {
	g.rate = rate
	if rate == 0 {
		g.next = time.Time{}
		return true
	}
	if g.next.IsZero() {
		return true
	}
	d := time.Until(g.next) - paceBurst
	if d <= 0 {
		return true
	}
	waits.Add(1)
	if g.timer == nil {
		g.timer = time.NewTimer(d)
	} else {
		g.timer.Reset(d)
	}
	select {
	case <-g.timer.C:
		return true
	case <-abort:
		return false
	}
}

// spend takes n bytes read at the current rate.
func (g *paceGate) spend(n int) {
	if g.rate == 0 {
		return
	}
	now := time.Now()
	if g.next.Before(now) {
		g.next = now
	}
	g.next = g.next.Add(time.Duration(float64(n) / float64(g.rate) * 1e9))
}

func (g *paceGate) stop() {
	if g.timer != nil {
		g.timer.Stop()
	}
}

package relay

import (
	"io"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

const tick = 250 * time.Millisecond

// feed runs the pacer over rates (bytes/s), one per tick from t0, and
// returns the caps it chose.
func feed(p *stripePacer, t0 time.Time, rtt time.Duration, appLimited bool, rates ...float64) ([]float64, time.Time) {
	caps := make([]float64, len(rates))
	now := t0
	for i, r := range rates {
		now = now.Add(tick)
		caps[i] = p.update(now, pacingTick{bytes: uint64(r * tick.Seconds()), dt: tick.Seconds(), appLimited: appLimited}, rtt)
	}
	return caps, now
}

func TestPacerStartupLeavesStreamsUncapped(t *testing.T) {
	var p stripePacer
	// Doubling every tick: start-up goes on, nothing is capped.
	caps, _ := feed(&p, time.Now(), 200*time.Millisecond, false, 1e6, 2e6, 4e6, 8e6, 16e6, 32e6)
	for i, c := range caps {
		if c != 0 {
			t.Fatalf("tick %d: cap %v during start-up", i, c)
		}
	}
	if p.cruising {
		t.Fatal("start-up ended while the rate kept doubling")
	}
}

func flat(rate float64, n int) []float64 {
	r := make([]float64, n)
	for i := range r {
		r[i] = rate
	}
	return r
}

func TestPacerCapsAtTheBestRateOnceItLevelsOff(t *testing.T) {
	var p stripePacer
	rtt := 200 * time.Millisecond
	_, now := feed(&p, time.Now(), rtt, false, 1e6, 4e6, 16e6, 60e6)
	// The rate levels off at 62e6: capped within a few ticks, not at the
	// first flat one.
	caps, now := feed(&p, now, rtt, false, flat(62e6, 12)...)
	first := -1
	for i, c := range caps {
		if c != 0 {
			first = i
			break
		}
	}
	if first < pacingFlatTicks-1 {
		t.Fatalf("capped at flat tick %d (%v): start-up needs %d ticks without growth", first, caps, pacingFlatTicks)
	}
	if e := p.ended; e.overflowed || e.best != 62e6 || e.rate != 62e6 || e.resent != 0 {
		t.Errorf("start-up ended %+v, want by a flat rate of 62e6, nothing sent again", e)
	}
	// Once the measurement has settled, one probe cycle is 1.25, 0.75
	// and six times 1 of the rate: on average what the path delivered.
	_, now = feed(&p, now, rtt, false, flat(62e6, 8)...)
	cycle, _ := feed(&p, now, rtt, false, flat(62e6, len(pacingGains))...)
	counts := map[float64]int{}
	sum := 0.0
	for _, c := range cycle {
		counts[c]++
		sum += c
	}
	if counts[1.25*62e6] != 1 || counts[0.75*62e6] != 1 || counts[62e6] != 6 {
		t.Errorf("one cycle's caps %v, want one at 1.25x, one at 0.75x and six at 1x of 62e6", cycle)
	}
	if mean := sum / float64(len(cycle)); math.Abs(mean-62e6) > 1 {
		t.Errorf("mean cap over a cycle %v, want the rate 62e6", mean)
	}
}

func TestPacerStartupNeedsRoundTripsAsWellAsTicks(t *testing.T) {
	// A 2 s round trip: a rate flat for three 250 ms ticks, or for less
	// than three round trips, is no plateau.
	var p stripePacer
	rtt := 2 * time.Second
	caps, now := feed(&p, time.Now(), rtt, false, 1e6, 10e6, 10e6, 10e6, 10e6, 10e6)
	for _, c := range caps {
		if c != 0 {
			t.Fatalf("capped after a few flat ticks of a 2 s round trip: %v", caps)
		}
	}
	caps, _ = feed(&p, now, rtt, false, flat(10e6, 48)...)
	if caps[len(caps)-1] == 0 {
		t.Fatal("never capped while flat for 12 s, six round trips")
	}
}

func TestPacerAppLimitedTicksDoNotLowerTheRate(t *testing.T) {
	var p stripePacer
	rtt := 100 * time.Millisecond
	_, now := feed(&p, time.Now(), rtt, false, append([]float64{1e6}, flat(50e6, 12)...)...)
	if !p.cruising {
		t.Fatal("no plateau")
	}
	// The end host sends little for 10 s: the best rate is held.
	_, now = feed(&p, now, rtt, true, flat(1e6, 40)...)
	if p.best != 50e6 {
		t.Fatalf("best rate %v after application-limited ticks, want 50e6 kept", p.best)
	}
	// Application-limited ticks above the best still raise it.
	_, now = feed(&p, now, rtt, true, flat(70e6, 8)...)
	if p.best != 70e6 {
		t.Fatalf("best rate %v, want 70e6 from faster application-limited ticks", p.best)
	}
	// Ticks the streams themselves held low lower it once the window
	// (2 s here) has passed.
	_, _ = feed(&p, now, rtt, false, flat(1e6, 40)...)
	if p.best != 1e6 {
		t.Fatalf("best rate %v after 10 s of stream-limited 1e6, want 1e6", p.best)
	}
}

func TestMbps(t *testing.T) {
	if got := mbps(62.5e6); got != 500 {
		t.Errorf("mbps(62.5e6 bytes/s) = %v, want 500", got)
	}
	if got := mbps(1234567); got != 9.9 {
		t.Errorf("mbps(1234567 bytes/s) = %v, want 9.9", got)
	}
}

func TestStreamShare(t *testing.T) {
	for _, c := range []struct {
		total            float64
		live, recovering int
		want             float64
	}{
		{0, 8, 0, 0},
		{80e6, 8, 0, 10e6},
		{80e6, 1, 0, 80e6},
		{1e3, 4, 0, pacingMinShare},
		{80e6, 0, 0, 0},
		// The streams in recovery carry nothing new: the rate is the
		// others'.
		{80e6, 8, 3, 16e6},
		{60e6, 4, 1, 20e6},
		{60e6, 4, 3, 60e6},
		// Fewer than a quarter out of recovery take new chunks again
		// (the scheduler's rule), and so their share.
		{80e6, 8, 7, 10e6},
		{80e6, 4, 4, 20e6},
		{80e6, 4, 9, 20e6},
		{80e6, 4, -1, 20e6},
	} {
		if got := streamShare(c.total, c.live, c.recovering); got != c.want {
			t.Errorf("streamShare(%v, %d, %d) = %v, want %v", c.total, c.live, c.recovering, got, c.want)
		}
	}
}

func TestPacerStartupEndsWhenTheStreamsOverflowThePath(t *testing.T) {
	// Doubling, but 10 % of what arrives was sent again: the streams
	// overflowed a queue, start-up is over and the rate is capped.
	var p stripePacer
	rtt := 200 * time.Millisecond
	now := time.Now()
	var caps []float64
	for i, r := range []float64{1e6, 2e6, 4e6, 8e6, 16e6} {
		now = now.Add(tick)
		b := uint64(r * tick.Seconds())
		resent := uint64(0)
		if i >= 3 {
			resent = b / 10
		}
		caps = append(caps, p.update(now, delivery(b, resent), rtt))
	}
	if caps[2] != 0 || caps[4] == 0 || !p.cruising {
		t.Fatalf("caps %v: want none while clean, one once 10 %% is sent again", caps)
	}
	// The log says how it ended: at the first tick with 10 % sent again.
	if e := p.ended; !e.overflowed || e.best != 8e6 || math.Abs(e.resent-0.1) > 0.01 {
		t.Errorf("start-up ended %+v, want by overflow at a best of 8e6 with 10 %% sent again", e)
	}
	// Random loss (0.1 %) does not end a start-up.
	var q stripePacer
	for _, r := range []float64{1e6, 2e6, 4e6, 8e6} {
		now = now.Add(tick)
		b := uint64(r * tick.Seconds())
		if c := q.update(now, delivery(b, b/1000), rtt); c != 0 {
			t.Fatalf("capped at %v for 0.1 %% sent again", c)
		}
	}
}

// testMSS is the segment size delivery counts segments with.
const testMSS = 1448

// delivery is one tick's delivery of b bytes, resent of them sent again.
func delivery(b, resent uint64) pacingTick {
	return pacingTick{bytes: b, segs: b / testMSS, resentSegs: resent / testMSS, dt: tick.Seconds()}
}

func TestPacerStartupOutlivesAFewSegmentsSentAgain(t *testing.T) {
	// The lab at 1 % loss: two start-ups of 16 stripes ended by overflow
	// at their first ticks, 6 of about 63 segments sent again (2.9
	// Mbit/s) and 2.5 % of about 750 (35 Mbit/s). Chance, not a queue:
	// start-up goes on.
	for _, c := range []struct {
		rate   float64 // bytes/s
		resent float64 // share sent again
	}{{2.9e6 / 8, 0.1}, {34.6e6 / 8, 0.025}} {
		var p stripePacer
		now := time.Now()
		for _, r := range []float64{c.rate, 2 * c.rate, 4 * c.rate} {
			now = now.Add(tick)
			b := uint64(r * tick.Seconds())
			if cp := p.update(now, delivery(b, uint64(c.resent*float64(b))), 200*time.Millisecond); cp != 0 || p.cruising {
				t.Fatalf("%.1f Mbit/s, %.1f %% sent again: start-up ended (%+v), capped at %v", mbps(r), 100*c.resent, p.ended, cp)
			}
		}
	}
}

func TestOverflowingNeedsMoreThanChance(t *testing.T) {
	for _, c := range []struct {
		delivered, again uint64
		want             bool
	}{
		{0, 0, false},
		{63, 6, false},     // 10 %, a handful
		{747, 19, false},   // 2.5 %
		{1600, 32, false},  // 2 %
		{8600, 172, false}, // exactly 2 %
		{8600, 205, false}, // 2.4 %: within 3 standard deviations
		{8600, 260, true},  // 3 %
		{8600, 722, true},  // 8.4 %: an overflow the lab logged
		{1381, 138, true},  // 10 % of a 2 MB tick
		{300, 60, true},    // 20 % of a slow path's tick
		{100, 30, false},   // 30 %, but fewer than pacingOverflowMin
	} {
		if got := overflowing(c.delivered, c.again); got != c.want {
			t.Errorf("overflowing(%d delivered, %d again) = %v, want %v", c.delivered, c.again, got, c.want)
		}
	}
}

func TestPacerCruisingStartsWithTheDrain(t *testing.T) {
	// Once the rate levels off, the first cap drains the queue start-up
	// built (0.75 times the best rate); then the cycle goes on at 1.
	var p stripePacer
	caps, _ := feed(&p, time.Now(), 200*time.Millisecond, false, 1e6, 2e6, 4e6, 8e6, 8e6, 8e6, 8e6, 8e6, 8e6)
	first := -1
	for i, c := range caps {
		if c != 0 {
			first = i
			break
		}
	}
	if first < 0 || first+1 >= len(caps) {
		t.Fatalf("caps %v: never capped", caps)
	}
	if caps[first] != 0.75*8e6 || caps[first+1] != 8e6 {
		t.Errorf("caps %v: want the drain (0.75 x 8e6) first, then 1 x the best", caps)
	}
}

func TestPacerStartsUpAgainWithMoreStreams(t *testing.T) {
	var p stripePacer
	rtt := 200 * time.Millisecond
	if p.noteStreams(8) {
		t.Fatal("the first count restarted start-up")
	}
	_, now := feed(&p, time.Now(), rtt, false, 1e6, 2e6, 4e6, 8e6, 8e6, 8e6, 8e6, 8e6)
	if !p.cruising {
		t.Fatal("not cruising after the rate levelled off")
	}
	// A lost stream and its replacement: back to the count it had.
	if p.noteStreams(7) || p.noteStreams(8) || !p.cruising {
		t.Fatalf("a replacement restarted start-up (cruising %v)", p.cruising)
	}
	// Auto's next count: start-up again, uncapped, keeping the rates.
	if p.again {
		t.Fatal("the first start-up counts as a restart")
	}
	if !p.noteStreams(16) || p.cruising {
		t.Fatalf("16 streams after 8: cruising %v, want a new start-up", p.cruising)
	}
	// The restart is bounded by the start-up window from the best rate
	// so far, whatever the stream count.
	if w, want := p.startupWindow(rtt, 1<<20), int(startupGain*8e6*rtt.Seconds()); !p.again || w != want {
		t.Fatalf("restart: again %v, start-up window %d, want %d", p.again, w, want)
	}
	// The new count's streams join over several ticks: still a restart.
	if !p.noteStreams(24) || !p.again {
		t.Fatalf("a later joiner of the new count: again %v, want still a restart", p.again)
	}
	now = now.Add(tick)
	if c := p.update(now, pacingTick{bytes: uint64(12e6 * tick.Seconds()), dt: tick.Seconds()}, rtt); c != 0 || p.best != 12e6 {
		t.Fatalf("the new start-up capped at %v (best %v)", c, p.best)
	}
}

func TestCarriersOnly(t *testing.T) {
	for _, c := range []struct {
		healthy, live int
		want          bool
	}{
		{8, 8, true}, {2, 8, true}, {1, 8, false}, {1, 4, true}, {0, 4, false}, {0, 0, false},
	} {
		if got := carriersOnly(c.healthy, c.live); got != c.want {
			t.Errorf("carriersOnly(%d, %d) = %v, want %v", c.healthy, c.live, got, c.want)
		}
	}
}

func TestHoldBack(t *testing.T) {
	for _, c := range []struct {
		state                           lossState
		healthy, live, queued, capacity int
		want                            bool
	}{
		{lossNone, 2, 8, 0, 17, false},
		{lossNone, 2, 8, 17, 17, false},
		// A timed-out stream takes nothing new, however full the queue,
		// while a quarter of the streams is healthy.
		{lossTimeout, 2, 8, 0, 17, true},
		{lossTimeout, 2, 8, 17, 17, true},
		{lossTimeout, 1, 8, 0, 17, false},
		// A stream in fast recovery, only while the queue is under half.
		{lossFast, 2, 8, 0, 17, true},
		{lossFast, 2, 8, 8, 17, true},
		{lossFast, 2, 8, 9, 17, false},
		{lossFast, 7, 8, 17, 17, false},
		{lossFast, 1, 8, 0, 17, false},
		{lossFast, 0, 0, 0, 1, false},
	} {
		if got := holdBack(c.state, c.healthy, c.live, c.queued, c.capacity); got != c.want {
			t.Errorf("holdBack(%d, %d, %d, %d, %d) = %v, want %v", c.state, c.healthy, c.live, c.queued, c.capacity, got, c.want)
		}
	}
}

func TestLossStateOf(t *testing.T) {
	for _, c := range []struct {
		caState, rtoRetrans uint8
		want                lossState
	}{
		{0, 0, lossNone}, {1, 0, lossNone}, {2, 0, lossNone}, // Open, Disorder, CWR
		{3, 0, lossFast}, {4, 0, lossTimeout}, {3, 1, lossTimeout}, {0, 2, lossTimeout},
	} {
		if got := lossStateOf(c.caState, c.rtoRetrans); got != c.want {
			t.Errorf("lossStateOf(%d, %d) = %d, want %d", c.caState, c.rtoRetrans, got, c.want)
		}
	}
}

// TestStripePacingCapsStreams runs an upload on loopback until its rate
// levels off: the client side then caps every stream's SO_MAX_PACING_RATE
// at its share, the server side (which sends only control frames) caps
// nothing, and every byte arrives. A session of fewer than
// pacingMinStreams streams is never capped (TestOneStreamNotPaced).
func TestStripePacingCapsStreams(t *testing.T) {
	testStripePacing(t, 8, nil)
}

// TestShortPathNotPaced runs TestStripePacingCapsStreams's session on
// loopback taken for what it is, a path far shorter than pacingMinRTT.
// Its pacer leaves start-up as on a long path (the log line says so,
// capped=false) and its streams stay uncapped; taken for a long path
// the same session is capped, and taken for a short one again the caps
// are lifted from every stream.
func TestShortPathNotPaced(t *testing.T) {
	log, logs := infoLogger(t)
	const streams = 8
	var received atomic.Int64
	p := startPair(t, pairOptions{streams: streams, chunk: 65536, queue: -1, logger: log}, func(c *net.TCPConn) {
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		received.Add(n)
	})
	c := p.dial(t)
	up := startUpload(c)
	look := func() (total uint64, caps []uint64) {
		total, _, caps = paceCaps(t, p.a)
		return total, caps
	}
	uncapped := func(total uint64, caps []uint64) bool {
		for _, v := range caps {
			if v != noPacingCap && v != 0 {
				return false
			}
		}
		return total == 0 && len(caps) == streams
	}
	testsupport.Eventually(t, 45*time.Second, "the pacing start-up to end, uncapped", func() bool {
		return strings.Contains(logs.String(), "relay: pacing start-up over") &&
			strings.Contains(logs.String(), "capped=false")
	})
	for _, rtt := range minRTTs(p.a) {
		if rtt >= pacingMinRTT {
			t.Fatalf("a loopback stream's min_rtt is %v, not below pacingMinRTT (%v)", rtt, pacingMinRTT)
		}
	}
	// Cruising, a few ticks: nothing capped.
	for range 8 {
		if total, caps := look(); !uncapped(total, caps) {
			t.Fatalf("a short path's session paced: total %d bytes/s, caps %v", total, caps)
		}
		time.Sleep(250 * time.Millisecond)
	}
	p.a.testPaceMinRTT.Store(1)
	testsupport.Eventually(t, 45*time.Second, "the caps once the path counts as long", func() bool {
		total, caps := look()
		return total > 0 && len(caps) == streams && !slices.Contains(caps, noPacingCap) && !slices.Contains(caps, 0)
	})
	p.a.testPaceMinRTT.Store(int64(time.Hour))
	testsupport.Eventually(t, 45*time.Second, "every cap lifted once the path counts as short again", func() bool {
		return uncapped(look())
	})
	if err := up.finish(); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "every byte at the server", func() bool { return received.Load() == up.sent.Load() })
}

// TestStripePacingLeavesRecoveryOut holds one of four streams in loss
// recovery: the session's rate is shared among the other three, which
// carry its new chunks.
func TestStripePacingLeavesRecoveryOut(t *testing.T) {
	testStripePacing(t, 4, func(stream int) bool { return stream == 2 })
}

func TestOneStreamNotPaced(t *testing.T) {
	if pacingMinStreams != 2 {
		t.Fatalf("pacingMinStreams %d: this test runs a session of 1", pacingMinStreams)
	}
	testStripePacing(t, pacingMinStreams-1, nil)
}

// paceCaps is the pacing total and share (bytes/s) of a's session, and
// every established stream's SO_MAX_PACING_RATE.
func paceCaps(t *testing.T, a *Agent) (total, share uint64, caps []uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for s := range a.sessions {
		total, share = s.paceTotal.Load(), s.paceShare.Load()
		for _, st := range s.establishedStreams() {
			v, err := maxPacingRate(st.conn)
			if err != nil {
				t.Error(err)
			}
			caps = append(caps, v)
		}
	}
	return total, share, caps
}

// gateWaits is how often a's sessions waited to read for their pacing
// rate.
func gateWaits(a *Agent) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var n uint64
	for s := range a.sessions {
		n += s.gateWaits.Load()
	}
	return n
}

// minRTTs is the min_rtt of every stream of a's sessions.
func minRTTs(a *Agent) []time.Duration {
	var v []time.Duration
	for _, st := range liveStreams(a) {
		if info, ok := readTCPInfo(st.conn); ok && info.minRTT > 0 {
			v = append(v, info.minRTT)
		}
	}
	return v
}

// testStripePacing runs a session of streams on loopback, both agents
// taking it for a path of pacingMinRTT or more (the caps need one).
func testStripePacing(t *testing.T, streams int, trouble func(stream int) bool) {
	wantCaps := streams >= pacingMinStreams
	recovering := 0
	for i := range streams {
		if trouble != nil && trouble(i) {
			recovering++
		}
	}
	var received atomic.Int64
	var troubleA func(int) lossState
	if trouble != nil {
		troubleA = timedOut(trouble)
	}
	p := startPair(t, pairOptions{streams: streams, chunk: 65536, queue: -1, troubleA: troubleA}, func(c *net.TCPConn) {
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		received.Add(n)
	})
	p.a.testPaceMinRTT.Store(1)
	p.b.testPaceMinRTT.Store(1)
	c := p.dial(t)
	up := startUpload(c)
	var total uint64
	capped := func(a *Agent) (share uint64, caps []uint64) {
		total, share, caps = paceCaps(t, a)
		return share, caps
	}
	var share uint64
	var caps []uint64
	if !wantCaps {
		// Long enough for a start-up to end (TestStripePacingCapsStreams
		// caps within about 4 s).
		end := time.Now().Add(8 * time.Second)
		for time.Now().Before(end) {
			share, caps = capped(p.a)
			for i, v := range caps {
				if share != 0 || (v != noPacingCap && v != 0) {
					t.Fatalf("a session of %d streams paced: share %d, stream %d capped at %d", streams, share, i, v)
				}
			}
			time.Sleep(250 * time.Millisecond)
		}
		if n := gateWaits(p.a); n != 0 {
			t.Errorf("a session of %d streams, not paced, waited %d times to read", streams, n)
		}
	} else {
		// The share is the session's rate over the streams not in
		// recovery (a tick may come between the two loads: look again).
		testsupport.Eventually(t, 45*time.Second, "the client side to cap its streams' pacing", func() bool {
			share, caps = capped(p.a)
			want := float64(total) / float64(streams-recovering)
			return share > 0 && len(caps) == streams && math.Abs(float64(share)-want) <= 1
		})
		for i, v := range caps {
			// The cap moves with the probe cycle; each socket holds a
			// value set within pacingRetune of some share, never "no cap".
			if v == noPacingCap || v == 0 {
				t.Errorf("stream %d: SO_MAX_PACING_RATE %d while the session's share is %d", i, v, share)
			}
		}
		t.Logf("share %d bytes/s per stream (%.1f Gbit/s for the session, %d of %d streams in recovery)",
			share, float64(total)*8/1e9, recovering, streams)
		// What the session reads from its end host is held to its rate
		// too: within a probe cycle its drain tick (0.75x the best rate)
		// holds the reads back.
		testsupport.Eventually(t, 45*time.Second, "the session's reads held to its pacing rate", func() bool {
			return gateWaits(p.a) > 0
		})
		// Status shows the session's pacing rate and its streams in
		// recovery.
		if ss := p.a.Stats().Sessions; len(ss) != 1 || ss[0].PacingRate <= 0 || ss[0].StreamsRecovering != recovering {
			t.Errorf("client-side stats %+v: want one session with a pacing rate and %d streams in recovery", ss, recovering)
		}
		if bShare, bCaps := capped(p.b); bShare != 0 {
			t.Errorf("server side capped its streams at %d (%v) with nothing to send", bShare, bCaps)
		}
	}
	if err := up.finish(); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "every byte at the server", func() bool { return received.Load() == up.sent.Load() })
}

func TestPacerDrainHoldsWhileTheQueueLasts(t *testing.T) {
	rtt := 200 * time.Millisecond
	// The path carries 8e6 bytes/s: 1.6e6 bytes is its BDP.
	run := func(inflight func(drainTick int) uint64) []float64 {
		var p stripePacer
		_, now := feed(&p, time.Now(), rtt, false, 1e6, 2e6, 4e6, 8e6, 8e6, 8e6)
		var caps []float64
		drain := 0
		for range 12 {
			now = now.Add(tick)
			c := p.update(now, pacingTick{bytes: uint64(8e6 * tick.Seconds()), dt: tick.Seconds(), inflight: inflight(drain), minRTT: rtt}, rtt)
			if c != 0 {
				caps = append(caps, c)
				drain++
			}
		}
		return caps
	}
	drains := func(caps []float64) int {
		n := 0
		for n < len(caps) && caps[n] == 0.75*8e6 {
			n++
		}
		if n == len(caps) || caps[n] != 8e6 {
			t.Fatalf("caps %v: want drains, then 1 x the best", caps)
		}
		return n
	}
	// The queue is gone by the drain's third tick.
	if n := drains(run(func(i int) uint64 {
		if i < 2 {
			return 3e6
		}
		return 1.5e6
	})); n != 2 {
		t.Errorf("%d drain ticks while twice the BDP was in flight for 2 ticks, want 2", n)
	}
	// A queue that does not go (or in-flight bytes lost, not queued):
	// the drain is bounded, and the cruise's first tick drains once
	// more, as a queue standing in any probe cycle does
	// (TestPacerDrainsAStandingQueue).
	if n := drains(run(func(int) uint64 { return 3e6 })); n != pacingDrainTicks+1 {
		t.Errorf("%d drain ticks with twice the BDP in flight throughout, want %d", n, pacingDrainTicks+1)
	}
	// Nothing queued: one drain tick, as before.
	if n := drains(run(func(int) uint64 { return 1e6 })); n != 1 {
		t.Errorf("%d drain ticks with less than the BDP in flight, want 1", n)
	}
}

func TestStartupWindow(t *testing.T) {
	rtt := 200 * time.Millisecond
	var p stripePacer
	if w := p.startupWindow(rtt, 1<<20); w != 0 {
		t.Fatalf("window %d before any rate was measured", w)
	}
	feed(&p, time.Now(), rtt, false, 1e6, 2e6, 4e6, 8e6)
	if p.cruising {
		t.Fatal("start-up ended while the rate kept doubling")
	}
	// startupGain x the best rate x the least RTT, never below the floor.
	if w, want := p.startupWindow(rtt, 1<<20), int(startupGain*8e6*rtt.Seconds()); w != want {
		t.Errorf("window %d, want %d", w, want)
	}
	if w := p.startupWindow(rtt, 4<<20); w != 4<<20 {
		t.Errorf("window %d, want the floor %d", w, 4<<20)
	}
	if w := p.startupWindow(0, 1<<20); w != 0 {
		t.Errorf("window %d without a measured RTT", w)
	}
	feed(&p, time.Now().Add(10*time.Second), rtt, false, flat(8e6, 8)...)
	if !p.cruising {
		t.Fatal("not cruising after the rate levelled off")
	}
	if w := p.startupWindow(rtt, 1<<20); w != 0 {
		t.Errorf("window %d once start-up is over", w)
	}
}

func sendBuffer(t *testing.T, c *net.TCPConn) int {
	var v int
	if err := onSocket(c, func(fd int) (err error) {
		v, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestStartupWindowBoundsManyStreams runs an upload of startupMinStreams
// streams on loopback: while its pacing starts up, the client side holds
// every stream's send buffer to its share of the start-up window; once
// start-up is over (the pacing rate is set) every stream has the
// configured buffer back; every byte arrives.
func TestStartupWindowBoundsManyStreams(t *testing.T) {
	const chunk, buffer = 65536, 4 << 20
	var received atomic.Int64
	// Loopback is a short path: the streams are not capped, but the
	// start-up window bounds them all the same. The log line says when
	// start-up is over.
	log, logs := infoLogger(t)
	p := startPair(t, pairOptions{streams: startupMinStreams, chunk: chunk, queue: -1, socketBuffer: buffer, logger: log}, func(c *net.TCPConn) {
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		received.Add(n)
	})
	c := p.dial(t)
	up := startUpload(c)
	// The kernel reports twice what was set.
	full := 2 * buffer
	look := func() (bufs []int, over bool) {
		over = strings.Contains(logs.String(), "relay: pacing start-up over")
		p.a.mu.Lock()
		defer p.a.mu.Unlock()
		for s := range p.a.sessions {
			for _, st := range s.establishedStreams() {
				bufs = append(bufs, sendBuffer(t, st.conn))
			}
		}
		return bufs, over
	}
	var bufs []int
	testsupport.Eventually(t, 30*time.Second, "start-up to bound every stream's send buffer", func() bool {
		var over bool
		bufs, over = look()
		if over || len(bufs) != startupMinStreams {
			return false
		}
		for _, b := range bufs {
			if b >= full || b < startupMinFrames*chunk {
				return false
			}
		}
		return true
	})
	t.Logf("start-up: send buffers %d..%d bytes (configured %d)", slices.Min(bufs), slices.Max(bufs), full)
	testsupport.Eventually(t, 45*time.Second, "the configured send buffers back once start-up is over", func() bool {
		var over bool
		bufs, over = look()
		return over && len(bufs) == startupMinStreams && slices.Min(bufs) == full && slices.Max(bufs) == full
	})
	if err := up.finish(); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "every byte at the server", func() bool { return received.Load() == up.sent.Load() })
}

// upload writes to c until finished (at most a minute), then half-closes
// it.
type upload struct {
	stop chan struct{}
	done chan error
	sent atomic.Int64
}

func startUpload(c *net.TCPConn) *upload {
	u := &upload{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		buf := make([]byte, 256<<10)
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-u.stop:
				u.done <- c.CloseWrite()
				return
			default:
			}
			n, err := c.Write(buf)
			u.sent.Add(int64(n))
			if err != nil {
				u.done <- err
				return
			}
		}
		u.done <- c.CloseWrite()
	}()
	return u
}

// finish stops the writes and returns the first error of the upload.
func (u *upload) finish() error {
	close(u.stop)
	return <-u.done
}

// The autotuning's maximum is read once per wmemRefresh for the whole
// agent, follows a change after that, and is unknown (0) when the
// sysctl cannot be read or parsed.
func TestWmemCacheRereadsAfterRefresh(t *testing.T) {
	text, reads := "4096\t16384\t4194304\n", 0
	w := wmemCache{read: func() ([]byte, error) {
		reads++
		if text == "" {
			return nil, os.ErrNotExist
		}
		return []byte(text), nil
	}}
	t0 := time.Unix(1000, 0)
	if got := w.max(t0); got != 2097152 || reads != 1 {
		t.Fatalf("first read: %d after %d reads, want 2097152 after 1", got, reads)
	}
	text = "4096 16384 67108864"
	if got := w.max(t0.Add(wmemRefresh - time.Millisecond)); got != 2097152 || reads != 1 {
		t.Fatalf("within the refresh: %d after %d reads, want the kept 2097152 after 1", got, reads)
	}
	now := t0.Add(wmemRefresh)
	if got := w.max(now); got != 33554432 || reads != 2 {
		t.Fatalf("after the refresh: %d after %d reads, want 33554432 after 2", got, reads)
	}
	for _, bad := range []string{"", "4096 16384", "4096 16384 lots", "4096 16384 0"} {
		text = bad
		now = now.Add(wmemRefresh)
		if got := w.max(now); got != 0 {
			t.Errorf("tcp_wmem %q: %d, want 0 (unknown)", bad, got)
		}
	}
}

// On this host, the agent's reader finds the real sysctl.
func TestWmemCacheReadsProc(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem")
	if err != nil {
		t.Fatalf("reading tcp_wmem: %v", err)
	}
	f := strings.Fields(string(b))
	want, _ := strconv.Atoi(f[2])
	var w wmemCache
	if got := w.max(time.Now()); got != want/2 {
		t.Fatalf("max = %d, want half of tcp_wmem's %d", got, want)
	}
}

// The drain tick undoes the probe tick's surplus: after a probe tick that
// ended held back (nothing waiting to be sent, so the cap did not bind and
// no queue was built) it stays at the best rate.
func TestPacerSkipsTheDrainAfterAHeldBackProbe(t *testing.T) {
	rtt := 200 * time.Millisecond
	const rate = 8e6
	flatTick := func(heldBack bool) pacingTick {
		return pacingTick{bytes: uint64(rate * tick.Seconds()), dt: tick.Seconds(), appLimited: heldBack}
	}
	cycle := func(heldBackProbe bool) []float64 {
		var p stripePacer
		_, now := feed(&p, time.Now(), rtt, false, 1e6, 2e6, 4e6, rate, rate, rate)
		for i := 0; !p.cruising || p.draining || p.phase != 0; i++ {
			if i == 100 {
				t.Fatal("no probe tick in 100 ticks of a flat rate")
			}
			now = now.Add(tick)
			p.update(now, flatTick(false), rtt)
		}
		// One cycle from the probe: the tick recorded at the drain
		// phase is the probe's.
		caps := make([]float64, len(pacingGains))
		for i := range caps {
			now = now.Add(tick)
			caps[i] = p.update(now, flatTick(heldBackProbe && i == pacingDrainPhase), rtt)
		}
		return caps
	}
	if c := cycle(false); c[0] != 1.25*rate || c[pacingDrainPhase] != 0.75*rate {
		t.Errorf("a probe that was carried out: cycle %v, want 1.25x then 0.75x of %v", c, rate)
	}
	c := cycle(true)
	if c[0] != 1.25*rate || c[pacingDrainPhase] != rate {
		t.Errorf("a probe that ended held back: cycle %v, want 1.25x then 1x of %v", c, rate)
	}
	for i, v := range c {
		if v < rate {
			t.Errorf("a probe that ended held back: tick %d capped at %v, below the best rate %v", i, v, rate)
		}
	}
}

// TestPacerDrainsAStandingQueue: a cruising session whose streams hold
// more than pacingQueueBDPs of the path's bandwidth-delay product in
// flight at a tick of gain 1 (its best rate overstates the path, and the
// WAN's queue fills) drains for that tick, once per probe cycle.
func TestPacerDrainsAStandingQueue(t *testing.T) {
	rtt := 200 * time.Millisecond
	const rate = 8e6 // bytes/s: a BDP of 1.6e6 bytes, a tick of 2e6
	cycle := func(inflight uint64) []float64 {
		var p stripePacer
		_, now := feed(&p, time.Now(), rtt, false, 1e6, 2e6, 4e6, rate, rate, rate)
		at := func() pacingTick {
			return pacingTick{bytes: uint64(rate * tick.Seconds()), dt: tick.Seconds(), inflight: inflight, minRTT: rtt}
		}
		for i := 0; !p.cruising || p.draining || p.phase != 0; i++ {
			if i == 100 {
				t.Fatal("no probe tick in 100 ticks of a flat rate")
			}
			now = now.Add(tick)
			p.update(now, pacingTick{bytes: uint64(rate * tick.Seconds()), dt: tick.Seconds(), minRTT: rtt}, rtt)
		}
		caps := make([]float64, 2*len(pacingGains))
		for i := range caps {
			now = now.Add(tick)
			caps[i] = p.update(now, at(), rtt)
		}
		return caps
	}
	count := func(caps []float64, v float64) int {
		n := 0
		for _, c := range caps {
			if c == v {
				n++
			}
		}
		return n
	}
	// Up to 1.25 BDPs in flight: the probe cycle as it is, a drain each.
	if c := cycle(uint64(1.2 * 1.6e6)); count(c, 0.75*rate) != 2 || count(c, 1.25*rate) != 2 {
		t.Errorf("1.2 BDPs in flight: caps %v, want the plain cycle (one probe, one drain, twice)", c)
	}
	// Beyond: one more drain per cycle, and only one.
	c := cycle(uint64(2 * 1.6e6))
	if count(c, 0.75*rate) != 4 || count(c, 1.25*rate) != 2 {
		t.Errorf("2 BDPs in flight: caps %v, want two drains per cycle", c)
	}
	if c[0] != 1.25*rate || c[1] != 0.75*rate || c[2] != 0.75*rate || c[3] != rate {
		t.Errorf("2 BDPs in flight: caps %v, want the probe, its drain, the queue's drain, then 1x", c)
	}
	// On a 50 ms path a tick carries five BDPs: the queue's drain takes
	// out the half BDP beyond one (0.2e6 bytes of a tick's 2e6), not a
	// quarter of the tick.
	rtt = 50 * time.Millisecond
	c = cycle(uint64(1.5 * 0.4e6))
	if count(c, 0.75*rate) != 2 || count(c, 1.25*rate) != 2 || c[2] != 0.9*rate || count(c, 0.9*rate) != 2 {
		t.Errorf("1.5 BDPs in flight at 50 ms: caps %v, want the probe, its drain, then 0.9x once per cycle", c)
	}
}

// TestPaceGate: the bytes a session reads from its end host fit its
// pacing rate; none while it has no rate; and a wait ends when the
// session aborts.
func TestPaceGate(t *testing.T) {
	var g paceGate
	var waits atomic.Uint64
	abort := make(chan struct{})
	// No rate: nothing owed.
	if !g.wait(0, &waits, abort) {
		t.Fatal("wait without a rate: false")
	}
	g.spend(1 << 30)
	if !g.next.IsZero() || waits.Load() != 0 {
		t.Fatalf("spent without a rate: owes until %v, %d waits", g.next, waits.Load())
	}
	// 1 MB/s: 2,000 bytes are 2 ms, within paceBurst; a megabyte more
	// is a second beyond it.
	const rate = 1e6
	if !g.wait(rate, &waits, abort) || waits.Load() != 0 {
		t.Fatal("the first read at a rate waited")
	}
	t0 := time.Now()
	g.spend(2000)
	t1 := time.Now()
	if lo, hi := t0.Add(2*time.Millisecond), t1.Add(2*time.Millisecond); g.next.Before(lo) || g.next.After(hi) {
		t.Fatalf("2,000 bytes at 1 MB/s owed until %v, want within [%v, %v]", g.next, lo, hi)
	}
	if !g.wait(rate, &waits, abort) || waits.Load() != 0 {
		t.Fatal("a read within paceBurst of the rate waited")
	}
	g.spend(1e6)
	close(abort)
	if g.wait(rate, &waits, abort) || waits.Load() != 1 {
		t.Fatalf("a read a second ahead of the rate, session aborted: waits %d, want one wait that ends false", waits.Load())
	}
	// The rate gone (a short path, a start-up again): the debt too.
	if !g.wait(0, &waits, abort) || !g.next.IsZero() {
		t.Fatal("the debt outlived the rate")
	}
	g.stop()
}

package relay

import (
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"
)

// autoModel drives the auto stream count's choice (chooseStreams) by hand:
// a client-side session of n stream slots under streams = "auto", with no
// sockets and no clock but the model's. Each step is a housekeeping tick
// (250 ms); the session moves what rate says its streams carry together,
// the streams hold it back unless hostLimited, and the streams a doubling
// asks for join one tick after it. Without sockets no round trip is read,
// so the choice settles and measures for its floors (autoSettleMin,
// autoSpanMin). Nothing here depends on how fast the machine runs.
type autoModel struct {
	s   *session
	now time.Time
	// rate is the session's rate in bytes/s with streams up, since secs
	// seconds at that count.
	rate        func(streams int, secs float64) float64
	hostLimited bool
	since       time.Time // when the count last changed
	chosen      []int     // the counts chosen, in order
}

const autoTick = 250 * time.Millisecond

func newAutoModel(n int, rate func(streams int, secs float64) float64) *autoModel {
	s := &session{
		agent:    &Agent{log: slog.New(slog.DiscardHandler)},
		n:        n,
		auto:     &autoChoice{},
		sendq:    make(chan *chunk, 1),
		lostWake: make(chan struct{}, 1),
	}
	s.established.Store(true)
	s.target.Store(int32(min(autoFirstStreams, n)))
	m := &autoModel{s: s, now: time.Unix(1_800_000_000, 0), rate: rate}
	m.since = m.now
	m.join()
	m.chosen = []int{int(s.target.Load())}
	return m
}

// join brings up the streams below the target.
func (m *autoModel) join() {
	for i := len(m.s.streams); i < int(m.s.target.Load()); i++ {
		m.s.streams = append(m.s.streams, &stream{s: m.s, index: i, conn: &net.TCPConn{}})
	}
}

// step runs one tick: the streams carry a tick's bytes, the choice runs,
// and the streams it asked for join afterwards (the next tick finds them
// up).
func (m *autoModel) step() {
	streams := len(m.s.streams)
	secs := m.now.Sub(m.since).Seconds()
	m.now = m.now.Add(autoTick)
	m.s.sentBytes.Add(uint64(m.rate(streams, secs) * autoTick.Seconds()))
	select {
	case <-m.s.sendq:
	default:
	}
	if !m.hostLimited {
		// A chunk waits for a stream: the streams hold the session back.
		m.s.sendq <- &chunk{}
	}
	m.s.chooseStreams(m.now)
	if target := int(m.s.target.Load()); target != m.chosen[len(m.chosen)-1] {
		m.chosen = append(m.chosen, target)
		m.since = m.now
	}
	m.join()
}

// run steps the model for d.
func (m *autoModel) run(d time.Duration) {
	for range int(d / autoTick) {
		m.step()
	}
}

// perStream is a path on which each stream carries rate bytes/s, however
// many there are.
func perStream(rate float64) func(int, float64) float64 {
	return func(streams int, _ float64) float64 { return float64(streams) * rate }
}

// TestAutoStreamsDoubleToMaxWhileTheRateFollows: while each stream adds
// its own rate, the count doubles from autoFirstStreams to the
// whitelist's maximum and stays there, however long the session lasts; a
// maximum that is no doubling of the first count is reached, not passed.
func TestAutoStreamsDoubleToMaxWhileTheRateFollows(t *testing.T) {
	for _, tc := range []struct {
		max  int
		want []int
	}{{32, []int{8, 16, 32}}, {24, []int{8, 16, 24}}} {
		m := newAutoModel(tc.max, perStream(2<<20))
		m.run(time.Minute)
		if !slices.Equal(m.chosen, tc.want) {
			t.Errorf("maximum %d: counts chosen %v, want %v", tc.max, m.chosen, tc.want)
		}
		if !m.s.auto.done {
			t.Errorf("maximum %d: the choice is still running at the maximum", tc.max)
		}
	}
}

// TestAutoStreamsKeepACountThatDidNotRaiseTheRate: on a path that carries
// the same rate whatever the count, the first doubling (which shows what
// more streams do) is taken and no other: the count stays at twice the
// first for good.
func TestAutoStreamsKeepACountThatDidNotRaiseTheRate(t *testing.T) {
	m := newAutoModel(32, func(int, float64) float64 { return 16 << 20 })
	m.run(time.Minute)
	if want := []int{8, 16}; !slices.Equal(m.chosen, want) {
		t.Errorf("counts chosen %v, want %v", m.chosen, want)
	}
	if !m.s.auto.done {
		t.Errorf("the choice did not end at a count that did not raise the rate")
	}
	// A gain just short of autoGain is no gain either.
	m = newAutoModel(32, func(streams int, _ float64) float64 {
		if streams > autoFirstStreams {
			return 0.99 * autoGain * (16 << 20)
		}
		return 16 << 20
	})
	m.run(time.Minute)
	if want := []int{8, 16}; !slices.Equal(m.chosen, want) {
		t.Errorf("with a gain of %.2f: counts chosen %v, want %v", 0.99*autoGain, m.chosen, want)
	}
}

// TestAutoStreamsHostLimitedKeepsTheFirst: a session whose streams never
// hold it back (its end host feeds it slowly) keeps its first streams:
// more would not tell.
func TestAutoStreamsHostLimitedKeepsTheFirst(t *testing.T) {
	m := newAutoModel(32, perStream(2<<20))
	m.hostLimited = true
	m.run(time.Minute)
	if want := []int{autoFirstStreams}; !slices.Equal(m.chosen, want) {
		t.Errorf("counts chosen %v, want %v", m.chosen, want)
	}
	if m.s.auto.done {
		t.Errorf("the choice ended although it never measured")
	}
}

// TestAutoStreamsMeasureThePlateau: after each doubling the session's
// rate falls and climbs back to its new plateau over six seconds (the new
// streams' congestion control starting up on a long path, beside the old
// ones). Each count is judged on its plateau, not its first span: judged
// at once, 16 streams early in their climb carry less than 8 at full
// speed, and the count would stop at 16.
func TestAutoStreamsMeasureThePlateau(t *testing.T) {
	const each = 2 << 20
	climb := func(streams int, secs float64) float64 {
		if streams == autoFirstStreams {
			return float64(streams) * each
		}
		return float64(streams) * each * min(1, 0.2+secs/6)
	}
	m := newAutoModel(32, climb)
	m.run(2 * time.Minute)
	if want := []int{8, 16, 32}; !slices.Equal(m.chosen, want) {
		t.Errorf("counts chosen %v, want %v", m.chosen, want)
	}
}

// TestAutoStreamsWaitForTheJoins: while streams of a doubling are still
// joining the choice measures nothing: a count is measured only once all
// its streams are up.
func TestAutoStreamsWaitForTheJoins(t *testing.T) {
	m := newAutoModel(32, perStream(2<<20))
	// Hold the first count's streams back: one of the 8 is not up yet.
	m.s.streams = m.s.streams[:autoFirstStreams-1]
	for range int(time.Minute / autoTick) {
		m.now = m.now.Add(autoTick)
		m.s.sentBytes.Add(uint64(m.rate(len(m.s.streams), 0) * autoTick.Seconds()))
		select {
		case m.s.sendq <- &chunk{}:
		default:
		}
		m.s.chooseStreams(m.now)
	}
	if got := m.s.target.Load(); got != autoFirstStreams {
		t.Errorf("with a stream still joining the count moved to %d", got)
	}
	if au := m.s.auto; !au.since.IsZero() || au.spans != 0 || au.rate != 0 {
		t.Errorf("with a stream still joining the choice measured: %+v", au)
	}
}

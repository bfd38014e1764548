package wanem

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var simStart = time.Unix(1_700_000_000, 0)

// simulateSaturated drives a link whose queue never runs dry for dur of
// simulated time. The sender wakes at the link's own nextWake plus whatever
// overshoot returns, standing in for a Go timer firing late. It returns the
// bytes forwarded.
func simulateSaturated(t *testing.T, s Shape, frameSize int, dur time.Duration, overshoot func() time.Duration) uint64 {
	t.Helper()
	l := newLink(s, 0, simStart)
	payload := make([]byte, frameSize)
	end := simStart.Add(dur)
	now := simStart
	var out []frame
	for steps := 0; now.Before(end); steps++ {
		if steps > 10_000_000 {
			t.Fatalf("simulation did not reach %v; stuck at %v", dur, now.Sub(simStart))
		}
		for l.queueBytes+frameSize <= l.queueLimit {
			l.offer(now, frame{data: payload})
		}
		l.release(now)
		out = l.popReady(now, out[:0])
		wake, ok := l.nextWake(now)
		if !ok {
			t.Fatal("saturated link reports nothing pending")
		}
		if !wake.After(now) {
			t.Fatalf("nextWake %v is not after now %v although nothing more was payable", wake, now)
		}
		now = wake.Add(overshoot())
	}
	return l.stats.ForwardedBytes
}

func TestLinkRateOverSimulatedSecond(t *testing.T) {
	jitter := rand.New(rand.NewPCG(7, 7))
	cases := []struct {
		name      string
		rate      int64
		frameSize int
		overshoot func() time.Duration
	}{
		{"1gbit jumbo punctual", 1e9, 9014, func() time.Duration { return 0 }},
		{"1gbit jumbo late up to 1.5ms", 1e9, 9014, func() time.Duration {
			return time.Duration(jitter.Int64N(int64(1500 * time.Microsecond)))
		}},
		{"500mbit 1500 late up to 1ms", 500e6, 1514, func() time.Duration {
			return time.Duration(jitter.Int64N(int64(time.Millisecond)))
		}},
		{"10mbit small frames late 100us", 10e6, 64, func() time.Duration { return 100 * time.Microsecond }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := Shape{Rate: tc.rate, QueueBytes: 1 << 20}
			got := float64(simulateSaturated(t, s, tc.frameSize, time.Second, tc.overshoot))
			want := float64(tc.rate) / 8
			// The link starts idle and never sends above its rate; a sender
			// late at the end has not yet released the frames of its last
			// wake-up's lateness (at most 1.5ms here).
			slack := want*0.0015 + 2*float64(tc.frameSize)
			if got < want-slack || got > want {
				t.Errorf("forwarded %.0f bytes in a simulated second, want %.0f (-%.0f, +0)", got, want, slack)
			}
		})
	}
}

func TestLinkLateWakeUpsLoseNoSendingTime(t *testing.T) {
	// The lab's failure: a sender that wakes late by more than the credit
	// a token bucket keeps loses the time overslept, so a busy host's link
	// runs below its rate (461-475 of 500 Mbit/s with 2ms of credit).
	const rate = 500e6
	const frameSize = 9014
	want := float64(rate) / 8
	for _, late := range []time.Duration{time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond} {
		got := float64(simulateSaturated(t, Shape{Rate: rate, QueueBytes: 4 << 20}, frameSize, time.Second,
			func() time.Duration { return late }))
		// Only the frames sent during the last wake-up's lateness may be
		// still unreleased at the end.
		if lost := want*late.Seconds() + 2*frameSize; got < want-lost || got > want {
			t.Errorf("wake-ups %v late: forwarded %.1f%% of the rate, want %.0f bytes (-%.0f, +0)",
				late, 100*got/want, want, lost)
		}
	}
}

func TestLinkLateReleaseKeepsTheWireSpacing(t *testing.T) {
	// 8 Mbit/s is one byte per microsecond: a 1000-byte frame is 1ms on the
	// wire. Five frames arrive at once; the sender looks 10ms later.
	l := newLink(Shape{Rate: 8e6, Delay: 50 * time.Millisecond}, 0, simStart)
	for i := range 5 {
		l.offer(simStart, labelled(byte(i), 1000))
	}
	late := simStart.Add(10 * time.Millisecond)
	l.release(late)
	if l.queue.len() != 0 || l.delayLine.len() != 5 {
		t.Fatalf("after 10ms the queue holds %d and the delay line %d frames, want 0 and 5", l.queue.len(), l.delayLine.len())
	}
	var dues []time.Duration
	for i := range l.delayLine.len() {
		dues = append(dues, l.delayLine.items[(l.delayLine.head+i)%len(l.delayLine.items)].due.Sub(simStart))
	}
	want := []time.Duration{51 * time.Millisecond, 52 * time.Millisecond, 53 * time.Millisecond, 54 * time.Millisecond, 55 * time.Millisecond}
	if !slices.Equal(dues, want) {
		t.Errorf("due at %v, want %v: each frame's delay counts from when the wire finished it", dues, want)
	}
}

func TestLinkIdleTimeEarnsNothing(t *testing.T) {
	// After an idle second the link still sends at its rate: three frames
	// offered at once leave 1ms apart, none at once.
	l := newLink(Shape{Rate: 8e6}, 0, simStart)
	idle := simStart.Add(time.Second)
	for i := range 3 {
		l.offer(idle, labelled(byte(i), 1000))
	}
	l.release(idle)
	if got := l.popReady(idle, nil); len(got) != 0 {
		t.Errorf("an idle second let %v leave at once", labels(got))
	}
	wake, ok := l.nextWake(idle)
	if !ok || wake != idle.Add(time.Millisecond) {
		t.Errorf("nextWake = %v after the idle second, want +1ms", wake.Sub(idle))
	}
}

func labelled(label byte, size int) frame {
	data := make([]byte, size)
	data[0] = label
	return frame{data: data}
}

func labels(frames []frame) []byte {
	var out []byte
	for _, f := range frames {
		out = append(out, f.data[0])
	}
	return out
}

func TestLinkQueueDropTailAtByteLimit(t *testing.T) {
	// 8 Mbit/s is one byte per microsecond: a 1000-byte frame is 1ms on the
	// wire, and is in the queue until the wire is done with it.
	l := newLink(Shape{Rate: 8e6, QueueBytes: 10_500}, 0, simStart)
	now := simStart
	var verdicts []verdict
	for i := range 11 {
		verdicts = append(verdicts, l.offer(now, labelled(byte(i), 1000)))
	}
	verdicts = append(verdicts,
		l.offer(now, labelled(100, 500)), // fits exactly: 10,500 bytes
		l.offer(now, labelled(101, 1)),   // one byte over
	)
	want := []verdict{
		accepted, accepted, accepted, accepted, accepted,
		accepted, accepted, accepted, accepted, accepted,
		queueFull, accepted, queueFull,
	}
	if !slices.Equal(verdicts, want) {
		t.Fatalf("verdicts = %v, want %v", verdicts, want)
	}
	st := l.snapshot()
	if st.QueueDropPackets != 2 || st.QueueDropBytes != 1001 {
		t.Errorf("queue drops = %d packets %d bytes, want 2 packets 1001 bytes", st.QueueDropPackets, st.QueueDropBytes)
	}
	if st.MaxQueueBytes != 10_500 || st.QueueBytes != 10_500 {
		t.Errorf("queue bytes = %d (max %d), want 10500 (max 10500)", st.QueueBytes, st.MaxQueueBytes)
	}

	// One frame per millisecond leaves, in arrival order.
	l.release(now)
	if got := l.popReady(now, nil); len(got) != 0 {
		t.Errorf("at start forwarded %v, want nothing: the first frame is still on the wire", labels(got))
	}
	wake, _ := l.nextWake(now)
	if wake != simStart.Add(time.Millisecond) {
		t.Errorf("nextWake = +%v, want +1ms", wake.Sub(simStart))
	}
	now = simStart.Add(2*time.Millisecond - time.Nanosecond)
	l.release(now)
	if got := labels(l.popReady(now, nil)); !slices.Equal(got, []byte{0}) {
		t.Errorf("just before +2ms forwarded %v, want [0]", got)
	}

	// Without release, an arriving frame still finds the room the wire
	// made meanwhile: by +3ms frames 1 and 2 have left too.
	now = simStart.Add(3 * time.Millisecond)
	if v := l.offer(now, labelled(102, 1000)); v != accepted {
		t.Errorf("after the wire sent 3000 bytes a 1000-byte frame got %v, want accepted", v)
	}
	if got := labels(l.popReady(now, nil)); !slices.Equal(got, []byte{1, 2}) {
		t.Errorf("at +3ms forwarded %v, want [1 2]", got)
	}
}

func TestLinkDelayLine(t *testing.T) {
	l := newLink(Shape{Delay: 100 * time.Millisecond}, 0, simStart)
	l.offer(simStart, labelled(1, 100))
	l.release(simStart)
	l.offer(simStart.Add(10*time.Millisecond), labelled(2, 100))
	l.release(simStart.Add(10 * time.Millisecond))

	wake, ok := l.nextWake(simStart.Add(10 * time.Millisecond))
	if !ok || wake != simStart.Add(100*time.Millisecond) {
		t.Fatalf("nextWake = +%v %v, want +100ms true", wake.Sub(simStart), ok)
	}
	if got := l.popReady(simStart.Add(100*time.Millisecond-time.Nanosecond), nil); len(got) != 0 {
		t.Errorf("1ns before the delay passed forwarded %v", labels(got))
	}
	if got := labels(l.popReady(simStart.Add(100*time.Millisecond), nil)); !slices.Equal(got, []byte{1}) {
		t.Errorf("at +100ms forwarded %v, want [1]", got)
	}
	if got := labels(l.popReady(simStart.Add(110*time.Millisecond), nil)); !slices.Equal(got, []byte{2}) {
		t.Errorf("at +110ms forwarded %v, want [2]", got)
	}
	if _, ok := l.nextWake(simStart.Add(110 * time.Millisecond)); ok {
		t.Error("empty link still reports a wake-up")
	}
}

func TestLinkDelayAfterSerialization(t *testing.T) {
	// 8 Mbit/s: each 1000-byte frame takes 1ms on the wire, then 10ms of
	// flight.
	l := newLink(Shape{Rate: 8e6, Delay: 10 * time.Millisecond}, 0, simStart)
	for i := range 3 {
		l.offer(simStart, labelled(byte(i), 1000))
	}
	var arrivals []time.Duration
	now := simStart
	for range 100 {
		l.release(now)
		for range l.popReady(now, nil) {
			arrivals = append(arrivals, now.Sub(simStart))
		}
		wake, ok := l.nextWake(now)
		if !ok {
			break
		}
		now = wake
	}
	want := []time.Duration{11 * time.Millisecond, 12 * time.Millisecond, 13 * time.Millisecond}
	if !slices.Equal(arrivals, want) {
		t.Errorf("arrivals = %v, want %v", arrivals, want)
	}
}

func lossPattern(s Shape, stream uint64, n int) []bool {
	l := newLink(s, stream, simStart)
	payload := make([]byte, 100)
	lost := make([]bool, n)
	for i := range lost {
		lost[i] = l.offer(simStart, frame{data: payload}) == lostOnArrival
		// Keep the queue from filling so only loss decides.
		l.release(simStart)
		l.popReady(simStart, nil)
	}
	return lost
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func TestLinkLossFractionWithSeed(t *testing.T) {
	const n = 200_000
	for _, loss := range []float64{0.001, 0.01, 0.2} {
		lost := count(lossPattern(Shape{Loss: loss, Seed: 1}, 0, n))
		got := float64(lost) / n
		// Five standard deviations of a binomial around the configured loss.
		tolerance := 5 * math.Sqrt(loss*(1-loss)/n)
		if got < loss-tolerance || got > loss+tolerance {
			t.Errorf("loss %v: lost %d of %d (%.5f), want within %.5f", loss, lost, n, got, tolerance)
		}
	}

	a := lossPattern(Shape{Loss: 0.01, Seed: 1}, 0, 10_000)
	if b := lossPattern(Shape{Loss: 0.01, Seed: 1}, 0, 10_000); !slices.Equal(a, b) {
		t.Error("the same seed lost different frames")
	}
	if b := lossPattern(Shape{Loss: 0.01, Seed: 2}, 0, 10_000); slices.Equal(a, b) {
		t.Error("seeds 1 and 2 lost the same frames")
	}
	if b := lossPattern(Shape{Loss: 0.01, Seed: 1}, 1, 10_000); slices.Equal(a, b) {
		t.Error("the two directions of one seed lost the same frames")
	}

	if lost := count(lossPattern(Shape{Loss: 0}, 0, 1000)); lost != 0 {
		t.Errorf("loss 0 lost %d frames", lost)
	}
	if lost := count(lossPattern(Shape{Loss: 1}, 0, 1000)); lost != 1000 {
		t.Errorf("loss 1 lost %d of 1000 frames", lost)
	}
}

func TestLinkAccountingAddsUp(t *testing.T) {
	ops := rand.New(rand.NewPCG(3, 4))
	l := newLink(Shape{Rate: 100e6, Delay: 5 * time.Millisecond, QueueBytes: 64 << 10, Loss: 0.05, Seed: 9}, 0, simStart)
	now := simStart
	for range 50_000 {
		switch ops.IntN(3) {
		case 0:
			l.offer(now, frame{data: make([]byte, 60+ops.IntN(9000))})
		case 1:
			l.release(now)
			l.popReady(now, nil)
		case 2:
			now = now.Add(time.Duration(ops.IntN(200)) * time.Microsecond)
		}
		s := l.snapshot()
		accounted := s.ForwardedBytes + s.QueueDropBytes + s.LossDropBytes + uint64(s.QueueBytes) + uint64(s.DelayLineBytes)
		if s.ReceivedBytes != accounted {
			t.Fatalf("received %d bytes but forwarded+dropped+queued+in flight = %d (%+v)", s.ReceivedBytes, accounted, s)
		}
		if s.QueueBytes > 64<<10 || s.MaxQueueBytes > 64<<10 {
			t.Fatalf("queue %d bytes (max %d) exceeds its 64KiB limit", s.QueueBytes, s.MaxQueueBytes)
		}
	}
	if s := l.snapshot(); s.ForwardedPackets == 0 || s.QueueDropPackets == 0 || s.LossDropPackets == 0 {
		t.Errorf("random run did not exercise every path: %+v", s)
	}
}

func TestRingKeepsOrderWhileGrowing(t *testing.T) {
	var r ring[int]
	next, want := 0, 0
	for round := range 200 {
		for range round % 37 {
			r.push(next)
			next++
		}
		for range round % 23 {
			if r.len() == 0 {
				break
			}
			if got := r.pop(); got != want {
				t.Fatalf("popped %d, want %d", got, want)
			}
			want++
		}
	}
	if r.len() != next-want {
		t.Fatalf("len = %d, want %d", r.len(), next-want)
	}
}

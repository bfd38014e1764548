package wanem

import (
	"math"
	"math/rand/v2"
	"time"
)

// frame is one Ethernet frame crossing a link.
type frame struct {
	data []byte
	// buf is the pooled buffer behind data, handed back once the frame is
	// sent or dropped; the link never looks at it.
	buf *[]byte
	// arrived is when the frame reached the link, and due when it leaves
	// the delay line.
	arrived, due time.Time
}

// verdict is what a link did with an arriving frame.
type verdict int

const (
	accepted verdict = iota
	lostOnArrival
	queueFull
)

// link is one direction of the WAN as pure bookkeeping: a frame arrives, may
// be lost, waits in a drop-tail queue until the link has sent the frames
// ahead of it and then the frame itself at the link's rate, then spends the
// one-way delay in a delay line before it is handed out. The caller supplies
// the time, so tests drive it with a simulated clock.
//
// The link keeps its own clock: a frame is sent when the one before it was
// (or when it arrived, on an idle link) plus its own time on the wire, and
// its delay counts from then, whenever the caller gets to it. A caller that
// wakes late therefore releases everything the link sent meanwhile, with the
// times a wire would have given them, and a busy link loses no sending time.
// (The token bucket this replaced kept 2 ms of credit: on the lab's 2-core
// machine during an accelerated transfer, its 500 Mbit/s link forwarded
// 461-475 Mbit/s with its queue full, and 490-494 with 20 ms of credit.)
// Idle time earns nothing: an idle link sends at its rate, never above.
type link struct {
	delay      time.Duration
	queueLimit int
	loss       float64
	rng        *rand.Rand
	// bytesPerSecond is the rate (0: unlimited); sentAt is when the link
	// finished sending the last frame it released.
	bytesPerSecond float64
	sentAt         time.Time

	queue      ring[frame]
	queueBytes int
	// delayLine is ordered by due because frames leave the queue in order
	// and all wait the same delay.
	delayLine      ring[frame]
	delayLineBytes int

	stats LinkStats
}

// newLink builds a link for s. stream separates the loss generators of links
// that share a seed, so the two directions of a WAN lose independently.
func newLink(s Shape, stream uint64, now time.Time) *link {
	return &link{
		delay:      s.Delay,
		queueLimit: s.EffectiveQueueBytes(),
		loss:       s.Loss,
		rng:        rand.New(rand.NewPCG(uint64(s.Seed), stream)),
		// The link starts idle.
		bytesPerSecond: float64(s.Rate) / 8,
		sentAt:         now,
	}
}

// offer takes an arriving frame. Loss is drawn before the queue is checked so
// that the same seed loses the same arrivals whatever the queue does. The
// queue is what the link has not sent by now, whenever release last ran.
func (l *link) offer(now time.Time, f frame) verdict {
	l.release(now)
	f.arrived = now
	size := len(f.data)
	l.stats.ReceivedPackets++
	l.stats.ReceivedBytes += uint64(size)
	if l.loss > 0 && l.rng.Float64() < l.loss {
		l.stats.LossDropPackets++
		l.stats.LossDropBytes += uint64(size)
		return lostOnArrival
	}
	if l.queueBytes+size > l.queueLimit {
		l.stats.QueueDropPackets++
		l.stats.QueueDropBytes += uint64(size)
		return queueFull
	}
	l.queue.push(f)
	l.queueBytes += size
	l.stats.MaxQueueBytes = max(l.stats.MaxQueueBytes, l.queueBytes)
	return accepted
}

// release moves every frame the link has finished sending by now from the
// queue into the delay line, each due its delay after it was sent.
func (l *link) release(now time.Time) {
	for l.queue.len() > 0 {
		sent := l.sentBy(l.queue.front())
		if sent.After(now) {
			return
		}
		f := l.queue.pop()
		l.queueBytes -= len(f.data)
		l.sentAt = sent
		f.due = sent.Add(l.delay)
		l.delayLine.push(f)
		l.delayLineBytes += len(f.data)
	}
}

// sentBy is when the link finishes sending f, the head of its queue: once
// it is done with the frame before (or f arrived, if later), plus f's time
// on the wire.
func (l *link) sentBy(f *frame) time.Time {
	start := f.arrived
	if l.sentAt.After(start) {
		start = l.sentAt
	}
	if l.bytesPerSecond == 0 {
		return start
	}
	// Round up so that waking at the time returned finds the frame sent.
	wire := math.Ceil(float64(len(f.data)) / l.bytesPerSecond * float64(time.Second))
	return start.Add(time.Duration(wire))
}

// popReady appends to dst every frame whose delay has passed at now and
// counts them as forwarded.
func (l *link) popReady(now time.Time, dst []frame) []frame {
	for l.delayLine.len() > 0 && !l.delayLine.front().due.After(now) {
		f := l.delayLine.pop()
		l.delayLineBytes -= len(f.data)
		l.stats.ForwardedPackets++
		l.stats.ForwardedBytes += uint64(len(f.data))
		dst = append(dst, f)
	}
	return dst
}

// nextWake is the earliest time after now at which release or popReady can
// make progress; ok is false when the link holds no frames.
func (l *link) nextWake(now time.Time) (wake time.Time, ok bool) {
	if l.delayLine.len() > 0 {
		wake, ok = l.delayLine.front().due, true
	}
	if l.queue.len() > 0 {
		sent := l.sentBy(l.queue.front())
		if !ok || sent.Before(wake) {
			wake, ok = sent, true
		}
	}
	return wake, ok
}

// snapshot returns the counters with the current queue and delay-line
// occupancy filled in.
func (l *link) snapshot() LinkStats {
	s := l.stats
	s.QueueBytes = l.queueBytes
	s.DelayLineBytes = l.delayLineBytes
	return s
}

// ring is a FIFO that reuses its backing array, so a busy link does not
// allocate per frame.
type ring[T any] struct {
	items []T
	head  int
	n     int
}

func (r *ring[T]) len() int { return r.n }

func (r *ring[T]) front() *T { return &r.items[r.head] }

func (r *ring[T]) push(v T) {
	if r.n == len(r.items) {
		grown := make([]T, max(16, 2*len(r.items)))
		for i := range r.n {
			grown[i] = r.items[(r.head+i)%len(r.items)]
		}
		r.items, r.head = grown, 0
	}
	r.items[(r.head+r.n)%len(r.items)] = v
	r.n++
}

func (r *ring[T]) pop() T {
	var zero T
	v := r.items[r.head]
	r.items[r.head] = zero
	r.head = (r.head + 1) % len(r.items)
	r.n--
	return v
}

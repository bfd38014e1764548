package wanem

import (
	"math"
	"time"
)

// tokenBucket paces frames to a byte rate. Tokens are bytes. The bucket keeps
// up to burst bytes of credit so that a sender that wakes late still sends
// everything the elapsed time paid for; refilling from "now" after every late
// wake-up instead would run the link at a fraction of its rate.
type tokenBucket struct {
	bytesPerSecond float64 // zero: unlimited
	burst          float64
	tokens         float64
	last           time.Time
}

// tokenSlack absorbs float rounding so that waking exactly at now+wait
// finds the frame payable instead of asking for one more nanosecond.
const tokenSlack = 1e-3

// newTokenBucket returns a full bucket for rate bits per second holding up to
// burst worth of sending time.
func newTokenBucket(rateBits int64, burst time.Duration, now time.Time) *tokenBucket {
	b := &tokenBucket{bytesPerSecond: float64(rateBits) / 8, last: now}
	b.burst = b.bytesPerSecond * burst.Seconds()
	b.tokens = b.burst
	return b
}

func (b *tokenBucket) unlimited() bool { return b.bytesPerSecond == 0 }

func (b *tokenBucket) refill(now time.Time) {
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(b.burst, b.tokens+elapsed.Seconds()*b.bytesPerSecond)
		b.last = now
	}
}

// needed is the credit a frame of n bytes waits for. A frame larger than the
// whole burst waits only for a full bucket and leaves the bucket in debt, so
// the long-run rate holds for any frame size.
func (b *tokenBucket) needed(n int) float64 {
	return min(float64(n), b.burst)
}

// take spends n bytes if the bucket holds enough credit at now.
func (b *tokenBucket) take(now time.Time, n int) bool {
	if b.unlimited() {
		return true
	}
	b.refill(now)
	if b.tokens+tokenSlack < b.needed(n) {
		return false
	}
	b.tokens -= float64(n)
	return true
}

// wait is how long after now a frame of n bytes can be taken.
func (b *tokenBucket) wait(now time.Time, n int) time.Duration {
	if b.unlimited() {
		return 0
	}
	b.refill(now)
	missing := b.needed(n) - b.tokens
	if missing <= tokenSlack {
		return 0
	}
	// Round up so that waking at now+wait always finds enough credit.
	return time.Duration(math.Ceil(missing / b.bytesPerSecond * float64(time.Second)))
}

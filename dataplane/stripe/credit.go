package stripe

import (
	"errors"
	"fmt"
)

// Credit errors: the peer broke the credit rules, so the session aborts.
var (
	ErrCreditOrder    = errors.New("stripe: CREDIT out of its stream's control sequence")
	ErrCreditBackward = errors.New("stripe: CREDIT below an earlier one")
	ErrCreditAbsurd   = errors.New("stripe: CREDIT too far ahead of what was sent")
)

// Flow-control sizes shared by both ends of a session.
const (
	// InitialWindow is the credit, in bytes, a sender holds before any
	// CREDIT arrives (at least one chunk per stream, see InitialCredit).
	InitialWindow = 4 << 20
	// MaxWindowFrames bounds a receive window in frames, whatever the
	// memory caps allow, so its bookkeeping stays bounded.
	MaxWindowFrames = 1 << 20
)

// InitialFrames is the receive window a session starts with, in frames:
// InitialWindow bytes of chunks, at least one chunk per stream, at most
// MaxWindowFrames.
func InitialFrames(streams, chunkSize int) int {
	chunk := max(chunkSize, 1)
	n := max((InitialWindow+chunk-1)/chunk, streams, 1)
	return min(n, MaxWindowFrames)
}

// InitialCredit is the implicit credit of a direction before its first
// CREDIT frame, in bytes.
func InitialCredit(streams, chunkSize int) uint64 {
	return uint64(InitialFrames(streams, chunkSize)) * uint64(max(chunkSize, 1))
}

// Credits applies the sender's rules to the CREDIT frames of one direction:
// on each stream the control sequence counts up by one from 0 and the
// credit never goes backwards; the sender's limit is the largest credit
// received on any stream (credits on different streams may overtake each
// other). It is not safe for concurrent use.
type Credits struct {
	chunk  uint64
	limit  uint64 // bytes
	stream []creditStream
}

type creditStream struct {
	next uint64 // expected control index
	last uint64 // last credit on this stream
}

// NewCredits tracks the credit of a session's sending direction.
func NewCredits(streams, chunkSize int) (*Credits, error) {
	if streams < 1 || chunkSize < 1 || chunkSize > MaxChunkSize {
		return nil, fmt.Errorf("%w: credits of %d streams, chunk size %d", ErrInvalid, streams, chunkSize)
	}
	return &Credits{
		chunk:  uint64(chunkSize),
		limit:  InitialCredit(streams, chunkSize),
		stream: make([]creditStream, streams),
	}, nil
}

// Frames is how many DATA frames the sender may have sent in all: every
// DATA frame consumes chunk-size bytes of credit, whatever its payload.
func (c *Credits) Frames() uint64 { return c.limit / c.chunk }

// Accept applies a CREDIT frame read from stream with header sequence seq
// and body credit, when the sender has sent sent DATA frames so far. It
// returns the sender's limit in frames.
func (c *Credits) Accept(stream int, seq, credit, sent uint64) (uint64, error) {
	if stream < 0 || stream >= len(c.stream) {
		return 0, fmt.Errorf("%w: stream %d of %d", ErrInvalid, stream, len(c.stream))
	}
	st := &c.stream[stream]
	if seq != ControlSeq(st.next) {
		return 0, fmt.Errorf("%w: stream %d sequence %#x, want %#x", ErrCreditOrder, stream, seq, ControlSeq(st.next))
	}
	if credit < st.last {
		return 0, fmt.Errorf("%w: stream %d credit %d after %d", ErrCreditBackward, stream, credit, st.last)
	}
	// sent x chunk cannot overflow: sent frames fit in memory that was.
	if credit > sent*c.chunk+MaxCreditAhead {
		return 0, fmt.Errorf("%w: credit %d bytes with %d frames of %d bytes sent", ErrCreditAbsurd, credit, sent, c.chunk)
	}
	st.next++
	st.last = credit
	c.limit = max(c.limit, credit)
	return c.Frames(), nil
}

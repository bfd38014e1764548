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
	ErrAckBackward    = errors.New("stripe: ACK below an earlier one")
	ErrAckAbsurd      = errors.New("stripe: ACK of frames never sent")
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

// Credits applies the sender's rules to the control frames it receives for
// one direction, CREDIT and ACK: on each stream the control sequence
// counts up by one from 0 (both types share it) and neither the credit nor
// the acknowledgement goes backwards; the sender's limit is the largest
// credit received on any stream and its acknowledged count the largest
// ACK (control frames on different streams may overtake each other). It is
// not safe for concurrent use.
type Credits struct {
	chunk  uint64
	limit  uint64 // bytes
	acked  uint64 // frames
	stream []creditStream
}

type creditStream struct {
	next    uint64 // expected control index
	last    uint64 // last credit on this stream
	lastAck uint64 // last ACK on this stream
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

// Acked is the number of frames (DATA and FIN) the receiver acknowledged
// as delivered to its end host.
func (c *Credits) Acked() uint64 { return c.acked }

// AcceptAck applies an ACK frame read from stream with header sequence seq
// and body acked, when the sender has numbered sent frames (DATA and FIN)
// so far, written or still queued. It returns the acknowledged count.
func (c *Credits) AcceptAck(stream int, seq, acked, sent uint64) (uint64, error) {
	if stream < 0 || stream >= len(c.stream) {
		return 0, fmt.Errorf("%w: stream %d of %d", ErrInvalid, stream, len(c.stream))
	}
	st := &c.stream[stream]
	if seq != ControlSeq(st.next) {
		return 0, fmt.Errorf("%w: ACK on stream %d sequence %#x, want %#x", ErrCreditOrder, stream, seq, ControlSeq(st.next))
	}
	if acked < st.lastAck {
		return 0, fmt.Errorf("%w: stream %d ACK %d after %d", ErrAckBackward, stream, acked, st.lastAck)
	}
	if acked > sent {
		return 0, fmt.Errorf("%w: ACK of %d frames with %d sent", ErrAckAbsurd, acked, sent)
	}
	st.next++
	st.lastAck = acked
	c.acked = max(c.acked, acked)
	return c.acked, nil
}

// ResetStream starts the control sequence of a replacement stream at
// index stream: it expects control index next (1 at the responder, whose
// JOIN took index 0 of the new stream; 0 at the initiator), and its
// credit and ACK start from zero. The session's limit and acknowledged
// count stay.
func (c *Credits) ResetStream(stream int, next uint64) {
	if stream >= 0 && stream < len(c.stream) {
		c.stream[stream] = creditStream{next: next}
	}
}

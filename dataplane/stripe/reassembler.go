package stripe

import (
	"errors"
	"fmt"
)

// Reassembly errors. Every one of them means the peer broke the protocol (or
// someone tampered with a stream), so the session must abort.
var (
	ErrReplay    = errors.New("stripe: sequence not above the stream's previous one")
	ErrStale     = errors.New("stripe: sequence already delivered")
	ErrDuplicate = errors.New("stripe: duplicate sequence")
	ErrAfterFin  = errors.New("stripe: sequence at or after FIN")
	ErrPaused    = errors.New("stripe: frame read from a paused stream")
)

// Reassembler puts the frames of one direction back in sequence order. It
// holds at most window frames in sequence range [next, next+window) plus one
// frame per stream beyond that range, whose stream is then paused: the caller
// must not read a stream while CanRead is false. It is not safe for
// concurrent use.
type Reassembler[T any] struct {
	window uint64
	next   uint64
	ring   []slot[T]
	// lastPlus1[s] is one more than the last sequence read from stream s,
	// 0 while nothing was read from it.
	lastPlus1 []uint64
	held      []heldFrame[T]
	heldCount int
	depth     int
	maxSeq    uint64
	anySeen   bool
	finSeq    uint64
	finSeen   bool
}

type slot[T any] struct {
	item T
	fin  bool
	full bool
}

type heldFrame[T any] struct {
	seq  uint64
	item T
	fin  bool
	full bool
}

// NewReassembler makes a reassembler for streams streams and a window of
// window frames (queue length x streams in the protocol).
func NewReassembler[T any](streams, window int) (*Reassembler[T], error) {
	if streams < 1 || window < 1 {
		return nil, fmt.Errorf("%w: reassembler of %d streams, window %d", ErrInvalid, streams, window)
	}
	return &Reassembler[T]{
		window:    uint64(window),
		ring:      make([]slot[T], window),
		lastPlus1: make([]uint64, streams),
		held:      make([]heldFrame[T], streams),
	}, nil
}

// Next is the sequence number delivery waits for.
func (r *Reassembler[T]) Next() uint64 { return r.next }

// Depth is how many frames are held.
func (r *Reassembler[T]) Depth() int { return r.depth }

// Window is the window size in frames.
func (r *Reassembler[T]) Window() int { return int(r.window) }

// CanRead applies the per-stream read rule: a stream may be read while the
// last sequence read from it is below Next()+window.
func (r *Reassembler[T]) CanRead(stream int) bool {
	return r.lastPlus1[stream] <= r.next+r.window
}

// MayHoldNext reports whether stream could still carry the frame delivery
// waits for: nothing at or beyond Next() was read from it yet.
func (r *Reassembler[T]) MayHoldNext(stream int) bool {
	return r.lastPlus1[stream] <= r.next
}

// Fin returns the FIN's sequence number once the FIN was received.
func (r *Reassembler[T]) Fin() (uint64, bool) { return r.finSeq, r.finSeen }

// Complete reports that the FIN was delivered: every frame of the
// direction went out in order.
func (r *Reassembler[T]) Complete() bool { return r.finSeen && r.next > r.finSeq }

// Received reports whether every frame up to and including the FIN has
// been received (delivered or held), so no stream needs to be read again.
func (r *Reassembler[T]) Received() bool {
	return r.finSeen && r.next+uint64(r.depth) == r.finSeq+1
}

// Insert accepts a frame read from stream with sequence number seq. fin
// marks the FIN frame. It refuses anything the protocol forbids, a
// duplicate included; it never drops a frame it accepted. Offer is the
// form an agent uses since retransmission: it drops duplicates instead.
func (r *Reassembler[T]) Insert(stream int, seq uint64, fin bool, item T) error {
	ok, err := r.Offer(stream, seq, fin, false, item)
	if err == nil && !ok {
		if seq < r.next {
			return fmt.Errorf("%w: seq %d, next %d", ErrStale, seq, r.next)
		}
		return fmt.Errorf("%w: seq %d", ErrDuplicate, seq)
	}
	return err
}

// Offer accepts a frame read from stream with sequence number seq, fin
// marking the FIN and retransmit the frame's FlagRetransmit. A frame
// whose sequence was already delivered or is held is a duplicate: Offer
// returns false and keeps nothing, so the caller releases item. Only
// authenticated frames may be offered: every authentic copy of a
// sequence carries the same chunk, so dropping one loses nothing. A
// frame without the flag must still come in increasing order along its
// stream (a replay on the stream is refused, not dropped); a
// retransmitted one may lie below the stream's previous frame, and does
// not move the stream's read position.
func (r *Reassembler[T]) Offer(stream int, seq uint64, fin, retransmit bool, item T) (bool, error) {
	if stream < 0 || stream >= len(r.lastPlus1) {
		return false, fmt.Errorf("%w: stream %d of %d", ErrInvalid, stream, len(r.lastPlus1))
	}
	if !r.CanRead(stream) {
		return false, fmt.Errorf("%w: stream %d", ErrPaused, stream)
	}
	if !retransmit && r.lastPlus1[stream] > seq {
		return false, fmt.Errorf("%w: stream %d seq %d after %d", ErrReplay, stream, seq, r.lastPlus1[stream]-1)
	}
	if r.finSeen && fin && seq == r.finSeq {
		return false, nil // the FIN again
	}
	if seq < r.next {
		return false, nil
	}
	if r.finSeen && seq >= r.finSeq {
		return false, fmt.Errorf("%w: seq %d, FIN at %d", ErrAfterFin, seq, r.finSeq)
	}
	if fin {
		if r.anySeen && r.maxSeq >= seq {
			return false, fmt.Errorf("%w: FIN at %d but seq %d already received", ErrAfterFin, seq, r.maxSeq)
		}
	}
	if seq < r.next+r.window {
		s := &r.ring[seq%r.window]
		if s.full {
			return false, nil
		}
		*s = slot[T]{item: item, fin: fin, full: true}
	} else {
		for i := range r.held {
			if r.held[i].full && r.held[i].seq == seq {
				return false, nil
			}
		}
		if retransmit || r.held[stream].full {
			// A retransmission lies below what its sender sent before,
			// so inside the credit and the window; a replacement stream
			// cannot hold a second frame beyond it.
			return false, fmt.Errorf("%w: stream %d seq %d beyond the window at %d", ErrPaused, stream, seq, r.next)
		}
		// The stream was readable, so its previous frame lay inside the
		// window and nothing of it is held.
		r.held[stream] = heldFrame[T]{seq: seq, item: item, fin: fin, full: true}
		r.heldCount++
	}
	if !retransmit {
		r.lastPlus1[stream] = seq + 1
	}
	if !r.anySeen || seq > r.maxSeq {
		r.maxSeq = seq
	}
	r.anySeen = true
	if fin {
		r.finSeq, r.finSeen = seq, true
	}
	r.depth++
	return true, nil
}

// ResetStream forgets the read position of stream: a replacement stream
// took its index and numbers its frames afresh. A frame the old stream
// left held beyond the window stays held.
func (r *Reassembler[T]) ResetStream(stream int) {
	if stream >= 0 && stream < len(r.lastPlus1) {
		r.lastPlus1[stream] = 0
	}
}

// Ready returns the frame at Next()+i if it is held in order, without
// releasing it: delivery peeks a run of ready frames, writes them, then
// releases them with Advance so the window covers them until written.
func (r *Reassembler[T]) Ready(i int) (item T, fin bool, ok bool) {
	if i < 0 || uint64(i) >= r.window {
		return item, false, false
	}
	s := &r.ring[(r.next+uint64(i))%r.window]
	if !s.full {
		return item, false, false
	}
	return s.item, s.fin, true
}

// Advance releases n delivered frames from the front of the window and pulls
// held frames that now fall inside it. It reports which streams became
// readable by calling woke (which may be nil).
func (r *Reassembler[T]) Advance(n int, woke func(stream int)) error {
	for range n {
		s := &r.ring[r.next%r.window]
		if !s.full {
			return fmt.Errorf("%w: advance past missing seq %d", ErrInvalid, r.next)
		}
		*s = slot[T]{}
		r.next++
		r.depth--
	}
	if r.heldCount > 0 {
		for i := range r.held {
			h := &r.held[i]
			if h.full && h.seq < r.next+r.window {
				r.ring[h.seq%r.window] = slot[T]{item: h.item, fin: h.fin, full: true}
				*h = heldFrame[T]{}
				r.heldCount--
			}
		}
	}
	if woke != nil && n > 0 {
		for s := range r.lastPlus1 {
			// Became readable in this step: it was paused before and is not now.
			if last := r.lastPlus1[s]; last > r.next-uint64(n)+r.window && last <= r.next+r.window {
				woke(s)
			}
		}
	}
	return nil
}

// Grow widens the window to window frames (never narrows it): a receiver
// that grants more credit makes room for it first. Held frames keep their
// sequence order; frames held beyond the old window that now fall inside
// move into it, and woke (which may be nil) is called for every stream
// the wider window makes readable.
func (r *Reassembler[T]) Grow(window int, woke func(stream int)) error {
	if window < 1 {
		return fmt.Errorf("%w: window %d", ErrInvalid, window)
	}
	if uint64(window) <= r.window {
		return nil
	}
	old := r.window
	ring := make([]slot[T], window)
	for i := range r.window {
		seq := r.next + i
		if s := r.ring[seq%r.window]; s.full {
			ring[seq%uint64(window)] = s
		}
	}
	r.ring, r.window = ring, uint64(window)
	// A zero-frame advance pulls held frames into the wider window.
	if err := r.Advance(0, nil); err != nil {
		return err
	}
	if woke != nil {
		for s, last := range r.lastPlus1 {
			if last > r.next+old && last <= r.next+r.window {
				woke(s)
			}
		}
	}
	return nil
}

// Drain calls release for every held frame and empties the reassembler, so
// the caller can recycle buffers after an abort.
func (r *Reassembler[T]) Drain(release func(T)) {
	for i := range r.ring {
		if r.ring[i].full {
			release(r.ring[i].item)
			r.ring[i] = slot[T]{}
		}
	}
	for i := range r.held {
		if r.held[i].full {
			release(r.held[i].item)
			r.held[i] = heldFrame[T]{}
		}
	}
	r.heldCount, r.depth = 0, 0
}

package stripe

import "math"

// StreamReadBuffer is the per-stream read buffer an agent keeps: it lets
// one read syscall pick up several small frames. It is counted in
// SessionMemory.
const StreamReadBuffer = 32 << 10

// MaxSendFrames bounds the frame buffers of a session's sending
// direction: chunks read from the end host and not yet written to a
// stream socket. What is in flight lives in the kernel's socket buffers.
const MaxSendFrames = 128

// SessionMemory is the frame-buffer memory one session can hold at an
// agent before its send retention grows, in bytes, for a session's
// streams, chunk size and receive window in frames. Per session and agent:
// the receive direction holds at most the window plus the FIN and one
// frame per stream being read (the sender never exceeds the credit, and
// the receiver never grants more than its window); the send direction
// holds SendBudget frames, queued for a stream or sent and not yet
// acknowledged; and every stream has a read buffer. Retention beyond
// SendBudget frames (RetainFootprint) is reserved as it grows and counts
// against the same session cap: SessionMemory at the window plus
// RetainFootprint of the extra retention never passes it. The arithmetic
// saturates at math.MaxInt64 instead of wrapping, so no shape a peer can
// announce passes a cap by overflowing; non-positive arguments count as
// zero.
func SessionMemory(streams, chunkSize, windowFrames int) int64 {
	n, chunk, window := nonNeg(streams), nonNeg(chunkSize), nonNeg(windowFrames)
	frames := satAdd(RecvBudget(n, window), SendBudget(n))
	return satAdd(satMul(FrameSize(int(chunk)), frames), satMul(n, StreamReadBuffer))
}

// FrameSize is the buffer size of one frame of a chunk size, as int64.
func FrameSize(chunkSize int) int64 {
	return satAdd(int64(HeaderSize+TagSize), max(nonNeg(chunkSize), FinBodySize))
}

// SessionFootprint is what one session reserves from an agent's memory
// cap with a receive window of window frames: its frame buffers
// (SessionMemory) plus the bookkeeping an agent allocates for it: reorder
// slots (a generous 48 bytes each), buffer queue slots (16) and per-stream
// state, mostly the stacks of the stream's reader and writer goroutines
// (16 KiB). A session reserves it at its initial window and reserves the
// difference before its window grows. It saturates like SessionMemory.
func SessionFootprint(streams, chunkSize, windowFrames int) int64 {
	const perSlot, perBuffer, perStream = 48, 16, 16 << 10
	n := nonNeg(streams)
	window := nonNeg(windowFrames)
	book := satAdd(satMul(window, perSlot),
		satAdd(satMul(satAdd(RecvBudget(n, window), SendBudget(n)), perBuffer), satMul(n, perStream)))
	return satAdd(SessionMemory(streams, chunkSize, windowFrames), book)
}

// RetainFootprint is what frames of send retention beyond SendBudget
// take: a frame buffer and a buffer queue slot each. A session reserves
// it from its agent's memory cap, within its session cap, before its
// retention grows.
func RetainFootprint(chunkSize, frames int) int64 {
	const perBuffer = 16
	return satMul(nonNeg(frames), satAdd(FrameSize(chunkSize), perBuffer))
}

// RecvBudget is the number of receive frame buffers of a session: the
// window, the FIN, and one per stream being read.
func RecvBudget(streams, window int64) int64 { return satAdd(satAdd(window, 1), streams) }

// SendBudget is the number of send frame buffers of a session: two per
// stream (one being written, one taken next), at most MaxSendFrames, plus
// the one being filled.
func SendBudget(streams int64) int64 { return min(satMul(2, streams), MaxSendFrames) + 1 }

func nonNeg(v int) int64 { return int64(max(v, 0)) }

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

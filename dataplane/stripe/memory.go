package stripe

import "math"

// StreamReadBuffer is the per-stream read buffer an agent keeps: it lets
// one read syscall pick up several small frames. It is counted in
// SessionMemory.
const StreamReadBuffer = 32 << 10

// SessionMemory is the most frame-buffer memory one session can hold at an
// agent, in bytes, for a session's streams, chunk size and queue length.
// Config validation uses it to check a cap, and an agent refuses a session
// whose need exceeds its cap. Per session and agent: the receive direction
// holds at most the window (queue length x streams) plus two frames per
// stream (one beyond the window, one being read); the send direction holds
// at most two frames per stream plus the one being filled; and every stream
// has a read buffer. The arithmetic saturates at math.MaxInt64 instead of
// wrapping, so no shape a peer can announce passes a cap by overflowing;
// non-positive arguments count as zero.
func SessionMemory(streams, chunkSize, queueLength int) int64 {
	n, chunk, queue := nonNeg(streams), nonNeg(chunkSize), nonNeg(queueLength)
	frame := satAdd(int64(HeaderSize+TagSize), max(chunk, FinBodySize))
	window := satMul(queue, n)
	frames := satAdd(satAdd(window, satMul(2, n)), satAdd(satMul(2, n), 1))
	return satAdd(satMul(frame, frames), satMul(n, StreamReadBuffer))
}

// SessionFootprint is what one session reserves from an agent's memory
// cap: its frame buffers (SessionMemory) plus the bookkeeping an agent
// allocates for it up front: reorder slots (a generous 48 bytes each),
// buffer queue slots (16) and per-stream state, mostly the stacks of the
// stream's reader and writer goroutines (16 KiB). It saturates like
// SessionMemory.
func SessionFootprint(streams, chunkSize, queueLength int) int64 {
	const perSlot, perBuffer, perStream = 48, 16, 16 << 10
	n := nonNeg(streams)
	window := satMul(nonNeg(queueLength), n)
	book := satAdd(satMul(window, perSlot),
		satAdd(satMul(satAdd(RecvBudget(n, window), SendBudget(n)), perBuffer), satMul(n, perStream)))
	return satAdd(SessionMemory(streams, chunkSize, queueLength), book)
}

// RecvBudget is the number of receive frame buffers of a session: the
// window plus two per stream.
func RecvBudget(streams, window int64) int64 { return satAdd(window, satMul(2, streams)) }

// SendBudget is the number of send frame buffers of a session.
func SendBudget(streams int64) int64 { return satAdd(satMul(2, streams), 1) }

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

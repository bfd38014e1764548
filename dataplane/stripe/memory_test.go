package stripe

import (
	"math"
	"testing"
)

func TestSessionMemoryFormula(t *testing.T) {
	// 64 streams, chunk 60000, a window of 320 frames: 65 more on the
	// receive side (FIN, one being read per stream), 129 on the send side,
	// and 64 read buffers.
	frame := int64(HeaderSize + 60000 + TagSize)
	want := frame*(320+65+129) + 64*StreamReadBuffer
	if got := SessionMemory(64, 60000, 320); got != want {
		t.Fatalf("SessionMemory = %d, want %d", got, want)
	}
}

// TestSessionMemorySaturates is the overflow a hostile hello used to
// reach: chunk 16,777,184 x a window of 2^42 frames (queue 2^29 x 8192
// streams) wrapped negative in int64 and passed every cap.
func TestSessionMemorySaturates(t *testing.T) {
	cases := []struct{ streams, chunk, queue int }{
		{8192, 16_777_184, 1 << 42},
		{65535, MaxChunkSize, math.MaxUint32 * 65535},
		{math.MaxInt, math.MaxInt, math.MaxInt},
		{1 << 50, 1, 1},
	}
	for _, c := range cases {
		if got := SessionMemory(c.streams, c.chunk, c.queue); got != math.MaxInt64 {
			t.Errorf("SessionMemory(%d, %d, %d) = %d, want saturation at MaxInt64", c.streams, c.chunk, c.queue, got)
		}
	}
	for _, c := range []struct{ streams, chunk, queue int }{{-1, 1, 1}, {1, -5, 1}, {0, 0, 0}} {
		if got := SessionMemory(c.streams, c.chunk, c.queue); got < 0 {
			t.Errorf("SessionMemory(%d, %d, %d) = %d: negative", c.streams, c.chunk, c.queue, got)
		}
	}
}

func FuzzSessionMemory(f *testing.F) {
	f.Add(int64(64), int64(60000), int64(5))
	f.Add(int64(8192), int64(16_777_184), int64(1<<29))
	f.Fuzz(func(t *testing.T, streams, chunk, queue int64) {
		got := SessionMemory(int(streams), int(chunk), int(queue))
		if got < 0 {
			t.Fatalf("SessionMemory(%d, %d, %d) = %d", streams, chunk, queue, got)
		}
		// Monotonic in each argument: more never costs less.
		if streams >= 0 && streams < math.MaxInt32 && SessionMemory(int(streams)+1, int(chunk), int(queue)) < got {
			t.Fatalf("not monotonic in streams at %d, %d, %d", streams, chunk, queue)
		}
	})
}

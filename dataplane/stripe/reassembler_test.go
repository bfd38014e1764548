package stripe

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// simulate stripes frames 0..frames-1 (the last one a FIN) over streams
// chosen at random by the sender, reads them back choosing readable streams
// at random and delivering runs of random length, and checks the output is
// in order, nothing is lost and the held frames never exceed window+streams.
func simulate(t *testing.T, rng *rand.Rand, streams, window, frames int) {
	t.Helper()
	r, err := NewReassembler[uint64](streams, window)
	if err != nil {
		t.Fatal(err)
	}
	// Each stream is a FIFO: the sender's writers take frames in sequence
	// order, so a stream's frames increase.
	pipes := make([][]uint64, streams)
	for seq := range uint64(frames) {
		s := rng.IntN(streams)
		pipes[s] = append(pipes[s], seq)
	}
	delivered := uint64(0)
	readable := make([]int, 0, streams)
	for steps := 0; !r.Complete(); steps++ {
		if steps > 10*frames+1000 {
			t.Fatalf("no progress: next %d depth %d", r.Next(), r.Depth())
		}
		readable = readable[:0]
		for s := range pipes {
			if len(pipes[s]) > 0 && r.CanRead(s) {
				readable = append(readable, s)
			}
		}
		_, _, ready := r.Ready(0)
		if len(readable) == 0 && !ready {
			t.Fatalf("deadlock: next %d depth %d", r.Next(), r.Depth())
		}
		if len(readable) > 0 && (!ready || rng.IntN(3) > 0) {
			s := readable[rng.IntN(len(readable))]
			seq := pipes[s][0]
			pipes[s] = pipes[s][1:]
			if err := r.Insert(s, seq, seq == uint64(frames-1), seq); err != nil {
				t.Fatalf("insert stream %d seq %d: %v", s, seq, err)
			}
			if r.Depth() > window+streams {
				t.Fatalf("depth %d exceeds window %d + streams %d", r.Depth(), window, streams)
			}
			continue
		}
		run := 0
		for max := 1 + rng.IntN(8); run < max; run++ {
			got, fin, ok := r.Ready(run)
			if !ok {
				break
			}
			if got != delivered+uint64(run) {
				t.Fatalf("delivered %d, want %d", got, delivered+uint64(run))
			}
			if fin != (got == uint64(frames-1)) {
				t.Fatalf("fin flag on %d", got)
			}
		}
		woke := 0
		if err := r.Advance(run, func(s int) {
			if !r.CanRead(s) {
				t.Fatalf("woke stream %d that cannot be read", s)
			}
			woke++
		}); err != nil {
			t.Fatal(err)
		}
		delivered += uint64(run)
	}
	if delivered != uint64(frames) || r.Depth() != 0 {
		t.Fatalf("delivered %d of %d, depth %d", delivered, frames, r.Depth())
	}
}

func TestReassemblerRandomStriping(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 300; i++ {
		streams := 1 + rng.IntN(64)
		window := 1 + rng.IntN(5*streams)
		simulate(t, rng, streams, window, 1+rng.IntN(3000))
	}
	// A window of one frame with many streams is the tightest case.
	simulate(t, rng, 64, 1, 20000)
}

func TestReassemblerRejects(t *testing.T) {
	r, _ := NewReassembler[int](2, 4)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.Insert(0, 1, false, 1))
	if err := r.Insert(0, 1, false, 1); !errors.Is(err, ErrReplay) {
		t.Errorf("replay on a stream: %v", err)
	}
	if err := r.Insert(1, 1, false, 1); !errors.Is(err, ErrDuplicate) {
		t.Errorf("duplicate across streams: %v", err)
	}
	must(r.Insert(1, 0, false, 0))
	must(r.Advance(2, nil))
	if err := r.Insert(1, 1, false, 1); !errors.Is(err, ErrStale) {
		t.Errorf("seq delivered from another stream: %v", err)
	}
	r2, _ := NewReassembler[int](3, 4)
	must(r2.Insert(0, 0, false, 0))
	must(r2.Advance(1, nil))
	if err := r2.Insert(1, 0, false, 0); !errors.Is(err, ErrStale) {
		t.Errorf("stale on another stream: %v", err)
	}
	must(r2.Insert(1, 9, false, 9)) // beyond the window: held, stream 1 pauses
	if r2.CanRead(1) {
		t.Error("stream holding a frame beyond the window is readable")
	}
	if err := r2.Insert(1, 10, false, 10); !errors.Is(err, ErrPaused) {
		t.Errorf("insert on paused stream: %v", err)
	}
	if err := r2.Insert(2, 9, false, 9); !errors.Is(err, ErrDuplicate) {
		t.Errorf("duplicate of a held frame: %v", err)
	}
	if err := r2.Insert(2, 5, true, 5); !errors.Is(err, ErrAfterFin) {
		t.Errorf("FIN below a received frame: %v", err)
	}
	must(r2.Insert(2, 12, true, 12))
	if err := r2.Insert(0, 13, false, 13); !errors.Is(err, ErrAfterFin) {
		t.Errorf("data after FIN: %v", err)
	}
	if err := r2.Advance(1, nil); err == nil {
		t.Error("advanced past a missing frame")
	}
	released := 0
	r2.Drain(func(int) { released++ })
	if released != 2 || r2.Depth() != 0 {
		t.Errorf("drain released %d, depth %d", released, r2.Depth())
	}
}

func TestReassemblerReceived(t *testing.T) {
	r, _ := NewReassembler[int](2, 8)
	insert := func(stream int, seq uint64, fin bool) {
		t.Helper()
		if err := r.Insert(stream, seq, fin, int(seq)); err != nil {
			t.Fatal(err)
		}
	}
	insert(1, 2, false)
	insert(1, 3, true)
	if !r.MayHoldNext(0) || r.MayHoldNext(1) {
		t.Fatal("only stream 0 can still carry seq 0")
	}
	insert(0, 0, false)
	if r.Received() {
		t.Fatal("received with seq 1 missing")
	}
	insert(0, 1, false)
	if !r.Received() || r.Complete() {
		t.Fatalf("received %v complete %v", r.Received(), r.Complete())
	}
	if err := r.Advance(4, nil); err != nil {
		t.Fatal(err)
	}
	if !r.Complete() {
		t.Fatal("not complete after delivering the FIN")
	}
}

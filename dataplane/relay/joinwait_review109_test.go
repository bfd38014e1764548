package relay

// Written by review (helper-109) of b48dd30 (session.waitJoin).

import (
	"net"
	"sync"
	"testing"
	"time"
)

func review109Pair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.DialTCP("tcp", nil, l.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return s, c
}

// TestWaitJoinOnePerSlot: waiters of two slots both start; a second
// waiter of one slot displaces the first; a waiter that saw the session
// start is never displaced (its stream goes to replaceStream), even by a
// JOIN for its slot that raced with the start; and the map is left empty.
func TestWaitJoinOnePerSlot(t *testing.T) {
	for round := range 200 {
		s := &session{abortCh: make(chan struct{})}
		a, _ := review109Pair(t)
		b, _ := review109Pair(t)
		c, _ := review109Pair(t)
		type res struct{ started, displaced bool }
		var wg sync.WaitGroup
		out := make([]res, 3)
		run := func(i, slot int, conn *net.TCPConn) {
			defer wg.Done()
			st, d := s.waitJoin(slot, conn, 2*time.Second)
			out[i] = res{st, d}
		}
		wg.Add(2)
		go run(0, 1, a)
		go run(1, 2, b)
		time.Sleep(time.Duration(round%7) * time.Millisecond)
		go s.established.Store(true)
		wg.Add(1)
		go run(2, 1, c) // races with the start for slot 1
		wg.Wait()
		if !out[1].started || out[1].displaced {
			t.Fatalf("round %d: slot 2's only waiter: %+v", round, out[1])
		}
		// Slot 1: exactly one of a, c goes on to replaceStream; the
		// other is displaced; never both started with one reset.
		startedN := 0
		for _, i := range []int{0, 2} {
			if out[i].started {
				startedN++
			}
			if out[i].started && out[i].displaced {
				t.Fatalf("round %d: started and displaced: %+v", round, out[i])
			}
		}
		if startedN == 0 {
			t.Fatalf("round %d: no waiter of slot 1 started: %+v", round, out)
		}
		if out[0].started && out[2].started {
			// Both started: a must not have been reset by c.
			if _, err := a.Write([]byte("x")); err != nil {
				t.Fatalf("round %d: a started but was reset: %v", round, err)
			}
		}
		s.mu.Lock()
		n := len(s.joinWaiting)
		s.mu.Unlock()
		if n != 0 {
			t.Fatalf("round %d: %d left in joinWaiting", round, n)
		}
	}
}

// TestWaitJoinEndsAtAbort: a waiter returns promptly, not started,
// when the session aborts.
func TestWaitJoinEndsAtAbort(t *testing.T) {
	s := &session{abortCh: make(chan struct{})}
	a, _ := review109Pair(t)
	go func() { time.Sleep(20 * time.Millisecond); close(s.abortCh) }()
	start := time.Now()
	st, d := s.waitJoin(3, a, 5*time.Second)
	if st || d || time.Since(start) > time.Second {
		t.Fatalf("started %v displaced %v after %v", st, d, time.Since(start))
	}
}

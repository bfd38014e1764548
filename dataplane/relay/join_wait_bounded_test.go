package relay

import (
	"bytes"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// awaitingSessions counts the goroutines of this process waiting in
// awaitSession.
func awaitingSessions() int {
	buf := make([]byte, 4<<20)
	n := runtime.Stack(buf, true)
	return bytes.Count(buf[:n], []byte("relay.(*Agent).awaitSession("))
}

// TestJoinWaitBoundedByPreAuth: a JOIN waits past joinGrace while a fresh
// stream of the same initiator holds the session's place (f6a9fc1). The
// place lives as long as any fresh hello of the id holds it, and a new
// fresh hello of the id (a new handshake, or the same hello bytes
// replayed: nothing refuses a second accepted fresh hello while the place
// is held) renews it. Before, a JOIN then waited for as long as the
// initiator, or a replayer of its hellos, kept the place alive: its
// goroutine outlived its own pre-auth deadline, its connection long gone.
// Now the wait ends at the JOIN's own pre-auth time. Here: PreAuthTimeout
// 1 s, a fresh stream 0 hello for session X that never confirms, the same
// hello bytes sent again every 400 ms, and JOIN hellos for X (one hello's
// bytes sent five times, each connection closed by its sender at once).
// Three pre-auth timeouts after the joins, their goroutines are gone.
// Found by review (helper-55).
func TestJoinWaitBoundedByPreAuth(t *testing.T) {
	p := startPair(t, pairOptions{streams: 2, limitsB: Limits{PreAuthTimeout: time.Second}}, echo)
	var id stripe.SessionID
	fresh := func(h *stripe.Hello) { h.Streams, h.Stream = 2, 0 }
	h0, _, hb0 := helloFrom(t, p, fresh)
	id = h0.Session
	data := p.b.Addrs().Data

	// The fresh hello, accepted, holds the place.
	c0, st, _ := placeHello(t, p, hb0)
	defer c0.Close()
	if st != stripe.StatusAccepted {
		t.Fatalf("fresh hello: %v", st)
	}
	before := awaitingSessions()

	// JOINs for the same session, closed by their sender at once: one
	// hello, sent five times (a replay needs no key).
	const joins = 5
	_, _, hb := helloFrom(t, p, func(h *stripe.Hello) {
		h.Session, h.Streams, h.Stream, h.Join = id, 2, 1, true
	})
	for range joins {
		c, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(data))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(hb[:]); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}
	testsupport.Eventually(t, 5*time.Second, "the joins waiting for the session", func() bool {
		return awaitingSessions() >= before+joins
	})
	joined := time.Now()

	// The same fresh hello, replayed every 400 ms, keeps the place.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var held []*net.TCPConn
	wg.Go(func() {
		tick := time.NewTicker(400 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			c, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(data))
			if err != nil {
				continue
			}
			_, _ = c.Write(hb0[:])
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
		mu.Lock()
		for _, c := range held {
			_ = c.Close()
		}
		mu.Unlock()
		testsupport.Eventually(t, 10*time.Second, "the joins' goroutines gone once the place is", func() bool {
			return awaitingSessions() <= before
		})
	}()

	time.Sleep(3*time.Second - time.Since(joined))
	places, _ := placesOf(p.b)
	stuck := awaitingSessions() - before
	t.Logf("%v after the joins (pre-auth timeout 1 s): %d of %d join goroutines still in awaitSession; places held %d",
		time.Since(joined).Round(time.Millisecond), stuck, joins, places)
	if stuck > 0 {
		t.Errorf("%d JOIN handshakes still wait for the session 3 pre-auth timeouts after their hello (their connections closed): the wait outlives their pre-auth deadline while fresh hellos (here one replayed) renew the place", stuck)
	}
}

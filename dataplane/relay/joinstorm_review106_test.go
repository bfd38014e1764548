package relay

// Written by review (helper-106): a key holder against the real
// server-side agent.

import (
	"crypto/rand"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestKeyHolderConcurrentJoinStorm: on a running session whose end server
// keeps sending, a key holder that never ACKs sends JOINs for every index
// from several connections at once, for 3 s, so that replacements of one
// slot race each other. The session must keep at most one stream per
// slot, and everything must go when the attacker leaves.
func TestKeyHolderConcurrentJoinStorm(t *testing.T) {
	const streams = 4
	release := make(chan struct{})
	defer close(release)
	p := review106B(t, streams, Limits{ReconnectTimeout: time.Second, PreAuthTimeout: 2 * time.Second}, func(c *net.TCPConn) {
		defer c.Close()
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-release:
				_ = c.Close()
			case <-done:
			}
		}()
		go func() { _, _ = io.Copy(io.Discard, c) }()
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}, nil)
	baseG := goroutines()
	var id stripe.SessionID
	_, _ = rand.Read(id[:])
	client := netip.MustParseAddrPort("127.0.0.1:46000")
	c0, st, sec0, err := evilHandshake(t, p, func(h *stripe.Hello) { h.Session, h.Streams, h.Client = id, streams, client })
	if err != nil || st != stripe.StatusAccepted {
		t.Fatalf("%v %v", st, err)
	}
	defer c0.Close()
	key := sec0.SessionKey()
	testsupport.Eventually(t, 10*time.Second, "the session running", func() bool {
		ss := p.b.Stats().Sessions
		return len(ss) == 1 && ss[0].BytesDown > 0
	})
	var mu sync.Mutex
	var held []*net.TCPConn
	defer func() {
		mu.Lock()
		for _, c := range held {
			_ = c.Close()
		}
		mu.Unlock()
	}()
	var joins atomic.Int64
	var maxLive atomic.Int64
	deadline := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				e, st, err := evilJoin(t, p, streams, id, client, &key, w%streams)
				if err != nil || st != stripe.StatusAccepted {
					continue
				}
				joins.Add(1)
				mu.Lock()
				held = append(held, e.c)
				mu.Unlock()
				// Read a little of what comes; never ACK.
				_ = e.c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
				_, _ = io.ReadFull(e.c, make([]byte, 1<<16))
				if ss := p.b.Stats().Sessions; len(ss) == 1 {
					v := int64(ss[0].StreamsLive)
					for o := maxLive.Load(); v > o && !maxLive.CompareAndSwap(o, v); o = maxLive.Load() {
					}
				}
			}
		}()
	}
	wg.Wait()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	ss := p.b.Stats()
	t.Logf("%d concurrent JOINs in 3 s: sessions %d, most streams live %d of %d, replaced %d, lost %d, goroutines %d -> %d, heap %d MiB, reserved %d KiB",
		joins.Load(), len(ss.Sessions), maxLive.Load(), streams, ss.Totals.StreamsReplaced, ss.Totals.StreamsLost, baseG, goroutines(), ms.HeapInuse>>20, ss.Totals.MemoryReserved>>10)
	if maxLive.Load() > streams {
		t.Errorf("the session counted %d live streams, more than its %d slots", maxLive.Load(), streams)
	}
	mu.Lock()
	for _, c := range held {
		_ = c.Close()
	}
	held = nil
	mu.Unlock()
	_ = c0.Close()
	testsupport.Eventually(t, 30*time.Second, "everything gone", func() bool {
		st := p.b.Stats()
		return len(st.Sessions) == 0 && st.Totals.MemoryReserved == 0 && goroutines() <= baseG+4
	})
}

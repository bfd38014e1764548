package relay

// Written by review (helper-106): a key holder against the real
// server-side agent.

import (
	"context"
	"crypto/rand"
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

// TestJoinsWhileConnectingHoldOnePlacePerSlot: a key holder founds a
// session whose server is slow to answer (its SYNs dropped: the connect
// runs up to the pre-auth timeout) and, meanwhile, sends valid JOINs of
// it, as many as it can. A JOIN's stream leaves the pre-auth accounting
// once its proof is checked, then waits for the session to start
// (waitJoin): one per stream slot, a later one resetting the earlier. So
// the agent holds a socket and goroutine per slot, not per JOIN. Before,
// each JOIN waited, counted under no limit: 4,307-5,372 goroutines and
// sockets for one session of 8 streams, and 119-147 MiB of heap once it
// started (review, helper-106).
func TestJoinsWhileConnectingHoldOnePlacePerSlot(t *testing.T) {
	const streams = 8
	release := make(chan struct{})
	var releaseOnce sync.Once
	open := func() { releaseOnce.Do(func() { close(release) }) }
	defer open()
	lim := Limits{Memory: 64 << 20, MaxPreAuth: 32, MaxPreAuthPerSource: 16, PreAuthTimeout: 5 * time.Second}
	p := review106B(t, streams, lim, echo, func(a *Agent) {
		dial := a.os.dial
		a.os.dial = func(ctx context.Context, client, server netip.AddrPort) (*net.TCPConn, error) {
			// A server whose SYNs are dropped: the connect waits.
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return dial(ctx, client, server)
		}
	})
	baseG, baseFD := goroutines(), openFDs()

	var id stripe.SessionID
	_, _ = rand.Read(id[:])
	client := netip.MustParseAddrPort("127.0.0.1:40000")
	c0, st, sec0, err := evilHandshake(t, p, func(h *stripe.Hello) { h.Session, h.Streams, h.Client = id, streams, client })
	if err != nil || st != stripe.StatusAccepted {
		t.Fatalf("stream 0: %v %v", st, err)
	}
	defer c0.Close()
	key := sec0.SessionKey()
	testsupport.Eventually(t, 10*time.Second, "the session connecting", func() bool { return len(p.b.Stats().Sessions) == 1 })

	var mu sync.Mutex
	var held []*net.TCPConn
	defer func() {
		mu.Lock()
		for _, c := range held {
			_ = c.Close()
		}
		mu.Unlock()
	}()
	var joined, refused atomic.Int64
	deadline := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := 0
			for time.Now().Before(deadline) {
				i++
				e, st, err := evilJoin(t, p, streams, id, client, &key, 1+(w+i)%(streams-1))
				if err != nil || st != stripe.StatusAccepted {
					refused.Add(1)
					continue
				}
				joined.Add(1)
				mu.Lock()
				held = append(held, e.c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// Let the agent take the last JOIN frames.
	time.Sleep(200 * time.Millisecond)
	st0 := p.b.Stats().Totals
	g, fd := goroutines(), openFDs()
	t.Logf("%d JOINs accepted (%d refused) in 3 s; agent pre-auth now %d (cap %d); goroutines %d -> %d, fds %d -> %d",
		joined.Load(), refused.Load(), st0.PreAuthActive, lim.MaxPreAuth, baseG, g, baseFD, fd)
	// The attacker's side holds one fd per stream and no goroutine: what
	// grew beyond that is the agent's.
	agentFDs := fd - baseFD - int(joined.Load()) - 1
	agentG := g - baseG
	t.Logf("agent-side growth: %d goroutines, %d fds, for one session of %d streams", agentG, agentFDs, streams)
	// The session starts with every JOIN still waiting: each makes its
	// stream (a 32 KiB read buffer) and replaces the last one in its slot.
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse
	open()
	var peak uint64
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}
	t.Logf("after the connect: heap in use %d MiB -> peak %d MiB; memory reserved %d of %d; goroutines %d; replaced %d",
		before>>20, peak>>20, p.b.Stats().Totals.MemoryReserved, p.b.Stats().Totals.MemoryLimit, goroutines(), p.b.Stats().Totals.StreamsReplaced)
	if agentG > lim.MaxPreAuth+2*streams || agentFDs > lim.MaxPreAuth+2*streams {
		t.Errorf("a key holder's JOINs held %d goroutines and %d sockets at the server side for one session of %d streams, beyond the pre-auth cap %d",
			agentG, agentFDs, streams, lim.MaxPreAuth)
	}
	// Everything goes once the session starts.
	mu.Lock()
	for _, c := range held {
		_ = c.Close()
	}
	held = nil
	mu.Unlock()
	_ = c0.Close()
	testsupport.Eventually(t, 30*time.Second, "the session and its streams gone", func() bool {
		return len(p.b.Stats().Sessions) == 0 && goroutines() <= baseG+4
	})
}

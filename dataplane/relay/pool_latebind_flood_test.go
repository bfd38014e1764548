package relay

import (
	"bytes"
	"io"
	mrand "math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestLateBindAfterRefusalFloodRefused: TestLateBindAfterRefusalRefused's
// scenario (stream 0's BIND held at the far agent while the fresh hello is
// refused at max_sessions and the connection goes direct, whole), but
// before the BIND goes on a key holder (any client-side agent, or simply
// a busy deployment) gets settledMax+1 fresh hellos for stream 0 refused
// within a few seconds, pushing the refused id out of the settled ids.
// The late BIND must still not found the session: its stream was closed
// when the connection went direct (peerGaveUp). (Found by review: every
// refusal settled its id in one queue with the founded ids, and the late
// BIND founded the session: the server got the request twice.)
func TestLateBindAfterRefusalFloodRefused(t *testing.T) {
	rec := &recordingServer{}
	p := startPair(t, pairOptions{streams: 4, chunk: 16384,
		pool:    agentspec.Pool{MinIdle: 4, Max: 8},
		limitsA: Limits{MaxSessions: 16, MaxSessionsPerPeer: 16, ReconnectTimeout: 60 * time.Second},
		limitsB: Limits{MaxSessions: 1}}, rec.handle)
	testsupport.Eventually(t, 10*time.Second, "the pool filled", func() bool { return onlyPool(t, p.a).Idle >= 4 })
	hold := p.dial(t)
	defer hold.Close()
	_ = hold.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := hold.Write([]byte("hold")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(hold, make([]byte, 4)); err != nil {
		t.Fatalf("the first connection: %v", err)
	}
	testsupport.Eventually(t, 10*time.Second, "the pool refilled", func() bool { return onlyPool(t, p.a).Idle >= 4 })

	release := make(chan struct{})
	var held atomic.Bool
	fault := func(stream uint16) bool {
		if stream == 0 && held.CompareAndSwap(false, true) {
			select {
			case <-release:
			case <-time.After(50 * time.Second):
			}
		}
		return false
	}
	p.b.testBindFault.Store(&fault)

	want := make([]byte, 64<<10)
	r := mrand.New(mrand.NewPCG(33, 1))
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	go func() {
		_, _ = c.Write(want)
		_ = c.CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the connection was not carried direct, whole: %d of %d bytes, err %v", len(got), len(want), err)
	}
	if !held.Load() || p.a.Stats().Totals.Fallbacks != 1 {
		t.Fatalf("the scenario did not happen: BIND held %v, fallbacks %d", held.Load(), p.a.Stats().Totals.Fallbacks)
	}
	p.b.mu.Lock()
	before := len(p.b.settled.ids)
	p.b.mu.Unlock()

	// A key holder's fresh hellos for stream 0, each refused (the far
	// agent's one place is taken), each settling a new id.
	hellos := make([][stripe.HelloSize]byte, settledMax+1)
	for i := range hellos {
		_, _, hellos[i] = helloFrom(t, p, nil)
	}
	start := time.Now()
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(hellos)) {
					return
				}
				fc, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(p.b.Addrs().Data))
				if err != nil {
					failed.Add(1)
					continue
				}
				_ = fc.SetDeadline(time.Now().Add(10 * time.Second))
				var rb [stripe.ReplySize]byte
				if _, err := fc.Write(hellos[i][:]); err == nil {
					_, err = io.ReadFull(fc, rb[:])
					if err != nil {
						failed.Add(1)
					}
				}
				_ = fc.Close()
			}
		}()
	}
	wg.Wait()
	p.b.mu.Lock()
	after := len(p.b.settled.ids)
	p.b.mu.Unlock()
	t.Logf("%d refused hellos in %v (%d failed); settled ids %d -> %d", len(hellos), time.Since(start), failed.Load(), before, after)

	// The far agent's place comes free; then the held BIND goes on.
	hold.Close()
	testsupport.Eventually(t, 10*time.Second, "the far agent's place free", func() bool {
		return p.b.Stats().Totals.SessionsActive == 0
	})
	started := p.b.Stats().Totals.SessionsStarted
	close(release)
	time.Sleep(time.Second)
	tb := p.b.Stats().Totals
	total := 0
	for _, b := range rec.received() {
		if string(b) != "hold" {
			total += len(b)
		}
	}
	t.Logf("far agent: sessions started %d -> %d; the server received %d bytes of the %d-byte request", started, tb.SessionsStarted, total, len(want))
	if tb.SessionsStarted != started || total != len(want) {
		t.Errorf("the late BIND founded the session after its connection went direct, its settled id evicted by %d refusals in %v: "+
			"sessions started %d -> %d, the server received %d bytes of a %d-byte request",
			len(hellos), time.Since(start), started, tb.SessionsStarted, total, len(want))
	}
}

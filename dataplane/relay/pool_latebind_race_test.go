package relay

import (
	"bytes"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestLateBindRacingTheFreshHello: stream 0's BIND is held at the far
// agent past the refusals of the other streams' joins; the client side
// takes stream 0 out and dials a fresh hello for it; just then the BIND
// goes on. Either it is refused (the client side closed its stream:
// peerGaveUp) and the fresh hello founds the session, or it founds the
// session first and the fresh hello is answered as a duplicate, after
// which stream 0 joins: either way the connection completes whole,
// accelerated, and the server gets the request once.
func TestLateBindRacingTheFreshHello(t *testing.T) {
	t.Parallel() // its own agents on loopback; mostly waiting on timeouts (see the Makefile's -parallel)
	rec := &recordingServer{}
	p := pooledPair(t, pairOptions{limitsA: Limits{ReconnectTimeout: 20 * time.Second},
		limitsB: Limits{ReconnectTimeout: 20 * time.Second}}, rec.handle)

	release, _ := holdBind(p, 15*time.Second)
	defer release()
	var hooked atomic.Bool
	hook := func(c *net.TCPConn) error {
		if !calledFromRefound() || !hooked.CompareAndSwap(false, true) {
			return nil
		}
		release()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if got := rec.received(); len(got) > 0 && len(got[0]) > 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		return nil
	}
	p.a.testDialed.Store(&hook)

	want := patterned(40<<10, 35)
	got, err := request(t, p, want, 30*time.Second)
	if !hooked.Load() {
		t.Fatalf("the scenario did not happen (client got %d bytes, err %v)", len(got), err)
	}
	total := 0
	for _, b := range rec.received() {
		total += len(b)
	}
	ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
	t.Logf("client got %d of %d bytes, err %v; fallbacks %d; far agent sessions started %d; server connections %d, %d bytes",
		len(got), len(want), err, ta.Fallbacks, tb.SessionsStarted, len(rec.received()), total)
	if ta.Fallbacks != 0 || tb.SessionsStarted != 1 {
		t.Errorf("fallbacks %d, far sessions started %d; want one session, accelerated (refounds %d)",
			ta.Fallbacks, tb.SessionsStarted, onlyPool(t, p.a).Refounds)
	}
	if total > len(want) {
		t.Errorf("the server received %d bytes of a %d-byte request", total, len(want))
	}
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("the connection did not complete: %d of %d bytes, err %v", len(got), len(want), err)
	}
}

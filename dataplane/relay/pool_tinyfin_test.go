package relay

import (
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

// TestTinyRequestWithFinBindDelayed: a tiny request and the
// client's FIN are read by the client side before the far agent reads
// stream 0's BIND (held 200 ms, inside joinGrace). The client side sends
// BIND, DATA and its FIN frame but must not half-close the TCP stream
// (finishWrite runs only once the session is complete), so the far agent
// still finds the stream ESTABLISHED (peerGaveUp false) and founds the
// session: the request is answered accelerated, not refused as a late
// BIND, not carried direct.
func TestTinyRequestWithFinBindDelayed(t *testing.T) {
	p := pooledPair(t, pairOptions{}, echo)
	var held atomic.Bool
	fault := func(stream uint16) bool {
		if stream == 0 && held.CompareAndSwap(false, true) {
			time.Sleep(200 * time.Millisecond)
		}
		return false
	}
	p.b.testBindFault.Store(&fault)
	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("tiny")); err != nil {
		t.Fatal(err)
	}
	_ = c.CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "tiny" {
		t.Fatalf("got %q, err %v", got, err)
	}
	tb := p.b.Stats().Totals
	if !held.Load() || tb.SessionsStarted != 1 || p.a.Stats().Totals.Fallbacks != 0 ||
		tb.Rejected[rejectKindOf(stripe.StatusDuplicateStream)] != 0 {
		t.Errorf("held %v; far agent sessions started %d, late-bind refusals %d; fallbacks %d: want one accelerated session",
			held.Load(), tb.SessionsStarted, tb.Rejected[rejectKindOf(stripe.StatusDuplicateStream)], p.a.Stats().Totals.Fallbacks)
	}
}

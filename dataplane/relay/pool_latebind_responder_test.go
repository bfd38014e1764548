package relay

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestLateBindAfterWrongResponderRefusal: stream 0's BIND of a pooled
// session is held at the far agent (read, judged by the configuration
// then in force, not yet admitted). The joins of the other streams are
// refused as an unknown session, so the client side founds the session
// again with a fresh hello for stream 0. Just before that hello, the far
// agent is reloaded under another name: the hello is refused as
// StatusWrongResponder, which the far agent answers before it looks the
// session up, so the refusal settles nothing and does not send the
// connection direct (settlesDirect): the client side resets it at its
// reconnect timeout, and the late BIND, released then, founds nothing.
// (Found by review: the connection went direct, whole, and the late BIND
// then founded the session: the server got the request twice.)
func TestLateBindAfterWrongResponderRefusal(t *testing.T) {
	t.Parallel() // its own agents on loopback; mostly waiting on timeouts (see the Makefile's -parallel)
	rec := &recordingServer{}
	p := pooledPair(t, pairOptions{limitsA: Limits{ReconnectTimeout: 3 * time.Second}}, rec.handle)

	release, held := holdBind(p, 20*time.Second)
	defer release()
	var renamed atomic.Bool
	hook := func(c *net.TCPConn) error {
		if !calledFromRefound() || !renamed.CompareAndSwap(false, true) {
			return nil
		}
		cfg := p.b.cfg.Load().Config
		cfg.Server = append([]Whitelist(nil), cfg.Server...)
		cfg.PSK = testPSK
		cfg.Name = "agent-b-renamed"
		if err := p.b.Update(cfg); err != nil {
			t.Errorf("reload: %v", err)
		}
		// The far agent may have accepted this connection under its old
		// name (it reads its configuration at accept): fail this dial,
		// and the next fresh hello meets the new name.
		return errors.New("test: the far agent was renamed; dial again")
	}
	p.a.testDialed.Store(&hook)

	want := patterned(64<<10, 32)
	got, err := request(t, p, want, 25*time.Second)
	if !held.Load() || !renamed.Load() {
		t.Fatalf("the scenario did not happen: BIND held %v, far agent renamed before the fresh hello %v (client got %d bytes, err %v)",
			held.Load(), renamed.Load(), len(got), err)
	}
	if f := p.a.Stats().Totals.Fallbacks; err == nil || f != 0 {
		t.Errorf("a session refused by a far agent renamed since: %d of %d bytes, err %v, %d fallbacks; want it reset, not carried direct",
			len(got), len(want), err, f)
	}
	started := p.b.Stats().Totals.SessionsStarted
	release()
	time.Sleep(1500 * time.Millisecond)
	tb := p.b.Stats().Totals
	total := 0
	for _, b := range rec.received() {
		total += len(b)
	}
	t.Logf("fallbacks %d; far agent sessions started %d -> %d; the server received %d bytes of a %d-byte request",
		p.a.Stats().Totals.Fallbacks, started, tb.SessionsStarted, total, len(want))
	if tb.SessionsStarted != started || total > len(want) {
		t.Errorf("the late BIND founded the session after its connection went direct on a StatusWrongResponder refusal: "+
			"sessions started %d -> %d, the server received %d bytes of a %d-byte request", started, tb.SessionsStarted, total, len(want))
	}
}

package relay

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestJoinGivenUpBeforeItsHelloIsNoHandshakeFailure: a join that the
// client side gives up after its dial and before its hello went (its
// context done: the pre-auth deadline here; the session completing or
// aborting while its joins dial does the same) is a give-up, not an
// attack. It ends with a FIN, which the far agent closes quietly
// ("closed before saying anything", serveStream). Found by review: with
// 2ae7724's reset of every failed stream, the far agent read it as a
// failed handshake, counted (the appliance exports it, an alert watches
// it) and logged at warn.
func TestJoinGivenUpBeforeItsHelloIsNoHandshakeFailure(t *testing.T) {
	p := startPair(t, pairOptions{streams: 2, limitsA: Limits{PreAuthTimeout: time.Second}}, echo)
	var dials, stalled atomic.Int32
	hook := func(*net.TCPConn) error {
		// The first dial is stream 0's; the next, stream 1's join.
		if dials.Add(1) == 2 {
			time.Sleep(1500 * time.Millisecond) // past the join's pre-auth deadline
			stalled.Add(1)
		}
		return nil
	}
	p.a.testDialed.Store(&hook)

	c := dialSaying(t, p, "hello")
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "hello" {
		t.Fatalf("echo: %q, %v", got, err)
	}
	testsupport.Eventually(t, 20*time.Second, "stream 1 joined after the given-up join", func() bool {
		return stalled.Load() == 1 && streamConn(p.a, 1) != nil && streamConn(p.b, 1) != nil
	})
	_ = c.CloseWrite()
	if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
		t.Fatalf("the end: %q, %v", b, err)
	}
	tb := p.b.Stats().Totals
	t.Logf("far agent: %d handshake failures, %d abandoned, %d preauth timeouts", tb.HandshakeFailures, tb.HandshakesAbandoned, tb.PreAuthTimeouts)
	if tb.HandshakeFailures != 0 {
		t.Errorf("the far agent counted %d handshake failures for a join the client side gave up before its hello", tb.HandshakeFailures)
	}
}

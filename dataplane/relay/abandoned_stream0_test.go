package relay

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAbandonedStreamZeroEndsFarSession: the client side's fresh stream
// 0 is accepted and its confirm sent (the far agent founds the session,
// dials the server and starts it), and then the client side's pre-auth
// deadline passes before openStream's stop() (held here by keeping the
// session's mu, which openStream takes right after the handshake to store
// the session key). The client side gives the session up and carries the
// connection direct. The failed stream 0 is closed with a FIN, so the far
// agent ends the session it founded at once. Found by review: a reset
// (2ae7724 reset every failed stream) left that session, and the server
// connection it dialed, waiting for a replacement until its reconnect
// timeout (60 s here), though the client side never joins it.
func TestAbandonedStreamZeroEndsFarSession(t *testing.T) {
	p := startPair(t, pairOptions{streams: 2,
		limitsA: Limits{PreAuthTimeout: 2 * time.Second},
		limitsB: Limits{ReconnectTimeout: 60 * time.Second},
	}, echo)
	var fired atomic.Bool
	var held *session
	locked := make(chan struct{})
	var unlockOnce sync.Once
	unlock := func() {
		unlockOnce.Do(func() {
			if held != nil {
				held.mu.Unlock()
			}
		})
	}
	hook := func(*net.TCPConn) error {
		if !fired.CompareAndSwap(false, true) {
			return nil
		}
		p.a.mu.Lock()
		for s := range p.a.sessions {
			held = s
		}
		p.a.mu.Unlock()
		held.mu.Lock()
		close(locked)
		return nil
	}
	p.a.testDialed.Store(&hook)

	c := dialSaying(t, p, "hello")
	_ = c.CloseWrite()
	awaitClosed(t, locked, "stream 0 never dialed")
	defer unlock()
	if !waitFor(10*time.Second, func() bool {
		p.b.mu.Lock()
		defer p.b.mu.Unlock()
		for s := range p.b.sessions {
			if s.established.Load() {
				return true
			}
		}
		return false
	}) {
		t.Fatal("the far agent never started the session on stream 0: the test did not mount its case")
	}
	// Past the client side's pre-auth deadline: stop() finds it fired.
	time.Sleep(2500 * time.Millisecond)
	unlock()

	got, err := io.ReadAll(c)
	if err != nil || string(got) != "hello" {
		t.Fatalf("the connection carried direct: %q, %v", got, err)
	}
	if f := p.a.Stats().Totals.Fallbacks; f != 1 {
		t.Fatalf("%d connections carried direct, want 1: the test did not mount its case", f)
	}
	ended := waitFor(10*time.Second, func() bool {
		p.b.mu.Lock()
		defer p.b.mu.Unlock()
		return len(p.b.sessions) == 0
	})
	tb := p.b.Stats().Totals
	t.Logf("far agent: %d sessions started, %d aborted, %d streams lost, server connections %d", tb.SessionsStarted, tb.SessionsAborted, tb.StreamsLost, p.server.accepted())
	if !ended {
		t.Errorf("the far agent still holds the session (and its server connection) the client side abandoned; it waits for its reconnect timeout")
	}
}

package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"golang.org/x/sys/unix"
)

// TestDrainLetsAFinishingSessionReplaceAStream: the server-side agent is
// shutting down (Shutdown lets live sessions finish; it started after the
// response went, the request still to come) when the stream that is to
// carry a complete session's final ACK is reset before the client side
// read that ACK (the mount of TestResetAsTheFinalACKGoesIsALostStream).
// The session, complete at the server side, lingers there for the
// replacement that carries the final ACK again; the draining agent takes
// that JOIN (it refuses new sessions only), and both sides complete.
// Found by review: Shutdown closed the data listener at once, so the
// replacement was refused until the client side's reconnect timeout
// aborted the session and reset its client, every byte through both ways
// and the server side counting it completed.
//
// The mount counts only when the client side is not complete at the hook
// (it has not read the final ACK, which the reset then discards);
// otherwise the attempt is void and repeated.
func TestDrainLetsAFinishingSessionReplaceAStream(t *testing.T) {
	for attempt := range 12 {
		if drainFinalACKAttempt(t, attempt) {
			return
		}
	}
	t.Fatal("the mount never held (the client side was always complete at the hook): the test did not test its case")
}

func drainFinalACKAttempt(t *testing.T, attempt int) (mountedOK bool) {
	response := patterned(256<<10, 3)
	request := patterned(64<<10, 4)
	gotRequest := make(chan []byte, 1)
	p := startPair(t, pairOptions{streams: 1, chunk: 16384,
		limitsA: Limits{ReconnectTimeout: 2 * time.Second},
		limitsB: Limits{ReconnectTimeout: 4 * time.Second},
	}, func(c *net.TCPConn) {
		defer c.Close()
		_, _ = c.Write(response)
		_ = c.CloseWrite()
		b, _ := io.ReadAll(c)
		gotRequest <- b
	})
	shutdown := make(chan error, 1)
	var mounted, void, took atomic.Bool
	hook := func(stream int, conn *net.TCPConn) {
		if !mounted.CompareAndSwap(false, true) {
			return
		}
		var peer *net.TCPConn
		p.a.mu.Lock()
		for s := range p.a.sessions {
			s.mu.Lock()
			if st := s.streams[stream]; st != nil {
				peer = st.conn
			}
			s.mu.Unlock()
			// The client side must still wait for the final ACK: not
			// complete (what the reset discards of its receive queue
			// it never reads).
			if s.isCompleted() {
				void.Store(true)
			}
		}
		p.a.mu.Unlock()
		if peer == nil || void.Load() {
			void.Store(true)
			return
		}
		reset(peer)
		for deadline := time.Now().Add(5 * time.Millisecond); time.Now().Before(deadline); {
			if info, ok := readTCPInfo(conn); ok && info.state != tcpEstablished {
				took.Store(errors.Is(socketError(conn), unix.ECONNRESET))
				return
			}
		}
	}
	p.b.testFinishWrite.Store(&hook)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))

	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, response) {
		t.Fatalf("the response: %d of %d bytes, err %v", len(got), len(response), err)
	}
	// The server-side agent starts draining while the session is live.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shutdown <- p.b.Shutdown(ctx)
	}()
	testsupport.Eventually(t, 10*time.Second, "the server side draining", func() bool {
		p.b.mu.Lock()
		defer p.b.mu.Unlock()
		return p.b.draining
	})
	if _, err := c.Write(request); err != nil {
		t.Fatal(err)
	}
	_ = c.CloseWrite()
	select {
	case b := <-gotRequest:
		if !bytes.Equal(b, request) {
			t.Fatalf("the server got %d of %d request bytes", len(b), len(request))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server never got the request's end")
	}
	testsupport.Eventually(t, 20*time.Second, "the session ended on both sides", func() bool {
		ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
		return ta.SessionsCompleted+ta.SessionsAborted == 1 && tb.SessionsCompleted+tb.SessionsAborted == 1
	})
	serr := <-shutdown
	if void.Load() || !took.Load() {
		t.Logf("attempt %d: mount void (client side complete already: %v; reset's error taken: %v)", attempt, void.Load(), took.Load())
		return false
	}
	ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
	for _, r := range p.a.Stats().RecentAborts {
		t.Logf("client side abort: %s: %s", r.Reason, r.Error)
	}
	t.Logf("attempt %d: client side: %d completed, %d aborted; server side: %d completed, %d aborted; shutdown: %v",
		attempt, ta.SessionsCompleted, ta.SessionsAborted, tb.SessionsCompleted, tb.SessionsAborted, serr)
	if ta.SessionsCompleted != 1 || tb.SessionsCompleted != 1 {
		t.Errorf("completed: client side %d, server side %d; want the session complete on both (every byte went through)", ta.SessionsCompleted, tb.SessionsCompleted)
	}
	return true
}

// TestDrainRefusesNewSessionsWithAnAnswer: while the server-side agent
// drains (a live session holds it), a new connection's hello gets an
// authenticated "shutting down" refusal on the data port it keeps open
// for the live sessions' joins, and the client side carries that
// connection direct, whole; the live session still finishes, and the
// drain with it.
func TestDrainRefusesNewSessionsWithAnAnswer(t *testing.T) {
	p := startPair(t, pairOptions{streams: 2}, echo)
	hold := p.dial(t)
	defer hold.Close()
	_ = hold.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := hold.Write([]byte("hold")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(hold, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	shutdown := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shutdown <- p.b.Shutdown(ctx)
	}()
	testsupport.Eventually(t, 10*time.Second, "the server side draining", func() bool {
		p.b.mu.Lock()
		defer p.b.mu.Unlock()
		return p.b.draining
	})

	want := patterned(64<<10, 9)
	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	go func() { _, _ = c.Write(want); _ = c.CloseWrite() }()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the connection made while the far agent drains: %d of %d bytes, err %v", len(got), len(want), err)
	}
	ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
	t.Logf("client side: %d carried direct; server side: %d refused as shutting down", ta.Fallbacks, tb.Rejected[rejectShuttingDown])
	if ta.Fallbacks != 1 || tb.Rejected[rejectShuttingDown] < 1 {
		t.Errorf("client side: %d carried direct, want 1; server side: %d refused as shutting down, want the new hello's",
			ta.Fallbacks, tb.Rejected[rejectShuttingDown])
	}

	// The live session finishes, and the drain with it.
	go func() { _, _ = hold.Write([]byte("last")); _ = hold.CloseWrite() }()
	if b, err := io.ReadAll(hold); err != nil || string(b) != "last" {
		t.Fatalf("the live session while draining: %q, %v", b, err)
	}
	if err := <-shutdown; err != nil {
		t.Fatalf("the drain: %v", err)
	}
}

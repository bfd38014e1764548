package relay

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestJoinFailedAfterItsJOINIsALostStream: a replacement stream whose
// join fails at the client side after its JOIN went (a cancel at the
// pre-auth deadline does that), when the server side has attached it
// already, is reset, so the server side loses that stream and the client
// side replaces it again; the session goes on. Found by review: the
// failed join was closed with a FIN, which the server side's reader took
// for the client side's process ending, and it aborted the session.
func TestJoinFailedAfterItsJOINIsALostStream(t *testing.T) {
	p := startPair(t, pairOptions{streams: 2}, echo)
	var armed, fired, attached atomic.Bool
	hook := func(c *net.TCPConn) error {
		// Armed once the session's streams are up: the first opening
		// of stream 1 is a join too.
		if !armed.Load() || !fired.CompareAndSwap(false, true) {
			return nil
		}
		// The server side attached this connection.
		local := c.LocalAddr().String()
		attached.Store(waitFor(10*time.Second, func() bool {
			p.b.mu.Lock()
			defer p.b.mu.Unlock()
			for s := range p.b.sessions {
				s.mu.Lock()
				for _, st := range s.streams {
					if st != nil && st.conn.RemoteAddr().String() == local {
						s.mu.Unlock()
						return true
					}
				}
				s.mu.Unlock()
			}
			return false
		}))
		return errors.New("test: the join failed after its JOIN went")
	}
	p.a.testJoinSent.Store(&hook)

	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	roundTrip := func(msg string) {
		t.Helper()
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
			t.Fatalf("echo of %q: %q, %v", msg, got, err)
		}
	}
	roundTrip("before")

	// Lose stream 1: reset the server side's end of it.
	var far *net.TCPConn
	testsupport.Eventually(t, 10*time.Second, "stream 1 up at both sides", func() bool {
		far = streamConn(p.b, 1)
		return far != nil && streamConn(p.a, 1) != nil
	})
	armed.Store(true)
	reset(far)
	testsupport.Eventually(t, 20*time.Second, "stream 1 replaced after the failed join, or the session aborted", func() bool {
		ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
		return fired.Load() && ta.StreamsReplaced >= 1 || ta.SessionsAborted+tb.SessionsAborted > 0
	})
	for _, a := range []*Agent{p.a, p.b} {
		for _, r := range a.Stats().RecentAborts {
			t.Errorf("%s side aborted the session: %s: %s", r.Side, r.Reason, r.Error)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if !attached.Load() {
		t.Fatal("the server side never attached the join that then failed: the test did not mount its case")
	}
	roundTrip("after")
	_ = c.CloseWrite()
	if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
		t.Fatalf("the end: %q, %v", b, err)
	}
	testsupport.Eventually(t, 20*time.Second, "the session ended on both sides", func() bool {
		ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
		return ta.SessionsCompleted+ta.SessionsAborted == 1 && tb.SessionsCompleted+tb.SessionsAborted == 1
	})
	ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
	t.Logf("client side: %d completed, %d aborted, %d replaced; server side: %d completed, %d aborted, %d streams lost",
		ta.SessionsCompleted, ta.SessionsAborted, ta.StreamsReplaced, tb.SessionsCompleted, tb.SessionsAborted, tb.StreamsLost)
	if ta.SessionsCompleted != 1 || tb.SessionsCompleted != 1 {
		t.Errorf("completed: client side %d, server side %d; want the session complete on both", ta.SessionsCompleted, tb.SessionsCompleted)
	}
}

// streamConn is the connection of stream i of a's session (a has one),
// or nil.
func streamConn(a *Agent, i int) *net.TCPConn {
	a.mu.Lock()
	defer a.mu.Unlock()
	for s := range a.sessions {
		s.mu.Lock()
		st := s.streams[i]
		s.mu.Unlock()
		if st != nil {
			return st.conn
		}
	}
	return nil
}

package relay

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestUnstartedSessionAbortsEachStreamOnce: a server-side session still
// gathering its streams can be finished by two owners at once: the abort
// of an unestablished session (the pre-auth deadline, or a drain's) sees
// it gathering, while its last stream's join completes it and
// connectServer, its dial cancelled by that abort, finishes it too. Each
// stream's ABORT is sealed once, and the peer gets one. Found by review:
// both sealed and wrote an ABORT, racing on the stream's codec (a data
// race `go test -race` showed; without it the second write mostly failed
// after the first one's half-close, so the seals are counted here).
func TestUnstartedSessionAbortsEachStreamOnce(t *testing.T) {
	p := startPair(t, pairOptions{streams: 2, limitsB: Limits{PreAuthTimeout: 20 * time.Second}}, echo)
	var sealed sync.Map // *stream -> *atomic.Int32
	hook := func(st *stream) {
		n, _ := sealed.LoadOrStore(st, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
	}
	p.b.testAbortSealed.Store(&hook)
	for round := range 10 {
		c, status := openHalfSession(t, p, "127.0.0.9")
		if status != stripe.StatusAccepted {
			c.Close()
			t.Fatalf("round %d: half session refused: %v", round, status)
		}
		var s *session
		testsupport.Eventually(t, 10*time.Second, "the half session at the far agent", func() bool {
			p.b.mu.Lock()
			defer p.b.mu.Unlock()
			for o := range p.b.sessions {
				o.mu.Lock()
				joined := o.joined
				o.mu.Unlock()
				if joined == 1 && !o.isAborted() {
					s = o
					return true
				}
			}
			return false
		})
		s.abort(AbortSetup, errors.New("test: both owners finish it"))
		var wg sync.WaitGroup
		begin := make(chan struct{})
		for range 2 {
			wg.Go(func() {
				<-begin
				s.finishUnstarted()
			})
		}
		close(begin)
		aborts := countAborts(t, c)
		wg.Wait()
		c.Close()
		if aborts != 1 {
			t.Fatalf("round %d: the peer's stream got %d ABORT frames, want 1", round, aborts)
		}
		s.mu.Lock()
		st := s.streams[1]
		s.mu.Unlock()
		n, ok := sealed.Load(st)
		if !ok {
			t.Fatalf("round %d: no ABORT sealed on the session's stream", round)
		}
		if k := n.(*atomic.Int32).Load(); k != 1 {
			t.Fatalf("round %d: %d ABORT frames sealed on the stream, want 1", round, k)
		}
	}
}

// countAborts reads frames from c until it ends and counts the ABORTs.
func countAborts(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n := 0
	var hb [stripe.HeaderSize]byte
	for {
		if _, err := io.ReadFull(c, hb[:]); err != nil {
			return n
		}
		h, err := stripe.ParseHeader(hb[:])
		if err != nil {
			t.Fatalf("a frame from the far agent: %v", err)
		}
		if h.Type == stripe.FrameAbort {
			n++
		}
		if _, err := io.CopyN(io.Discard, c, int64(h.Length)); err != nil {
			return n
		}
	}
}

package relay

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestUnstartedSessionAbortsEachStreamOnce: a server-side session still
// gathering its streams can be finished by two owners at once: the abort
// of an unestablished session (the pre-auth deadline, or a drain's) sees
// it gathering, while its last stream's join completes it and
// connectServer, its dial cancelled by that abort, finishes it too. The
// peer gets one ABORT per stream all the same. Found by review: both
// sealed and wrote an ABORT, racing on the stream's codec.
func TestUnstartedSessionAbortsEachStreamOnce(t *testing.T) {
	p := startPair(t, pairOptions{streams: 2, limitsB: Limits{PreAuthTimeout: 20 * time.Second}}, echo)
	for round := range 20 {
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

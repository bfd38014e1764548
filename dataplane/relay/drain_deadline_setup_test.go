package relay

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestDrainDeadlineCountsASetupFailingAsItPasses: serveClient's stream 0
// fails, its s.abort(AbortSetup) goes first, and the drain's deadline
// passes before goDirect. The hook below puts the two in that order: it
// aborts the session as serveClient's abort would, waits for the
// deadline, then fails the dial. The deadline's abortUnestablished finds
// the session aborted already (not counted there), and goDirect, refused
// after the drain, resets the client and counts it as cut in Shutdown's
// error. Found by review: nothing counted it, and Shutdown returned nil.
func TestDrainDeadlineCountsASetupFailingAsItPasses(t *testing.T) {
	p := startPair(t, pairOptions{streams: 2}, echo)
	dialed := failFirstDial(p.a, func() {
		p.a.mu.Lock()
		var ss []*session
		for s := range p.a.sessions {
			ss = append(ss, s)
		}
		p.a.mu.Unlock()
		for _, s := range ss {
			s.abort(AbortSetup, errors.New("test: stream 0's setup failed"))
		}
		awaitDrainOver(p.a)
	})

	c := dialSaying(t, p, "hello")
	awaitClosed(t, dialed, "stream 0 never dialed")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	serr := p.a.Shutdown(ctx)
	_, rerr := c.Read(make([]byte, 16))
	ta := p.a.Stats().Totals
	t.Logf("client read: %v; drain: %v; sessions aborted %d, rejected %v, fallbacks %d", rerr, serr, ta.SessionsAborted, ta.Rejected, ta.Fallbacks)
	if serr == nil {
		t.Errorf("the drain's deadline reset a client connection, and Shutdown reports no session aborted and no connection cut")
	}
}

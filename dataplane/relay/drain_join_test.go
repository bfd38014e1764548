package relay

import (
	"io"
	"sync"
	"testing"
	"time"
)

// TestDrainJoinWaitsForAPlacedSession: as
// TestDrainWaitsForAHelloAcceptedBeforeIt (the far agent accepted stream
// 0's hello before its drain and keeps its place, so the drain makes the
// session once the confirm comes), with two streams: stream 1's JOIN
// reaches the far agent during its drain, before join made the session
// from the place. The JOIN waits for the session a moment (joinGrace) as
// outside a drain, finds it, and the session runs. Found by review:
// awaitSession gave up at once while the agent stopped, the JOIN was
// refused as naming no session, and the client side, taking that for a
// session the far agent had ended, aborted its own and reset the client.
// (A hook holds the JOIN until the drain began; the confirm goes on a
// moment after the JOIN is let go, well within joinGrace. Whether the
// client side then aborts depends on what it heard meanwhile, so the test
// checks the refusal itself.)
func TestDrainJoinWaitsForAPlacedSession(t *testing.T) {
	p, held, gateOnce := heldConfirmPair(t, pairOptions{streams: 2}, nil)
	joinHold := make(chan struct{})
	releaseJoins := sync.OnceFunc(func() { close(joinHold) })
	defer releaseJoins()
	p.b.testJoinHold.Store(&joinHold)

	c := dialSaying(t, p, "hello")
	awaitClosed(t, held, "stream 0's confirm never came: the test did not mount its case")
	shutdown := drainAsync(t, p.b)
	releaseJoins()
	time.Sleep(100 * time.Millisecond) // the JOIN waits for its session
	early := p.b.Stats().Totals.Rejected[rejectMismatch]
	gateOnce()

	got := make([]byte, 5)
	_, err := io.ReadFull(c, got)
	if err == nil {
		_, err = c.Write([]byte("world"))
	}
	_ = c.CloseWrite()
	rest, rerr := io.ReadAll(c)
	if err == nil {
		err = rerr
	}
	serr := <-shutdown
	ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
	t.Logf("client: %q%q, %v; client side aborted %d; far agent refused %d as unknown, %d as shutting down; far agent's drain: %v",
		got, rest, err, ta.SessionsAborted, tb.Rejected[rejectMismatch], tb.Rejected[rejectShuttingDown], serr)
	for _, r := range p.a.Stats().RecentAborts {
		t.Logf("client side aborted: %s: %s", r.Reason, r.Error)
	}
	if early != 0 {
		t.Errorf("the far agent refused %d JOINs as naming no session while its drain was to make that session", early)
	}
	if err != nil || string(got)+string(rest) != "helloworld" {
		t.Errorf("the connection whose stream 0 the far agent accepted before its drain: %q%q, %v; want it carried",
			got, rest, err)
	}
	if serr != nil {
		t.Errorf("the far agent's drain: %v", serr)
	}
}

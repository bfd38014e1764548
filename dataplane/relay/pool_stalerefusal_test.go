package relay

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestJoinRefusedBeforeTheSessionWasFoundedAgain: the far agent resets
// a pooled session's stream 0 as its BIND arrives, so it never founds
// the session and refuses the other streams' binds, then their joins, as
// an unknown session. One of those refusals is decided before the client
// side's fresh hello for stream 0 founds the session, and taken up after
// the far agent was heard on the new stream 0 (here the fresh hello waits
// for the refusal, which waits for the far agent's first frame; on a busy
// machine a join's grace ran out a millisecond before the fresh hello
// arrived). The refusal is stale: the far agent holds the session. Before,
// the client side took it for a far agent that lost the session and
// aborted (a rare flake of TestPooledBindDelayedPastTheRefusals); now the
// join is tried again, and the transfer completes on both ends.
func TestJoinRefusedBeforeTheSessionWasFoundedAgain(t *testing.T) {
	p := startPair(t, pairOptions{streams: 4, chunk: 1000, queue: 2, pool: agentspec.Pool{MinIdle: 4, Max: 4}}, echo)
	testsupport.Eventually(t, 30*time.Second, "a full pool", func() bool { return onlyPool(t, p.a).Idle == 4 })
	var bindReset atomic.Bool
	fault := func(stream uint16) bool { return stream == 0 && bindReset.CompareAndSwap(false, true) }
	p.b.testBindFault.Store(&fault)

	// The fresh hello waits for a refused join; the refused joins wait
	// until the far agent was heard on the session.
	refused := make(chan struct{})
	refusedOnce := sync.OnceFunc(func() { close(refused) })
	t.Cleanup(refusedOnce)
	dialed := func(*net.TCPConn) error {
		if calledFromRefound() {
			select {
			case <-refused:
			case <-time.After(20 * time.Second):
			}
		}
		return nil
	}
	p.a.testDialed.Store(&dialed)
	var stale, unheard atomic.Int32
	joinRefused := func(int) {
		refusedOnce()
		stale.Add(1)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if clientSessionHeard(p.a) {
				return
			}
		}
		unheard.Add(1)
	}
	p.a.testJoinRefused.Store(&joinRefused)

	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	want := patterned(256<<10, 5)
	if _, err := c.Write(want[:1000]); err != nil {
		t.Fatal(err)
	}
	// The first bytes' echo comes back once the session was founded
	// again; the client keeps its side open until every refusal was
	// taken up, so the session is not complete by then.
	first := make([]byte, 1000)
	if _, err := io.ReadFull(c, first); err != nil {
		t.Fatalf("the first bytes' echo: %v; client aborts %+v", err, p.a.Stats().RecentAborts)
	}
	testsupport.Eventually(t, 20*time.Second, "a stale refusal taken up", func() bool { return stale.Load() > 0 })
	time.Sleep(2 * peerAbortGrace)
	if _, err := c.Write(want[1000:]); err != nil {
		t.Fatalf("writing the rest after the stale refusal: %v", err)
	}
	_ = c.CloseWrite()
	rest, err := io.ReadAll(c)
	got := append(first, rest...)
	ta := p.a.Stats().Totals
	t.Logf("%d stale refusals (%d unheard); client: %d aborted, %d streams replaced, %d refounds",
		stale.Load(), unheard.Load(), ta.SessionsAborted, ta.StreamsReplaced, onlyPool(t, p.a).Refounds)
	if unheard.Load() > 0 {
		t.Fatalf("the far agent was never heard on the founded session")
	}
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the session with a stale refusal: %d of %d bytes back, equal %v, err %v; client aborts %+v",
			len(got), len(want), bytes.Equal(got, want), err, p.a.Stats().RecentAborts)
	}
	testsupport.Eventually(t, 30*time.Second, "the session complete on both ends", func() bool {
		return p.a.Stats().Totals.SessionsCompleted == 1 && p.b.Stats().Totals.SessionsCompleted == 1
	})
	if n := p.a.Stats().Totals.SessionsAborted; n != 0 {
		t.Errorf("%d sessions aborted at the client side", n)
	}
}

// clientSessionHeard reports whether a's client-side session has read a
// frame from the far agent.
func clientSessionHeard(a *Agent) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for s := range a.sessions {
		if s.side == clientSide && s.heard.Load() {
			return true
		}
	}
	return false
}

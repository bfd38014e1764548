package relay

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestDrainDeadlineCutsOnePooledConnectionOnce: one steered connection,
// bound from the pool as a 4-stream session, is being set up at the far
// agent (stream 0's BIND held before bindSession, the other BINDs waiting
// for the session) when the far agent's drain deadline passes. It is one
// connection still being set up: Shutdown's error says "cut 1", and the
// refusals that follow do not count it again. Found by review: every
// BIND counted as a connection cut, and each was then counted again as
// refused.
func TestDrainDeadlineCutsOnePooledConnectionOnce(t *testing.T) {
	t.Parallel() // its own agents on loopback; mostly waiting on timeouts (see the Makefile's -parallel)
	p := pooledPair(t, pairOptions{}, echo)
	admitted, release := holdFirstBind(t, p, nil)
	rejectedBefore := sumRejected(p.b)

	dialSaying(t, p, "hello")
	awaitClosed(t, admitted, "no BIND admitted: the test did not mount its case")
	testsupport.Eventually(t, 10*time.Second, "all 4 BINDs being handled", func() bool {
		p.b.mu.Lock()
		defer p.b.mu.Unlock()
		binding, _ := p.b.bindingLocked()
		return binding == 4
	})
	go func() {
		awaitDrainOver(p.b)
		release()
	}()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the deadline has passed
	serr := p.b.Shutdown(ctx)

	tb := p.b.Stats().Totals
	t.Logf("far agent's drain: %v; rejected %v", serr, tb.Rejected)
	if serr == nil || !strings.Contains(serr.Error(), "cut 1 connections") {
		t.Errorf("Shutdown: %v; want one connection cut", serr)
	}
	if n := sumRejected(p.b) - rejectedBefore; n != 0 {
		t.Errorf("the streams the deadline cut were counted again as %d refusals", n)
	}
}

// sumRejected counts a's refusals but those of pooled streams beyond its
// bound: the client side's pool refilling while the far agent still
// counts the claimed streams as idle pooled ones (their BINDs unread),
// which happened once under the race detector and is no count of a
// connection the drain cut.
func sumRejected(a *Agent) uint64 {
	var n uint64
	for reason, v := range a.Stats().Totals.Rejected {
		if reason != "pool_limit" {
			n += v
		}
	}
	return n
}

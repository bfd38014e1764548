package relay

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// TestDrainDeadlineCountsAConnectionStillSettingUp: the drain waits for
// a steered connection accepted before it (a.serving) until its deadline;
// the connection, still setting up then, is reset, and Shutdown's error
// counts it, once. Found by review: Shutdown returned nil, as for a clean
// drain, and the reset counted only as a refusal.
func TestDrainDeadlineCountsAConnectionStillSettingUp(t *testing.T) {
	p := startPair(t, pairOptions{streams: 2}, echo)
	looking := holdLookups(p.a, func() { awaitDrainOver(p.a) })

	c := dialSaying(t, p, "hello")
	awaitClosed(t, looking, "the connection was never served")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	serr := p.a.Shutdown(ctx)
	_ = c.CloseWrite()
	got, err := io.ReadAll(c)
	ta := p.a.Stats().Totals
	t.Logf("client: %q, %v; drain: %v; aborted %d, rejected shutting down %d, fallbacks %d",
		got, err, serr, ta.SessionsAborted, ta.Rejected[rejectShuttingDown], ta.Fallbacks)
	if err == nil && string(got) == "hello" {
		t.Fatal("the connection was carried: the test did not mount its case")
	}
	if serr == nil || !strings.Contains(serr.Error(), "cut 1 connections still being set up") {
		t.Errorf("the drain's deadline passed and reset a connection it waited for (%v); Shutdown said %v", err, serr)
	}
	if n := ta.Rejected[rejectShuttingDown]; n != 0 {
		t.Errorf("the connection the deadline cut counted again as %d refused", n)
	}
}

// TestDrainDeadlineCountsAnAcceptedHello: the far agent's drain waits
// for a place kept for a hello it accepted before the drain (a.pending)
// until its deadline; the stream is then reset, and the client side's
// session, started on that stream, is lost. Shutdown's error counts it.
// Found by review: Shutdown returned nil, and nothing counted the loss.
func TestDrainDeadlineCountsAnAcceptedHello(t *testing.T) {
	p, held, gateOnce := heldConfirmPair(t, pairOptions{streams: 1, limitsA: Limits{ReconnectTimeout: 2 * time.Second}}, nil)
	c := dialSaying(t, p, "hello")
	awaitClosed(t, held, "stream 0's confirm never came: the test did not mount its case")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	go func() {
		awaitDrainOver(p.b)
		gateOnce()
	}()
	serr := p.b.Shutdown(ctx)
	_ = c.CloseWrite()
	got, err := io.ReadAll(c)
	tb := p.b.Stats().Totals
	t.Logf("client: %q, %v; far agent's drain: %v; far agent: sessions started %d, aborted %d, rejected shutting down %d",
		got, err, serr, tb.SessionsStarted, tb.SessionsAborted, tb.Rejected[rejectShuttingDown])
	if err == nil && string(got) == "hello" {
		t.Fatal("the connection was carried: the test did not mount its case")
	}
	if serr == nil || !strings.Contains(serr.Error(), "cut 1 connections still being set up") {
		t.Errorf("the far agent's drain deadline passed with a place it waited for, and the client was lost (%v); Shutdown said %v", err, serr)
	}
}

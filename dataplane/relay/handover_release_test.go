package relay

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestHandedOverReservationBackOnDialFailure: a refused pooled
// session hands its bytes to its direct connection, whose dial to the
// server fails (nothing listens there any more): the client's connection
// is reset and the part of the reservation handed over with the bytes
// comes back (relayDirect's deferred release), none left over once the
// session is gone. Covers the dial-failure path, which
// TestHandedOverBytesStayInMemoryCap (the written path) does not.
func TestHandedOverReservationBackOnDialFailure(t *testing.T) {
	p, _ := fullFarAgent(t, pairOptions{}, echo)
	base := p.a.memReserved.Load()
	// The far agent's one session keeps its server connection; a direct
	// connection to the server finds nobody listening.
	_ = p.server.ln.Close()
	releaseRefound := holdRefound(t, p)
	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(patterned(256<<10, 37)); err != nil {
		t.Fatal(err)
	}
	awaitRead(t, p, 128<<10)
	releaseRefound()
	// The direct dial fails: the client's connection is reset.
	if _, err := io.ReadAll(c); err == nil {
		t.Error("the client's connection ended in order, want a reset (nothing reached the server)")
	}
	testsupport.Eventually(t, 20*time.Second, "the refused session carried direct and its dial failed", func() bool {
		st := p.a.Stats().Totals
		return st.Fallbacks == 1 && st.SessionsActive == 1
	})
	testsupport.Eventually(t, 10*time.Second, "the reservation back", func() bool {
		return p.a.memReserved.Load() == base
	})
	if got := p.a.memReserved.Load(); got < 0 {
		t.Errorf("memReserved %d", got)
	}
}

// TestHandedOverReservationBackWhenDirectRefused: the client
// side takes 2 sessions and so at most 2 direct connections; two refused
// pooled sessions went direct and stay open. A third refused session's
// hand-over finds the direct connections at their limit (goDirect
// refuses and resets the client's connection): the reservation it took
// from the session for its bytes comes back, none left over. Covers the
// goDirect-refusal path.
func TestHandedOverReservationBackWhenDirectRefused(t *testing.T) {
	p, _ := fullFarAgent(t, pairOptions{limitsA: Limits{MaxSessions: 2}}, echo)
	base := p.a.memReserved.Load()
	for i := range 2 {
		c := p.dial(t)
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		want := patterned(64<<10, uint64(40+i))
		if _, err := c.Write(want); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatalf("direct connection %d: %v", i, err)
		}
		testsupport.Eventually(t, 20*time.Second, "the refused session gone, carried direct", func() bool {
			st := p.a.Stats().Totals
			return st.Fallbacks == uint64(i+1) && st.SessionsActive == 1
		})
	}
	releaseRefound := holdRefound(t, p)
	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(patterned(256<<10, 42)); err != nil {
		t.Fatal(err)
	}
	awaitRead(t, p, 128<<10)
	releaseRefound()
	if _, err := io.ReadAll(c); err == nil {
		t.Error("the third connection ended in order, want a reset (no direct place)")
	}
	testsupport.Eventually(t, 20*time.Second, "the third session gone", func() bool {
		return p.a.Stats().Totals.SessionsActive == 1
	})
	if st := p.a.Stats().Totals; st.Fallbacks != 2 {
		t.Fatalf("%d fallbacks, want 2 (the third refused)", st.Fallbacks)
	}
	testsupport.Eventually(t, 10*time.Second, "the reservation back", func() bool {
		return p.a.memReserved.Load() == base
	})
}

// TestHandedOverReservationBackAtShutdown: bytes handed over to
// a direct connection whose server reads nothing stay reserved; a
// shutdown whose drain deadline passes resets the direct connection and,
// once Shutdown returns, nothing is reserved any more. Covers the
// shutdown path.
func TestHandedOverReservationBackAtShutdown(t *testing.T) {
	p, release := fullFarAgentSlowDirect(t)
	t.Cleanup(func() { close(release) })
	base := p.a.memReserved.Load()
	releaseRefound := holdRefound(t, p)
	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(patterned(4<<20, 43)); err != nil {
		t.Fatal(err)
	}
	awaitRead(t, p, 2<<20+1)
	releaseRefound()
	testsupport.Eventually(t, 20*time.Second, "the refused session carried direct", func() bool {
		st := p.a.Stats().Totals
		return st.Fallbacks == 1 && st.SessionsActive == 1
	})
	if held := p.a.memReserved.Load() - base; held <= 0 {
		t.Fatalf("%d reserved for the bytes handed over while the server reads none", held)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_ = p.a.Shutdown(ctx)
	if got := p.a.memReserved.Load(); got != 0 {
		t.Errorf("%d bytes reserved after Shutdown returned", got)
	}
}

package relay

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// awaitDraining waits until a's Shutdown has begun.
func awaitDraining(t *testing.T, a *Agent) {
	t.Helper()
	testsupport.Eventually(t, 10*time.Second, "the agent draining", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.draining
	})
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
	awaitDraining(t, p.b)

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

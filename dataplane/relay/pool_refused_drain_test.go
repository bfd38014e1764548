package relay

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestRefusedPooledSessionCarriedDuringDrain: the client-side agent is
// draining (Shutdown with time to spare lets live sessions finish) while
// a live session bound from the warm pool waits for the far agent, which
// refused its BIND at max_sessions. The session goes direct: a drain
// lets a live connection go direct (a new one it resets) and waits for
// it, and the connection completes within the drain. (Found by review:
// trackDirect refused every direct connection while draining, so the
// connection was reset at once, and counted as a fallback and as a
// session-limit rejection, "too many direct connections".)
func TestRefusedPooledSessionCarriedDuringDrain(t *testing.T) {
	t.Parallel() // its own agents on loopback; mostly waiting on timeouts (see the Makefile's -parallel)
	p, hold := fullFarAgent(t, pairOptions{}, echo)

	want := patterned(64<<10, 30)
	// The refusal is known as soon as the client side's fresh hello for
	// stream 0 is answered: hold it until the drain is on.
	releaseRefound := holdRefound(t, p)
	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(want); err != nil {
		t.Fatal(err)
	}
	_ = c.CloseWrite()
	awaitRead(t, p, uint64(len(want)))
	before := p.a.Stats().Totals
	// The drain begins with ten seconds to spare; the held session stays
	// open for three more, so the drain is still on when the refusal
	// comes.
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- p.a.Shutdown(ctx)
	}()
	testsupport.Eventually(t, 10*time.Second, "the drain on", func() bool {
		p.a.mu.Lock()
		defer p.a.mu.Unlock()
		return p.a.draining
	})
	releaseRefound()
	go func() {
		time.Sleep(3 * time.Second)
		hold.Close()
	}()
	got, err := io.ReadAll(c)
	ta := p.a.Stats().Totals
	t.Logf("client got %d of %d bytes, err %v; fallbacks %d -> %d; rejected[session-limit] %d -> %d",
		len(got), len(want), err, before.Fallbacks, ta.Fallbacks, before.Rejected[rejectSessionLimit], ta.Rejected[rejectSessionLimit])
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("a live session refused by the far agent while its agent drained was not carried (drain time left): %d of %d bytes, err %v",
			len(got), len(want), err)
	}
	if err != nil && ta.Fallbacks > before.Fallbacks {
		t.Errorf("the reset connection was counted as carried direct (fallbacks %d -> %d)", before.Fallbacks, ta.Fallbacks)
	}
	if err != nil && ta.Rejected[rejectSessionLimit] > before.Rejected[rejectSessionLimit] {
		t.Errorf("the reset at drain was counted as a session-limit rejection (%d -> %d)",
			before.Rejected[rejectSessionLimit], ta.Rejected[rejectSessionLimit])
	}
	<-done
}

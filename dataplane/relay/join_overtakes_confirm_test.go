package relay

import (
	"bytes"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestJoinOvertakesStreamZerosConfirm: a session without a pool opens
// its stream 0 with a fresh hello and starts once its confirm is written;
// its other streams JOIN at once. The far agent makes the session only
// when it has read that confirm (join). Here stream 0's confirm is held
// for three times joinGrace (as a lost segment on a long path, or a busy
// far agent, holds it). Before, a JOIN waited joinGrace for the session,
// then was refused as an unknown session; the client side took that for
// a lost session and aborted a moment after the far agent founded it:
// the client was reset, though its transfer could go on. Now a JOIN
// waits while a fresh stream 0 of the same initiator holds the session's
// place (awaitSession, bounded by that handshake's pre-auth deadline),
// and joins the session once it is made. Found by review (helper-52).
func TestJoinOvertakesStreamZerosConfirm(t *testing.T) {
	p, held, release := heldConfirmPair(t, pairOptions{streams: 4, chunk: 1000, queue: 2,
		limitsA: Limits{ReconnectTimeout: 20 * time.Second}}, nil)
	// Refusals of joins that come after the session completed (a slow
	// join; the session is short) are not counted.
	var refused atomic.Int32
	hook := func(int) {
		p.a.mu.Lock()
		defer p.a.mu.Unlock()
		for s := range p.a.sessions {
			if s.side == clientSide && !s.isCompleted() {
				refused.Add(1)
			}
		}
	}
	p.a.testJoinRefused.Store(&hook)

	want := patterned(64<<10, 52)
	c := dialSaying(t, p, string(want[:1000]))
	awaitClosed(t, held, "stream 0's confirm never came: the test did not mount its case")
	time.Sleep(3 * joinGrace)
	release()
	first := make([]byte, 1000)
	_, err := io.ReadFull(c, first)
	if err == nil {
		if _, err = c.Write(want[1000:]); err == nil {
			_ = c.CloseWrite()
			var rest []byte
			rest, err = io.ReadAll(c)
			first = append(first, rest...)
		}
	}
	ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
	t.Logf("%d joins refused as unknown before the session completed; client side: %d aborted %+v, %d streams replaced; far agent: %d started, %d aborted",
		refused.Load(), ta.SessionsAborted, p.a.Stats().RecentAborts, ta.StreamsReplaced, tb.SessionsStarted, tb.SessionsAborted)
	if err != nil || !bytes.Equal(first, want) {
		t.Fatalf("the client's transfer after its joins overtook stream 0's confirm: %d of %d bytes back, err %v",
			len(first), len(want), err)
	}
	if n := refused.Load(); n != 0 {
		t.Errorf("%d joins refused as an unknown session while stream 0's handshake held the session's place", n)
	}
	testsupport.Eventually(t, 20*time.Second, "the session complete on both ends", func() bool {
		return p.a.Stats().Totals.SessionsCompleted == 1 && p.b.Stats().Totals.SessionsCompleted == 1
	})
}

package relay

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestRefoundRacesOtherBinds: stream 0 of a pooled session is reset as
// its BIND arrives (the far agent never founds the session). The client
// side's fresh hello for stream 0 goes at once and founds the session
// with a new key while the other streams' BINDs (join proofs under the
// old bound key) still wait in awaitSession at the far agent: they are
// refused as a mismatch, not counted as handshake failures (an alert
// fires at 10), and their streams join again. Found by review
// (helper-42): when the fresh hello went at once, each of them counted
// one.
func TestRefoundRacesOtherBinds(t *testing.T) {
	for _, enc := range []string{EncryptionAESGCM, EncryptionNone} {
		t.Run(enc, func(t *testing.T) {
			p := startPair(t, pairOptions{encryption: enc, streams: 8, chunk: 1000, queue: 2, pool: agentspec.Pool{MinIdle: 8, Max: 8}}, echo)
			testsupport.Eventually(t, 30*time.Second, "a full pool", func() bool { return onlyPool(t, p.a).Idle == 8 })
			var once atomic.Bool
			fault := func(stream uint16) bool { return stream == 0 && once.CompareAndSwap(false, true) }
			p.b.testBindFault.Store(&fault)
			echoThrough(t, p, 1<<20, 5)
			if !once.Load() {
				t.Fatal("the fault never struck stream 0's bind")
			}
			testsupport.Eventually(t, 30*time.Second, "the session complete on both ends", func() bool {
				return p.a.Stats().Totals.SessionsCompleted == 1 && p.b.Stats().Totals.SessionsCompleted == 1
			})
			tb := p.b.Stats().Totals
			// The fault itself counts one (a "bad bind" of stream 0).
			if tb.HandshakeFailures > 1 {
				t.Errorf("far agent counted %d handshake failures, want only the faulted bind's 1 (the other streams' binds refused for a proof under the old key)", tb.HandshakeFailures)
			}
		})
	}
}

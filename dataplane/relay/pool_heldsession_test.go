package relay

import (
	"encoding/hex"
	"io"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestFreshHelloOfHeldSessionSettlesNothing: the far agent holds
// a pooled session (founded by its stream 0's BIND). A fresh hello for
// stream 0 of that id, as refound sends it, must get an answer that does
// not send the client side direct (settlesDirect false): the far agent
// founded the session and may have delivered its bytes. When the hello
// differs from the session in a field joinable compares (here the
// initiator's name, as after a reload of the client-side agent that
// renamed it: refound's hello takes rc.Name, the BIND took the pooled
// stream's), the answer is StatusDuplicateStream too. (Found by review:
// knownSession answered joinable's StatusSessionMismatch, which
// settlesDirect took for a refusal after which nothing was founded.)
func TestFreshHelloOfHeldSessionSettlesNothing(t *testing.T) {
	p := pooledPair(t, pairOptions{}, echo)
	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	var ss SessionStats
	testsupport.Eventually(t, 5*time.Second, "the client-side session", func() bool {
		for _, s := range p.a.Stats().Sessions {
			ss = s
			return true
		}
		return false
	})
	if p.b.Stats().Totals.SessionsStarted != 1 {
		t.Fatalf("far agent sessions started %d, want 1", p.b.Stats().Totals.SessionsStarted)
	}
	raw, err := hex.DecodeString(ss.ID)
	if err != nil {
		t.Fatal(err)
	}
	var id stripe.SessionID
	copy(id[:], raw)
	key, _ := stripe.NewHandshakeKey(testPSK)
	for _, tc := range []struct {
		name      string
		initiator string
	}{
		{"same initiator", "agent-a"},
		{"initiator renamed by a reload", "agent-a-renamed"},
	} {
		_, _, hb := helloFrom(t, p, func(h *stripe.Hello) {
			h.Initiator = tc.initiator
			h.Session, h.Client, h.Server = id, ss.Client, ss.Server
			h.Streams, h.ChunkSize, h.QueueLength = uint16(ss.Streams), uint32(ss.ChunkSize), uint32(ss.QueueLength)
		})
		hc, rb, err := sendHello(t, p.b.Addrs().Data, hb[:])
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_ = hc.Close()
		rep, err := stripe.ParseReply(hb[:], rb[:], key)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		t.Logf("%s: a fresh stream-0 hello for the held session is answered %v; settlesDirect %v", tc.name, rep.Status, settlesDirect(rep.Status))
		if rep.Status == stripe.StatusAccepted || settlesDirect(rep.Status) {
			t.Errorf("%s: the far agent holds the session, yet its answer %v to a fresh hello for stream 0 would send the client side direct (the server would get its bytes twice)",
				tc.name, rep.Status)
		}
	}
}

package relay

import (
	"bytes"
	"encoding/hex"
	"io"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestLateBindWhileFreshHelloPending: stream 0's BIND is held at the far agent
// while a fresh hello for stream 0 of the same session id, accepted,
// holds the session's place (its confirm not sent yet). The BIND then goes
// on and must not found the session (bindSession refuses it for the place
// kept, and for its stream, which the client side closed). The client side founds it again
// later with its own fresh hello, and the request reaches the server
// once, whole. The client side's own fresh hello is held until the late
// BIND was decided: sent as soon as its stream 0 is reset, it would
// otherwise found the session before the check that the BIND did not.
func TestLateBindWhileFreshHelloPending(t *testing.T) {
	rec := &recordingServer{}
	p := pooledPair(t, pairOptions{limitsA: Limits{ReconnectTimeout: 30 * time.Second}}, rec.handle)

	release, held := holdBind(p, 20*time.Second)
	defer release()
	releaseRefound := holdRefound(t, p)

	want := patterned(64<<10, 34)
	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(25 * time.Second))
	go func() {
		_, _ = c.Write(want)
		_ = c.CloseWrite()
	}()
	var ss SessionStats
	testsupport.Eventually(t, 5*time.Second, "the client-side session and its held BIND", func() bool {
		for _, s := range p.a.Stats().Sessions {
			ss = s
			return held.Load()
		}
		return false
	})
	raw, err := hex.DecodeString(ss.ID)
	if err != nil {
		t.Fatal(err)
	}
	var id stripe.SessionID
	copy(id[:], raw)
	_, _, hb := helloFrom(t, p, func(h *stripe.Hello) {
		h.Session, h.Client, h.Server = id, ss.Client, ss.Server
		h.Streams, h.ChunkSize, h.QueueLength = uint16(ss.Streams), uint32(ss.ChunkSize), uint32(ss.QueueLength)
	})
	hc, rb, err := sendHello(t, p.b.Addrs().Data, hb[:])
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	key, _ := stripe.NewHandshakeKey(testPSK)
	if rep, err := stripe.ParseReply(hb[:], rb[:], key); err != nil || rep.Status != stripe.StatusAccepted {
		t.Fatalf("the fresh hello for the session's stream 0: %v, %v; want accepted", rep.Status, err)
	}
	p.b.mu.Lock()
	pending := p.b.pending[id] != nil
	p.b.mu.Unlock()
	if !pending {
		t.Fatal("no place kept for the fresh hello")
	}
	rejected := p.b.Stats().Totals.Rejected[rejectKindOf(stripe.StatusDuplicateStream)]
	release()
	testsupport.Eventually(t, 5*time.Second, "the late BIND refused", func() bool {
		return p.b.Stats().Totals.Rejected[rejectKindOf(stripe.StatusDuplicateStream)] > rejected
	})
	if n := p.b.Stats().Totals.SessionsStarted; n != 0 {
		t.Errorf("the late BIND founded the session while a fresh hello held its place: %d sessions started", n)
	}
	_ = hc.Close()
	releaseRefound()

	got, err := io.ReadAll(c)
	total := 0
	for _, b := range rec.received() {
		total += len(b)
	}
	t.Logf("client got %d of %d bytes, err %v; far agent sessions started %d; the server received %d bytes; fallbacks %d",
		len(got), len(want), err, p.b.Stats().Totals.SessionsStarted, total, p.a.Stats().Totals.Fallbacks)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("the connection did not complete once founded again: %d of %d bytes, err %v", len(got), len(want), err)
	}
	if total != len(want) {
		t.Errorf("the server received %d bytes of a %d-byte request", total, len(want))
	}
}

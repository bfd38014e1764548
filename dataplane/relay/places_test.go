package relay

// Places (admit's pendingPlace): an accepted fresh hello keeps its
// session's place under the session limits, its half-open slot and its
// memory until the session is made or the stream's handshake ends. These
// tests were written by review (helper-29); the three that failed then
// (half-open slots, a place of another peer, a release of a place not
// held) pass since.

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// placeHello sends hb on a fresh data-port connection and returns it with
// the reply's status and bytes.
func placeHello(t *testing.T, p *pair, hb [stripe.HelloSize]byte) (*net.TCPConn, stripe.Status, [stripe.ReplySize]byte) {
	t.Helper()
	key, _ := stripe.NewHandshakeKey(testPSK)
	c, rb, err := sendHello(t, p.b.Addrs().Data, hb[:])
	if err != nil {
		t.Fatal(err)
	}
	r, err := stripe.ParseReply(hb[:], rb[:], key)
	if err != nil {
		t.Fatal(err)
	}
	return c, r.Status, rb
}

func placeConfirm(t *testing.T, c *net.TCPConn, eph *stripe.Ephemeral, hb [stripe.HelloSize]byte, rb [stripe.ReplySize]byte) {
	t.Helper()
	key, _ := stripe.NewHandshakeKey(testPSK)
	r, err := stripe.ParseReply(hb[:], rb[:], key)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := stripe.Finish(key, eph, r.Ephemeral, hb[:], rb[:])
	if err != nil {
		t.Fatal(err)
	}
	cf := sec.Confirm()
	_, _ = c.Write(cf[:])
}

func placesOf(a *Agent) (int, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, v := range a.pendingByPeer {
		n += v
	}
	return len(a.pending), n
}

func halfOpenOf(a *Agent, src string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for pfx, v := range a.halfOpen {
		if pfx.Contains(netip.MustParseAddr(src)) {
			n += v
		}
	}
	return n
}

// TestPlacesHoldHalfOpenSlots: hellos of new sessions from one source,
// all answered before any confirm, are accepted only up to
// max_half_open_per_source: a place holds its source's half-open slot,
// which its session takes over.
func TestPlacesHoldHalfOpenSlots(t *testing.T) {
	t.Parallel() // its own agents on loopback; mostly waiting on timeouts (see the Makefile's -parallel)
	p := startPair(t, pairOptions{streams: 2,
		limitsB: Limits{MaxSessions: 16, MaxSessionsPerPeer: 16, MaxHalfOpenPerSource: 1, PreAuthTimeout: 3 * time.Second}}, echo)
	type hs struct {
		c   *net.TCPConn
		eph *stripe.Ephemeral
		hb  [stripe.HelloSize]byte
		rb  [stripe.ReplySize]byte
	}
	var acc []hs
	for range 4 {
		_, eph, hb := helloFrom(t, p, func(h *stripe.Hello) { h.Streams, h.Stream = 2, 1 })
		c, st, rb := placeHello(t, p, hb)
		defer c.Close()
		if st == stripe.StatusAccepted {
			acc = append(acc, hs{c, eph, hb, rb})
		}
	}
	for _, h := range acc {
		placeConfirm(t, h.c, h.eph, h.hb, h.rb)
	}
	time.Sleep(300 * time.Millisecond)
	if n := halfOpenOf(p.b, "127.0.0.1"); n > 1 {
		t.Errorf("%d hellos accepted, %d half-open sessions from one source, limit max_half_open_per_source = 1", len(acc), n)
	}
}

// TestPlacesGiveMemoryBack: every way a fresh stream's place ends
// (hang-up before the confirm, two fresh streams of one session, a
// duplicate stream refused after the confirm, the half-open session
// reaped) gives the memory back exactly once.
func TestPlacesGiveMemoryBack(t *testing.T) {
	// Not parallel: a 1 s pre-auth timeout bounds a step of it.
	p := startPair(t, pairOptions{streams: 2,
		limitsB: Limits{MaxSessions: 16, MaxSessionsPerPeer: 16, PreAuthTimeout: time.Second}}, echo)
	back := func(what string) {
		t.Helper()
		testsupport.Eventually(t, 10*time.Second, what+": memory and places back to 0", func() bool {
			np, nb := placesOf(p.b)
			return p.b.Stats().Totals.MemoryReserved == 0 && np == 0 && nb == 0 && len(p.b.Stats().Sessions) == 0
		})
		if m := p.b.Stats().Totals.MemoryReserved; m != 0 {
			t.Fatalf("%s: MemoryReserved %d", what, m)
		}
	}
	// 1: hang up after the reply.
	_, _, hb := helloFrom(t, p, func(h *stripe.Hello) { h.Streams, h.Stream = 2, 1 })
	c, st, _ := placeHello(t, p, hb)
	if st != stripe.StatusAccepted {
		t.Fatalf("status %v", st)
	}
	if p.b.Stats().Totals.MemoryReserved == 0 {
		t.Errorf("an accepted hello holds no memory")
	}
	_ = c.Close()
	back("hang-up after reply")

	// 2: two fresh hellos of one session (same stream index); both
	// confirm; the second is refused after its confirm (duplicate).
	var id stripe.SessionID
	_, eph1, hb1 := helloFrom(t, p, func(h *stripe.Hello) { h.Streams, h.Stream = 2, 1; id = h.Session })
	_, eph2, hb2 := helloFrom(t, p, func(h *stripe.Hello) { h.Streams, h.Stream, h.Session = 2, 1, id })
	c1, st1, rb1 := placeHello(t, p, hb1)
	c2, st2, rb2 := placeHello(t, p, hb2)
	if st1 != stripe.StatusAccepted || st2 != stripe.StatusAccepted {
		t.Fatalf("statuses %v %v", st1, st2)
	}
	placeConfirm(t, c1, eph1, hb1, rb1)
	time.Sleep(100 * time.Millisecond)
	placeConfirm(t, c2, eph2, hb2, rb2)
	_ = c2.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, _ = io.Copy(io.Discard, c2)
	_ = c1.Close()
	_ = c2.Close()
	back("two fresh streams, one refused after confirm")

	// 3: two fresh hellos of one session; one hangs up before its
	// confirm, the other makes the session, reaped half-open.
	_, eph1, hb1 = helloFrom(t, p, func(h *stripe.Hello) { h.Streams, h.Stream = 2, 1; id = h.Session })
	_, _, hb2 = helloFrom(t, p, func(h *stripe.Hello) { h.Streams, h.Stream, h.Session = 2, 0, id })
	c1, _, rb1 = placeHello(t, p, hb1)
	c2, _, _ = placeHello(t, p, hb2)
	_ = c2.Close()
	time.Sleep(100 * time.Millisecond)
	placeConfirm(t, c1, eph1, hb1, rb1)
	time.Sleep(100 * time.Millisecond)
	_ = c1.Close()
	back("one of two hangs up, the other reaped half-open")
}

// TestPlaceNotSharedAcrossPeers: a place kept for a session of agent-a
// is not agent-x's, though its hello names the same session id: agent-x,
// at its sessions_per_peer, is refused. The pre-auth timeout is far
// longer than any handshake takes, so that neither agent-x's half-open
// session (which holds its share) nor agent-a's place (held by its
// stream's handshake) ends before the test is done with them, however
// slow the machine; that the place was there when agent-x's hello named
// its id is checked, not assumed.
func TestPlaceNotSharedAcrossPeers(t *testing.T) {
	t.Parallel() // its own agents on loopback; mostly waiting on timeouts (see the Makefile's -parallel)
	p := startPair(t, pairOptions{streams: 2,
		limitsB: Limits{MaxSessions: 16, MaxSessionsPerPeer: 1, PreAuthTimeout: time.Minute},
		serverWhitelist: func(e Whitelist) []Whitelist {
			e.PeerNames = []string{"agent-a", "agent-x"}
			return []Whitelist{e}
		}}, echo)
	// agent-x fills its share with a half-open session.
	_, ephx, hbx := helloFrom(t, p, func(h *stripe.Hello) { h.Streams, h.Stream, h.Initiator = 2, 1, "agent-x" })
	cx, st, rbx := placeHello(t, p, hbx)
	defer cx.Close()
	if st != stripe.StatusAccepted {
		t.Fatalf("agent-x first: %v", st)
	}
	placeConfirm(t, cx, ephx, hbx, rbx)
	testsupport.Eventually(t, 15*time.Second, "agent-x's session", func() bool { return byPeerOf(p.b, "agent-x") == 1 })
	// agent-x at its share: a new session refused.
	_, _, hb := helloFrom(t, p, func(h *stripe.Hello) { h.Streams, h.Stream, h.Initiator = 2, 1, "agent-x" })
	c, st, _ := placeHello(t, p, hb)
	c.Close()
	if st != stripe.StatusSessionLimit {
		t.Fatalf("agent-x beyond share: %v", st)
	}
	// agent-a's hello keeps a place for id; agent-x names id.
	var id stripe.SessionID
	_, _, hba := helloFrom(t, p, func(h *stripe.Hello) { h.Streams, h.Stream = 2, 1; id = h.Session })
	ca, sta, _ := placeHello(t, p, hba)
	defer ca.Close()
	if sta != stripe.StatusAccepted {
		t.Fatalf("agent-a: %v", sta)
	}
	_, _, hb2 := helloFrom(t, p, func(h *stripe.Hello) { h.Streams, h.Stream, h.Initiator, h.Session = 2, 1, "agent-x", id })
	c2, st2, _ := placeHello(t, p, hb2)
	defer c2.Close()
	// agent-a's place and agent-x's session are still there after
	// agent-x's hello (neither comes back once gone): the hello was
	// judged with both.
	if np, nb := placesOf(p.b); np != 1 || nb != 1 || byPeerOf(p.b, "agent-x") != 1 {
		t.Fatalf("after agent-x's hello: places %d (held for %d sessions), agent-x's sessions %d; want agent-a's place and agent-x's session still there",
			np, nb, byPeerOf(p.b, "agent-x"))
	}
	if st2 == stripe.StatusAccepted {
		t.Errorf("agent-x at sessions_per_peer=1 accepted through agent-a's place")
	}
}

// TestReleaseOnlyTheHeldPlace: a fresh hello accepted because its
// session was running keeps no place, and its end releases none: when
// that session ended and its id was opened again, the stale stream's
// hang-up leaves the new place alone, and the new stream, accepted in its
// reply, is not refused after its confirm. The pre-auth timeout is far
// longer than any handshake takes, so the stale stream's handshake lasts
// until the test ends it, however slow the machine; a reload shortens the
// timeout only to reap the half-open session, and another restores it.
// The ended session's id stays settled for settledFor (5 minutes), which
// refuses any fresh hello for it; the test lets that time pass at once.
func TestReleaseOnlyTheHeldPlace(t *testing.T) {
	t.Parallel() // its own agents on loopback; mostly waiting on timeouts (see the Makefile's -parallel)
	p := startPair(t, pairOptions{streams: 2,
		limitsB: Limits{MaxSessions: 16, MaxSessionsPerPeer: 1, PreAuthTimeout: time.Minute}}, echo)
	preAuth := func(d time.Duration) {
		t.Helper()
		reloadB(t, p, testPSK, func(cfg *Config) { cfg.Limits.PreAuthTimeout = d })
	}
	var id stripe.SessionID
	_, eph1, hb1 := helloFrom(t, p, func(h *stripe.Hello) { h.Streams, h.Stream = 2, 1; id = h.Session })
	c1, st, rb1 := placeHello(t, p, hb1)
	defer c1.Close()
	if st != stripe.StatusAccepted {
		t.Fatal(st)
	}
	placeConfirm(t, c1, eph1, hb1, rb1)
	testsupport.Eventually(t, 15*time.Second, "half-open session", func() bool { return byPeerOf(p.b, "agent-a") == 1 })
	// Stream 0 of the running session: accepted via byID, no place kept.
	_, _, hb0 := helloFrom(t, p, func(h *stripe.Hello) { h.Streams, h.Stream, h.Session = 2, 0, id })
	c0, st, _ := placeHello(t, p, hb0)
	defer c0.Close()
	if st != stripe.StatusAccepted {
		t.Fatal(st)
	}
	np, _ := placesOf(p.b)
	t.Logf("places after the byID acceptance: %d", np)
	_ = c1.Close()
	preAuth(100 * time.Millisecond)
	testsupport.Eventually(t, 15*time.Second, "half-open session reaped", func() bool {
		return byPeerOf(p.b, "agent-a") == 0 && len(p.b.Stats().Sessions) == 0
	})
	preAuth(time.Minute)
	p.b.mu.Lock()
	p.b.settled.expire(time.Now().Add(settledFor + time.Second))
	p.b.mu.Unlock()
	// The id opened again: a new place.
	_, eph2, hb2 := helloFrom(t, p, func(h *stripe.Hello) { h.Streams, h.Stream, h.Session = 2, 1, id })
	c2, st, rb2 := placeHello(t, p, hb2)
	defer c2.Close()
	if st != stripe.StatusAccepted {
		t.Fatalf("id reopened: %v", st)
	}
	if np, _ := placesOf(p.b); np != 1 {
		t.Fatalf("places %d, want 1", np)
	}
	// The stale stream 0 ends its handshake. Its end releases its place,
	// if it held one, before it leaves the pre-auth connections.
	stale := c0.LocalAddr().String()
	_ = c0.Close()
	testsupport.Eventually(t, 15*time.Second, "the stale stream's handshake over", func() bool { return !inPreAuth(p.b, stale) })
	if np, _ := placesOf(p.b); np != 1 {
		t.Errorf("the stale stream's release dropped the reopened session's place: places %d, want 1; memory %d", np, p.b.Stats().Totals.MemoryReserved)
	}
	// Another session of the peer takes the share meanwhile...
	_, _, hby := helloFrom(t, p, func(h *stripe.Hello) { h.Streams, h.Stream = 2, 1 })
	cy, sty, _ := placeHello(t, p, hby)
	defer cy.Close()
	t.Logf("other session's hello while the reopened one holds the share: %v", sty)
	// ...and the reopened stream, accepted in its reply, confirms: its
	// session is made (a stream refused after its confirm is reset, and
	// makes none).
	placeConfirm(t, c2, eph2, hb2, rb2)
	made := testsupport.Poll(15*time.Second, func() bool { return byPeerOf(p.b, "agent-a") == 1 })
	_ = c2.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, err := io.ReadFull(c2, make([]byte, 1))
	if !made || isReset(err) {
		t.Errorf("stream accepted in its reply was refused after its confirm: session made %v, read %v", made, err)
	}
}

// inPreAuth says whether the connection from addr is still in its
// handshake at a (among its unauthenticated connections).
func inPreAuth(a *Agent, addr string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for c := range a.preauth {
		if c.RemoteAddr().String() == addr {
			return true
		}
	}
	return false
}

// TestPlaceAcrossShutdown: a place held by a handshake in flight
// (and one whose confirm arrives while draining) gives its memory back
// when the agent shuts down.
func TestPlaceAcrossShutdown(t *testing.T) {
	t.Parallel() // its own agents on loopback; mostly waiting on timeouts (see the Makefile's -parallel)
	p := startPair(t, pairOptions{streams: 2,
		limitsB: Limits{MaxSessions: 16, MaxSessionsPerPeer: 16, PreAuthTimeout: 5 * time.Second}}, echo)
	_, _, hb := helloFrom(t, p, func(h *stripe.Hello) { h.Streams, h.Stream = 2, 1 })
	c, st, _ := placeHello(t, p, hb)
	defer c.Close()
	_, eph2, hb2 := helloFrom(t, p, func(h *stripe.Hello) { h.Streams, h.Stream = 2, 1 })
	c2, st2, rb2 := placeHello(t, p, hb2)
	defer c2.Close()
	if st != stripe.StatusAccepted || st2 != stripe.StatusAccepted {
		t.Fatal(st, st2)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- p.b.Shutdown(ctx)
	}()
	time.Sleep(50 * time.Millisecond)
	placeConfirm(t, c2, eph2, hb2, rb2)
	<-done
	testsupport.Eventually(t, 5*time.Second, "memory and places back to 0 after Shutdown", func() bool {
		np, _ := placesOf(p.b)
		return np == 0 && p.b.Stats().Totals.MemoryReserved == 0
	})
}

// TestGenuineSessionsGiveMemoryBack: sessions made from places
// (genuine, through the client side) give back exactly what they held.
func TestGenuineSessionsGiveMemoryBack(t *testing.T) {
	p := startPair(t, pairOptions{streams: 4, limitsB: Limits{MaxSessions: 4, MaxSessionsPerPeer: 2}}, echo)
	for i := range 5 {
		roundTrip(t, p.entry, "genuine session")
		_ = i
	}
	testsupport.Eventually(t, 10*time.Second, "memory back to 0 on both agents", func() bool {
		np, _ := placesOf(p.b)
		return np == 0 && p.b.Stats().Totals.MemoryReserved == 0 && p.a.Stats().Totals.MemoryReserved == 0
	})
}

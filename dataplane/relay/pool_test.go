package relay

import (
	"crypto/rand"
	"net"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

func onlyPool(t *testing.T, a *Agent) PoolStats {
	t.Helper()
	ps := a.Pools()
	if len(ps) != 1 {
		t.Fatalf("%d pools, want 1", len(ps))
	}
	return ps[0]
}

// resetPooled resets every idle pooled stream the server side holds, as a
// NAT timing them out or a path failure would.
func resetPooled(b *Agent) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, conns := range b.pooled {
		for c := range conns {
			reset(c)
			n++
		}
	}
	return n
}

// TestPoolKeepsMinIdle: the client side opens min_idle pooled streams,
// the server side holds them, pooled streams killed while idle are noticed
// and replaced, and sessions are carried as before meanwhile.
func TestPoolKeepsMinIdle(t *testing.T) {
	p := startPair(t, pairOptions{pool: agentspec.Pool{MinIdle: 4, Max: 8}}, echo)
	testsupport.Eventually(t, 30*time.Second, "4 idle pooled streams on both ends", func() bool {
		return onlyPool(t, p.a).Idle == 4 && p.b.PooledStreams()["agent-a"] == 4
	})
	st := onlyPool(t, p.a)
	if st.Refills != 4 || st.Peer != p.b.Addrs().Data || st.PeerName != "agent-b" || st.MinIdle != 4 || st.Max != 8 {
		t.Errorf("pool after filling: %+v", st)
	}
	roundTrip(t, p.entry, "carried while the pool idles")

	if n := resetPooled(p.b); n != 4 {
		t.Fatalf("reset %d pooled streams, want 4", n)
	}
	testsupport.Eventually(t, 30*time.Second, "the dead pooled streams replaced", func() bool {
		st := onlyPool(t, p.a)
		return st.Died == 4 && st.Refills == 8 && st.Idle == 4 && p.b.PooledStreams()["agent-a"] == 4
	})
	roundTrip(t, p.entry, "carried after the pool refilled")
}

// TestPoolGrowsOnMissesAndShrinks: a session that finds the pool short
// raises its target toward max; idle streams beyond min_idle close after
// the idle timeout.
func TestPoolGrowsOnMissesAndShrinks(t *testing.T) {
	p := startPair(t, pairOptions{pool: agentspec.Pool{MinIdle: 2, Max: 6, IdleTimeout: 300 * time.Millisecond}}, echo)
	testsupport.Eventually(t, 30*time.Second, "2 idle pooled streams", func() bool { return onlyPool(t, p.a).Idle == 2 })
	var pool *streamPool
	for _, sp := range p.a.pools {
		pool = sp
	}
	got := pool.take(5)
	if len(got) != 2 {
		t.Fatalf("took %d streams, want the 2 idle", len(got))
	}
	for _, ps := range got {
		// A claimed stream belongs to its claimant: the watcher let go
		// of it without closing it.
		if err := ps.conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
			t.Fatalf("claimed stream closed: %v", err)
		}
		_ = ps.conn.Close()
	}
	st := onlyPool(t, p.a)
	if st.Claims != 2 || st.Misses != 3 || st.Target != 5 {
		t.Errorf("after a short claim: %+v", st)
	}
	testsupport.Eventually(t, 30*time.Second, "the pool grown to 5", func() bool { return onlyPool(t, p.a).Idle == 5 })
	testsupport.Eventually(t, 30*time.Second, "the surplus closed by the idle timeout", func() bool {
		st := onlyPool(t, p.a)
		return st.Idle == 2 && st.Target == 2 && st.Expired == 3 && p.b.PooledStreams()["agent-a"] == 2
	})
	if got := pool.take(9); len(got) != 2 || onlyPool(t, p.a).Target != 6 {
		t.Errorf("a miss beyond max: took %d, target %d", len(got), onlyPool(t, p.a).Target)
	} else {
		for _, ps := range got {
			_ = ps.conn.Close()
		}
	}
}

// pooledHandshake opens a pooled stream to the server-side agent as the
// key holder initiator would and returns the connection and the reply.
func pooledHandshake(t *testing.T, p *pair, initiator string) (*net.TCPConn, stripe.Status) {
	t.Helper()
	key, _ := stripe.NewHandshakeKey(testPSK)
	_, eph, hb := helloFrom(t, p, func(h *stripe.Hello) {
		*h = stripe.Hello{Mode: h.Mode, Initiator: initiator, Responder: h.Responder, Ephemeral: h.Ephemeral, Pool: true}
	})
	c, rb, err := sendHello(t, p.b.Addrs().Data, hb[:])
	if err != nil {
		t.Fatal(err)
	}
	r, err := stripe.ParseReply(hb[:], rb[:], key)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != stripe.StatusAccepted {
		_ = c.Close()
		return nil, r.Status
	}
	s, err := stripe.Finish(key, eph, r.Ephemeral, hb[:], rb[:])
	if err != nil {
		t.Fatal(err)
	}
	confirm := s.Confirm()
	if _, err := c.Write(confirm[:]); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, stripe.StatusAccepted
}

// TestPooledStreamsBounded mounts the attack of a key holder that opens
// pooled streams and holds them: the server side holds at most
// MaxPooledPerPeer for the peer and refuses the rest with an
// authenticated StatusPoolRefused; an unknown initiator gets none; a
// pooled stream that sends a frame before binding is reset.
func TestPooledStreamsBounded(t *testing.T) {
	const bound = 8
	p := startPair(t, pairOptions{limitsB: Limits{MaxPooledPerPeer: bound}}, echo)
	var held []*net.TCPConn
	t.Cleanup(func() {
		for _, c := range held {
			_ = c.Close()
		}
	})
	refused := 0
	for range 3 * bound {
		c, status := pooledHandshake(t, p, "agent-a")
		if status == stripe.StatusAccepted {
			held = append(held, c)
			// The server side registers it after the confirm: wait, so
			// the next hello sees it counted.
			testsupport.Eventually(t, 10*time.Second, "the pooled stream held", func() bool {
				return p.b.PooledStreams()["agent-a"] == len(held)
			})
			continue
		}
		if status != stripe.StatusPoolRefused {
			t.Fatalf("pooled hello beyond the bound: %s", status)
		}
		refused++
	}
	if len(held) != bound || refused != 2*bound {
		t.Fatalf("held %d, refused %d; want %d and %d", len(held), refused, bound, 2*bound)
	}
	if n := p.b.PooledStreams()["agent-a"]; n != bound {
		t.Errorf("server side holds %d pooled streams, bound %d", n, bound)
	}
	if _, status := pooledHandshake(t, p, "agent-x"); status != stripe.StatusUnknownInitiator {
		t.Errorf("pooled hello of an unknown initiator: %s", status)
	}
	// A frame before any bind resets the stream.
	var junk [stripe.HeaderSize + 8]byte
	_, _ = rand.Read(junk[:])
	if _, err := held[0].Write(junk[:]); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 10*time.Second, "the stream that sent a frame dropped", func() bool {
		return p.b.PooledStreams()["agent-a"] == bound-1
	})
	// Closing them frees them all.
	for _, c := range held {
		_ = c.Close()
	}
	held = nil
	testsupport.Eventually(t, 10*time.Second, "the pooled streams released", func() bool {
		return p.b.PooledStreams()["agent-a"] == 0
	})
	if st := p.b.Stats(); len(st.Sessions) != 0 || st.Totals.MemoryReserved != 0 {
		t.Errorf("pooled streams left sessions %d, memory %d", len(st.Sessions), st.Totals.MemoryReserved)
	}
	roundTrip(t, p.entry, "still serving")
}

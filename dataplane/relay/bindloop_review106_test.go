package relay

// Written by review (helper-106): a key holder against the real
// server-side agent.

import (
	"crypto/rand"
	"io"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// evilBind binds the pooled stream c (handshake sec) as stream index of
// session id, with the session key for index > 0; it returns the bound
// stream, ready for session frames (Up control index 1), and the session
// key a bind of stream 0 derived.
func evilBind(t testing.TB, p *pair, c *net.TCPConn, sec *stripe.Secrets, id stripe.SessionID, index, streams int, client netip.AddrPort, key *[32]byte) (*evilStream, *[32]byte) {
	t.Helper()
	b := stripe.Bind{Session: id, Stream: uint16(index), Streams: uint16(streams), ChunkSize: 60000, QueueLength: 5, Client: client, Server: p.server.addr}
	body, bound, err := sec.PoolStream().NewBind(rand.Reader, b, key)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := stripe.NewCodec(stripe.ModeAESGCM, &sec.Keys, true, 0, stripe.BindBodySize)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, pc.FrameBufferSize())
	copy(buf[stripe.HeaderSize:], body[:])
	frame, err := pc.Seal(buf, stripe.FrameBind, stripe.ControlSeq(0), stripe.BindBodySize)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	codec, err := stripe.NewCodec(stripe.ModeAESGCM, &bound.Keys, true, uint16(index), 60000)
	if err != nil {
		t.Fatal(err)
	}
	return &evilStream{c: c, codec: codec, index: index, ctl: 1, buf: make([]byte, codec.FrameBufferSize())}, bound.SessionKey
}

// TestKeyHolderBindAndDropLoop: a key holder binds pooled streams as
// stream 0 of new sessions and resets each at once, in a loop; then it
// holds one bound session, never ACKs, and replaces its stream 1 again and
// again with BINDs of fresh pooled streams. Afterwards the server side
// must hold no session, pooled stream, reservation or goroutine of it.
func TestKeyHolderBindAndDropLoop(t *testing.T) {
	const streams, loops, rebinds = 2, 150, 60
	release := make(chan struct{})
	defer close(release)
	lim := Limits{MaxPooledPerPeer: 8, ReconnectTimeout: time.Second, PreAuthTimeout: 2 * time.Second}
	p := review106B(t, streams, lim, func(c *net.TCPConn) {
		defer c.Close()
		_, _ = c.Write(make([]byte, 200000))
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-release:
				_ = c.Close()
			case <-done:
			}
		}()
		_, _ = io.Copy(io.Discard, c)
	}, nil)
	baseG := goroutines()
	for i := range loops {
		c, st, sec := pooledHandshake(t, p, "agent-a")
		if st != stripe.StatusAccepted {
			// The bound: wait for the ones reset to go.
			time.Sleep(20 * time.Millisecond)
			continue
		}
		var id stripe.SessionID
		_, _ = rand.Read(id[:])
		evilBind(t, p, c, sec, id, 0, streams, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(43000+i)), nil)
		if i%2 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
		_ = c.SetLinger(0)
		_ = c.Close()
	}
	testsupport.Eventually(t, 30*time.Second, "the bound-and-dropped sessions gone", func() bool {
		st := p.b.Stats()
		return len(st.Sessions) == 0 && p.b.PooledStreams()["agent-a"] == 0 && st.Totals.MemoryReserved == 0
	})
	st := p.b.Stats().Totals
	t.Logf("%d binds dropped: %d sessions started, %d end-server connections, aborts %v, goroutines %d -> %d",
		loops, st.SessionsStarted, p.server.accepted(), st.Aborts, baseG, goroutines())

	// One bound session held; its stream 1 replaced by BIND after BIND.
	c0, _, sec0 := pooledHandshake(t, p, "agent-a")
	if c0 == nil {
		t.Fatal("pooled stream refused")
	}
	defer c0.Close()
	var id stripe.SessionID
	_, _ = rand.Read(id[:])
	client := netip.MustParseAddrPort("127.0.0.1:44000")
	e0, key := evilBind(t, p, c0, sec0, id, 0, streams, client, nil)
	_ = e0
	testsupport.Eventually(t, 10*time.Second, "the bound session", func() bool { return len(p.b.Stats().Sessions) == 1 })
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap0 := ms.HeapInuse
	g0 := goroutines()
	var last *net.TCPConn
	for range rebinds {
		c, st, sec := pooledHandshake(t, p, "agent-a")
		if st != stripe.StatusAccepted {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		evilBind(t, p, c, sec, id, 1, streams, client, key)
		// Take a little of what comes, never ACK.
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, _ = io.ReadFull(c, make([]byte, 4096))
		if last != nil {
			_ = last.Close()
		}
		last = c
	}
	if last != nil {
		defer last.Close()
	}
	time.Sleep(500 * time.Millisecond)
	runtime.GC()
	runtime.ReadMemStats(&ms)
	ss := p.b.Stats()
	t.Logf("after %d BIND replacements: sessions %d, replaced %d, lost %d, pooled held %d, goroutines %d -> %d, heap %+d KiB",
		rebinds, len(ss.Sessions), ss.Totals.StreamsReplaced, ss.Totals.StreamsLost, p.b.PooledStreams()["agent-a"], g0, goroutines(),
		(int64(ms.HeapInuse)-int64(heap0))>>10)
	if g := goroutines(); g > g0+8 {
		t.Errorf("goroutines grew %d -> %d over %d BIND replacements", g0, g, rebinds)
	}
	_ = c0.Close()
	if last != nil {
		_ = last.Close()
	}
	testsupport.Eventually(t, 30*time.Second, "everything gone", func() bool {
		st := p.b.Stats()
		return len(st.Sessions) == 0 && st.Totals.MemoryReserved == 0 && goroutines() <= baseG+4
	})
}

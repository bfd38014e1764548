package relay

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// liveSession opens a session through the pair, echoes a first message,
// waits until every stream joined at both agents (the streams after 0
// join the running session; those joins are over then) and returns the
// client connection and the server side's view of the session.
func liveSession(t *testing.T, p *pair) (*net.TCPConn, SessionStats, stripe.SessionID) {
	t.Helper()
	c := p.dial(t)
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "every stream joined at both agents", func() bool {
		for _, ag := range []*Agent{p.a, p.b} {
			st := ag.Stats()
			if len(st.Sessions) != 1 || st.Sessions[0].StreamsLive != uint64(st.Sessions[0].Streams) || st.Totals.PreAuthActive != 0 {
				return false
			}
		}
		return true
	})
	live := p.b.Stats().Sessions[0]
	var id stripe.SessionID
	if _, err := hex.Decode(id[:], []byte(live.ID)); err != nil {
		t.Fatal(err)
	}
	return c, live, id
}

// acceptedHello sends the hello that mutate makes of agent-a's to the
// server-side agent, requires it accepted, and returns the connection and
// the handshake's secrets.
func acceptedHello(t *testing.T, p *pair, mutate func(h *stripe.Hello)) (*net.TCPConn, *stripe.Secrets) {
	t.Helper()
	key, _ := stripe.NewHandshakeKey(testPSK)
	_, eph, hb := helloFrom(t, p, mutate)
	conn, rb, err := sendHello(t, p.b.Addrs().Data, hb[:])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	r, err := stripe.ParseReply(hb[:], rb[:], key)
	if err != nil || r.Status != stripe.StatusAccepted {
		t.Fatalf("reply %v, %v; want accepted", r.Status, err)
	}
	secrets, err := stripe.Finish(key, eph, r.Ephemeral, hb[:], rb[:])
	if err != nil {
		t.Fatal(err)
	}
	return conn, secrets
}

// TestJoinForUnknownSessionRefused: a JOIN for a session the server-side
// agent does not hold gets the authenticated unknown-session refusal and
// is counted as Rejected[session_mismatch], not as a handshake failure
// (it is what a client-side agent sends when the far agent restarted, or
// when its session ended there first).
func TestJoinForUnknownSessionRefused(t *testing.T) {
	p := startPair(t, pairOptions{}, echo)
	key, _ := stripe.NewHandshakeKey(testPSK)
	_, _, hb := helloFrom(t, p, func(h *stripe.Hello) { h.Join, h.Stream = true, 3 })
	conn, rb, err := sendHello(t, p.b.Addrs().Data, hb[:])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if r, err := stripe.ParseReply(hb[:], rb[:], key); err != nil || r.Status != stripe.StatusUnknownSession {
		t.Fatalf("join for an unknown session: %v, %v; want %v", r.Status, err, stripe.StatusUnknownSession)
	}
	if _, err := conn.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after the refusal: %v, want an orderly close", err)
	}
	testsupport.Eventually(t, 30*time.Second, "the refusal counted", func() bool {
		return p.b.Stats().Totals.Rejected[rejectMismatch] == 1
	})
	if st := p.b.Stats().Totals; st.HandshakeFailures != 0 || st.HandshakesAbandoned != 0 {
		t.Errorf("counted %d handshake failures, %d abandoned; want none", st.HandshakeFailures, st.HandshakesAbandoned)
	}
}

// TestJoinForSessionEndedDuringHandshake: a JOIN hello for a live session
// is accepted, then the session completes before the joiner's confirm
// arrives (a client-side agent's replacement stream that its session no
// longer needed). The valid confirm finds no session: the stream is reset
// and counted as Rejected[session_mismatch], not as a handshake failure,
// and nothing reaches the end server.
func TestJoinForSessionEndedDuringHandshake(t *testing.T) {
	lim := Limits{PreAuthTimeout: time.Minute}
	p := startPair(t, pairOptions{limitsB: lim, viaMITM: true}, echo)
	c, live, id := liveSession(t, p)
	// The client-side agent's own late joins, if its session opens any
	// as it ends, do not reach the server side: only the test's counts.
	p.mitm.refuse.Store(true)
	conn, secrets := acceptedHello(t, p, func(h *stripe.Hello) { h.Session, h.Client, h.Stream, h.Join = id, live.Client, 3, true })

	// The session completes while the join waits for its confirm.
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(c); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "the session to complete at the server side", func() bool {
		st := p.b.Stats()
		return st.Totals.SessionsCompleted == 1 && len(st.Sessions) == 0
	})
	accepted := p.server.accepted()

	confirm := secrets.Confirm()
	if _, err := conn.Write(confirm[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, conn); !isReset(err) {
		t.Errorf("late join: %v, want a reset", err)
	}
	testsupport.Eventually(t, 30*time.Second, "the late join counted", func() bool {
		return p.b.Stats().Totals.Rejected[rejectMismatch] == 1
	})
	st := p.b.Stats().Totals
	if st.HandshakeFailures != 0 || st.HandshakesAbandoned != 0 {
		t.Errorf("counted %d handshake failures, %d abandoned; want none", st.HandshakeFailures, st.HandshakesAbandoned)
	}
	if st.SessionsStarted != 1 || st.SessionsAborted != 0 {
		t.Errorf("sessions started %d, aborted %d; want 1 and 0", st.SessionsStarted, st.SessionsAborted)
	}
	if got := p.server.accepted(); got != accepted {
		t.Errorf("the late join made the agent connect to the server")
	}
}

// TestHangUpAfterValidHello: a peer that hangs up (closes or resets)
// after its valid hello was accepted, before it finished the handshake,
// is counted in HandshakesAbandoned, not as a handshake failure; one that
// sends a wrong confirm, or a hello with a bad MAC, still is a handshake
// failure. No session is created by any of them and the agent serves on.
func TestHangUpAfterValidHello(t *testing.T) {
	p := startPair(t, pairOptions{viaMITM: true}, echo)
	c, live, id := liveSession(t, p)
	p.mitm.refuse.Store(true) // only the test's handshakes reach the server side
	ofLive := func(h *stripe.Hello) { h.Session, h.Client, h.Stream, h.Join = id, live.Client, 3, true }
	resetConn := func(conn *net.TCPConn) {
		_ = conn.SetLinger(0)
		_ = conn.Close()
	}
	cases := []struct {
		name     string
		mutate   func(h *stripe.Hello)
		then     func(conn *net.TCPConn, s *stripe.Secrets)
		abandons bool
	}{
		{"reset before the confirm", nil, func(conn *net.TCPConn, _ *stripe.Secrets) { resetConn(conn) }, true},
		{"close before the confirm", nil, func(conn *net.TCPConn, _ *stripe.Secrets) { _ = conn.Close() }, true},
		{"join reset before its JOIN frame", ofLive, func(conn *net.TCPConn, s *stripe.Secrets) {
			confirm := s.Confirm()
			_, _ = conn.Write(confirm[:])
			resetConn(conn)
		}, true},
		{"wrong confirm", nil, func(conn *net.TCPConn, s *stripe.Secrets) {
			confirm := s.Confirm()
			confirm[0] ^= 1
			_, _ = conn.Write(confirm[:])
			_, _ = io.Copy(io.Discard, conn)
		}, false},
	}
	for _, tc := range cases {
		before := p.b.Stats().Totals
		conn, secrets := acceptedHello(t, p, tc.mutate)
		tc.then(conn, secrets)
		testsupport.Eventually(t, 30*time.Second, tc.name+" counted", func() bool {
			st := p.b.Stats().Totals
			return st.HandshakesAbandoned+st.HandshakeFailures > before.HandshakesAbandoned+before.HandshakeFailures
		})
		st := p.b.Stats().Totals
		abandoned, failed := st.HandshakesAbandoned-before.HandshakesAbandoned, st.HandshakeFailures-before.HandshakeFailures
		if tc.abandons && (abandoned != 1 || failed != 0) {
			t.Errorf("%s: %d abandoned, %d handshake failures; want 1 abandoned", tc.name, abandoned, failed)
		}
		if !tc.abandons && (abandoned != 0 || failed != 1) {
			t.Errorf("%s: %d abandoned, %d handshake failures; want 1 failure", tc.name, abandoned, failed)
		}
	}
	// A hello that fails its MAC, then a hang-up: a handshake failure.
	_, _, hb := helloFrom(t, p, nil)
	hb[150] ^= 1
	before := p.b.Stats().Totals
	conn, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(p.b.Addrs().Data))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = conn.Write(hb[:])
	_ = conn.Close()
	testsupport.Eventually(t, 30*time.Second, "the bad hello counted", func() bool {
		return p.b.Stats().Totals.HandshakeFailures > before.HandshakeFailures
	})
	if st := p.b.Stats().Totals; st.HandshakesAbandoned != before.HandshakesAbandoned {
		t.Errorf("a bad hello counted as abandoned")
	}
	if st := p.b.Stats(); len(st.Sessions) != 1 || st.Totals.SessionsStarted != 1 || st.Totals.StreamsReplaced != 0 {
		t.Errorf("the hang-ups touched the sessions: %d live, %d started, %d streams replaced",
			len(st.Sessions), st.Totals.SessionsStarted, st.Totals.StreamsReplaced)
	}
	msg := bytes.Repeat([]byte("still fine "), 10000)
	go func() { _, _ = c.Write(msg); _ = c.CloseWrite() }()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("session after the hang-ups: %d bytes, %v", len(got), err)
	}
}

// TestJoinForSessionIDReusedDuringHandshake: the initiator picks session
// ids. A JOIN hello accepted for one session, its confirm held back while
// the peer ends that session and opens another of the same id under a
// whitelist of another shape (2 streams, or a smaller chunk), then
// confirmed and proved with the new session's key, is reset: its stream
// index and codec were checked against the first session. Before, the
// agent attached it to the second and panicked (stream 7 of 2, or a
// 60000-byte frame in a 16384-byte buffer), taking the process down.
func TestJoinForSessionIDReusedDuringHandshake(t *testing.T) {
	for _, c := range []struct {
		name    string
		reshape func(w *Whitelist, h *stripe.Hello)
	}{
		{"fewer streams", func(w *Whitelist, h *stripe.Hello) { w.Streams, h.Streams = 2, 2 }},
		{"smaller chunk", func(w *Whitelist, h *stripe.Hello) { w.ChunkSize, h.ChunkSize = 16384, 16384 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			second := netip.MustParseAddrPort("127.0.0.2:40000")
			p := startPair(t, pairOptions{streams: 8, chunk: 60000, queue: 5,
				serverWhitelist: func(e Whitelist) []Whitelist {
					e.Clients = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
					other := e
					other.Name = "other"
					other.Clients = []netip.Prefix{netip.PrefixFrom(second.Addr(), 32)}
					c.reshape(&other, &stripe.Hello{})
					return []Whitelist{e, other}
				}}, echo)
			// The first session: stream 0 under the 8-stream entry.
			var id stripe.SessionID
			_, _ = rand.Read(id[:])
			c0, sec0 := acceptedHello(t, p, func(h *stripe.Hello) { h.Session = id })
			confirm(t, c0, sec0)
			testsupport.Eventually(t, 10*time.Second, "the first session", func() bool { return len(p.b.Stats().Sessions) == 1 })
			// A JOIN of its stream 7, accepted; the confirm held back.
			cj, secJ := acceptedHello(t, p, func(h *stripe.Hello) { h.Session, h.Stream, h.Join = id, 7, true })
			// The first session ends (ABORT on its stream 0) ...
			codec0, err := stripe.NewCodec(stripe.ModeAESGCM, &sec0.Keys, true, 0, 60000)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, stripe.HeaderSize+stripe.MaxAbortReason+stripe.TagSize)
			frame, err := codec0.Seal(buf, stripe.FrameAbort, stripe.AbortSeq, stripe.PutAbortBody(buf[stripe.HeaderSize:], "bye"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c0.Write(frame); err != nil {
				t.Fatal(err)
			}
			testsupport.Eventually(t, 10*time.Second, "the first session's end", func() bool { return len(p.b.Stats().Sessions) == 0 })
			// A fresh hello reusing the id of a session founded here is
			// refused as a duplicate (settled.go) ...
			hkey, _ := stripe.NewHandshakeKey(testPSK)
			_, _, hb := helloFrom(t, p, func(h *stripe.Hello) { h.Session, h.Client = id, second; c.reshape(&Whitelist{}, h) })
			rc, rb, err := sendHello(t, p.b.Addrs().Data, hb[:])
			if err != nil {
				t.Fatal(err)
			}
			_ = rc.Close()
			if r, err := stripe.ParseReply(hb[:], rb[:], hkey); err != nil || r.Status != stripe.StatusDuplicateStream {
				t.Errorf("a fresh hello reusing an ended session's id: %v, %v; want %s", r.Status, err, stripe.StatusDuplicateStream)
			}
			// ... for a while and within a bound: once it is forgotten
			// (5 minutes, or 16,384 ids later), the JOIN check below still
			// holds.
			p.b.mu.Lock()
			p.b.settled = settledIDs{}
			p.b.mu.Unlock()
			// ... and a second opens under the same id in the other shape.
			c2, sec2 := acceptedHello(t, p, func(h *stripe.Hello) {
				h.Session, h.Client = id, second
				c.reshape(&Whitelist{}, h)
			})
			confirm(t, c2, sec2)
			testsupport.Eventually(t, 10*time.Second, "the second session", func() bool { return len(p.b.Stats().Sessions) == 1 })
			mismatches := p.b.Stats().Totals.Rejected[rejectMismatch]

			// The held JOIN, confirmed and proved with the second
			// session's key, then a whole 60000-byte DATA frame.
			confirm(t, cj, secJ)
			codecJ, err := stripe.NewCodec(stripe.ModeAESGCM, &secJ.Keys, true, 7, 60000)
			if err != nil {
				t.Fatal(err)
			}
			// The agent may reset the stream at its confirm, before these
			// writes, which then fail with the reset.
			key := sec2.SessionKey()
			errJoin := sendJoin(cj, codecJ, secJ, &key, id)
			data0, err := codecJ.Seal(make([]byte, codecJ.FrameBufferSize()), stripe.FrameData, 0, 60000)
			if err != nil {
				t.Fatal(err)
			}
			_, errData := cj.Write(data0)
			_ = cj.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.Copy(io.Discard, cj); !isReset(errJoin) && !isReset(errData) && !isReset(err) {
				t.Errorf("the join for the reused id: join %v, data %v, read %v; want a reset", errJoin, errData, err)
			}
			testsupport.Eventually(t, 10*time.Second, "the refusal counted", func() bool {
				return p.b.Stats().Totals.Rejected[rejectMismatch] == mismatches+1
			})
			// The agent runs on: the second session is whole, and a
			// transfer through the pair still goes.
			if s := p.b.Stats().Sessions; len(s) != 1 {
				t.Errorf("sessions after the refused join: %+v, want the second one", s)
			}
			roundTrip(t, p.entry, "still serving")
		})
	}
}

// confirm sends the initiator's key confirmation of an accepted hello.
func confirm(t *testing.T, c *net.TCPConn, s *stripe.Secrets) {
	t.Helper()
	cf := s.Confirm()
	if _, err := c.Write(cf[:]); err != nil {
		t.Fatal(err)
	}
}

// readDataFrame reads frames from c with codec until a DATA frame, and
// returns its header; control frames are skipped.
func readDataFrame(t *testing.T, c *net.TCPConn, codec *stripe.Codec) stripe.Header {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	for {
		var hdr [stripe.HeaderSize]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			t.Fatalf("reading a frame header: %v", err)
		}
		h, err := stripe.ParseHeader(hdr[:])
		if err != nil {
			t.Fatal(err)
		}
		body := make([]byte, h.Length)
		if _, err := io.ReadFull(c, body); err != nil {
			t.Fatalf("reading a frame body: %v", err)
		}
		if _, err := codec.Open(h, hdr[:], body); err != nil {
			t.Fatal(err)
		}
		if h.Type == stripe.FrameData {
			return h
		}
	}
}

// serverSession is the server-side agent's only session.
func serverSession(t *testing.T, a *Agent) *session {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.sessions) != 1 {
		t.Fatalf("%d sessions at the server side, want 1", len(a.sessions))
	}
	for s := range a.sessions {
		return s
	}
	return nil
}

// TestJoinChurnPinsDeadStreams mounts a key holder that opens a session,
// takes the first frame the server side sends and never acknowledges it,
// then replaces the stream over and over with valid JOINs. Each
// replacement loses the old stream and its frame goes again on the new
// one. The frame used to keep every stream that ever sealed it in its
// sealedOn list, so the dead streams (each with its 32 KiB read buffer
// and its AES-GCM state, none of it reserved from limits.memory) stayed
// reachable for as long as the peer withheld the ACK: about 35 KB of heap
// per JOIN, without bound. A lost stream now leaves the list at the
// frame's next seal once its goroutines are gone (until then its writer
// may still run: TestSealedOnKeepsRunningLostStreams). Each JOIN waits
// for the goroutines of the stream the last one replaced, however long
// they take to end, so that the list and the streams still reachable at
// the end show the pruning, not how quickly the goroutines ended: the
// live stream and the one it replaced (its goroutines may have run
// still at the last seal), not one per JOIN.
func TestJoinChurnPinsDeadStreams(t *testing.T) {
	const joins = 40
	release := make(chan struct{})
	p := startPair(t, pairOptions{streams: 1}, func(c *net.TCPConn) {
		defer c.Close()
		// The server sends a little, then waits: the first frame of the
		// Down direction stays with the agent until the peer ACKs it.
		_, _ = c.Write(make([]byte, 1000))
		go func() { <-release; _ = c.Close() }()
		_, _ = io.Copy(io.Discard, c)
	})
	defer close(release)

	var id stripe.SessionID
	_, _ = rand.Read(id[:])
	shape := func(h *stripe.Hello) { h.Session, h.Streams = id, 1 }
	c0, sec0 := acceptedHello(t, p, shape)
	confirm(t, c0, sec0)
	codec0, err := stripe.NewCodec(stripe.ModeAESGCM, &sec0.Keys, true, 0, 60000)
	if err != nil {
		t.Fatal(err)
	}
	if h := readDataFrame(t, c0, codec0); h.Seq != 0 {
		t.Fatalf("first DATA frame seq %d, want 0", h.Seq)
	}
	s := serverSession(t, p.b)
	key := sec0.SessionKey()

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var dead []weak.Pointer[stream]
	last, lastCodec := c0, codec0
	// replacedGone is closed once the goroutines of the stream the last
	// JOIN replaced are gone (a channel, not the stream: it must not stay
	// reachable from here).
	var replacedGone chan struct{}
	awaitReplaced := func(what string) {
		t.Helper()
		if replacedGone == nil {
			return
		}
		select {
		case <-replacedGone:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the replaced stream's goroutines still run after 30 s", what)
		}
	}
	for i := range joins {
		awaitReplaced(fmt.Sprintf("join %d", i))
		s.mu.Lock()
		old := s.streams[0]
		s.mu.Unlock()
		replacedGone = nil
		if old != nil {
			dead = append(dead, weak.Make(old))
			replacedGone = old.gone
		}
		cj, secJ := acceptedHello(t, p, func(h *stripe.Hello) { shape(h); h.Stream, h.Join = 0, true })
		confirm(t, cj, secJ)
		codecJ, err := stripe.NewCodec(stripe.ModeAESGCM, &secJ.Keys, true, 0, 60000)
		if err != nil {
			t.Fatal(err)
		}
		if err := sendJoin(cj, codecJ, secJ, &key, id); err != nil {
			t.Fatal(err)
		}
		// The unacknowledged frame goes again, on the new stream.
		if h := readDataFrame(t, cj, codecJ); h.Seq != 0 || h.Flags&stripe.FlagRetransmit == 0 {
			t.Fatalf("join %d: DATA seq %d flags %#x, want seq 0 retransmitted", i, h.Seq, h.Flags)
		}
		last, lastCodec = cj, codecJ
	}
	// End the session when the test ends (an ABORT on its live stream),
	// so the agent's shutdown need not wait out its drain.
	defer func() {
		buf := make([]byte, stripe.HeaderSize+stripe.MaxAbortReason+stripe.TagSize)
		if frame, err := lastCodec.Seal(buf, stripe.FrameAbort, stripe.AbortSeq, stripe.PutAbortBody(buf[stripe.HeaderSize:], "bye")); err == nil {
			_, _ = last.Write(frame)
		}
		testsupport.Eventually(t, 30*time.Second, "the session ended", func() bool { return len(p.b.Stats().Sessions) == 0 })
	}()
	testsupport.Eventually(t, 30*time.Second, "the replacements counted", func() bool {
		return p.b.Stats().Totals.StreamsReplaced >= joins
	})
	awaitReplaced("after the joins")

	s.sendMu.Lock()
	sealedOn := 0
	if len(s.retained) > 0 {
		sealedOn = len(s.retained[0].sealedOn)
	}
	s.sendMu.Unlock()
	runtime.GC()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("live heap %d -> %d bytes (%+d, %d per JOIN)", before.HeapAlloc, after.HeapAlloc,
		int64(after.HeapAlloc)-int64(before.HeapAlloc), (int64(after.HeapAlloc)-int64(before.HeapAlloc))/joins)
	pinned := 0
	for _, w := range dead {
		if w.Value() != nil {
			pinned++
		}
	}
	t.Logf("after %d JOINs: the unacknowledged frame names %d streams; %d of %d replaced streams still reachable",
		joins, sealedOn, pinned, len(dead))
	// One live stream carries the frame, and the one it replaced may be
	// named still (or a stale scratch entry hold it), not one per JOIN.
	if sealedOn > 2 || pinned > 2 {
		t.Errorf("a peer's JOINs pin every replaced stream: the frame names %d streams, %d of %d dead streams are reachable (want at most 2)",
			sealedOn, pinned, len(dead))
	}
}

// TestSealedOnKeepsRunningLostStreams: a frame keeps naming a lost stream
// that sealed it until that stream's goroutines are gone (its writer may
// still run, and must never seal the frame again: one key, one nonce),
// and a lost stream's writer takes no frame to send again. Then the
// stream leaves the list at the frame's next seal. (An independent
// review's case: pruning lost streams at once let a lost writer take
// back a frame it had sealed.)
func TestSealedOnKeepsRunningLostStreams(t *testing.T) {
	s := &session{resendWake: make(chan struct{}, 1)}
	stream := func(i int) *stream {
		return &stream{s: s, index: i, dead: make(chan struct{}), gone: make(chan struct{})}
	}
	a, b, d := stream(0), stream(1), stream(2)
	c := &chunk{seq: 7}
	c.sealOn(a)
	close(a.dead) // lost; its writer has not returned
	c.sealOn(b)
	if !c.sealedBy(a) || !c.sealedBy(b) {
		t.Fatalf("sealedOn %d streams: a lost stream whose writer runs left the list", len(c.sealedOn))
	}
	s.resend = []*chunk{c}
	if got := s.takeResend(a, nil, false); len(got) != 0 {
		t.Errorf("lost stream %d took frame %d to send again", a.index, got[0].seq)
	}
	close(a.gone) // its goroutines returned
	c.sealOn(d)
	if c.sealedBy(a) || !c.sealedBy(b) || !c.sealedBy(d) || len(c.sealedOn) != 2 {
		t.Errorf("after the lost stream's goroutines returned, sealedOn is %d streams, want b and d", len(c.sealedOn))
	}
}

package relay

// Attacks on the real agent from the security review (issue "Hostile peers
// and switches"): each test mounts one against agents on loopback and shows
// that it fails harmlessly: the victim keeps serving, no byte leaks, memory
// and goroutines stay bounded.

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// forwarder relays every connection it accepts to target, and records the
// bytes each way of the first one: an on-path relay that can redirect
// streams (a reflector) and a passive recorder.
type forwarder struct {
	ln     *net.TCPListener
	addr   netip.AddrPort
	target netip.AddrPort

	mu       sync.Mutex
	recorded [2]bytes.Buffer // 0: client -> target, 1: target -> client
	first    bool
	wg       sync.WaitGroup
}

func newForwarder(t testing.TB, target netip.AddrPort) *forwarder {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln, addr: ln.Addr().(*net.TCPAddr).AddrPort(), target: target}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			f.mu.Lock()
			record := !f.first
			f.first = true
			f.mu.Unlock()
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.relay(c, record)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		f.wg.Wait()
	})
	return f
}

type recordingWriter struct {
	f   *forwarder
	dir int
	w   io.Writer
}

func (r recordingWriter) Write(p []byte) (int, error) {
	r.f.mu.Lock()
	r.f.recorded[r.dir].Write(p)
	r.f.mu.Unlock()
	return r.w.Write(p)
}

func (f *forwarder) relay(c *net.TCPConn, record bool) {
	defer c.Close()
	far, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(f.target))
	if err != nil {
		return
	}
	defer far.Close()
	var up, down io.Writer = far, c
	if record {
		up, down = recordingWriter{f, 0, far}, recordingWriter{f, 1, c}
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, c)
		_ = far.CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(down, far)
	_ = c.CloseWrite()
	<-done
}

func (f *forwarder) transcript() (up, down []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return bytes.Clone(f.recorded[0].Bytes()), bytes.Clone(f.recorded[1].Bytes())
}

// roundTrip sends msg through the client side and reads the echo.
func roundTrip(t *testing.T, entry netip.AddrPort, msg string) {
	t.Helper()
	c, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(entry))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	go func() { _, _ = c.Write([]byte(msg)); _ = c.CloseWrite() }()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != msg {
		t.Fatalf("round trip: got %q, %v; want %q", got, err, msg)
	}
}

// TestReflectedStreamsRefused is the reflection attack: an on-path relay
// sends agent A's streams back to A's own data port. A refuses them (the
// hello names another responder; and where a misconfiguration names A
// itself, A recognises its own handshake key), never dials the server as a
// server side, and carries the client's connection direct, counted, so its
// stats never show a normal session that is not one.
func TestReflectedStreamsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		peer   string // whom A's client route names as the server-side agent
		reason string
	}{
		{"names the real peer", "agent-b", stripe.StatusWrongResponder.String()},
		{"names itself", "agent-a", stripe.StatusReflected.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newEndServer(t, echo)
			entry := Whitelist{
				Name: "test", Clients: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
				Server: srv.addr.Addr(), Port: srv.addr.Port(), Streams: 4, ChunkSize: 1000, QueueLength: 4,
			}
			// A is client side for the flow and, for the same flow, the
			// server side of sessions from "agent-a": the worst case, in
			// which only the handshake stands between A and itself.
			accept := entry
			accept.PeerName = "agent-a"
			a, err := New(Config{
				Name: "agent-a", PSK: testPSK,
				TransparentListen: netip.MustParseAddrPort("127.0.0.1:0"),
				DataListen:        netip.MustParseAddrPort("127.0.0.1:0"),
				Server:            []Whitelist{accept},
			}, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			a.os = loopbackTransparency(srv.addr)
			if err := a.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = a.Shutdown(ctx)
			})
			reflector := newForwarder(t, a.Addrs().Data)
			cfg := a.cfg.Load().Config
			cfg.PSK = testPSK
			route := entry
			route.Peer, route.PeerName = reflector.addr, tc.peer
			cfg.Client = []Whitelist{route}
			if err := a.Update(cfg); err != nil {
				t.Fatal(err)
			}

			roundTrip(t, a.Addrs().Transparent, "reflected, then carried direct")
			st := a.Stats()
			if st.Totals.Rejected[rejectIdentity] == 0 {
				t.Errorf("no identity refusal counted: %v", st.Totals.Rejected)
			}
			if st.Totals.Fallbacks != 1 {
				t.Errorf("fallbacks = %d, want 1", st.Totals.Fallbacks)
			}
			for _, r := range st.RecentAborts {
				if r.Side == "server" {
					t.Errorf("A ran a server-side session for its own streams: %+v", r)
				}
			}
			if len(st.RecentAborts) != 1 || !strings.Contains(st.RecentAborts[0].Error, tc.reason) {
				t.Errorf("client-side setup failure does not name %q: %+v", tc.reason, st.RecentAborts)
			}
			if srv.accepted() != 1 {
				t.Errorf("server accepted %d connections, want the one direct connection", srv.accepted())
			}
		})
	}
}

// rawHello is a hello whose every field the test chooses, MAC'd with the
// PSK as an agent holding the key would: the parser and the agent must
// stand whatever a key holder sends.
func rawHello(psk []byte, body [232]byte) [stripe.HelloSize]byte {
	auth, err := hkdf.Key(sha256.New, psk, nil, "sosappliance v2 handshake auth", 32)
	if err != nil {
		panic(err)
	}
	var b [stripe.HelloSize]byte
	copy(b[:], body[:])
	m := hmac.New(sha256.New, auth)
	m.Write([]byte("sos v2 hello"))
	m.Write(b[:232])
	copy(b[232:], m.Sum(nil))
	return b
}

// helloFrom marshals a hello as agent-a would send it to agent-b.
func helloFrom(t testing.TB, p *pair, mutate func(h *stripe.Hello)) (stripe.Hello, *stripe.Ephemeral, [stripe.HelloSize]byte) {
	t.Helper()
	eph, err := stripe.NewEphemeral(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h := stripe.Hello{
		Mode: stripe.ModeAESGCM, Initiator: "agent-a", Responder: "agent-b", Ephemeral: eph.Public(),
		Stream: 0, Streams: 8, ChunkSize: 60000, QueueLength: 5,
		Client: netip.MustParseAddrPort("127.0.0.1:40000"), Server: p.server.addr,
	}
	_, _ = rand.Read(h.Session[:])
	if mutate != nil {
		mutate(&h)
	}
	key, err := stripe.NewHandshakeKey(testPSK)
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	return h, eph, b
}

// sendHello opens a data-port connection, sends b and returns the reply.
func sendHello(t testing.TB, data netip.AddrPort, b []byte) (*net.TCPConn, [stripe.ReplySize]byte, error) {
	t.Helper()
	c, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(data))
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var rb [stripe.ReplySize]byte
	if _, err := c.Write(b); err != nil {
		return c, rb, err
	}
	_, err = io.ReadFull(c, rb[:])
	return c, rb, err
}

// TestHostileShapeRefused sends, as a key holder, the hello that used to
// crash the daemon (chunk 16,777,184 x queue 2^29 x 8,192 streams wrapped
// the memory check negative and panicked in makeslice), and other shapes
// that differ from the server side's own whitelist. Each gets an
// authenticated refusal; the agent allocates nothing and serves on.
func TestHostileShapeRefused(t *testing.T) {
	p := startPair(t, pairOptions{streams: 8, limitsB: Limits{MaxStreams: 8192}}, echo)
	key, _ := stripe.NewHandshakeKey(testPSK)
	for _, tc := range []struct {
		name   string
		mutate func(h *stripe.Hello)
		want   stripe.Status
	}{
		{"overflowing shape", func(h *stripe.Hello) { h.Streams, h.ChunkSize, h.QueueLength = 8192, 16_777_184, 1<<29 }, stripe.StatusShapeMismatch},
		{"more streams", func(h *stripe.Hello) { h.Streams = 9 }, stripe.StatusShapeMismatch},
		{"bigger chunks", func(h *stripe.Hello) { h.ChunkSize = stripe.MaxChunkSize }, stripe.StatusShapeMismatch},
		{"another initiator", func(h *stripe.Hello) { h.Initiator = "agent-x" }, stripe.StatusUnknownInitiator},
		{"another responder", func(h *stripe.Hello) { h.Responder = "agent-x" }, stripe.StatusWrongResponder},
		{"no whitelist", func(h *stripe.Hello) { h.Server = netip.MustParseAddrPort("127.0.0.1:1") }, stripe.StatusNotWhitelisted},
		// A pooled stream names no whitelist: its initiator must be the
		// client-side agent of one (see also TestPooledStreamsBounded).
		{"pooled stream of another initiator", func(h *stripe.Hello) {
			*h = stripe.Hello{Mode: h.Mode, Initiator: "agent-x", Responder: h.Responder, Ephemeral: h.Ephemeral, Pool: true}
		}, stripe.StatusUnknownInitiator},
	} {
		_, _, hb := helloFrom(t, p, tc.mutate)
		c, rb, err := sendHello(t, p.b.Addrs().Data, hb[:])
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_ = c.Close()
		r, err := stripe.ParseReply(hb[:], rb[:], key)
		if err != nil || r.Status != tc.want {
			t.Errorf("%s: reply %v, %v; want %v", tc.name, r.Status, err, tc.want)
		}
	}
	if n := len(p.b.Stats().Sessions); n != 0 {
		t.Errorf("%d sessions exist after refused hellos", n)
	}
	if r := p.b.Stats().Totals.MemoryReserved; r != 0 {
		t.Errorf("%d bytes reserved after refused hellos", r)
	}
	roundTrip(t, p.entry, "still serving")
}

// TestVersionOneHelloGetsARefusal: an agent of protocol version 1 gets a
// refusal it reads whole and that names version 2, not a silent close.
func TestVersionOneHelloGetsARefusal(t *testing.T) {
	p := startPair(t, pairOptions{}, echo)
	v1 := make([]byte, 136) // a version 1 hello is 136 bytes
	copy(v1, "SOSt\x01\x01")
	c, rb, err := sendHello(t, p.b.Addrs().Data, v1)
	if err != nil {
		t.Fatalf("no refusal: %v", err)
	}
	defer c.Close()
	if !stripe.IsVersionRefusal(rb[:]) || rb[4] != 2 {
		t.Errorf("refusal % x", rb[:8])
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("after the refusal: %v, want an orderly close", err)
	}
	if n := p.b.Stats().Totals.Rejected[rejectVersion]; n != 1 {
		t.Errorf("version refusals counted: %d", n)
	}
}

// TestRecordedSessionStaysSecret: a passive recorder on the path that later
// obtains the PSK cannot decrypt what it recorded. Keys computable from the
// PSK and every byte on the wire (the handshake without the ephemeral
// private keys, as version 1 derived them) do not open the first frame.
func TestRecordedSessionStaysSecret(t *testing.T) {
	p := startPair(t, pairOptions{streams: 1}, echo)
	rec := newForwarder(t, p.b.Addrs().Data)
	cfg := p.a.cfg.Load().Config
	cfg.PSK = testPSK
	cfg.Client[0].Peer = rec.addr
	if err := p.a.Update(cfg); err != nil {
		t.Fatal(err)
	}
	secret := "the payload a recorder must never read"
	roundTrip(t, p.entry, secret)
	up, _ := rec.transcript()
	if len(up) < stripe.HelloSize+stripe.ConfirmSize+stripe.HeaderSize {
		t.Fatalf("recorded %d bytes", len(up))
	}
	if bytes.Contains(up, []byte(secret)) {
		t.Fatal("payload in clear on the wire")
	}
	_, down := rec.transcript()
	hello, reply := up[:stripe.HelloSize], down[:stripe.ReplySize]
	frame := up[stripe.HelloSize+stripe.ConfirmSize:]
	hdr, err := stripe.ParseHeader(frame)
	if err != nil || hdr.Type != stripe.FrameData {
		t.Fatalf("first frame: %+v, %v", hdr, err)
	}
	body := frame[stripe.HeaderSize : stripe.HeaderSize+int(hdr.Length)]
	th := sha256.Sum256(append(bytes.Clone(hello), reply...))
	var nonce [12]byte
	binary.BigEndian.PutUint64(nonce[4:], hdr.Seq)
	guesses := [][]byte{}
	for _, ikm := range [][]byte{testPSK, append(make([]byte, 32), testPSK...)} {
		okm, _ := hkdf.Key(sha256.New, ikm, th[:], "sosappliance v2 stream keys", 96)
		guesses = append(guesses, okm[32:64])
	}
	for i, k := range guesses {
		block, _ := aes.NewCipher(k)
		gcm, _ := cipher.NewGCM(block)
		if _, err := gcm.Open(nil, nonce[:], body, frame[:stripe.HeaderSize]); err == nil {
			t.Fatalf("guess %d opened a recorded frame with the PSK alone", i)
		}
	}
}

// TestPreAuthFloodDoesNotLockOutPeers: hundreds of idle connections from
// many sources (the global cap), and from the client agent's own address
// (the per-source cap), do not stop a session of the genuine peer: at each
// cap the oldest idle connection is evicted, and the peer's handshakes take
// one round trip.
func TestPreAuthFloodDoesNotLockOutPeers(t *testing.T) {
	const preauthCap, perSource = 32, 16
	lim := Limits{MaxPreAuth: preauthCap, MaxPreAuthPerSource: perSource, PreAuthTimeout: 20 * time.Second}
	p := startPair(t, pairOptions{streams: 8, limitsB: lim}, echo)
	data := net.TCPAddrFromAddrPort(p.b.Addrs().Data)
	var conns []*net.TCPConn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	flood := func(src string, n int) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		for range n {
			c, err := d.Dial("tcp4", data.String())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c.(*net.TCPConn))
		}
	}
	for i := range 10 {
		flood("127.0.0."+strconv.Itoa(2+i), 30) // 300 from ten sources
	}
	flood("127.0.0.1", 40) // and from the peer's own address
	testsupport.Eventually(t, 30*time.Second, "the flood to be accepted", func() bool {
		return p.b.Stats().Totals.Rejected[rejectPreAuthEvicted] >= 300+40-preauthCap
	})
	if n := p.b.Stats().Totals.PreAuthActive; n > preauthCap {
		t.Errorf("%d unauthenticated connections held, cap %d", n, preauthCap)
	}
	roundTrip(t, p.entry, "accelerated despite the flood")
	testsupport.Eventually(t, 30*time.Second, "the session to complete", func() bool { return p.a.Stats().Totals.SessionsCompleted == 1 })
	if st := p.a.Stats().Totals; st.Fallbacks != 0 || st.SessionsAborted != 0 {
		t.Errorf("the genuine session was not accelerated: fallbacks %d, aborted %d", st.Fallbacks, st.SessionsAborted)
	}
}

// TestUnreachablePeerCarriesDirect: when the streams cannot be opened
// (here the far agent's data port is flooded faster than any handshake
// completes, then gone), the client's connection is carried direct instead
// of reset, and counted.
func TestUnreachablePeerCarriesDirect(t *testing.T) {
	p := startPair(t, pairOptions{streams: 4, limitsA: Limits{PreAuthTimeout: 2 * time.Second}}, echo)
	ctx := t.Context()
	if err := p.b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		roundTrip(t, p.entry, "direct "+string(rune('0'+i)))
	}
	st := p.a.Stats().Totals
	if st.Fallbacks != 3 {
		t.Errorf("fallbacks = %d, want 3", st.Fallbacks)
	}
	if p.server.accepted() != 3 {
		t.Errorf("server accepted %d", p.server.accepted())
	}
}

// TestHalfOpenSessionsBounded: a key holder announcing sessions of two
// streams and joining only stream 1 (a session starts on its stream 0,
// so without it the session gathers), over and over, holds at most the per-source
// bound of half-open sessions and their reserved memory; the agent-wide
// memory cap is never exceeded; genuine sessions from another source run.
func TestHalfOpenSessionsBounded(t *testing.T) {
	t.Parallel() // its own agents on loopback; mostly waiting on timeouts (see the Makefile's -parallel)
	const halfOpen = 4
	p := startPair(t, pairOptions{streams: 2, limitsB: Limits{MaxHalfOpenPerSource: halfOpen, PreAuthTimeout: 20 * time.Second}}, echo)
	var held []*net.TCPConn
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	refused := 0
	for range 3 * halfOpen {
		c, status := openHalfSession(t, p, "127.0.0.9")
		held = append(held, c)
		if status != stripe.StatusAccepted {
			if status != stripe.StatusSessionLimit {
				t.Fatalf("refusal %v", status)
			}
			refused++
			continue
		}
		testsupport.Eventually(t, 30*time.Second, "the half-open session", func() bool {
			return len(p.b.Stats().Sessions) == len(held)-refused
		})
	}
	if refused != 2*halfOpen {
		t.Errorf("refused %d half-open sessions, want %d", refused, 2*halfOpen)
	}
	st := p.b.Stats().Totals
	if want := int64(halfOpen) * stripe.SessionFootprint(2, 60000, stripe.InitialFrames(2, 60000)); st.MemoryReserved != want {
		t.Errorf("reserved %d bytes, want %d for %d half-open sessions", st.MemoryReserved, want, halfOpen)
	}
	roundTrip(t, p.entry, "genuine session beside the half-open ones")
}

// openHalfSession opens, from src, stream 1 of a new session of two
// streams and completes its handshake (the session then gathers,
// half-open, waiting for its stream 0); it returns the connection and the
// reply's status, the connection's handshake not completed when refused.
func openHalfSession(t *testing.T, p *pair, src string) (*net.TCPConn, stripe.Status) {
	t.Helper()
	return handshakeFrom(t, p, src, func(h *stripe.Hello) { h.Streams, h.Stream = 2, 1 })
}

// handshakeFrom runs, from src, a hello that set shapes at p's server
// side, confirming it when accepted; it returns the connection and the
// reply's status.
func handshakeFrom(t *testing.T, p *pair, src string, set func(h *stripe.Hello)) (*net.TCPConn, stripe.Status) {
	t.Helper()
	key, _ := stripe.NewHandshakeKey(testPSK)
	_, eph, hb := helloFrom(t, p, set)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	nc, err := d.Dial("tcp4", p.b.Addrs().Data.String())
	if err != nil {
		t.Fatal(err)
	}
	c := nc.(*net.TCPConn)
	_, _ = c.Write(hb[:])
	var rb [stripe.ReplySize]byte
	if _, err := io.ReadFull(c, rb[:]); err != nil {
		t.Fatal(err)
	}
	r, err := stripe.ParseReply(hb[:], rb[:], key)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != stripe.StatusAccepted {
		return c, r.Status
	}
	sec, err := stripe.Finish(key, eph, r.Ephemeral, hb[:], rb[:])
	if err != nil {
		t.Fatal(err)
	}
	cf := sec.Confirm()
	_, _ = c.Write(cf[:])
	return c, r.Status
}

// TestAgentMemoryCap: with room for one session only, a second concurrent
// one is refused by the server side's memory cap and carried direct.
func TestAgentMemoryCap(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	one := stripe.SessionFootprint(4, 60000, stripe.InitialFrames(4, 60000))
	p := startPair(t, pairOptions{streams: 4, limitsB: Limits{Memory: one + one/2}}, func(c *net.TCPConn) {
		buf := make([]byte, 64)
		n, _ := c.Read(buf)
		_, _ = c.Write(buf[:n])
		<-release
		_ = c.Close()
	})
	first := p.dial(t)
	defer first.Close()
	_, _ = first.Write([]byte("x"))
	if _, err := io.ReadFull(first, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	second := p.dial(t)
	defer second.Close()
	_, _ = second.Write([]byte("y"))
	if _, err := io.ReadFull(second, make([]byte, 1)); err != nil {
		t.Fatalf("second connection: %v", err)
	}
	if n := p.b.Stats().Totals.Rejected[rejectMemoryLimit]; n == 0 {
		t.Errorf("no memory refusal at the server side")
	}
	if st := p.b.Stats().Totals; st.MemoryReserved > st.MemoryLimit {
		t.Errorf("reserved %d above the cap %d", st.MemoryReserved, st.MemoryLimit)
	}
	if n := p.a.Stats().Totals.Fallbacks; n != 1 {
		t.Errorf("fallbacks %d, want 1", n)
	}
}

// FuzzAgentHandshake drives the whole handshake path of a real agent with
// key-holder hellos whose every field is fuzzed (MAC'd, so they pass
// authentication and reach admission), completes the handshake when the
// agent accepts, and then sends fuzzed frame bytes. Nothing may crash the
// agent, and it must serve a genuine session afterwards.
func FuzzAgentHandshake(f *testing.F) {
	var body [232]byte
	copy(body[:], "SOSt\x02\x01\x01\x00")
	f.Add(body[:], true, []byte{})
	overflow := body
	binary.BigEndian.PutUint16(overflow[186:], 8192)
	binary.BigEndian.PutUint32(overflow[188:], 16_777_184)
	binary.BigEndian.PutUint32(overflow[192:], 1<<29)
	f.Add(overflow[:], true, []byte("\x01\x00\x00\x00\xff\xff\xff\xff"))
	f.Add([]byte("SOSt\x01"), false, []byte{})
	f.Add([]byte("GET / HTTP/1.1\r\n"), false, []byte{})

	p := startPair(f, pairOptions{streams: 2, quiet: true}, echo)
	key, _ := stripe.NewHandshakeKey(testPSK)
	var iterations atomic.Int64
	f.Fuzz(func(t *testing.T, fields []byte, valid bool, after []byte) {
		iterations.Add(1)
		var b []byte
		var eph *stripe.Ephemeral
		if valid {
			// A well-formed frame of the fields: preamble, both names
			// those of the pair, our key, the rest fuzzed, MAC'd.
			var body [232]byte
			copy(body[:], fields)
			copy(body[:4], "SOSt")
			body[4] = stripe.Version
			body[8], body[72] = 7, 7
			copy(body[9:], "agent-a")
			copy(body[73:], "agent-b")
			var err error
			if eph, err = stripe.NewEphemeral(rand.Reader); err != nil {
				t.Fatal(err)
			}
			pub := eph.Public()
			copy(body[136:168], pub[:])
			hb := rawHello(testPSK, body)
			b = hb[:]
		} else {
			b = fields
		}
		c, rb, err := sendHello(t, p.b.Addrs().Data, b)
		defer c.Close()
		if err != nil || !valid {
			return
		}
		r, err := stripe.ParseReply(b, rb[:], key)
		if err != nil || r.Status != stripe.StatusAccepted {
			return
		}
		sec, err := stripe.Finish(key, eph, r.Ephemeral, b, rb[:])
		if err != nil {
			return
		}
		cf := sec.Confirm()
		_, _ = c.Write(append(cf[:], after...))
	})
	// Runs before the pair's own cleanups (which were registered first).
	f.Cleanup(func() {
		if iterations.Load() == 0 {
			return
		}
		if !testsupport.Poll(30*time.Second, func() bool { return p.b.Stats().Totals.PreAuthActive == 0 }) {
			f.Errorf("fuzzed connections still unauthenticated: %d", p.b.Stats().Totals.PreAuthActive)
		}
		c, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(p.entry))
		if err != nil {
			f.Errorf("dial after fuzzing: %v", err)
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		go func() { _, _ = c.Write([]byte("after fuzzing")); _ = c.CloseWrite() }()
		if got, err := io.ReadAll(c); err != nil || string(got) != "after fuzzing" {
			f.Errorf("agent does not serve after fuzzing: %q, %v", got, err)
		}
	})
}

package stripe

import (
	"bytes"
	"crypto/rand"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func poolHello() Hello {
	return Hello{Mode: ModeAESGCM, Initiator: "agent-clemson", Responder: "agent-utah", Pool: true}
}

// poolPair runs the handshake of a pooled stream (seed picks the
// initiator's ephemeral key) and returns both ends' bind state.
func poolPair(t testing.TB, seed byte) (ini, resp *PoolStream, iniSecrets *Secrets) {
	t.Helper()
	key := testKey(t)
	e := fixedEphemeral(t, seed)
	h := poolHello()
	h.Ephemeral = e.Public()
	hello, err := h.Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	r := Reply{Status: StatusAccepted, Ephemeral: responderEphemeral.Public()}
	reply := r.Marshal(hello[:], key)
	is, err := Finish(key, e, r.Ephemeral, hello[:], reply[:])
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Finish(key, responderEphemeral, h.Ephemeral, hello[:], reply[:])
	if err != nil {
		t.Fatal(err)
	}
	return is.PoolStream(), rs.PoolStream(), is
}

func fixedBind(stream uint16) Bind {
	b := Bind{
		Stream:      stream,
		Streams:     64,
		ChunkSize:   60000,
		QueueLength: 5,
		Client:      netip.MustParseAddrPort("10.10.1.1:40000"),
		Server:      netip.MustParseAddrPort("10.10.2.1:5201"),
	}
	for i := range b.Session {
		b.Session[i] = byte(0xa0 + i)
	}
	return b
}

func TestGoldenBind(t *testing.T) {
	h := poolHello()
	h.Ephemeral = initiatorEphemeral.Public()
	hello, err := h.Marshal(testKey(t))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "hello-pool", hello[:])
	if hello[7] != HelloPool || !bytes.Equal(hello[168:232], make([]byte, 64)) {
		t.Errorf("pooled hello: flags %#x, session fields % x", hello[7], hello[168:232])
	}

	ini, resp, secrets := poolPair(t, 0x10)
	body, bound, err := ini.NewBind(seedReader(0x40), fixedBind(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "bind-body", body[:])
	if !bytes.Equal(body[0:8], make([]byte, 8)) || body[8] != 0x40 || body[24] != 0xa0 ||
		!bytes.Equal(body[40:44], []byte{0, 0, 0, 64}) || !bytes.Equal(body[88:120], make([]byte, 32)) {
		t.Errorf("bind fields % x", body[:120])
	}
	golden(t, "bind-keys", append(append(bound.Keys.Up[:], bound.Keys.Down[:]...), bound.SessionKey[:]...))
	if _, got, err := resp.AcceptBind(body[:]); err != nil || got.Keys != bound.Keys || *got.SessionKey != *bound.SessionKey {
		t.Fatalf("responder: %+v %v", got, err)
	}

	// The pool codec (handshake keys, chunk size BindBodySize) seals only
	// BIND frames, numbered by generation.
	for _, mode := range []Mode{ModeAESGCM, ModeNone} {
		c, err := NewCodec(mode, &secrets.Keys, true, 0, BindBodySize)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, c.FrameBufferSize())
		copy(buf[HeaderSize:], body[:])
		frame, err := c.Seal(buf, FrameBind, ControlSeq(0), BindBodySize)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "frame-bind-"+mode.String(), frame)
	}
}

func TestBindRoundTrip(t *testing.T) {
	ini, resp, secrets := poolPair(t, 0x11)
	for _, mode := range []Mode{ModeAESGCM, ModeNone} {
		ic, err := NewCodec(mode, &secrets.Keys, true, 0, BindBodySize)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := NewCodec(mode, &secrets.Keys, false, 0, BindBodySize)
		if err != nil {
			t.Fatal(err)
		}
		gen := ini.Generation()
		body, bound, err := ini.NewBind(rand.Reader, fixedBind(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, ic.FrameBufferSize())
		copy(buf[HeaderSize:], body[:])
		frame, err := ic.Seal(buf, FrameBind, ControlSeq(gen), BindBodySize)
		if err != nil {
			t.Fatal(err)
		}
		h, plain, err := receive(rc, append([]byte(nil), frame...))
		if err != nil || h.Type != FrameBind || h.Seq != ControlSeq(gen) {
			t.Fatalf("%s: %+v %v", mode, h, err)
		}
		b, got, err := resp.AcceptBind(plain)
		if err != nil {
			t.Fatal(err)
		}
		want := fixedBind(0)
		want.Generation, want.Nonce = gen, b.Nonce
		if b != want || got.Keys != bound.Keys || *got.SessionKey != *bound.SessionKey {
			t.Errorf("%s: bind %+v, want %+v", mode, b, want)
		}
		if got.Keys == secrets.Keys {
			t.Errorf("bound keys are the pooled stream's handshake keys")
		}
	}
	c, err := NewCodec(ModeNone, &secrets.Keys, true, 0, BindBodySize)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, c.FrameBufferSize())
	if _, err := c.Seal(buf, FrameBind, ControlSeq(0), BindBodySize-1); !errors.Is(err, ErrFrame) {
		t.Errorf("short BIND sealed: %v", err)
	}
	// Sealing does not police the sequence space; parsing does.
	if _, err := c.Seal(buf, FrameBind, 3, BindBodySize); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseHeader(buf); !errors.Is(err, ErrFrame) {
		t.Errorf("BIND with a data sequence parsed: %v", err)
	}
	if FrameBind.String() != "BIND" || !FrameBind.Control() {
		t.Errorf("FrameBind: %s control %v", FrameBind, FrameBind.Control())
	}
}

// TestBindKeysPerSession binds the same pooled stream to two sessions in
// turn: each gets its own keys and session key, and neither is the
// stream's handshake keys.
func TestBindKeysPerSession(t *testing.T) {
	ini, resp, secrets := poolPair(t, 0x12)
	b1 := fixedBind(0)
	body1, k1, err := ini.NewBind(rand.Reader, b1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, r1, err := resp.AcceptBind(body1[:]); err != nil || r1.Keys != k1.Keys {
		t.Fatalf("first bind: %v", err)
	}
	// The same session id and shape again (the worst case): still new keys.
	body2, k2, err := ini.NewBind(rand.Reader, b1, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, r2, err := resp.AcceptBind(body2[:])
	if err != nil || r2.Keys != k2.Keys {
		t.Fatalf("second bind: %v", err)
	}
	keys := [][32]byte{k1.Keys.Up, k1.Keys.Down, *k1.SessionKey, k2.Keys.Up, k2.Keys.Down, *k2.SessionKey,
		secrets.Keys.Up, secrets.Keys.Down, secrets.SessionKey()}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if keys[i] == keys[j] {
				t.Errorf("keys %d and %d are equal", i, j)
			}
		}
	}
	// Even with the same nonce (a broken random source) the ratchet
	// makes the second session's keys differ.
	a, _, _ := poolPair(t, 0x13)
	_, x1, err := a.NewBind(seedReader(7), b1, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, x2, err := a.NewBind(seedReader(7), b1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if x1.Keys == x2.Keys || *x1.SessionKey == *x2.SessionKey {
		t.Errorf("a repeated nonce repeats the keys")
	}
}

func TestBindReplayRefused(t *testing.T) {
	ini, resp, _ := poolPair(t, 0x14)
	body, _, err := ini.NewBind(rand.Reader, fixedBind(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := resp.AcceptBind(body[:]); err != nil {
		t.Fatal(err)
	}
	// Replayed on the same stream: its generation is spent and the
	// stream's secret has ratcheted past the one that MAC'd it.
	if _, _, err := resp.AcceptBind(body[:]); !errors.Is(err, ErrMAC) || resp.Generation() != 1 {
		t.Errorf("replayed BIND on its stream: %v", err)
	}
	// Moved to another pooled stream: its MAC names the other transcript.
	_, other, _ := poolPair(t, 0x15)
	if _, _, err := other.AcceptBind(body[:]); !errors.Is(err, ErrMAC) {
		t.Errorf("BIND moved to another stream: %v", err)
	}
	// A refused bind does not advance: the genuine next bind still goes.
	next, _, err := ini.NewBind(rand.Reader, fixedBind(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := resp.AcceptBind(next[:]); err != nil {
		t.Errorf("the next bind after a refused replay: %v", err)
	}
	// Every single-bit change is refused.
	ini2, resp2, _ := poolPair(t, 0x16)
	good, _, err := ini2.NewBind(rand.Reader, fixedBind(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < BindBodySize; i++ {
		bad := good
		bad[i] ^= 0x01
		if _, _, err := resp2.AcceptBind(bad[:]); err == nil {
			t.Fatalf("BIND with byte %d altered accepted", i)
		}
	}
	if _, _, err := resp2.AcceptBind(good[:BindBodySize-1]); !errors.Is(err, ErrFrame) {
		t.Errorf("short BIND: %v", err)
	}
	if _, _, err := resp2.AcceptBind(good[:]); err != nil {
		t.Errorf("genuine BIND after the forgeries: %v", err)
	}
}

// TestBindJoinProof binds a second pooled stream into a session whose
// stream 0 was bound on a first: its proof is checked under the session
// key, and is good for that stream and generation only.
func TestBindJoinProof(t *testing.T) {
	i0, r0, _ := poolPair(t, 0x17)
	i1, r1, _ := poolPair(t, 0x18)
	_, b0, err := i0.NewBind(rand.Reader, fixedBind(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := i1.NewBind(rand.Reader, fixedBind(1), nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("BIND of stream 1 without a session key: %v", err)
	}
	body, bound, err := i1.NewBind(rand.Reader, fixedBind(1), b0.SessionKey)
	if err != nil {
		t.Fatal(err)
	}
	if bound.SessionKey != nil {
		t.Errorf("a bind of stream 1 yields a session key")
	}
	// The wrong stream's state refuses it outright (MAC).
	if _, _, err := r0.AcceptBind(body[:]); !errors.Is(err, ErrMAC) {
		t.Errorf("stream 1's bind on stream 0: %v", err)
	}
	b, got, err := r1.AcceptBind(body[:])
	if err != nil || got.Keys != bound.Keys {
		t.Fatalf("accept: %v", err)
	}
	if err := r1.VerifyBindProof(b0.SessionKey, &b); err != nil {
		t.Errorf("proof under the session key: %v", err)
	}
	wrong := *b0.SessionKey
	wrong[0] ^= 1
	if err := r1.VerifyBindProof(&wrong, &b); !errors.Is(err, ErrMAC) {
		t.Errorf("proof under another key: %v", err)
	}
	other := b
	other.Session[0] ^= 1
	if err := r1.VerifyBindProof(b0.SessionKey, &other); !errors.Is(err, ErrMAC) {
		t.Errorf("proof for another session: %v", err)
	}
	// A stream-0 bind carries no proof, and a proof is never accepted
	// for stream 0.
	zero := b
	zero.Stream = 0
	if err := r1.VerifyBindProof(b0.SessionKey, &zero); !errors.Is(err, ErrMAC) {
		t.Errorf("proof on stream 0: %v", err)
	}
}

func TestPoolHello(t *testing.T) {
	key := testKey(t)
	h := poolHello()
	h.Ephemeral = initiatorEphemeral.Public()
	b, err := h.Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseHello(b[:], key)
	if err != nil || got != h {
		t.Fatalf("pooled hello: %+v %v", got, err)
	}
	for name, mut := range map[string]func(*Hello){
		"session":   func(h *Hello) { h.Session[0] = 1 },
		"streams":   func(h *Hello) { h.Streams = 1 },
		"chunk":     func(h *Hello) { h.ChunkSize = 100 },
		"client":    func(h *Hello) { h.Client = netip.MustParseAddrPort("10.0.0.1:1") },
		"and join":  func(h *Hello) { h.Join = true },
		"queue len": func(h *Hello) { h.QueueLength = 1 },
	} {
		bad := h
		mut(&bad)
		if _, err := bad.Marshal(key); !errors.Is(err, ErrInvalid) {
			t.Errorf("pooled hello with %s: %v", name, err)
		}
	}
	// A session hello without the flag still needs its session fields.
	h.Pool = false
	if _, err := h.Marshal(key); !errors.Is(err, ErrInvalid) {
		t.Errorf("hello without session fields or pool flag: %v", err)
	}
	if got := StatusPoolRefused.String(); strings.HasPrefix(got, "status(") {
		t.Errorf("StatusPoolRefused has no name: %q", got)
	}
}

func FuzzAcceptBind(f *testing.F) {
	ini, _, _ := poolPair(f, 0x19)
	i1, _, _ := poolPair(f, 0x1a)
	b0, bound, err := ini.NewBind(seedReader(1), fixedBind(0), nil)
	if err != nil {
		f.Fatal(err)
	}
	b1, _, err := i1.NewBind(seedReader(2), fixedBind(1), bound.SessionKey)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b0[:])
	f.Add(b1[:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		_, resp, _ := poolPair(t, 0x19)
		b, got, err := resp.AcceptBind(body)
		if err != nil {
			if got != nil || resp.Generation() != 0 {
				t.Fatalf("refused bind changed state: %v", err)
			}
			return
		}
		// Only the genuine body authenticates.
		if !bytes.Equal(body, b0[:]) || got.Keys != bound.Keys || b.Stream != 0 || resp.Generation() != 1 {
			t.Fatalf("forged BIND accepted: % x", body)
		}
	})
}

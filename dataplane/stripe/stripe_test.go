package stripe

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var testPSK = []byte("0123456789abcdef0123456789abcdef")

func testKey(t testing.TB) *HandshakeKey {
	t.Helper()
	k, err := NewHandshakeKey(testPSK)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// seedReader is a deterministic source of "random" key material.
type seedReader byte

func (r seedReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r) + byte(i)
	}
	return len(p), nil
}

func fixedEphemeral(t testing.TB, seed byte) *Ephemeral {
	t.Helper()
	e, err := NewEphemeral(seedReader(seed))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func fixedHello() Hello {
	h := Hello{
		Mode:        ModeAESGCM,
		Initiator:   "agent-clemson",
		Responder:   "agent-utah",
		Stream:      3,
		Streams:     64,
		ChunkSize:   60000,
		QueueLength: 5,
		Client:      netip.MustParseAddrPort("10.10.1.1:40000"),
		Server:      netip.MustParseAddrPort("10.10.2.1:5201"),
	}
	for i := range h.Session {
		h.Session[i] = byte(0xa0 + i)
	}
	h.Ephemeral = initiatorEphemeral.Public()
	return h
}

var (
	initiatorEphemeral = mustEphemeral(0x10)
	responderEphemeral = mustEphemeral(0x80)
)

func mustEphemeral(seed byte) *Ephemeral {
	e, err := NewEphemeral(seedReader(seed))
	if err != nil {
		panic(err)
	}
	return e
}

// exchange runs the fixed handshake and returns its messages and both
// sides' secrets.
func exchange(t testing.TB, h Hello) (hello [HelloSize]byte, reply [ReplySize]byte, ini, resp *Secrets) {
	t.Helper()
	key := testKey(t)
	h.Ephemeral = initiatorEphemeral.Public()
	hello, err := h.Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	r := Reply{Status: StatusAccepted, Ephemeral: responderEphemeral.Public()}
	reply = r.Marshal(hello[:], key)
	if ini, err = Finish(key, initiatorEphemeral, r.Ephemeral, hello[:], reply[:]); err != nil {
		t.Fatal(err)
	}
	if resp, err = Finish(key, responderEphemeral, h.Ephemeral, hello[:], reply[:]); err != nil {
		t.Fatal(err)
	}
	return hello, reply, ini, resp
}

// golden compares got with testdata/name (hex, 32 bytes a line) or rewrites
// it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".hex")
	var sb strings.Builder
	for i := 0; i < len(got); i += 32 {
		sb.WriteString(hex.EncodeToString(got[i:min(i+32, len(got))]))
		sb.WriteByte('\n')
	}
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if string(want) != sb.String() {
		t.Errorf("%s differs from golden:\n got %s\nwant %s", name, sb.String(), want)
	}
}

func TestGoldenHandshake(t *testing.T) {
	h := fixedHello()
	hello, reply, ini, resp := exchange(t, h)
	golden(t, "hello", hello[:])

	// Field positions are part of the wire contract; check a few by hand
	// so the golden file cannot silently drift with the code.
	if string(hello[0:4]) != "SOSt" || hello[4] != 2 || hello[5] != 1 || hello[6] != 1 || hello[7] != 0 {
		t.Errorf("preamble % x", hello[:8])
	}
	if hello[8] != 13 || string(hello[9:22]) != "agent-clemson" || hello[22] != 0 {
		t.Errorf("initiator name % x", hello[8:24])
	}
	if hello[72] != 10 || string(hello[73:83]) != "agent-utah" {
		t.Errorf("responder name % x", hello[72:84])
	}
	if !bytes.Equal(hello[184:188], []byte{0, 3, 0, 64}) {
		t.Errorf("stream fields % x", hello[184:188])
	}
	if !bytes.Equal(hello[188:192], []byte{0, 0, 0xea, 0x60}) {
		t.Errorf("chunk size % x", hello[188:192])
	}
	if !bytes.Equal(hello[196:214], append(bytes.Repeat([]byte{0}, 10), 0xff, 0xff, 10, 10, 1, 1, 0x9c, 0x40)) {
		t.Errorf("client address % x", hello[196:214])
	}
	golden(t, "reply", reply[:])
	if reply[4] != 2 || reply[5] != 2 || reply[6] != 0 {
		t.Errorf("reply preamble % x", reply[:8])
	}
	confirm := ini.Confirm()
	golden(t, "confirm", confirm[:])
	if err := resp.VerifyConfirm(confirm[:]); err != nil {
		t.Errorf("responder refuses the initiator's confirm: %v", err)
	}
	golden(t, "stream-keys", append(ini.Keys.Up[:], ini.Keys.Down[:]...))
	if ini.Keys != resp.Keys {
		t.Errorf("the two sides derived different keys")
	}
	refusal := VersionRefusal()
	golden(t, "version-refusal", refusal[:])
}

func TestGoldenFrames(t *testing.T) {
	_, _, ini, _ := exchange(t, fixedHello())
	keys := ini.Keys
	for _, mode := range []Mode{ModeAESGCM, ModeNone} {
		c, err := NewCodec(mode, &keys, true, 3, 64)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, c.FrameBufferSize())
		n := copy(buf[HeaderSize:], "hello, striped world")
		data, err := c.Seal(buf, FrameData, 7, n)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "frame-data-"+mode.String(), data)

		PutFinBody(buf[HeaderSize:], 123456789)
		fin, err := c.Seal(buf, FrameFin, 42, FinBodySize)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "frame-fin-"+mode.String(), fin)

		n = PutAbortBody(buf[HeaderSize:], "stream 17: read: connection reset by peer")
		abort, err := c.Seal(buf, FrameAbort, AbortSeq, n)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "frame-abort-"+mode.String(), abort)

		PutCreditBody(buf[HeaderSize:], 12<<20)
		credit, err := c.Seal(buf, FrameCredit, ControlSeq(2), CreditBodySize)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "frame-credit-"+mode.String(), credit)
	}
}

// TestCreditRoundTrip seals CREDIT frames on one end and opens them on the
// other, in both modes, and checks the header rules of the control space.
func TestCreditRoundTrip(t *testing.T) {
	for _, mode := range []Mode{ModeAESGCM, ModeNone} {
		ini, resp := codecPair(t, mode, 1, 1000)
		buf := make([]byte, resp.FrameBufferSize())
		for i, credit := range []uint64{0, 1, 4 << 20, 1<<63 + 5} {
			PutCreditBody(buf[HeaderSize:], credit)
			frame, err := resp.Seal(buf, FrameCredit, ControlSeq(uint64(i)), CreditBodySize)
			if err != nil {
				t.Fatal(err)
			}
			frame = append([]byte(nil), frame...)
			h, err := ParseHeader(frame)
			if err != nil {
				t.Fatal(err)
			}
			plain, err := ini.Open(h, frame[:HeaderSize], frame[HeaderSize:])
			if err != nil {
				t.Fatal(err)
			}
			if got, err := ParseCreditBody(plain); err != nil || got != credit || h.Seq != ControlSeq(uint64(i)) {
				t.Fatalf("%s: credit %d seq %#x: got %d seq %#x, %v", mode, credit, ControlSeq(uint64(i)), got, h.Seq, err)
			}
		}
		if _, err := resp.Seal(buf, FrameCredit, ControlSeq(0), 7); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: CREDIT body of 7 bytes sealed: %v", mode, err)
		}
	}
	var hdr [HeaderSize]byte
	for _, c := range []struct {
		h  Header
		ok bool
	}{
		{Header{Type: FrameCredit, Length: 8, Seq: ControlSeq(0)}, true},
		{Header{Type: FrameCredit, Length: 8, Seq: 7}, false},
		{Header{Type: FrameCredit, Length: 8, Seq: AbortSeq}, false},
		{Header{Type: FrameData, Length: 8, Seq: ControlSeq(1)}, false},
		{Header{Type: FrameFin, Length: 8, Seq: ControlSeqBase}, false},
		{Header{Type: FrameData, Length: 8, Seq: ControlSeqBase - 1}, true},
		{Header{Type: FrameAck, Length: 8, Seq: ControlSeq(0)}, true},
		{Header{Type: FrameAck, Length: 8, Seq: 3}, false},
		{Header{Type: FrameJoin, Length: 32, Seq: 3}, false},
		{Header{Type: FrameAck, Flags: FlagRetransmit, Length: 8, Seq: ControlSeq(0)}, false},
		{Header{Type: FrameFin, Flags: FlagRetransmit, Length: 8, Seq: 9}, true},
		{Header{Type: FrameBind, Length: BindBodySize, Seq: ControlSeq(0)}, true},
		{Header{Type: FrameBind, Length: BindBodySize, Seq: 2}, false},
		{Header{Type: 8, Length: 8, Seq: ControlSeq(0)}, false},
	} {
		c.h.Put(hdr[:])
		if _, err := ParseHeader(hdr[:]); (err == nil) != c.ok {
			t.Errorf("%+v: err %v, want ok=%v", c.h, err, c.ok)
		}
	}
}

func TestCredits(t *testing.T) {
	const chunk = 1000
	c, err := NewCredits(2, chunk)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Frames(), uint64(InitialFrames(2, chunk)); got != want {
		t.Fatalf("initial frames %d, want %d", got, want)
	}
	accept := func(stream int, i, credit, sent uint64) (uint64, error) {
		return c.Accept(stream, ControlSeq(i), credit, sent)
	}
	if f, err := accept(0, 0, 10<<20, 0); err != nil || f != 10<<20/chunk {
		t.Fatalf("first credit: %d, %v", f, err)
	}
	// A smaller credit on another stream was overtaken: the limit stays.
	if f, err := accept(1, 0, 8<<20, 0); err != nil || f != 10<<20/chunk {
		t.Fatalf("overtaken credit: %d, %v", f, err)
	}
	if _, err := accept(0, 1, 9<<20, 0); !errors.Is(err, ErrCreditBackward) {
		t.Fatalf("backwards credit on a stream: %v", err)
	}
	c, _ = NewCredits(2, chunk)
	if _, err := accept(0, 1, 10<<20, 0); !errors.Is(err, ErrCreditOrder) {
		t.Fatalf("skipped control sequence: %v", err)
	}
	c, _ = NewCredits(2, chunk)
	if _, err := accept(0, 0, 10<<20, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := accept(0, 0, 11<<20, 0); !errors.Is(err, ErrCreditOrder) {
		t.Fatalf("replayed control sequence: %v", err)
	}
	c, _ = NewCredits(2, chunk)
	if _, err := accept(0, 0, MaxCreditAhead+5*chunk+1, 5); !errors.Is(err, ErrCreditAbsurd) {
		t.Fatalf("absurd credit: %v", err)
	}
	if _, err := accept(0, 0, MaxCreditAhead+5*chunk, 5); err != nil {
		t.Fatalf("largest credit refused: %v", err)
	}
	if _, err := accept(2, 0, 1, 0); err == nil {
		t.Fatal("credit on a stream out of range accepted")
	}
}

func TestInitialFrames(t *testing.T) {
	for _, c := range []struct{ streams, chunk, want int }{
		{1, 60000, 70},
		{4096, 60000, 4096},
		{1, 1, MaxWindowFrames},
		{8, 128 << 10, 32},
	} {
		if got := InitialFrames(c.streams, c.chunk); got != c.want {
			t.Errorf("InitialFrames(%d, %d) = %d, want %d", c.streams, c.chunk, got, c.want)
		}
	}
}

func TestHandshakeRoundTrip(t *testing.T) {
	key := testKey(t)
	long := strings.Repeat("n", MaxNameSize)
	cases := []Hello{
		fixedHello(),
		{Mode: ModeNone, Initiator: "a", Responder: "b", Stream: 0, Streams: 1, ChunkSize: 1, QueueLength: 0,
			Client: netip.MustParseAddrPort("[2001:db8::1]:1"), Server: netip.MustParseAddrPort("[2001:db8::2]:65535")},
		{Mode: ModeAESGCM, Initiator: long, Responder: "agent-ü", Stream: 65534, Streams: 65535, ChunkSize: MaxChunkSize, QueueLength: 1 << 31,
			Client: netip.MustParseAddrPort("192.0.2.1:0"), Server: netip.MustParseAddrPort("192.0.2.2:80")},
	}
	for _, h := range cases {
		h.Ephemeral = initiatorEphemeral.Public()
		b, err := h.Marshal(key)
		if err != nil {
			t.Fatalf("marshal %+v: %v", h, err)
		}
		got, err := ParseHello(b[:], key)
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		if got != h {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, h)
		}
		for st := StatusAccepted; st < statusCount; st++ {
			r := Reply{Status: st, Ephemeral: responderEphemeral.Public()}
			rb := r.Marshal(b[:], key)
			gotR, err := ParseReply(b[:], rb[:], key)
			if err != nil || gotR != r {
				t.Errorf("reply %v: got %+v, %v", st, gotR, err)
			}
		}
	}
}

func TestHandshakeRejects(t *testing.T) {
	key := testKey(t)
	other, err := NewHandshakeKey([]byte("another pre-shared key, 32 bytes"))
	if err != nil {
		t.Fatal(err)
	}
	h := fixedHello()
	b, _ := h.Marshal(key)

	if _, err := ParseHello(b[:], other); !errors.Is(err, ErrMAC) {
		t.Errorf("wrong PSK: %v", err)
	}
	for i := 8; i < HelloSize; i += 7 {
		bad := b
		bad[i] ^= 0x01
		if _, err := ParseHello(bad[:], key); !errors.Is(err, ErrMAC) {
			t.Errorf("flipped byte %d: %v", i, err)
		}
	}
	bad := b
	bad[0] = 'X'
	if _, err := ParseHello(bad[:], key); !errors.Is(err, ErrMagic) {
		t.Errorf("bad magic: %v", err)
	}
	bad = b
	bad[4] = 1
	if _, err := ParseHello(bad[:], key); !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "version 1") {
		t.Errorf("version 1: %v", err)
	}
	if _, err := ParseHello(b[:HelloSize-1], key); !errors.Is(err, ErrShort) {
		t.Errorf("short: %v", err)
	}

	r := Reply{Ephemeral: responderEphemeral.Public()}
	rb := r.Marshal(b[:], key)
	// A reply answers one hello only.
	h2 := fixedHello()
	h2.Stream = 4
	b2, _ := h2.Marshal(key)
	if _, err := ParseReply(b2[:], rb[:], key); !errors.Is(err, ErrMAC) {
		t.Errorf("reply for another hello: %v", err)
	}
	// A hello is not a reply and a reply not a hello, whatever the MAC: the
	// kinds differ, so a message cannot be reflected as the other.
	if _, err := ParseReply(b[:], b[:ReplySize], key); !errors.Is(err, ErrInvalid) {
		t.Errorf("hello bytes parsed as a reply: %v", err)
	}
	// An accepting reply must carry a key.
	noKey := Reply{Status: StatusAccepted}
	nk := noKey.Marshal(b[:], key)
	if _, err := ParseReply(b[:], nk[:], key); !errors.Is(err, ErrInvalid) {
		t.Errorf("accepting reply without a key: %v", err)
	}
	// A confirm binds the responder's fresh ephemeral: computed against one
	// reply, it fails against another.
	_, reply1, ini1, _ := exchange(t, h)
	c := ini1.Confirm()
	r2 := Reply{Ephemeral: mustEphemeral(0x33).Public()}
	rb2 := r2.Marshal(b[:], key)
	resp2, err := Finish(key, mustEphemeral(0x33), h.Ephemeral, b[:], rb2[:])
	if err != nil {
		t.Fatal(err)
	}
	if err := resp2.VerifyConfirm(c[:]); !errors.Is(err, ErrMAC) {
		t.Errorf("confirm replayed against a fresh reply: %v", err)
	}
	_ = reply1
	// Low-order points give no key.
	if _, err := Finish(key, initiatorEphemeral, PublicKey{}, b[:], rb[:]); !errors.Is(err, ErrInvalid) {
		t.Errorf("zero peer key: %v", err)
	}

	invalid := []func(*Hello){
		func(h *Hello) { h.Streams = 0; h.Stream = 0 },
		func(h *Hello) { h.Stream = h.Streams },
		func(h *Hello) { h.ChunkSize = 0 },
		func(h *Hello) { h.ChunkSize = MaxChunkSize + 1 },
		func(h *Hello) { h.Mode = 7 },
		func(h *Hello) { h.Client = netip.AddrPort{} },
		func(h *Hello) { h.Server = netip.MustParseAddrPort("[2001:db8::2]:80") },
		func(h *Hello) { h.Initiator = "" },
		func(h *Hello) { h.Responder = strings.Repeat("x", MaxNameSize+1) },
		func(h *Hello) { h.Responder = "bad\x00name" },
		func(h *Hello) { h.Ephemeral = PublicKey{} },
	}
	for i, mutate := range invalid {
		h := fixedHello()
		mutate(&h)
		if _, err := h.Marshal(key); !errors.Is(err, ErrInvalid) {
			t.Errorf("invalid hello %d marshalled: %v", i, err)
		}
	}
	if _, err := NewHandshakeKey([]byte("short")); !errors.Is(err, ErrPSKTooShort) {
		t.Errorf("short PSK: %v", err)
	}
}

func TestVersionRefusal(t *testing.T) {
	r := VersionRefusal()
	if !IsVersionRefusal(r[:]) {
		t.Fatal("VersionRefusal is not recognised")
	}
	// A version 1 initiator reads a 72-byte reply and checks magic and
	// version first: it must find version 2 there.
	if len(r) != 72 || string(r[:4]) != "SOSt" || r[4] != 2 {
		t.Errorf("refusal % x is not readable by a version 1 peer", r[:8])
	}
	if v, err := PeekVersion([]byte("SOSt\x01\x01\x01\x00")); v != 1 || !errors.Is(err, ErrVersion) {
		t.Errorf("PeekVersion of a v1 hello: %d, %v", v, err)
	}
	if _, err := PeekVersion([]byte("GET / HT")); !errors.Is(err, ErrMagic) {
		t.Errorf("PeekVersion of HTTP: %v", err)
	}
}

func TestStreamKeysDiffer(t *testing.T) {
	// Every stream has its own ephemeral exchange; even with every other
	// input equal, fresh ephemerals give fresh keys, and the two
	// directions never share one.
	key := testKey(t)
	h := fixedHello()
	b, _ := h.Marshal(key)
	seen := map[[32]byte]bool{}
	for seed := range byte(4) {
		e := mustEphemeral(0x40 + seed)
		r := Reply{Ephemeral: e.Public()}
		rb := r.Marshal(b[:], key)
		s, err := Finish(key, e, h.Ephemeral, b[:], rb[:])
		if err != nil {
			t.Fatal(err)
		}
		for _, part := range [][32]byte{s.Keys.Up, s.Keys.Down} {
			if seen[part] {
				t.Fatalf("key repeated across streams or directions")
			}
			seen[part] = true
		}
	}
	// The PSK is mixed in: the same exchange under another PSK differs.
	other, _ := NewHandshakeKey([]byte("another pre-shared key, 32 bytes"))
	r := Reply{Ephemeral: responderEphemeral.Public()}
	rb := r.Marshal(b[:], key)
	s1, _ := Finish(key, responderEphemeral, h.Ephemeral, b[:], rb[:])
	s2, _ := Finish(other, responderEphemeral, h.Ephemeral, b[:], rb[:])
	if s1.Keys == s2.Keys {
		t.Fatal("stream keys do not depend on the PSK")
	}
}

func codecPair(t testing.TB, mode Mode, stream uint16, chunk int) (initiator, responder *Codec) {
	t.Helper()
	h := fixedHello()
	h.Stream = stream
	_, _, ini, _ := exchange(t, h)
	keys := ini.Keys
	var err error
	if initiator, err = NewCodec(mode, &keys, true, stream, chunk); err != nil {
		t.Fatal(err)
	}
	if responder, err = NewCodec(mode, &keys, false, stream, chunk); err != nil {
		t.Fatal(err)
	}
	return initiator, responder
}

// receive decodes one frame the way the relay does: header, check, body.
func receive(c *Codec, frame []byte) (Header, []byte, error) {
	h, err := ParseHeader(frame)
	if err != nil {
		return h, nil, err
	}
	if err := c.CheckHeader(h); err != nil {
		return h, nil, err
	}
	if len(frame) != HeaderSize+int(h.Length) {
		return h, nil, ErrFrame
	}
	plain, err := c.Open(h, frame[:HeaderSize], frame[HeaderSize:])
	return h, plain, err
}

func TestFrameRoundTrip(t *testing.T) {
	for _, mode := range []Mode{ModeAESGCM, ModeNone} {
		ini, resp := codecPair(t, mode, 9, 1000)
		for _, dir := range []struct {
			name     string
			from, to *Codec
		}{{"up", ini, resp}, {"down", resp, ini}} {
			buf := make([]byte, ini.FrameBufferSize())
			for _, n := range []int{1, 17, 999, 1000} {
				want := bytes.Repeat([]byte{byte(n)}, n)
				copy(buf[HeaderSize:], want)
				frame, err := dir.from.Seal(buf, FrameData, uint64(n)*3, n)
				if err != nil {
					t.Fatal(err)
				}
				h, plain, err := receive(dir.to, append([]byte(nil), frame...))
				if err != nil {
					t.Fatalf("%s %s n=%d: %v", mode, dir.name, n, err)
				}
				if h.Type != FrameData || h.Seq != uint64(n)*3 || h.Stream != 9 || !bytes.Equal(plain, want) {
					t.Fatalf("%s %s n=%d: got %+v %q", mode, dir.name, n, h, plain)
				}
			}
			PutFinBody(buf[HeaderSize:], 1<<40+5)
			frame, _ := dir.from.Seal(buf, FrameFin, 77, FinBodySize)
			_, plain, err := receive(dir.to, append([]byte(nil), frame...))
			if err != nil {
				t.Fatal(err)
			}
			if total, err := ParseFinBody(plain); err != nil || total != 1<<40+5 {
				t.Fatalf("fin: %d %v", total, err)
			}
			n := PutAbortBody(buf[HeaderSize:], "stall \x00\xff")
			frame, _ = dir.from.Seal(buf, FrameAbort, AbortSeq, n)
			_, plain, err = receive(dir.to, append([]byte(nil), frame...))
			if err != nil {
				t.Fatal(err)
			}
			if got := ParseAbortBody(plain); got != "stall ??" {
				t.Fatalf("abort reason %q", got)
			}
		}
	}
}

func TestFrameRejects(t *testing.T) {
	ini, resp := codecPair(t, ModeAESGCM, 2, 100)
	_, other := codecPair(t, ModeAESGCM, 5, 100)
	buf := make([]byte, ini.FrameBufferSize())
	copy(buf[HeaderSize:], "payload")
	frame, err := ini.Seal(buf, FrameData, 10, 7)
	if err != nil {
		t.Fatal(err)
	}
	frame = append([]byte(nil), frame...)

	for i := range frame {
		bad := append([]byte(nil), frame...)
		bad[i] ^= 0x80
		if _, _, err := receive(resp, bad); err == nil {
			t.Errorf("byte %d flipped and accepted", i)
		}
	}
	// The same frame on another stream fails: its index and its key differ.
	if _, _, err := receive(other, append([]byte(nil), frame...)); !errors.Is(err, ErrFrame) {
		t.Errorf("cross-stream: %v", err)
	}
	relabelled := append([]byte(nil), frame...)
	relabelled[3] = 5
	if _, _, err := receive(other, relabelled); !errors.Is(err, ErrOpen) {
		t.Errorf("cross-stream with rewritten index: %v", err)
	}
	// A frame sealed for one direction does not open in the other.
	back := append([]byte(nil), frame...)
	if _, _, err := receive(ini, back); !errors.Is(err, ErrOpen) {
		t.Errorf("reflected frame: %v", err)
	}

	headers := []Header{
		{Type: 0, Stream: 2, Length: 20, Seq: 1},
		{Type: 4, Stream: 2, Length: 20, Seq: 1},
		{Type: FrameData, Flags: 2, Stream: 2, Length: 20, Seq: 1},
		{Type: FrameCredit, Flags: FlagRetransmit, Stream: 2, Length: 8, Seq: ControlSeq(0)},
		{Type: 8, Stream: 2, Length: 20, Seq: ControlSeq(0)},
		{Type: FrameAbort, Stream: 2, Length: 20, Seq: 1},
		{Type: FrameData, Stream: 2, Length: 20, Seq: AbortSeq},
	}
	for _, h := range headers {
		var b [HeaderSize]byte
		h.Put(b[:])
		if _, err := ParseHeader(b[:]); !errors.Is(err, ErrFrame) {
			t.Errorf("header %+v: %v", h, err)
		}
	}
	lengths := []Header{
		{Type: FrameData, Stream: 2, Length: TagSize, Seq: 1},
		{Type: FrameData, Stream: 2, Length: 101 + TagSize, Seq: 1},
		{Type: FrameFin, Stream: 2, Length: 7 + TagSize, Seq: 1},
		{Type: FrameAbort, Stream: 2, Length: MaxAbortReason + 1 + TagSize, Seq: AbortSeq},
		{Type: FrameData, Stream: 2, Length: 3, Seq: 1},
		{Type: FrameData, Stream: 3, Length: 50, Seq: 1},
	}
	for _, h := range lengths {
		if err := resp.CheckHeader(h); !errors.Is(err, ErrFrame) {
			t.Errorf("CheckHeader %+v: %v", h, err)
		}
	}
	if _, err := ini.Seal(buf[:HeaderSize+50], FrameData, 1, 50); err == nil {
		t.Error("sealed into a buffer without room for the tag")
	}
	if _, err := ini.Seal(buf, FrameData, 1, 0); err == nil {
		t.Error("sealed an empty DATA frame")
	}
}

func TestFrameBufferHoldsFinForTinyChunks(t *testing.T) {
	for _, mode := range []Mode{ModeAESGCM, ModeNone} {
		ini, resp := codecPair(t, mode, 0, 1)
		buf := make([]byte, ini.FrameBufferSize())
		PutFinBody(buf[HeaderSize:], 5)
		frame, err := ini.Seal(buf, FrameFin, 5, FinBodySize)
		if err != nil {
			t.Fatalf("%s: FIN does not fit a 1-byte-chunk buffer: %v", mode, err)
		}
		if _, _, err := receive(resp, append([]byte(nil), frame...)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAbortReasonTruncatesOnRuneBoundary(t *testing.T) {
	reason := strings.Repeat("é", MaxAbortReason) // two bytes each
	b := make([]byte, 2*MaxAbortReason)
	n := PutAbortBody(b, reason)
	if n > MaxAbortReason || n%2 != 0 {
		t.Fatalf("truncated to %d bytes", n)
	}
	if got := ParseAbortBody(b[:n]); got != strings.Repeat("é", n/2) {
		t.Fatalf("reason %q", got)
	}
}

func TestSealDoesNotAllocate(t *testing.T) {
	ini, resp := codecPair(t, ModeAESGCM, 0, 60000)
	buf := make([]byte, ini.FrameBufferSize())
	seq := uint64(0)
	allocs := testing.AllocsPerRun(100, func() {
		frame, err := ini.Seal(buf, FrameData, seq, 60000)
		if err != nil {
			t.Fatal(err)
		}
		h, _ := ParseHeader(frame)
		if _, err := resp.Open(h, frame[:HeaderSize], frame[HeaderSize:]); err != nil {
			t.Fatal(err)
		}
		seq++
	})
	if allocs != 0 {
		t.Errorf("seal+open allocates %.1f times per frame", allocs)
	}
}

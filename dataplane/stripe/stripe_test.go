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

func fixedHello() Hello {
	h := Hello{
		Mode:        ModeAESGCM,
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
	for i := range h.Nonce {
		h.Nonce[i] = byte(i)
	}
	return h
}

func fixedReplyNonce() Nonce {
	var n Nonce
	for i := range n {
		n[i] = byte(0xff - i)
	}
	return n
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
	key := testKey(t)
	h := fixedHello()
	hello, err := h.Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "hello", hello[:])

	// Field positions are part of the wire contract; check a few by hand
	// so the golden file cannot silently drift with the code.
	if string(hello[0:4]) != "SOSt" || hello[4] != 1 || hello[5] != 1 {
		t.Errorf("preamble % x", hello[:6])
	}
	if !bytes.Equal(hello[6:10], []byte{0, 3, 0, 64}) {
		t.Errorf("stream fields % x", hello[6:10])
	}
	if !bytes.Equal(hello[12:16], []byte{0, 0, 0xea, 0x60}) {
		t.Errorf("chunk size % x", hello[12:16])
	}
	if !bytes.Equal(hello[36:54], append(bytes.Repeat([]byte{0}, 10), 0xff, 0xff, 10, 10, 1, 1, 0x9c, 0x40)) {
		t.Errorf("client address % x", hello[36:54])
	}

	r := Reply{Status: StatusAccepted, Nonce: fixedReplyNonce()}
	reply := r.Marshal(hello[:], key)
	golden(t, "reply", reply[:])
	confirm := Confirm(hello[:], reply[:], key)
	golden(t, "confirm", confirm[:])

	keys, err := DeriveStreamKeys(key, &h, r.Nonce)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "stream-keys", append(keys.Up[:], keys.Down[:]...))
}

func TestGoldenFrames(t *testing.T) {
	key := testKey(t)
	h := fixedHello()
	keys, err := DeriveStreamKeys(key, &h, fixedReplyNonce())
	if err != nil {
		t.Fatal(err)
	}
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
	}
}

func TestHandshakeRoundTrip(t *testing.T) {
	key := testKey(t)
	cases := []Hello{
		fixedHello(),
		{Mode: ModeNone, Stream: 0, Streams: 1, ChunkSize: 1, QueueLength: 1,
			Client: netip.MustParseAddrPort("[2001:db8::1]:1"), Server: netip.MustParseAddrPort("[2001:db8::2]:65535")},
		{Mode: ModeAESGCM, Stream: 65534, Streams: 65535, ChunkSize: MaxChunkSize, QueueLength: 1 << 31,
			Client: netip.MustParseAddrPort("192.0.2.1:0"), Server: netip.MustParseAddrPort("192.0.2.2:80")},
	}
	for _, h := range cases {
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
			r := Reply{Status: st, Nonce: fixedReplyNonce()}
			rb := r.Marshal(b[:], key)
			gotR, err := ParseReply(b[:], rb[:], key)
			if err != nil || gotR != r {
				t.Errorf("reply %v: got %+v, %v", st, gotR, err)
			}
			c := Confirm(b[:], rb[:], key)
			if err := VerifyConfirm(b[:], rb[:], c[:], key); err != nil {
				t.Errorf("confirm: %v", err)
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
	for i := 5; i < HelloSize; i += 7 {
		bad := b
		bad[i] ^= 0x01
		if _, err := ParseHello(bad[:], key); !errors.Is(err, ErrMAC) {
			t.Errorf("flipped byte %d: %v", i, err)
		}
	}
	bad := b
	bad[0] = 'X'
	if _, err := ParseHello(bad[:], key); !errors.Is(err, ErrMAC) && !errors.Is(err, ErrMagic) {
		t.Errorf("bad magic: %v", err)
	}
	if _, err := ParseHello(b[:HelloSize-1], key); !errors.Is(err, ErrShort) {
		t.Errorf("short: %v", err)
	}

	r := Reply{Nonce: fixedReplyNonce()}
	rb := r.Marshal(b[:], key)
	// A reply answers one hello only.
	h2 := fixedHello()
	h2.Stream = 4
	b2, _ := h2.Marshal(key)
	if _, err := ParseReply(b2[:], rb[:], key); !errors.Is(err, ErrMAC) {
		t.Errorf("reply for another hello: %v", err)
	}
	// A confirm binds the responder's fresh nonce.
	c := Confirm(b[:], rb[:], key)
	r2 := Reply{Nonce: Nonce{1}}
	rb2 := r2.Marshal(b[:], key)
	if err := VerifyConfirm(b[:], rb2[:], c[:], key); !errors.Is(err, ErrMAC) {
		t.Errorf("confirm replayed against a fresh reply: %v", err)
	}

	invalid := []func(*Hello){
		func(h *Hello) { h.Streams = 0; h.Stream = 0 },
		func(h *Hello) { h.Stream = h.Streams },
		func(h *Hello) { h.ChunkSize = 0 },
		func(h *Hello) { h.ChunkSize = MaxChunkSize + 1 },
		func(h *Hello) { h.QueueLength = 0 },
		func(h *Hello) { h.Mode = 7 },
		func(h *Hello) { h.Client = netip.AddrPort{} },
		func(h *Hello) { h.Server = netip.MustParseAddrPort("[2001:db8::2]:80") },
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

func TestStreamKeysDiffer(t *testing.T) {
	key := testKey(t)
	h := fixedHello()
	k1, _ := DeriveStreamKeys(key, &h, fixedReplyNonce())
	h.Stream = 4
	k2, _ := DeriveStreamKeys(key, &h, fixedReplyNonce())
	h = fixedHello()
	h.Session[0] ^= 1
	k3, _ := DeriveStreamKeys(key, &h, fixedReplyNonce())
	h = fixedHello()
	k4, _ := DeriveStreamKeys(key, &h, Nonce{})
	seen := map[[32]byte]bool{}
	for _, k := range []StreamKeys{k1, k2, k3, k4} {
		for _, part := range [][32]byte{k.Up, k.Down} {
			if seen[part] {
				t.Fatalf("key repeated across stream, session, nonce or direction")
			}
			seen[part] = true
		}
	}
}

func codecPair(t testing.TB, mode Mode, stream uint16, chunk int) (initiator, responder *Codec) {
	t.Helper()
	key := testKey(t)
	h := fixedHello()
	h.Stream = stream
	keys, err := DeriveStreamKeys(key, &h, fixedReplyNonce())
	if err != nil {
		t.Fatal(err)
	}
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
		{Type: FrameData, Flags: 1, Stream: 2, Length: 20, Seq: 1},
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

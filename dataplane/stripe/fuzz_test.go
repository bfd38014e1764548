package stripe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func FuzzParseHello(f *testing.F) {
	key := testKey(f)
	h := fixedHello()
	b, _ := h.Marshal(key)
	f.Add(b[:])
	f.Add(b[:HelloSize-1])
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add(make([]byte, HelloSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseHello(data, key)
		if err != nil {
			return
		}
		// Anything accepted must re-encode to the same bytes: the parser
		// reads no field the MAC did not cover.
		again, err := got.Marshal(key)
		if err != nil {
			t.Fatalf("accepted hello does not re-marshal: %v", err)
		}
		if !bytes.Equal(again[:], data) {
			t.Fatalf("accepted hello re-encodes differently")
		}
	})
}

func FuzzParseReply(f *testing.F) {
	key := testKey(f)
	h := fixedHello()
	hello, _ := h.Marshal(key)
	r := Reply{Status: StatusSessionLimit}
	rb := r.Marshal(hello[:], key)
	f.Add(rb[:])
	ok := Reply{Status: StatusAccepted, Ephemeral: responderEphemeral.Public()}
	okb := ok.Marshal(hello[:], key)
	f.Add(okb[:])
	refusal := VersionRefusal()
	f.Add(refusal[:])
	f.Add(rb[:10])
	f.Add(make([]byte, ReplySize))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseReply(hello[:], data, key)
		if err != nil {
			return
		}
		if again := got.Marshal(hello[:], key); !bytes.Equal(again[:], data) {
			t.Fatalf("accepted reply re-encodes differently")
		}
		if got.Status != StatusAccepted {
			return
		}
		// An accepted reply runs the key agreement without panicking; a
		// key the curve refuses is an error, not a crash.
		if s, err := Finish(key, initiatorEphemeral, got.Ephemeral, hello[:], data); err == nil {
			c := s.Confirm()
			if err := s.VerifyConfirm(c[:]); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func FuzzVerifyConfirm(f *testing.F) {
	_, _, ini, resp := exchange(f, fixedHello())
	c := ini.Confirm()
	f.Add(c[:])
	f.Add(c[:5])
	f.Fuzz(func(t *testing.T, data []byte) {
		err := resp.VerifyConfirm(data)
		if (err == nil) != bytes.Equal(data, c[:]) {
			t.Fatalf("confirm %x accepted=%v", data, err == nil)
		}
	})
}

// FuzzFrame feeds arbitrary bytes to the receive path of a stream in both
// modes: header parse, header check, open. It must never panic, and in
// AES-GCM mode nothing but an untouched sealed frame may open.
func FuzzFrame(f *testing.F) {
	ini, resp := codecPair(f, ModeAESGCM, 2, 256)
	iniPlain, respPlain := codecPair(f, ModeNone, 2, 256)
	buf := make([]byte, ini.FrameBufferSize())
	copy(buf[HeaderSize:], "some payload")
	seal := func(c *Codec, typ FrameType, seq uint64, n int) []byte {
		frame, err := c.Seal(buf, typ, seq, n)
		if err != nil {
			f.Fatal(err)
		}
		return append([]byte(nil), frame...)
	}
	sealed := seal(ini, FrameData, 5, 12)
	PutFinBody(buf[HeaderSize:], 99)
	fin := seal(ini, FrameFin, 6, FinBodySize)
	abort := seal(ini, FrameAbort, AbortSeq, PutAbortBody(buf[HeaderSize:], "bye"))
	PutCreditBody(buf[HeaderSize:], 1<<30)
	credit := seal(ini, FrameCredit, ControlSeq(3), CreditBodySize)
	PutCreditBody(buf[HeaderSize:], 77)
	for _, frame := range [][]byte{sealed, fin, abort, credit, seal(iniPlain, FrameData, 1, 3), seal(iniPlain, FrameCredit, ControlSeq(0), CreditBodySize)} {
		f.Add(frame)
	}
	f.Add([]byte{1, 0, 0, 2, 0, 0, 0, 0})

	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range []*Codec{resp, respPlain} {
			h, err := ParseHeader(data)
			if err != nil {
				continue
			}
			if err := c.CheckHeader(h); err != nil {
				continue
			}
			if h.Length > uint32(len(data)-HeaderSize) {
				continue
			}
			frame := append([]byte(nil), data[:HeaderSize+int(h.Length)]...)
			out, err := c.Open(h, frame[:HeaderSize], frame[HeaderSize:])
			if err != nil {
				continue
			}
			switch h.Type {
			case FrameFin:
				if _, err := ParseFinBody(out); err != nil {
					t.Fatalf("opened FIN with bad body: %v", err)
				}
			case FrameAbort:
				_ = ParseAbortBody(out)
			case FrameCredit:
				if _, err := ParseCreditBody(out); err != nil {
					t.Fatalf("opened CREDIT with bad body: %v", err)
				}
			}
			if c == resp {
				want := map[uint64][]byte{5: sealed, 6: fin, AbortSeq: abort, ControlSeq(3): credit}[h.Seq]
				if !bytes.Equal(data[:HeaderSize+int(h.Length)], want) {
					t.Fatalf("forged frame opened: % x", data)
				}
			}
		}
	})
}

// FuzzReassembler drives a reassembler with arbitrary inserts and advances:
// it must never panic, never hold more than window+streams frames and never
// deliver out of order.
func FuzzReassembler(f *testing.F) {
	f.Add([]byte{3, 2, 0, 0, 0, 1, 1, 0, 2, 5})
	f.Add([]byte{1, 1, 0, 0, 1, 0, 2, 0, 3, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		streams, window := 1+int(data[0]%8), 1+int(data[1]%16)
		r, err := NewReassembler[uint64](streams, window)
		if err != nil {
			t.Fatal(err)
		}
		next := uint64(0)
		for data = data[2:]; len(data) >= 3; data = data[3:] {
			op, arg := data[0], binary.BigEndian.Uint16(data[1:])
			if op%4 == 0 {
				next = deliverInOrder(t, r, int(arg%8), next)
				continue
			}
			s := int(op) % streams
			seq := next + uint64(arg%64)
			err := r.Insert(s, seq, op%7 == 0, seq)
			if err != nil && !errors.Is(err, ErrReplay) && !errors.Is(err, ErrStale) &&
				!errors.Is(err, ErrDuplicate) && !errors.Is(err, ErrAfterFin) && !errors.Is(err, ErrPaused) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			if r.Depth() > window+streams {
				t.Fatalf("depth %d > %d", r.Depth(), window+streams)
			}
		}
	})
}

// FuzzCredits feeds arbitrary CREDIT frames (stream, control index,
// credit, frames sent) to the sender's credit rules: they must never
// panic, the limit never goes backwards, and it never runs further ahead
// of what was sent than MaxCreditAhead allows.
func FuzzCredits(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		const chunk = 4096
		c, err := NewCredits(3, chunk)
		if err != nil {
			t.Fatal(err)
		}
		limit := c.Frames()
		for ; len(data) >= 18; data = data[18:] {
			stream := int(data[0] % 4)
			idx := uint64(data[1]) % 4
			credit := binary.BigEndian.Uint64(data[2:])
			sent := binary.BigEndian.Uint64(data[10:]) % (1 << 40)
			got, err := c.Accept(stream, ControlSeq(idx), credit, sent)
			if err != nil {
				if c.Frames() != limit {
					t.Fatalf("refused credit moved the limit")
				}
				continue
			}
			if got < limit {
				t.Fatalf("limit went back from %d to %d", limit, got)
			}
			if got > limit && got*chunk > sent*chunk+MaxCreditAhead {
				t.Fatalf("limit %d frames with %d sent", got, sent)
			}
			limit = got
		}
	})
}

// FuzzReassemblerGrow interleaves inserts, deliveries and window growth.
func FuzzReassemblerGrow(f *testing.F) {
	f.Add([]byte{2, 1, 1, 0, 3, 3, 0, 5, 0, 0, 2, 1, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		streams, window := 1+int(data[0]%4), 1+int(data[1]%8)
		r, err := NewReassembler[uint64](streams, window)
		if err != nil {
			t.Fatal(err)
		}
		next := uint64(0)
		for data = data[2:]; len(data) >= 3; data = data[3:] {
			op, arg := data[0], uint64(data[1])<<8|uint64(data[2])
			switch op % 5 {
			case 0:
				next = deliverInOrder(t, r, int(arg%8), next)
			case 1:
				window += int(arg % 16)
				if err := r.Grow(window, func(s int) {
					if !r.CanRead(s) {
						t.Fatalf("woke stream %d that cannot be read", s)
					}
				}); err != nil {
					t.Fatal(err)
				}
			default:
				s := int(op) % streams
				seq := next + arg%32
				_ = r.Insert(s, seq, false, seq)
				if r.Depth() > window+streams {
					t.Fatalf("depth %d > %d", r.Depth(), window+streams)
				}
			}
		}
	})
}

// deliverInOrder takes up to n ready items from r, checking that they are
// next, next+1, ... in order, advances past them and returns the new next.
func deliverInOrder(t *testing.T, r *Reassembler[uint64], n int, next uint64) uint64 {
	t.Helper()
	run := 0
	for run < n {
		got, _, ok := r.Ready(run)
		if !ok {
			break
		}
		if got != next+uint64(run) {
			t.Fatalf("ready %d at %d", got, next+uint64(run))
		}
		run++
	}
	if err := r.Advance(run, nil); err != nil {
		t.Fatal(err)
	}
	return next + uint64(run)
}

// FuzzHelloInitiator: reading the initiator's name of an unauthenticated
// hello never panics, and a name it returns is one a hello may carry.
func FuzzHelloInitiator(f *testing.F) {
	key := testKey(f)
	h := fixedHello()
	b, _ := h.Marshal(key)
	f.Add(b[:])
	f.Add(make([]byte, HelloSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		name, err := HelloInitiator(data)
		if err != nil {
			return
		}
		if !validName(name) {
			t.Fatalf("HelloInitiator returned the invalid name %q", name)
		}
	})
}

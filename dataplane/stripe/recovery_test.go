package stripe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// TestGoldenRecoveryFrames pins ACK, JOIN and a retransmitted DATA frame,
// and the session key and join proof of the fixed handshake.
func TestGoldenRecoveryFrames(t *testing.T) {
	_, _, ini, resp := exchange(t, fixedHello())
	key := ini.SessionKey()
	if key != resp.SessionKey() {
		t.Fatal("the two ends derive different session keys")
	}
	golden(t, "session-key", key[:])
	proof := ini.JoinProof(&key, fixedHello().Session)
	golden(t, "join-proof", proof[:])
	keys := ini.Keys
	for _, mode := range []Mode{ModeAESGCM, ModeNone} {
		c, err := NewCodec(mode, &keys, true, 3, 64)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, c.FrameBufferSize())
		PutAckBody(buf[HeaderSize:], 4242)
		ack, err := c.Seal(buf, FrameAck, ControlSeq(5), AckBodySize)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "frame-ack-"+mode.String(), ack)

		copy(buf[HeaderSize:], proof[:])
		join, err := c.Seal(buf, FrameJoin, ControlSeq(0), JoinBodySize)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "frame-join-"+mode.String(), join)

		n := copy(buf[HeaderSize:], "hello, striped world")
		data, err := c.SealFlags(buf, FrameData, FlagRetransmit, 7, n)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "frame-data-retransmit-"+mode.String(), data)
	}
}

// TestRecoveryRoundTrip seals ACK, JOIN and retransmitted frames on one
// end and opens them on the other; Unseal gives back the plaintext a
// sender resends on another stream.
func TestRecoveryRoundTrip(t *testing.T) {
	for _, mode := range []Mode{ModeAESGCM, ModeNone} {
		ini, resp := codecPair(t, mode, 1, 1000)
		other, _ := codecPair(t, mode, 2, 1000)
		buf := make([]byte, ini.FrameBufferSize())
		for i, v := range []uint64{0, 1, 1 << 40} {
			PutAckBody(buf[HeaderSize:], v)
			frame, err := resp.Seal(buf, FrameAck, ControlSeq(uint64(i)), AckBodySize)
			if err != nil {
				t.Fatal(err)
			}
			h, plain, err := receive(ini, append([]byte(nil), frame...))
			if err != nil {
				t.Fatal(err)
			}
			if got, err := ParseAckBody(plain); err != nil || got != v || h.Type != FrameAck {
				t.Fatalf("%s: ACK %d: got %d, %v", mode, v, got, err)
			}
		}
		payload := []byte("a chunk that travels twice")
		n := copy(buf[HeaderSize:], payload)
		first, err := ini.Seal(buf, FrameData, 9, n)
		if err != nil {
			t.Fatal(err)
		}
		sealed := append([]byte(nil), first...)
		if err := ini.Unseal(buf); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf[HeaderSize:HeaderSize+n], payload) {
			t.Fatalf("%s: unseal gave %q", mode, buf[HeaderSize:HeaderSize+n])
		}
		// Resent on stream 2, under its key, flagged.
		again, err := other.SealFlags(buf, FrameData, FlagRetransmit, 9, n)
		if err != nil {
			t.Fatal(err)
		}
		_, otherResp := codecPair(t, mode, 2, 1000)
		h, plain, err := receive(otherResp, append([]byte(nil), again...))
		if err != nil || h.Flags != FlagRetransmit || !bytes.Equal(plain, payload) {
			t.Fatalf("%s: retransmission: %+v %q %v", mode, h, plain, err)
		}
		if mode == ModeAESGCM {
			// The flag is authenticated: clearing it breaks the frame.
			cleared := append([]byte(nil), again...)
			cleared[1] = 0
			if _, _, err := receive(otherResp, cleared); !errors.Is(err, ErrOpen) {
				t.Errorf("retransmit flag cleared: %v", err)
			}
			// A forged retransmission fails to open.
			forged := append([]byte(nil), sealed...)
			forged[1] = FlagRetransmit
			if _, _, err := receive(resp, forged); !errors.Is(err, ErrOpen) {
				t.Errorf("retransmit flag set by an attacker: %v", err)
			}
		}
		if _, err := ini.SealFlags(buf, FrameCredit, FlagRetransmit, ControlSeq(0), CreditBodySize); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: flagged CREDIT sealed: %v", mode, err)
		}
		if _, err := ini.Seal(buf, FrameJoin, ControlSeq(0), 31); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: short JOIN sealed: %v", mode, err)
		}
	}
}

func TestJoinProof(t *testing.T) {
	_, _, first, _ := exchange(t, fixedHello())
	key := first.SessionKey()
	h := fixedHello()
	h.Join = true
	h.Stream = 5
	hb, _, ini, resp := exchange(t, h)
	parsed, err := ParseHello(hb[:], testKey(t))
	if err != nil || !parsed.Join {
		t.Fatalf("join hello: %+v %v", parsed, err)
	}
	proof := ini.JoinProof(&key, h.Session)
	if err := resp.VerifyJoin(&key, h.Session, proof[:]); err != nil {
		t.Fatal(err)
	}
	other := h.Session
	other[0] ^= 1
	if err := resp.VerifyJoin(&key, other, proof[:]); !errors.Is(err, ErrMAC) {
		t.Errorf("proof for another session: %v", err)
	}
	// A proof is bound to its stream's transcript: another stream's
	// handshake rejects it.
	if err := first.VerifyJoin(&key, h.Session, proof[:]); !errors.Is(err, ErrMAC) {
		t.Errorf("proof moved to another stream: %v", err)
	}
	wrong := ini.SessionKey() // a replacement's own key is not the session's
	if err := resp.VerifyJoin(&wrong, h.Session, proof[:]); !errors.Is(err, ErrMAC) {
		t.Errorf("proof under another key: %v", err)
	}
	hb[7] = 0x04
	if _, err := ParseHello(hb[:], testKey(t)); err == nil {
		t.Errorf("unknown hello flag accepted")
	}
}

func TestAcks(t *testing.T) {
	c, err := NewCredits(2, 1000)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		stream     int
		ctl        uint64
		credit     bool
		v, sent    uint64
		err        error
		wantAcked  uint64
		wantFrames uint64
	}{
		{stream: 0, ctl: 0, credit: true, v: 10_000_000, sent: 0, wantAcked: 0},
		{stream: 0, ctl: 1, v: 5, sent: 10, wantAcked: 5},
		{stream: 1, ctl: 0, v: 3, sent: 10, wantAcked: 5}, // overtaken: the largest counts
		{stream: 1, ctl: 1, v: 2, sent: 10, err: ErrAckBackward, wantAcked: 5},
		{stream: 1, ctl: 1, v: 11, sent: 10, err: ErrAckAbsurd, wantAcked: 5},
		{stream: 1, ctl: 2, v: 8, sent: 10, err: ErrCreditOrder, wantAcked: 5},
		{stream: 1, ctl: 1, v: 10, sent: 10, wantAcked: 10},
	}
	for i, s := range steps {
		var err error
		if s.credit {
			_, err = c.Accept(s.stream, ControlSeq(s.ctl), s.v, s.sent)
		} else {
			_, err = c.AcceptAck(s.stream, ControlSeq(s.ctl), s.v, s.sent)
		}
		if !errors.Is(err, s.err) || (s.err == nil && err != nil) {
			t.Fatalf("step %d: err %v, want %v", i, err, s.err)
		}
		if c.Acked() != s.wantAcked {
			t.Fatalf("step %d: acked %d, want %d", i, c.Acked(), s.wantAcked)
		}
	}
	// A replacement stream numbers its control frames afresh.
	c.ResetStream(1, 1)
	if _, err := c.AcceptAck(1, ControlSeq(1), 0, 10); err != nil {
		t.Fatalf("replacement stream's first ACK: %v", err)
	}
	if c.Acked() != 10 {
		t.Fatalf("acked went back to %d", c.Acked())
	}
}

// TestReassemblerRetransmissions: duplicated, reordered and retransmitted
// frames; only the order rule of unflagged frames refuses.
func TestReassemblerRetransmissions(t *testing.T) {
	r, err := NewReassembler[uint64](3, 8)
	if err != nil {
		t.Fatal(err)
	}
	offer := func(stream int, seq uint64, fin, re bool) (bool, error) { return r.Offer(stream, seq, fin, re, seq) }
	must := func(ok bool, err error, want bool) {
		t.Helper()
		if err != nil || ok != want {
			t.Fatalf("offer: ok %v err %v, want ok %v", ok, err, want)
		}
	}
	ok, err := offer(0, 1, false, false)
	must(ok, err, true)
	ok, err = offer(0, 3, false, false) // 2 was on stream 1, which dies
	must(ok, err, true)
	ok, err = offer(2, 2, false, true) // resent on stream 2, below nothing
	must(ok, err, true)
	ok, err = offer(2, 0, false, true) // 0 resent below stream 2's position
	must(ok, err, true)
	ok, err = offer(1, 0, false, false) // the original arrives after all: dropped
	must(ok, err, false)
	ok, err = offer(2, 3, false, true) // a duplicate retransmission: dropped
	must(ok, err, false)
	if _, err := offer(0, 2, false, false); !errors.Is(err, ErrReplay) {
		t.Fatalf("unflagged frame below its stream's previous: %v", err)
	}
	if got := deliverInOrder(t, r, 8, 0); got != 4 {
		t.Fatalf("delivered up to %d", got)
	}
	ok, err = offer(2, 1, false, true) // already delivered
	must(ok, err, false)
	ok, err = offer(0, 5, true, false)
	must(ok, err, true)
	ok, err = offer(1, 5, true, true) // the FIN again
	must(ok, err, false)
	if _, err := offer(1, 6, true, true); !errors.Is(err, ErrAfterFin) {
		t.Fatalf("a second FIN: %v", err)
	}
	if _, err := offer(2, 100, false, true); !errors.Is(err, ErrAfterFin) {
		t.Fatalf("retransmission beyond the FIN: %v", err)
	}
	ok, err = offer(1, 4, false, true)
	must(ok, err, true)
	if got := deliverInOrder(t, r, 8, 4); got != 6 || !r.Complete() {
		t.Fatalf("delivered up to %d, complete %v", got, r.Complete())
	}
	// A replacement stream starts its order afresh.
	r2, _ := NewReassembler[uint64](1, 4)
	ok, err = r2.Offer(0, 2, false, false, 2)
	must(ok, err, true)
	r2.ResetStream(0)
	ok, err = r2.Offer(0, 0, false, false, 0)
	must(ok, err, true)
}

// FuzzRecoveryReassembler drives Offer with arbitrary streams, sequences,
// flags and deliveries: never a panic, never more than window+streams
// frames held, delivery in order, and a retransmission only ever dropped
// (never refused) when it duplicates.
func FuzzRecoveryReassembler(f *testing.F) {
	f.Add([]byte{3, 2, 1, 0, 0, 5, 0, 1, 0, 0, 0, 4, 1, 0, 2})
	f.Add([]byte{1, 7, 9, 0, 3, 13, 0, 3, 4, 0, 0, 8, 0, 5})
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
			switch op % 5 {
			case 0:
				next = deliverInOrder(t, r, int(arg%8), next)
				continue
			case 1:
				r.ResetStream(int(arg) % streams)
				continue
			}
			s := int(op>>3) % streams
			seq := next + uint64(arg%32)
			if op&4 != 0 && seq >= uint64(arg%5) {
				seq -= uint64(arg % 5) // below next: a stale copy
			}
			_, err := r.Offer(s, seq, op%7 == 0, op&1 != 0, seq)
			if err != nil && !errors.Is(err, ErrReplay) && !errors.Is(err, ErrAfterFin) && !errors.Is(err, ErrPaused) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			if r.Depth() > window+streams {
				t.Fatalf("depth %d > %d", r.Depth(), window+streams)
			}
		}
	})
}

// FuzzAcks feeds arbitrary CREDIT and ACK frames to the sender's rules:
// the acknowledged count never goes back and never passes what was sent.
func FuzzAcks(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := NewCredits(3, 4096)
		if err != nil {
			t.Fatal(err)
		}
		var acked, sent uint64
		for ; len(data) >= 19; data = data[19:] {
			stream := int(data[0] % 4)
			idx := uint64(data[1]) % 4
			v := binary.BigEndian.Uint64(data[3:])
			sent += binary.BigEndian.Uint64(data[11:]) % 64
			switch data[2] % 3 {
			case 0:
				_, _ = c.Accept(stream, ControlSeq(idx), v, sent)
			case 1:
				c.ResetStream(stream, idx)
			default:
				got, err := c.AcceptAck(stream, ControlSeq(idx), v%(sent+2), sent)
				if err != nil {
					if c.Acked() != acked {
						t.Fatalf("refused ACK moved the count")
					}
					continue
				}
				if got < acked || got > sent {
					t.Fatalf("acked %d after %d with %d sent", got, acked, sent)
				}
				acked = got
			}
		}
	})
}

// FuzzUnseal: Unseal of arbitrary bytes never panics, and of a sealed
// frame gives its plaintext back.
func FuzzUnseal(f *testing.F) {
	ini, _ := codecPair(f, ModeAESGCM, 2, 256)
	f.Add([]byte("some payload"), uint8(0))
	f.Fuzz(func(t *testing.T, payload []byte, mutate uint8) {
		if len(payload) == 0 || len(payload) > 256 {
			return
		}
		buf := make([]byte, ini.FrameBufferSize())
		n := copy(buf[HeaderSize:], payload)
		if _, err := ini.Seal(buf, FrameData, 3, n); err != nil {
			t.Fatal(err)
		}
		if mutate != 0 {
			buf[int(mutate)%(HeaderSize+n+TagSize)] ^= mutate
			_ = ini.Unseal(buf)
			return
		}
		if err := ini.Unseal(buf); err != nil || !bytes.Equal(buf[HeaderSize:HeaderSize+n], payload) {
			t.Fatalf("unseal: %v", err)
		}
	})
}

// TestUnsealWhileSealing: a sender takes a frame back from a stream
// (Unseal) while that stream's writer goes on sealing others with the
// same codec; the two share no scratch state (run with -race), and each
// gives the right bytes.
func TestUnsealWhileSealing(t *testing.T) {
	ini, resp := codecPair(t, ModeAESGCM, 1, 1000)
	payload := []byte("a chunk stuck behind a loss")
	const frames = 200
	sealed := make([][]byte, frames)
	for i := range sealed {
		buf := make([]byte, ini.FrameBufferSize())
		n := copy(buf[HeaderSize:], payload)
		if _, err := ini.Seal(buf, FrameData, uint64(i), n); err != nil {
			t.Fatal(err)
		}
		sealed[i] = buf
	}
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, ini.FrameBufferSize())
		for i := frames; i < 2*frames; i++ {
			n := copy(buf[HeaderSize:], payload)
			frame, err := ini.Seal(buf, FrameData, uint64(i), n)
			if err == nil {
				_, _, err = receive(resp, append([]byte(nil), frame...))
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i, buf := range sealed {
		if err := ini.Unseal(buf); err != nil || !bytes.Equal(buf[HeaderSize:HeaderSize+len(payload)], payload) {
			t.Fatalf("frame %d: unseal %v, %q", i, err, buf[HeaderSize:HeaderSize+len(payload)])
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

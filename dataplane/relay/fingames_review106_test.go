package relay

// Written by review (helper-106): a key holder against the real
// server-side agent.

import (
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

type hostOutcome struct {
	n     int
	clean bool // ended with end of file
	err   error
}

// TestKeyHolderFinAndControlGames: a key holder's stream 0 sends DATA,
// FIN, CREDIT, ACK and ABORT in orders and counts that disagree. The end
// server may see a clean end only when every byte the FIN counts arrived
// in order; otherwise a reset. Nothing may crash the agent or leave a
// session behind.
func TestKeyHolderFinAndControlGames(t *testing.T) {
	five := []byte("12345")
	initial := uint64(stripe.InitialFrames(1, 60000))
	type step func(e *evilStream) error
	d := func(seq uint64, flags uint8) step {
		return func(e *evilStream) error { return e.data(seq, five, flags) }
	}
	fin := func(seq, total uint64, flags uint8) step {
		return func(e *evilStream) error { return e.fin(seq, total, flags) }
	}
	ctl := func(typ stripe.FrameType, v uint64) step {
		return func(e *evilStream) error { return e.control(typ, v) }
	}
	cases := []struct {
		name      string
		steps     []step
		wantClean bool
		wantBytes int
	}{
		{"fin counts more bytes than sent", []step{d(0, 0), fin(1, 10, 0)}, false, -1},
		{"fin counts fewer bytes than sent", []step{d(0, 0), d(1, 0), fin(2, 5, 0)}, false, -1},
		{"fin first then data in reverse", []step{fin(3, 15, 0), d(2, stripe.FlagRetransmit), d(1, stripe.FlagRetransmit), d(0, stripe.FlagRetransmit)}, true, 15},
		{"fin then data past it", []step{d(0, 0), fin(1, 5, 0), d(2, 0)}, false, 5},
		{"credit fin data", []step{ctl(stripe.FrameCredit, 1<<20), fin(0, 0, 0), d(0, stripe.FlagRetransmit)}, false, 0},
		{"second fin elsewhere, retransmitted", []step{d(0, 0), fin(1, 5, 0), fin(2, 5, stripe.FlagRetransmit)}, false, 5},
		{"fin again with another count", []step{d(0, 0), fin(2, 10, 0), fin(2, 5, stripe.FlagRetransmit), d(1, stripe.FlagRetransmit)}, true, 10},
		{"retransmitted data at the window's edge", []step{d(initial-1, stripe.FlagRetransmit)}, false, -1},
		{"data at the grant", []step{d(initial, 0)}, false, -1},
		{"ack of frames never read", []step{d(0, 0), ctl(stripe.FrameAck, 1000)}, false, -1},
		{"ack repeated then data and fin", []step{ctl(stripe.FrameAck, 0), ctl(stripe.FrameAck, 0), d(0, 0), fin(1, 5, 0)}, true, 5},
		{"ack out of control sequence", []step{d(0, 0), func(e *evilStream) error { e.ctl = 5; return e.control(stripe.FrameAck, 0) }, fin(1, 5, 0)}, false, -1},
		// The ABORT may overtake the FIN's delivery: either end, but a
		// clean one has the 5 bytes.
		{"abort after fin", []step{d(0, 0), fin(1, 5, 0), func(e *evilStream) error { return e.abort("x") }}, false, 5},
		{"gap then fin", []step{d(1, 0), fin(2, 10, 0)}, false, -1},
		{"fin numbered at the grant", func() []step {
			var s []step
			for i := range initial {
				s = append(s, d(i, 0))
			}
			return append(s, fin(initial, 5*initial, 0))
		}(), true, int(5 * initial)},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			got := make(chan hostOutcome, 1)
			p := review106B(t, 1, Limits{ReconnectTimeout: time.Second, StallTimeout: time.Second}, func(c *net.TCPConn) {
				defer c.Close()
				n, err := io.Copy(io.Discard, c)
				got <- hostOutcome{n: int(n), clean: err == nil, err: err}
			}, nil)
			var id stripe.SessionID
			_, _ = rand.Read(id[:])
			c, st, sec, err := evilHandshake(t, p, func(h *stripe.Hello) {
				h.Session, h.Streams, h.Client = id, 1, netip.MustParseAddrPort("127.0.0.1:45000")
			})
			if err != nil || st != stripe.StatusAccepted {
				t.Fatalf("%v %v", st, err)
			}
			defer c.Close()
			e := newEvilStream(t, c, sec, 0, 60000, 0)
			r := readEvil(e, 0)
			for _, s := range tc.steps {
				if err := s(e); err != nil {
					break
				}
			}
			var out hostOutcome
			select {
			case out = <-got:
			case <-time.After(20 * time.Second):
				_ = c.Close()
				t.Fatalf("the end server got no end within 20 s (sessions %d)", len(p.b.Stats().Sessions))
			}
			t.Logf("end server: %d bytes, clean %v (%v); attacker saw abort %v; aborts %v", out.n, out.clean, out.err, r.aborted.Load(), p.b.Stats().Totals.Aborts)
			if out.clean != tc.wantClean && !(tc.wantBytes >= 0 && !tc.wantClean) {
				t.Errorf("end server clean end %v, want %v", out.clean, tc.wantClean)
			}
			if tc.wantBytes >= 0 && out.clean && out.n != tc.wantBytes {
				t.Errorf("end server got %d bytes with a clean end, want %d", out.n, tc.wantBytes)
			}
			if !out.clean && out.err != nil && !isReset(out.err) && !errors.Is(out.err, io.ErrUnexpectedEOF) {
				t.Logf("end server error: %v", out.err)
			}
			_ = c.Close()
			testsupport.Eventually(t, 20*time.Second, "the session gone", func() bool {
				st := p.b.Stats()
				return len(st.Sessions) == 0 && st.Totals.MemoryReserved == 0
			})
		})
	}
}

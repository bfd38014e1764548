package relay

// Review 106: a key holder (a compromised client-side agent) against the
// real server-side agent. Helpers shared by the review's tests.

import (
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

// evilStream is one authenticated stream of the attacker's, with the
// sealing state an initiator keeps.
type evilStream struct {
	c     *net.TCPConn
	codec *stripe.Codec
	index int
	ctl   uint64 // next Up control index
	buf   []byte
	mu    sync.Mutex
}

func newEvilStream(t testing.TB, c *net.TCPConn, sec *stripe.Secrets, index, chunk int, ctl uint64) *evilStream {
	t.Helper()
	codec, err := stripe.NewCodec(stripe.ModeAESGCM, &sec.Keys, true, uint16(index), chunk)
	if err != nil {
		t.Fatal(err)
	}
	return &evilStream{c: c, codec: codec, index: index, ctl: ctl, buf: make([]byte, codec.FrameBufferSize())}
}

// data sends a DATA frame (flags: 0 or FlagRetransmit).
func (e *evilStream) data(seq uint64, payload []byte, flags uint8) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	copy(e.buf[stripe.HeaderSize:], payload)
	f, err := e.codec.SealFlags(e.buf, stripe.FrameData, flags, seq, len(payload))
	if err != nil {
		return err
	}
	_, err = e.c.Write(f)
	return err
}

func (e *evilStream) fin(seq, total uint64, flags uint8) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	stripe.PutFinBody(e.buf[stripe.HeaderSize:], total)
	f, err := e.codec.SealFlags(e.buf, stripe.FrameFin, flags, seq, stripe.FinBodySize)
	if err != nil {
		return err
	}
	_, err = e.c.Write(f)
	return err
}

func (e *evilStream) control(typ stripe.FrameType, v uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	stripe.PutCreditBody(e.buf[stripe.HeaderSize:], v)
	f, err := e.codec.Seal(e.buf, typ, stripe.ControlSeq(e.ctl), stripe.CreditBodySize)
	if err != nil {
		return err
	}
	e.ctl++
	_, err = e.c.Write(f)
	return err
}

func (e *evilStream) abort(reason string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	f, err := e.codec.Seal(e.buf, stripe.FrameAbort, stripe.AbortSeq, stripe.PutAbortBody(e.buf[stripe.HeaderSize:], reason))
	if err != nil {
		return err
	}
	_, err = e.c.Write(f)
	return err
}

// evilJoin opens a replacement stream index of session id (session key
// key) and sends its JOIN; ctl is then 1.
func evilJoin(t testing.TB, p *pair, streams int, id stripe.SessionID, client netip.AddrPort, key *[32]byte, index int) (*evilStream, stripe.Status, error) {
	c, st, sec, err := evilHandshake(t, p, func(h *stripe.Hello) {
		h.Session, h.Streams, h.Stream, h.Join = id, uint16(streams), uint16(index), true
		if client.IsValid() {
			h.Client = client
		}
	})
	if err != nil || st != stripe.StatusAccepted {
		return nil, st, err
	}
	e := newEvilStream(t, c, sec, index, 60000, 1)
	if err := sendJoin(c, e.codec, sec, key, id); err != nil {
		_ = c.Close()
		return nil, st, err
	}
	return e, st, nil
}

// review106Pair is a server-side agent B (and its end server) with no
// client side: the attacker speaks for agent-a.
func review106B(t *testing.T, streams int, lim Limits, handle func(c *net.TCPConn), prep func(*Agent)) *pair {
	t.Helper()
	srv := newEndServer(t, handle)
	entry := Whitelist{
		Name:        "test",
		Clients:     []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Server:      srv.addr.Addr(),
		Port:        srv.addr.Port(),
		Streams:     streams,
		ChunkSize:   60000,
		QueueLength: 5,
		PeerName:    "agent-a",
	}
	cfgB := Config{
		Name:       "agent-b",
		DataListen: netip.MustParseAddrPort("127.0.0.1:0"),
		PSK:        testPSK,
		Server:     []Whitelist{entry},
		Limits:     lim,
	}
	b := startAgentWith(t, cfgB, srv.addr, testLogger(t), prep)
	return &pair{b: b, server: srv, wlB: []Whitelist{entry}}
}

// evilHandshake runs a hello that mutate makes (streams shape set by the
// caller) and returns the connection, the status and the secrets; it
// confirms an accepted one.
func evilHandshake(t testing.TB, p *pair, mutate func(h *stripe.Hello)) (*net.TCPConn, stripe.Status, *stripe.Secrets, error) {
	key, _ := stripe.NewHandshakeKey(testPSK)
	_, eph, hb := helloFrom(t, p, mutate)
	c, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(p.b.Addrs().Data))
	if err != nil {
		return nil, 0, nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(hb[:]); err != nil {
		_ = c.Close()
		return nil, 0, nil, err
	}
	var rb [stripe.ReplySize]byte
	if _, err := io.ReadFull(c, rb[:]); err != nil {
		_ = c.Close()
		return nil, 0, nil, err
	}
	r, err := stripe.ParseReply(hb[:], rb[:], key)
	if err != nil {
		_ = c.Close()
		return nil, 0, nil, err
	}
	if r.Status != stripe.StatusAccepted {
		_ = c.Close()
		return nil, r.Status, nil, nil
	}
	sec, err := stripe.Finish(key, eph, r.Ephemeral, hb[:], rb[:])
	if err != nil {
		_ = c.Close()
		return nil, 0, nil, err
	}
	cf := sec.Confirm()
	if _, err := c.Write(cf[:]); err != nil {
		_ = c.Close()
		return nil, 0, nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, stripe.StatusAccepted, sec, nil
}

func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

func goroutines() int { return runtime.NumGoroutine() }

var _ = context.Background
var _ = rand.Read

package relay

import (
	"bytes"
	"io"
	mrand "math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// recordingServer echoes like echo and records, per connection, what it
// received.
type recordingServer struct {
	mu   sync.Mutex
	got  []*bytes.Buffer
	done []bool
}

func (r *recordingServer) handle(c *net.TCPConn) {
	defer c.Close()
	r.mu.Lock()
	buf := &bytes.Buffer{}
	i := len(r.got)
	r.got = append(r.got, buf)
	r.done = append(r.done, false)
	r.mu.Unlock()
	b := make([]byte, 64<<10)
	for {
		n, err := c.Read(b)
		if n > 0 {
			r.mu.Lock()
			buf.Write(b[:n])
			r.mu.Unlock()
			if _, werr := c.Write(b[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = c.CloseWrite()
	r.mu.Lock()
	r.done[i] = true
	r.mu.Unlock()
}

// received returns a copy of what each connection received so far.
func (r *recordingServer) received() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([][]byte, len(r.got))
	for i, b := range r.got {
		out[i] = append([]byte(nil), b.Bytes()...)
	}
	return out
}

// calledFromRefound reports whether the calling goroutine runs
// session.refound (the fresh hello for stream 0 that founds a pooled
// session again).
func calledFromRefound() bool {
	buf := make([]byte, 64<<10)
	n := runtime.Stack(buf, false)
	return strings.Contains(string(buf[:n]), "(*session).refound(")
}

// TestLateBindThenRefusalNotSentTwice: stream 0's BIND of a pooled
// session reaches the far agent late (held here until the client side
// dials its fresh hello for stream 0, after every join was refused as an
// unknown session and the client side reset stream 0). The far agent then
// founds the session from that BIND and delivers to the server the frames
// stream 0 carried: they sat in its socket ahead of the client side's
// reset, and a read returns them before the reset. Nothing it sends back
// reaches the client side (stream 0 is reset there, and the joins that
// would find the session are held at the far agent here), so the client
// side has heard nothing. The far agent's session ends (its reconnect
// timeout, no stream left), and another session takes the far agent's
// one place. The fresh hello must not send the connection direct with
// every byte again: the far agent remembers the session it founded
// (settled.go) and answers StatusDuplicateStream, so the client side
// gives up at its reconnect timeout and resets the connection, whose
// request reached the server once. (Found by review: the hello was
// refused with the session limit and the request went to the server a
// second time on the direct connection.)
func TestLateBindThenRefusalNotSentTwice(t *testing.T) {
	rec := &recordingServer{}
	p := startPair(t, pairOptions{streams: 4, chunk: 16384,
		pool:    agentspec.Pool{MinIdle: 4, Max: 8},
		limitsA: Limits{MaxSessions: 16, MaxSessionsPerPeer: 16, ReconnectTimeout: 8 * time.Second, PreAuthTimeout: 20 * time.Second},
		limitsB: Limits{MaxSessions: 1, ReconnectTimeout: time.Second, PreAuthTimeout: 20 * time.Second}}, rec.handle)
	testsupport.Eventually(t, 10*time.Second, "the pool filled", func() bool {
		return onlyPool(t, p.a).Idle >= 4
	})

	want := make([]byte, 40<<10)
	r := mrand.New(mrand.NewPCG(30, 1))
	for i := range want {
		want[i] = byte(r.Uint32())
	}

	release := make(chan struct{})
	var held, hooked, filled atomic.Bool
	fault := func(stream uint16) bool {
		if stream == 0 && held.CompareAndSwap(false, true) {
			select {
			case <-release:
			case <-time.After(15 * time.Second):
			}
		}
		return false
	}
	p.b.testBindFault.Store(&fault)

	var filler *net.TCPConn
	t.Cleanup(func() {
		if filler != nil {
			filler.Close()
		}
	})
	dialed := func(c *net.TCPConn) error {
		if !calledFromRefound() || !hooked.CompareAndSwap(false, true) {
			return nil
		}
		// The client side founds the session again with a fresh hello.
		// Joins from now on wait at the far agent; those already in
		// their grace are refused first.
		hold := make(chan struct{})
		t.Cleanup(func() { close(hold) })
		p.b.testJoinHold.Store(&hold)
		time.Sleep(joinGrace + 300*time.Millisecond)
		// The late BIND founds the session at the far agent, which
		// delivers stream 0's frames to the server.
		close(release)
		deadline := time.Now().Add(8 * time.Second)
		for time.Now().Before(deadline) {
			if got := rec.received(); len(got) > 0 && len(got[0]) > 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		// That session ends at the far agent (no stream came back within
		// its reconnect timeout)...
		for time.Now().Before(deadline) {
			tb := p.b.Stats().Totals
			if tb.SessionsAborted >= 1 && tb.SessionsActive == 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		// ... and another connection takes the far agent's one place.
		f, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(p.entry))
		if err != nil {
			t.Errorf("filler: %v", err)
			return nil
		}
		filler = f
		_ = f.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := f.Write([]byte("fill")); err != nil {
			t.Errorf("filler: %v", err)
			return nil
		}
		if _, err := io.ReadFull(f, make([]byte, 4)); err != nil {
			t.Errorf("filler: %v", err)
			return nil
		}
		filled.Store(true)
		return nil
	}
	p.a.testDialed.Store(&dialed)

	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	go func() {
		_, _ = c.Write(want)
		_ = c.CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if !hooked.Load() || !filled.Load() {
		t.Fatalf("the scenario did not happen: fresh hello hooked %v, far agent filled %v (client got %d bytes, err %v)",
			hooked.Load(), filled.Load(), len(got), err)
	}
	server := rec.received()
	ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
	sizes := make([]int, len(server))
	for i, b := range server {
		sizes[i] = len(b)
	}
	t.Logf("client got %d of %d bytes, err %v; client fallbacks %d; far agent: session-limit refusals %d; server connections received %v bytes",
		len(got), len(want), err, ta.Fallbacks, tb.Rejected[rejectSessionLimit], sizes)
	total := 0
	for i, b := range server {
		if string(b) == "fill" {
			continue
		}
		if !bytes.Equal(b, want[:len(b)]) {
			t.Errorf("server connection %d received bytes that are not a prefix of the request", i)
		}
		total += len(b)
	}
	if err == nil {
		t.Errorf("the client's connection completed (%d bytes back) although its session was lost at the far agent", len(got))
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("the client's connection hung until its deadline instead of being reset at the reconnect timeout: %v", err)
	}
	if total > len(want) {
		t.Errorf("the server received %d bytes of a %d-byte request over its connections %v: the far agent's session "+
			"delivered them, and the client side, which had heard nothing of it, carried the connection direct and sent "+
			"them again (client fallbacks %d)", total, len(want), sizes, ta.Fallbacks)
	}
}

// TestLateBindAfterRefusalRefused: the other order. Stream 0's BIND is
// held at the far agent while the client side's fresh hello for stream 0
// is refused at max_sessions and the connection goes direct, whole. The
// far agent's place then comes free, and the BIND goes on: it must not
// found the session (the refusal settled its id), or the server would get
// the request a second time, from the far agent.
func TestLateBindAfterRefusalRefused(t *testing.T) {
	rec := &recordingServer{}
	p := startPair(t, pairOptions{streams: 4, chunk: 16384,
		pool:    agentspec.Pool{MinIdle: 4, Max: 8},
		limitsA: Limits{MaxSessions: 16, MaxSessionsPerPeer: 16, ReconnectTimeout: 30 * time.Second},
		limitsB: Limits{MaxSessions: 1}}, rec.handle)
	testsupport.Eventually(t, 10*time.Second, "the pool filled", func() bool { return onlyPool(t, p.a).Idle >= 4 })
	hold := p.dial(t)
	defer hold.Close()
	_ = hold.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := hold.Write([]byte("hold")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(hold, make([]byte, 4)); err != nil {
		t.Fatalf("the first connection: %v", err)
	}
	testsupport.Eventually(t, 10*time.Second, "the pool refilled", func() bool { return onlyPool(t, p.a).Idle >= 4 })

	release := make(chan struct{})
	var held atomic.Bool
	fault := func(stream uint16) bool {
		if stream == 0 && held.CompareAndSwap(false, true) {
			select {
			case <-release:
			case <-time.After(20 * time.Second):
			}
		}
		return false
	}
	p.b.testBindFault.Store(&fault)

	want := make([]byte, 64<<10)
	r := mrand.New(mrand.NewPCG(31, 1))
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	c := p.dial(t)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	go func() {
		_, _ = c.Write(want)
		_ = c.CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the connection was not carried direct, whole: %d of %d bytes, err %v", len(got), len(want), err)
	}
	if !held.Load() || p.a.Stats().Totals.Fallbacks != 1 {
		t.Fatalf("the scenario did not happen: BIND held %v, fallbacks %d", held.Load(), p.a.Stats().Totals.Fallbacks)
	}
	// The far agent's place comes free; then the held BIND goes on.
	hold.Close()
	testsupport.Eventually(t, 10*time.Second, "the far agent's place free", func() bool {
		return p.b.Stats().Totals.SessionsActive == 0
	})
	started := p.b.Stats().Totals.SessionsStarted
	close(release)
	time.Sleep(time.Second)
	tb := p.b.Stats().Totals
	total := 0
	for _, b := range rec.received() {
		if string(b) != "hold" {
			total += len(b)
		}
	}
	t.Logf("far agent: sessions started %d -> %d; the server received %d bytes of the %d-byte request", started, tb.SessionsStarted, total, len(want))
	if tb.SessionsStarted != started || total != len(want) {
		t.Errorf("the late BIND founded the session after its connection went direct: sessions started %d -> %d, the server received %d bytes of a %d-byte request",
			started, tb.SessionsStarted, total, len(want))
	}
}

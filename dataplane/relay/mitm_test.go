package relay

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// mitm is a frame-aware man in the middle between the two agents: it
// forwards each stream's handshake, then whole frames, and lets a test
// delay, reset, alter, replay or inject frames. It plays the attacker and
// the bad network of the fault tests.
type mitm struct {
	ln     *net.TCPListener
	addr   netip.AddrPort
	target netip.AddrPort

	// onFrame, if set, decides what to forward for each frame; it may
	// return the frame, nothing, or several frames. It is called from
	// many goroutines.
	onFrame func(ms *mitmStream, dir stripe.Direction, frame []byte) [][]byte
	// delay, if set, is slept before forwarding each frame.
	delay func() time.Duration
	// hold, if set, is called before forwarding each frame and may block:
	// the stream's frames in that direction then wait (and, once the
	// socket buffers fill, so do its sender's writes).
	hold func(ms *mitmStream, dir stripe.Direction, frame []byte)

	// refuse, when set, resets every new connection at once: the path
	// to the server-side agent is gone.
	refuse atomic.Bool

	mu      sync.Mutex
	streams []*mitmStream
	wg      sync.WaitGroup
}

type mitmStream struct {
	index   int
	a, b    *net.TCPConn // a: from the client-side agent; b: to the server-side agent
	wmu     [2]sync.Mutex
	hello   []byte
	confirm []byte
	// shutA, shutB: a pump half-closed a, b (set before the call).
	shutA, shutB atomic.Bool
}

func (ms *mitmStream) shut(c *net.TCPConn) *atomic.Bool {
	if c == ms.a {
		return &ms.shutA
	}
	return &ms.shutB
}

func (ms *mitmStream) markShut(c *net.TCPConn) {
	if c == ms.a {
		ms.shutA.Store(true)
	} else {
		ms.shutB.Store(true)
	}
}

func newMITM(t testing.TB, target netip.AddrPort) *mitm {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	m := &mitm{ln: ln, addr: ln.Addr().(*net.TCPAddr).AddrPort(), target: target}
	m.wg.Add(1)
	go m.accept()
	t.Cleanup(m.close)
	return m
}

func (m *mitm) close() {
	_ = m.ln.Close()
	m.mu.Lock()
	for _, ms := range m.streams {
		reset(ms.a)
		reset(ms.b)
	}
	m.mu.Unlock()
	m.wg.Wait()
}

func (m *mitm) accept() {
	defer m.wg.Done()
	for {
		a, err := m.ln.AcceptTCP()
		if err != nil {
			return
		}
		m.wg.Add(1)
		go m.serve(a)
	}
}

var mitmKey = func() *stripe.HandshakeKey {
	k, err := stripe.NewHandshakeKey(testPSK)
	if err != nil {
		panic(err)
	}
	return k
}()

func (m *mitm) serve(a *net.TCPConn) {
	defer m.wg.Done()
	if m.refuse.Load() {
		reset(a)
		return
	}
	m.mu.Lock()
	target := m.target
	m.mu.Unlock()
	b, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(target))
	if err != nil {
		reset(a)
		return
	}
	hello := make([]byte, stripe.HelloSize)
	if _, err := io.ReadFull(a, hello); err != nil {
		reset(a)
		reset(b)
		return
	}
	// The man in the middle knows the PSK only to read the stream index.
	h, err := stripe.ParseHello(hello, mitmKey)
	if err != nil {
		reset(a)
		reset(b)
		return
	}
	ms := &mitmStream{index: int(h.Stream), a: a, b: b, hello: hello}
	m.mu.Lock()
	m.streams = append(m.streams, ms)
	m.mu.Unlock()
	if _, err := b.Write(hello); err != nil {
		reset(a)
		reset(b)
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.pump(ms, stripe.Down, b, a, stripe.ReplySize)
	}()
	m.pump(ms, stripe.Up, a, b, stripe.ConfirmSize)
}

// pump forwards one direction: the rest of the handshake, then frames.
func (m *mitm) pump(ms *mitmStream, dir stripe.Direction, from, to *net.TCPConn, handshake int) {
	hs := make([]byte, handshake)
	if _, err := io.ReadFull(from, hs); err != nil {
		m.propagate(ms, err, from, to)
		return
	}
	if dir == stripe.Up {
		m.mu.Lock()
		ms.confirm = hs
		m.mu.Unlock()
	}
	if _, err := to.Write(hs); err != nil {
		return
	}
	for {
		hdr := make([]byte, stripe.HeaderSize)
		if _, err := io.ReadFull(from, hdr); err != nil {
			m.propagate(ms, err, from, to)
			return
		}
		n := binary.BigEndian.Uint32(hdr[4:8])
		if n > stripe.MaxChunkSize+stripe.TagSize {
			reset(from)
			reset(to)
			return
		}
		frame := make([]byte, stripe.HeaderSize+int(n))
		copy(frame, hdr)
		if _, err := io.ReadFull(from, frame[stripe.HeaderSize:]); err != nil {
			m.propagate(ms, err, from, to)
			return
		}
		if m.delay != nil {
			if d := m.delay(); d > 0 {
				time.Sleep(d)
			}
		}
		if m.hold != nil {
			m.hold(ms, dir, frame)
		}
		out := [][]byte{frame}
		if m.onFrame != nil {
			out = m.onFrame(ms, dir, frame)
		}
		for _, f := range out {
			if err := ms.write(dir, f); err != nil {
				return
			}
		}
	}
}

// propagate passes on how from ended: a FIN as a FIN, anything else as
// resets. End of file alone can be a reset whose error the other pump's
// write took (see endedByFin); passed on as a FIN, it would look to the
// agent past to like the far agent's orderly close.
func (m *mitm) propagate(ms *mitmStream, err error, from, to *net.TCPConn) {
	if errors.Is(err, io.EOF) && endedByFin(from, ms.shut(from)) {
		ms.markShut(to)
		_ = to.CloseWrite()
		return
	}
	reset(from)
	reset(to)
}

func (ms *mitmStream) write(dir stripe.Direction, frame []byte) error {
	to := ms.b
	if dir == stripe.Down {
		to = ms.a
	}
	ms.wmu[dir].Lock()
	defer ms.wmu[dir].Unlock()
	_, err := to.Write(frame)
	return err
}

// stream returns the stream with index i once it is up.
func (m *mitm) stream(t testing.TB, i int) *mitmStream {
	t.Helper()
	var found *mitmStream
	testsupport.Eventually(t, 30*time.Second, "mitm stream", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, ms := range m.streams {
			if ms.index == i {
				found = ms
				return true
			}
		}
		return false
	})
	return found
}

// setTarget sends new connections to another server-side agent.
func (m *mitm) setTarget(target netip.AddrPort) {
	m.mu.Lock()
	m.target = target
	m.mu.Unlock()
}

// current returns the latest connection of each stream index.
func (m *mitm) current() map[int]*mitmStream {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[int]*mitmStream)
	for _, ms := range m.streams {
		out[ms.index] = ms
	}
	return out
}

// resetAll resets every connection it carries.
func (m *mitm) resetAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ms := range m.streams {
		reset(ms.a)
		reset(ms.b)
	}
}

// resetStream sends RST both ways on stream i: to both agents it looks
// like the network reset that stream.
func (m *mitm) resetStream(t testing.TB, i int) {
	ms := m.stream(t, i)
	reset(ms.a)
	reset(ms.b)
}

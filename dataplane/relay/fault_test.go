package relay

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"golang.org/x/sys/unix"
)

func TestHalfCloseClientStillGetsFullReply(t *testing.T) {
	const request, reply = 3 << 20, 40 << 20
	var srvErr error
	var gotRequest []byte
	p := startPair(t, pairOptions{streams: 8, chunk: 16384, queue: 2}, func(c *net.TCPConn) {
		defer c.Close()
		// The server reads the whole request first: it sees EOF only if
		// the client's half-close crossed both agents.
		n, h, err := receiveAll(c, rand.New(rand.NewPCG(1, 1)), false)
		if err != nil || n != request {
			srvErr = errors.Join(err, errors.New("short request"))
			return
		}
		gotRequest = h
		if _, err := sendPattern(c, 7, reply, rand.New(rand.NewPCG(2, 2)), false); err != nil {
			srvErr = err
			return
		}
		_ = c.CloseWrite()
	})
	c := p.dial(t)
	defer c.Close()
	sent, err := sendPattern(c, 3, request, rand.New(rand.NewPCG(3, 3)), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	n, h, err := receiveAll(c, rand.New(rand.NewPCG(4, 4)), false)
	if err != nil {
		t.Fatalf("reading the reply after half-close: %v", err)
	}
	testsupport.Eventually(t, 30*time.Second, "sessions to complete", func() bool {
		return p.a.Stats().Totals.SessionsCompleted == 1 && p.b.Stats().Totals.SessionsCompleted == 1
	})
	if srvErr != nil {
		t.Fatal(srvErr)
	}
	if !bytes.Equal(gotRequest, sent) {
		t.Fatal("request differs at the server")
	}
	if n != reply || !bytes.Equal(h, prefixHash(7, reply)) {
		t.Fatalf("reply: %d of %d bytes, hash mismatch %v", n, reply, !bytes.Equal(h, prefixHash(7, reply)))
	}
}

// TestSlowReaderPausesWithoutLoss stops reading at the client for 10 s in
// the middle of a download. Backpressure must reach the server through the
// streams, no byte may be lost, the pause must not count as a stall (the
// stall timeout is shorter than the pause) and the session's buffers and
// the process heap must stay under the cap.
func TestSlowReaderPausesWithoutLoss(t *testing.T) {
	const size = 256 << 20
	streams, chunk, queue := 16, 65536, 4
	// The cap holds the initial window only: the window cannot grow.
	memCap := stripe.SessionMemory(streams, chunk, stripe.InitialFrames(streams, chunk))
	lim := Limits{SessionMemory: memCap, StallTimeout: 2 * time.Second, HalfClosedIdle: 2 * time.Second}
	p := startPair(t, pairOptions{streams: streams, chunk: chunk, queue: queue, limitsA: lim, limitsB: lim}, func(c *net.TCPConn) {
		defer c.Close()
		_, _ = sendPattern(c, 11, size, rand.New(rand.NewPCG(5, 5)), false)
		_ = c.CloseWrite()
		_, _ = io.Copy(io.Discard, c)
	})
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapBefore := ms.HeapInuse

	c := p.dial(t)
	defer c.Close()
	hr := &hashingReader{r: c, h: sha256.New()}
	if _, err := io.CopyN(io.Discard, hr, 8<<20); err != nil {
		t.Fatal(err)
	}
	var maxMem, maxHeap uint64
	var maxDepth int
	pauseEnd := time.Now().Add(10 * time.Second)
	for time.Now().Before(pauseEnd) {
		for _, ag := range []*Agent{p.a, p.b} {
			for _, s := range ag.Stats().Sessions {
				if s.Memory > s.MemoryMax || s.Memory > memCap {
					t.Errorf("%s side holds %d bytes, cap %d", s.Side, s.Memory, memCap)
				}
				maxMem = max(maxMem, uint64(s.Memory))
				maxDepth = max(maxDepth, s.ReorderDepthMax)
			}
		}
		runtime.ReadMemStats(&ms)
		maxHeap = max(maxHeap, ms.HeapInuse)
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := io.Copy(io.Discard, hr); err != nil {
		t.Fatalf("after the pause: %v", err)
	}
	if hr.n != size || !bytes.Equal(hr.h.Sum(nil), prefixHash(11, size)) {
		t.Fatalf("got %d of %d bytes or wrong bytes", hr.n, size)
	}
	_ = c.Close()
	testsupport.Eventually(t, 30*time.Second, "sessions to end", func() bool {
		return p.a.Stats().Totals.SessionsActive == 0 && p.b.Stats().Totals.SessionsActive == 0
	})
	for _, ag := range []*Agent{p.a, p.b} {
		if tot := ag.Stats().Totals; tot.SessionsAborted != 0 {
			t.Errorf("aborted sessions: %+v", ag.Stats().RecentAborts)
		}
	}
	// Both agents and both end hosts live in this process; the heap may
	// grow by the two sessions' caps plus the end hosts' buffers.
	growth := int64(maxHeap) - int64(heapBefore)
	t.Logf("cap %d per session; most held by a session %d; heap growth %d; max reorder depth %d", memCap, maxMem, growth, maxDepth)
	if growth > 2*memCap+16<<20 {
		t.Errorf("heap grew by %d bytes during the pause, more than two session caps (%d)", growth, 2*memCap)
	}
}

// abortWatch collects both end hosts' view of an aborted transfer: the
// server reads (and hashes) what it receives, the client uploads a pattern
// and reads until the connection fails.
type abortWatch struct {
	srvN                          int64
	srvHash                       []byte
	srvErr                        error
	clientReadErr, clientWriteErr error
	done                          chan struct{}
}

// sawReset says whether an end host got an RST: after one, exactly one
// socket call returns ECONNRESET, the read or the write, whichever comes
// first; later calls see EOF or EPIPE.
func sawReset(errs ...error) bool {
	for _, err := range errs {
		if isReset(err) {
			return true
		}
	}
	return false
}

const uploadSeed = 42

func uploadUntilAbort(t *testing.T, p *pair) *abortWatch {
	t.Helper()
	w := &abortWatch{done: make(chan struct{})}
	srvDone := make(chan struct{})
	p.server.setHandler(func(c *net.TCPConn) {
		defer close(srvDone)
		defer c.Close()
		hr := &hashingReader{r: c, h: sha256.New()}
		_, err := io.Copy(io.Discard, hr)
		w.srvN, w.srvHash, w.srvErr = hr.n, hr.h.Sum(nil), err
	})
	c := p.dial(t)
	go func() {
		defer close(w.done)
		defer c.Close()
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			_, w.clientWriteErr = sendPattern(c, uploadSeed, 1<<30, rand.New(rand.NewPCG(1, 1)), false)
		}()
		_, w.clientReadErr = io.Copy(io.Discard, c)
		<-wrote
		<-srvDone
	}()
	t.Cleanup(func() {
		_ = c.Close()
		<-w.done
	})
	return w
}

// checkAborted waits for both agents to abort and both end hosts to see a
// reset, and checks the server got only genuine bytes, in order.
func (w *abortWatch) checkAborted(t *testing.T, p *pair) (clientSide, serverSide AbortRecord) {
	t.Helper()
	testsupport.Eventually(t, 30*time.Second, "both agents to abort", func() bool {
		return len(p.a.Stats().RecentAborts) > 0 && len(p.b.Stats().RecentAborts) > 0
	})
	<-w.done
	if !sawReset(w.clientReadErr, w.clientWriteErr) {
		t.Errorf("client saw read %v, write %v; want a reset", w.clientReadErr, w.clientWriteErr)
	}
	if !isReset(w.srvErr) {
		t.Errorf("server saw %v, want a reset", w.srvErr)
	}
	if !bytes.Equal(w.srvHash, prefixHash(uploadSeed, w.srvN)) {
		t.Errorf("the %d bytes the server received are not the first %d bytes sent", w.srvN, w.srvN)
	}
	return p.a.Stats().RecentAborts[0], p.b.Stats().RecentAborts[0]
}

// dataFrames counts DATA frames per stream and direction in a mitm hook.
type frameCounter struct {
	mu sync.Mutex
	n  map[[2]int]int
}

func (fc *frameCounter) next(ms *mitmStream, dir stripe.Direction, frame []byte) int {
	if frame[0] != byte(stripe.FrameData) {
		return -1
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.n == nil {
		fc.n = map[[2]int]int{}
	}
	k := [2]int{ms.index, int(dir)}
	fc.n[k]++
	return fc.n[k]
}

// TestAttacksAbortWithoutDelivering alters the stream between the agents
// the way an attacker on the path could. Every attack must abort the
// session at both ends with resets, and the server must have received only
// a prefix of what the client sent: zero attacker bytes.
func TestAttacksAbortWithoutDelivering(t *testing.T) {
	marker := []byte("ATTACKER-BYTES!!")
	type attack struct {
		name  string
		modes []string
		hook  func(fc *frameCounter) func(ms *mitmStream, dir stripe.Direction, frame []byte) [][]byte
	}
	attacks := []attack{{
		name:  "tampered frame",
		modes: []string{EncryptionAESGCM},
		hook: func(fc *frameCounter) func(*mitmStream, stripe.Direction, []byte) [][]byte {
			return func(ms *mitmStream, dir stripe.Direction, frame []byte) [][]byte {
				if dir == stripe.Up && ms.index == 3 && fc.next(ms, dir, frame) == 20 {
					copy(frame[stripe.HeaderSize:], marker)
				}
				return [][]byte{frame}
			}
		},
	}, {
		name:  "replayed frame",
		modes: []string{EncryptionAESGCM, EncryptionNone},
		hook: func(fc *frameCounter) func(*mitmStream, stripe.Direction, []byte) [][]byte {
			var saved []byte
			return func(ms *mitmStream, dir stripe.Direction, frame []byte) [][]byte {
				if dir != stripe.Up || ms.index != 3 {
					return [][]byte{frame}
				}
				switch fc.next(ms, dir, frame) {
				case 10:
					saved = append([]byte(nil), frame...)
				case 20:
					return [][]byte{frame, saved}
				}
				return [][]byte{frame}
			}
		},
	}, {
		// With encryption none a copy relabelled for another stream is
		// an authentic-looking duplicate of a frame of that session, which
		// the receiver drops (retransmissions make duplicates legal); with
		// encryption it fails to open.
		name:  "cross-stream frame",
		modes: []string{EncryptionAESGCM},
		hook: func(fc *frameCounter) func(*mitmStream, stripe.Direction, []byte) [][]byte {
			var mu sync.Mutex
			var stolen []byte
			return func(ms *mitmStream, dir stripe.Direction, frame []byte) [][]byte {
				if dir != stripe.Up {
					return [][]byte{frame}
				}
				n := fc.next(ms, dir, frame)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case ms.index == 2 && n == 20 && stolen == nil:
					// Copy a frame of stream 2 and relabel it for stream 5.
					stolen = append([]byte(nil), frame...)
					binary.BigEndian.PutUint16(stolen[2:4], 5)
				case ms.index == 5 && n > 0 && stolen != nil:
					out := [][]byte{frame, stolen}
					stolen = []byte{}
					return out
				}
				return [][]byte{frame}
			}
		},
	}, {
		// Both frames are genuine but leave the stream out of order; if the
		// later one lands beyond the window the stream pauses with the
		// earlier one behind it, which must abort at once, not stall.
		name:  "swapped frames",
		modes: []string{EncryptionAESGCM, EncryptionNone},
		// The held frame is swapped with the stream's next one. If that
		// does not come within holdFor (the session's small window filled
		// behind the held frame first, and the scheduler put none of the
		// frames after it on this stream: it deadlocked until the stall
		// timeout once in a loaded package run), the frame goes on in
		// order and the next one is held instead.
		hook: func(fc *frameCounter) func(*mitmStream, stripe.Direction, []byte) [][]byte {
			const holdFor = 200 * time.Millisecond
			var mu sync.Mutex
			var held []byte
			var release *time.Timer
			swapped := false
			return func(ms *mitmStream, dir stripe.Direction, frame []byte) [][]byte {
				if dir != stripe.Up || ms.index != 5 {
					return [][]byte{frame}
				}
				n := fc.next(ms, dir, frame)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case held != nil:
					release.Stop()
					out := [][]byte{frame, held}
					held, swapped = nil, true
					return out
				case n >= 20 && !swapped:
					held = append([]byte(nil), frame...)
					release = time.AfterFunc(holdFor, func() {
						mu.Lock()
						h := held
						held = nil
						mu.Unlock()
						if h != nil {
							_ = ms.write(dir, h)
						}
					})
					return nil
				}
				return [][]byte{frame}
			}
		},
	}, {
		// A genuine frame marked as a retransmission by the attacker, so
		// that it could jump its stream's order: the flag is in the
		// authenticated header.
		name:  "forged retransmit flag",
		modes: []string{EncryptionAESGCM},
		hook: func(fc *frameCounter) func(*mitmStream, stripe.Direction, []byte) [][]byte {
			return func(ms *mitmStream, dir stripe.Direction, frame []byte) [][]byte {
				if dir == stripe.Up && ms.index == 3 && fc.next(ms, dir, frame) == 20 {
					frame[1] = stripe.FlagRetransmit
				}
				return [][]byte{frame}
			}
		},
	}, {
		// A forged retransmission of an early sequence with the attacker's
		// bytes: it must not be taken for a duplicate (dropped) or data.
		name:  "forged retransmission",
		modes: []string{EncryptionAESGCM},
		hook: func(fc *frameCounter) func(*mitmStream, stripe.Direction, []byte) [][]byte {
			return func(ms *mitmStream, dir stripe.Direction, frame []byte) [][]byte {
				if dir != stripe.Up || ms.index != 5 || fc.next(ms, dir, frame) != 20 {
					return [][]byte{frame}
				}
				forged := make([]byte, stripe.HeaderSize+len(marker)+stripe.TagSize)
				stripe.Header{Type: stripe.FrameData, Flags: stripe.FlagRetransmit, Stream: 5,
					Length: uint32(len(marker) + stripe.TagSize), Seq: binary.BigEndian.Uint64(frame[8:16]) + 1}.Put(forged)
				copy(forged[stripe.HeaderSize:], marker)
				return [][]byte{forged, frame}
			}
		},
	}, {
		name:  "injected frame",
		modes: []string{EncryptionAESGCM},
		hook: func(fc *frameCounter) func(*mitmStream, stripe.Direction, []byte) [][]byte {
			return func(ms *mitmStream, dir stripe.Direction, frame []byte) [][]byte {
				if dir != stripe.Up || ms.index != 5 || fc.next(ms, dir, frame) != 20 {
					return [][]byte{frame}
				}
				// A well-formed frame right after this one, with the next
				// sequence number, carrying the attacker's bytes.
				forged := make([]byte, stripe.HeaderSize+len(marker)+stripe.TagSize)
				stripe.Header{Type: stripe.FrameData, Stream: 5, Length: uint32(len(marker) + stripe.TagSize),
					Seq: binary.BigEndian.Uint64(frame[8:16]) + 1}.Put(forged)
				copy(forged[stripe.HeaderSize:], marker)
				return [][]byte{frame, forged}
			}
		},
	}}
	for _, at := range attacks {
		for _, mode := range at.modes {
			t.Run(at.name+"/"+mode, func(t *testing.T) {
				lim := Limits{StallTimeout: time.Minute, HalfClosedIdle: time.Minute}
				p := startPair(t, pairOptions{streams: 8, chunk: 16384, queue: 4, encryption: mode, viaMITM: true,
					limitsA: lim, limitsB: lim}, nil)
				p.mitm.onFrame = at.hook(&frameCounter{})
				w := uploadUntilAbort(t, p)
				ca, sa := w.checkAborted(t, p)
				t.Logf("server side: %s: %s; client side: %s: %s", sa.Reason, sa.Error, ca.Reason, ca.Error)
				if sa.Reason != AbortProtocol {
					t.Errorf("server side aborted for %s, want %s", sa.Reason, AbortProtocol)
				}
			})
		}
	}
}

// TestForgedJoinsRejected replays captured handshakes and sends forged ones
// to the server-side agent, during and after a session. None may join a
// session, reach the server, or disturb the live session.
func TestForgedJoinsRejected(t *testing.T) {
	p := startPair(t, pairOptions{streams: 4, chunk: 8192, queue: 2, viaMITM: true}, echo)
	c := p.dial(t)
	defer c.Close()
	if _, err := c.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	ms := p.mitm.stream(t, 0)
	var confirm []byte
	testsupport.Eventually(t, 30*time.Second, "captured confirm", func() bool {
		p.mitm.mu.Lock()
		defer p.mitm.mu.Unlock()
		confirm = ms.confirm
		return confirm != nil
	})
	dataAddr := net.TCPAddrFromAddrPort(p.b.Addrs().Data)
	forged := append([]byte(nil), ms.hello...)
	forged[150] ^= 1 // inside the initiator's ephemeral key: the MAC no longer fits

	refusals := func() uint64 {
		st := p.b.Stats().Totals
		n := st.HandshakeFailures
		for _, v := range st.Rejected {
			n += v
		}
		return n
	}
	// attempt plays one forged join; the agent must end the connection
	// (reset, or close after an authenticated refusal) and count it.
	attempt := func(name string, hello []byte, withConfirm bool) {
		t.Helper()
		before := refusals()
		conn, err := net.DialTCP("tcp4", nil, dataAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		_, _ = conn.Write(hello)
		if withConfirm {
			// The recorded confirm answers the old reply, not the fresh
			// ephemeral key of this one.
			reply := make([]byte, stripe.ReplySize)
			if _, err := io.ReadFull(conn, reply); err != nil {
				t.Fatalf("%s: no reply to a replayed hello: %v", name, err)
			}
			_, _ = conn.Write(confirm)
		}
		_, _ = conn.Write(bytes.Repeat([]byte("attacker"), 1000))
		if _, err := io.Copy(io.Discard, conn); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: the agent kept the connection open", name)
		}
		testsupport.Eventually(t, 30*time.Second, name+" counted", func() bool { return refusals() > before })
	}
	attempt("hello with a bad MAC", forged, false)
	attempt("replayed hello and confirm during the session", ms.hello, true)

	// The live session is untouched.
	msg := bytes.Repeat([]byte("still fine "), 10000)
	go func() { _, _ = c.Write(msg); _ = c.CloseWrite() }()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("session after forged joins: %d bytes, %v", len(got), err)
	}
	testsupport.Eventually(t, 30*time.Second, "session to complete", func() bool { return p.b.Stats().Totals.SessionsCompleted == 1 })

	before := p.server.accepted()
	attempt("replayed hello and confirm after the session", ms.hello, true)
	if got := p.server.accepted(); got != before {
		t.Errorf("a replayed handshake made the agent connect to the server")
	}
	if st := p.b.Stats().Totals; st.SessionsAborted != 0 {
		t.Errorf("aborted sessions: %+v", p.b.Stats().RecentAborts)
	}
}

// TestPreAuthCapAndReap opens 1,000 connections to the data port and sends
// nothing: at most the cap may wait for a handshake, each new one beyond it
// evicts (resets) the oldest, and the last ones waiting are reset after the
// pre-auth timeout. The agent still serves afterwards.
func TestPreAuthCapAndReap(t *testing.T) {
	const conns, preauthCap = 1000, 64
	lim := Limits{MaxPreAuth: preauthCap, PreAuthTimeout: 2 * time.Second}
	p := startPair(t, pairOptions{streams: 4, limitsB: lim}, echo)
	dataAddr := net.TCPAddrFromAddrPort(p.b.Addrs().Data)

	var wg sync.WaitGroup
	var closed atomic.Int64
	var maxActive atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			default:
			}
			if n := int64(p.b.Stats().Totals.PreAuthActive); n > maxActive.Load() {
				maxActive.Store(n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for range conns {
		c, err := net.DialTCP("tcp4", nil, dataAddr)
		if isReset(err) {
			// Reset before connect() even returned: capped at accept.
			closed.Add(1)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				closed.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stopSampling)
	<-sampled
	st := p.b.Stats().Totals
	t.Logf("evicted %d, reaped %d, most waiting at once %d", st.Rejected[rejectPreAuthEvicted], st.PreAuthTimeouts, maxActive.Load())
	if closed.Load() != conns {
		t.Errorf("%d of %d idle connections were closed by the agent", closed.Load(), conns)
	}
	if maxActive.Load() > preauthCap {
		t.Errorf("%d unauthenticated connections waited at once, cap %d", maxActive.Load(), preauthCap)
	}
	if st.Rejected[rejectPreAuthEvicted]+st.PreAuthTimeouts != conns || st.PreAuthTimeouts > preauthCap || st.PreAuthTimeouts == 0 {
		t.Errorf("evicted %d + reaped %d != %d", st.Rejected[rejectPreAuthEvicted], st.PreAuthTimeouts, conns)
	}
	testsupport.Eventually(t, 30*time.Second, "no connection waiting", func() bool { return p.b.Stats().Totals.PreAuthActive == 0 })

	c := p.dial(t)
	defer c.Close()
	go func() { _, _ = c.Write([]byte("after the flood")); _ = c.CloseWrite() }()
	if got, err := io.ReadAll(c); err != nil || string(got) != "after the flood" {
		t.Fatalf("session after the flood: %q, %v", got, err)
	}
}

// TestHalfClosedIdleTimeout: the client half-closes, the server neither
// answers nor closes; the session must be aborted with resets.
func TestHalfClosedIdleTimeout(t *testing.T) {
	lim := Limits{HalfClosedIdle: time.Second}
	release := make(chan struct{})
	p := startPair(t, pairOptions{limitsA: lim, limitsB: lim}, func(c *net.TCPConn) {
		defer c.Close()
		_, _ = io.Copy(io.Discard, c)
		<-release
	})
	t.Cleanup(func() { close(release) })
	c := p.dial(t)
	defer c.Close()
	if _, err := c.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	_ = c.CloseWrite()
	_, err := io.Copy(io.Discard, c)
	if !isReset(err) {
		t.Fatalf("client saw %v, want a reset", err)
	}
	testsupport.Eventually(t, 30*time.Second, "aborts recorded", func() bool {
		return len(p.a.Stats().RecentAborts) > 0 && len(p.b.Stats().RecentAborts) > 0
	})
	idle := 0
	for _, ag := range []*Agent{p.a, p.b} {
		r := ag.Stats().RecentAborts[0]
		if r.Reason == AbortIdle {
			idle++
			if !strings.Contains(r.Error, "half-closed by the client") {
				t.Errorf("idle abort: %s", r.Error)
			}
		}
	}
	if idle == 0 {
		t.Errorf("no idle abort: %+v %+v", p.a.Stats().RecentAborts, p.b.Stats().RecentAborts)
	}
}

// TestClientResetNeverEndsCleanly resets the client while its agent is
// writing a download to it and its upload is idle. The agent's write to
// the client takes the reset's error, and its read of the client then
// sees only end of file: that must still end the session with a reset at
// the server, never with a FIN that makes the truncated upload look
// complete. Each round is one session.
//
// The end server writes too, so it cannot tell a FIN from a reset by its
// read alone either: at end of file it asks the kernel whether a FIN
// came (state CLOSE_WAIT).
func TestClientResetNeverEndsCleanly(t *testing.T) {
	t.Parallel() // its own agents on loopback; mostly waiting on timeouts (see the Makefile's -parallel)
	const rounds, upload = 20, 64 << 10
	ends := make(chan error, rounds)
	p := startPair(t, pairOptions{streams: 4, chunk: 16384}, func(c *net.TCPConn) {
		defer c.Close()
		go func() {
			buf := make([]byte, 256<<10)
			for {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
		n, err := io.Copy(io.Discard, c)
		if err == nil && n < upload {
			err = io.ErrUnexpectedEOF
		}
		if err == nil {
			err = syscall.ECONNRESET
			if tcpState(t, c) == 8 { // CLOSE_WAIT
				err = io.EOF // a FIN: the upload ended cleanly
			}
		}
		ends <- err
	})
	for i := range rounds {
		c := p.dial(t)
		if _, err := c.Write(make([]byte, upload)); err != nil {
			t.Fatal(err)
		}
		// Let the download fill the client's receive buffer, so that its
		// agent is writing (or blocked writing) when the reset comes.
		testsupport.Eventually(t, 30*time.Second, "the download to back up", func() bool {
			for _, s := range p.a.Stats().Sessions {
				if s.BytesDown > 1<<20 {
					return true
				}
			}
			return false
		})
		time.Sleep(20 * time.Millisecond)
		reset(c)
		select {
		case err := <-ends:
			if errors.Is(err, io.EOF) {
				t.Errorf("round %d: the server saw the client's upload end cleanly; the client had reset", i)
			} else if !isReset(err) {
				t.Errorf("round %d: the server saw %v, want a reset", i, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the server saw no end of the upload", i)
		}
		testsupport.Eventually(t, 30*time.Second, "both agents to abort the session", func() bool {
			return p.a.Stats().Totals.SessionsAborted == uint64(i+1) && p.b.Stats().Totals.SessionsAborted == uint64(i+1)
		})
	}
}

// tcpState is the connection's tcpi_state, read with no help from the
// relay's own TCP_INFO code.
func tcpState(t *testing.T, c *net.TCPConn) uint8 {
	rc, err := c.SyscallConn()
	if err != nil {
		t.Error(err)
		return 0
	}
	var info *unix.TCPInfo
	if err := rc.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil || info == nil {
		t.Error(err)
		return 0
	}
	return info.State
}

// TestAbortedSessionsReturnTheirFrames resets the client in the middle of
// uploads the server takes slowly, so that the client's agent holds many
// frames (queued and sent, not acknowledged) when its session aborts. The
// session must put them back when it ends, not leave them for the garbage
// collector, which is off here: the process's frame memory in use comes
// back to where it was before each session.
func TestAbortedSessionsReturnTheirFrames(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	const rounds = 5
	p := startPair(t, pairOptions{streams: 4, chunk: 16384}, func(c *net.TCPConn) {
		defer c.Close()
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	base := FrameMemory().InUse
	for i := range rounds {
		c := p.dial(t)
		go func() {
			buf := make([]byte, 64<<10)
			for {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
		testsupport.Eventually(t, 30*time.Second, "the client's agent to hold frames", func() bool {
			return FrameMemory().InUse > base+1<<20
		})
		reset(c)
		testsupport.Eventually(t, 30*time.Second, "both agents to abort the session", func() bool {
			return p.a.Stats().Totals.SessionsAborted == uint64(i+1) && p.b.Stats().Totals.SessionsAborted == uint64(i+1)
		})
		testsupport.Eventually(t, 10*time.Second, "the frames to come back", func() bool {
			return FrameMemory().InUse <= base
		})
	}
}

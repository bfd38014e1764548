package relay

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

// countingSink is an end server that reads everything, counting and
// hashing it.
type countingSink struct {
	n    atomic.Int64
	mu   sync.Mutex
	sum  []byte
	done chan struct{}
}

func newCountingSink() *countingSink { return &countingSink{done: make(chan struct{})} }

func (cs *countingSink) handle(c *net.TCPConn) {
	defer close(cs.done)
	defer c.Close()
	h := sha256.New()
	buf := make([]byte, 256<<10)
	for {
		n, err := c.Read(buf)
		h.Write(buf[:n])
		cs.n.Add(int64(n))
		if err != nil {
			break
		}
	}
	cs.mu.Lock()
	cs.sum = h.Sum(nil)
	cs.mu.Unlock()
}

// checkAll waits for send to end and fails the test unless the sink
// holds every byte it sent, in order (call it once the sink is done).
func (cs *countingSink) checkAll(t *testing.T, send *asyncSend, size int64) {
	t.Helper()
	sent, err := send.wait()
	if err != nil {
		t.Fatal(err)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.n.Load() != size || !bytes.Equal(cs.sum, sent) {
		t.Fatalf("server got %d of %d bytes, hash equal %v", cs.n.Load(), size, bytes.Equal(cs.sum, sent))
	}
}

// checkMemory fails the test if a session of either agent holds more than
// its cap.
func checkMemory(t *testing.T, p *pair) {
	t.Helper()
	for _, ag := range []*Agent{p.a, p.b} {
		for _, s := range ag.Stats().Sessions {
			if s.Memory > s.MemoryMax || s.ReorderDepth > s.ReorderWindow+s.Streams {
				t.Errorf("%s side holds %d bytes of %d, reorder depth %d of window %d", s.Side, s.Memory, s.MemoryMax, s.ReorderDepth, s.ReorderWindow)
			}
		}
		if st := ag.Stats().Totals; st.MemoryReserved > st.MemoryLimit {
			t.Errorf("reserved %d above the agent cap %d", st.MemoryReserved, st.MemoryLimit)
		}
	}
}

// TestHeldStreamIsRoutedAround holds one stream back for seconds: the man
// in the middle forwards none of its frames toward the server side, and
// the client-side agent's view of it (TCP_INFO's loss-recovery state,
// which loopback cannot produce) says it is recovering. The scheduler must
// give it nothing new, the other streams must keep delivering while it is
// held, every session's memory must stay under its cap, and once released
// the transfer completes byte for byte.
func TestHeldStreamIsRoutedAround(t *testing.T) {
	const size = 48 << 20
	const heldIdx = 1
	var held atomic.Bool
	held.Store(true)
	release := make(chan struct{})
	sink := newCountingSink()
	p := startPair(t, pairOptions{streams: 4, chunk: 32768, queue: -1, encryption: EncryptionAESGCM, viaMITM: true,
		troubleA: timedOut(func(stream int) bool { return stream == heldIdx && held.Load() })}, sink.handle)
	p.mitm.hold = func(ms *mitmStream, dir stripe.Direction, _ []byte) {
		if ms.index == heldIdx && dir == stripe.Up && held.Load() {
			<-release
		}
	}
	c := p.dial(t)
	defer c.Close()
	sendDone := sendPatternAsync(c, 21, size)
	// Delivery goes on while the stream is held: at least a quarter of the
	// transfer reaches the server, and the hold lasts two seconds at least.
	holdEnd := time.Now().Add(2 * time.Second)
	testsupport.Eventually(t, 30*time.Second, "delivery while a stream is held", func() bool {
		checkMemory(t, p)
		return sink.n.Load() >= size/4 && time.Now().After(holdEnd)
	})
	var heldFrames uint64
	for _, s := range p.a.Stats().Sessions {
		for _, ps := range s.PerStream {
			if ps.Index == heldIdx {
				heldFrames = ps.FramesSent
				if ps.Troubles == 0 {
					t.Errorf("held stream never found in trouble")
				}
			}
		}
	}
	if heldFrames != 0 {
		t.Errorf("held stream was given %d frames while in recovery", heldFrames)
	}
	t.Logf("delivered %d bytes while stream %d was held", sink.n.Load(), heldIdx)
	held.Store(false)
	close(release)
	<-sink.done
	sink.checkAll(t, sendDone, size)
}

// TestRecoveringStreamsCarryWhenTheHealthyCannot puts three of four
// streams in loss recovery for a whole transfer while the one healthy
// stream cannot carry it. Streams in fast recovery take new chunks once
// the healthy stream lets the send queue back up (holdBack): at 1 % loss
// nearly every stream of a session is in fast recovery, and leaving them
// idle left the session to the few healthy ones. The man in the middle
// holds the healthy stream's first data frame until the three have
// carried held data frames: left idle, they would carry nothing while it
// is held, and the transfer would go no further (the test fails on that
// wait, however fast or slow the machine). Streams whose retransmission
// timed out still take nothing, however slow the healthy one (the man in
// the middle holds each of its data frames 2 ms, about 16 MB/s; they must
// carry nothing at all, which no speed of the machine changes). Either way
// the transfer completes byte for byte with memory under the caps.
func TestRecoveringStreamsCarryWhenTheHealthyCannot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state lossState
	}{{"fast recovery", lossFast}, {"timed out", lossTimeout}} {
		t.Run(tc.name, func(t *testing.T) {
			const size = 16 << 20
			const streams = 4
			// held: what the streams in fast recovery carry while the
			// healthy one is held, in frames of 32 KiB. The healthy
			// stream's socket buffers take in a few frames behind the one
			// held; the session's window (4 MiB, 128 frames) leaves the
			// rest to the other streams (over 100 frames on loopback),
			// and held is well under it.
			const held = 32
			var frames [streams]atomic.Int64
			release := make(chan struct{})
			var releaseOnce sync.Once
			sink := newCountingSink()
			p := startPair(t, pairOptions{streams: streams, chunk: 32768, queue: -1, encryption: EncryptionAESGCM, viaMITM: true,
				troubleA: func(stream int) lossState {
					if stream == 0 {
						return lossNone
					}
					return tc.state
				}}, sink.handle)
			// Before the man in the middle closes (cleanups run last
			// first), so that no frame stays held.
			t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
			p.mitm.hold = func(ms *mitmStream, dir stripe.Direction, frame []byte) {
				if dir != stripe.Up || frame[0] != byte(stripe.FrameData) || ms.index >= streams {
					return
				}
				frames[ms.index].Add(1)
				switch {
				case ms.index == 0 && tc.state == lossTimeout:
					time.Sleep(2 * time.Millisecond)
				case ms.index == 0:
					select {
					case <-release:
					default:
						// What its socket takes in behind the frame held
						// stays small, whatever the machine's TCP settings.
						_ = ms.a.SetReadBuffer(64 << 10)
						<-release
					}
				case frames[1].Load()+frames[2].Load()+frames[3].Load() >= held:
					releaseOnce.Do(func() { close(release) })
				}
			}
			c := p.dial(t)
			defer c.Close()
			sendDone := sendPatternAsync(c, 31, size)
			if tc.state == lossFast {
				testsupport.Eventually(t, 60*time.Second, "the streams in fast recovery to carry what the held healthy one cannot", func() bool {
					checkMemory(t, p)
					select {
					case <-release:
						return true
					default:
						return false
					}
				})
			}
			finished := false
			testsupport.Eventually(t, 60*time.Second, "the transfer to reach the server", func() bool {
				checkMemory(t, p)
				select {
				case <-sink.done:
					finished = true
				default:
				}
				return finished
			})
			sink.checkAll(t, sendDone, size)
			healthy, recovering := frames[0].Load(), int64(0)
			for i := 1; i < streams; i++ {
				recovering += frames[i].Load()
			}
			t.Logf("data frames: %d on the healthy stream, %d on the three in recovery", healthy, recovering)
			if tc.state == lossTimeout && recovering != 0 {
				t.Errorf("the streams whose retransmission timed out were given %d frames", recovering)
			}
		})
	}
}

// TestStreamHeldMidTransfer holds one stream's frames in the man in the
// middle for three seconds in the middle of a transfer, with no hint to
// the scheduler but what the stream's socket shows. Delivery waits for the
// held frame: the man in the middle read it, so the stream's TCP
// acknowledged it, and a frame that reached the far agent's TCP is not
// reinjected (TestBlockingFrameIsReinjected holds one that did not). But
// nothing is lost, nothing aborts, and memory stays under the caps
// throughout.
func TestStreamHeldMidTransfer(t *testing.T) {
	const size = 64 << 20
	const heldIdx = 2
	var holding sync.Once
	var heldAt atomic.Int64
	release := make(chan struct{})
	sink := newCountingSink()
	lim := Limits{StallTimeout: 20 * time.Second}
	p := startPair(t, pairOptions{streams: 6, chunk: 65536, queue: -1, encryption: EncryptionNone, viaMITM: true,
		limitsA: lim, limitsB: lim}, sink.handle)
	p.mitm.hold = func(ms *mitmStream, dir stripe.Direction, frame []byte) {
		if ms.index != heldIdx || dir != stripe.Up || frame[0] != byte(stripe.FrameData) ||
			binary.BigEndian.Uint64(frame[8:]) < 200 {
			return
		}
		holding.Do(func() { heldAt.Store(sink.n.Load() + 1) })
		<-release
	}
	c := p.dial(t)
	defer c.Close()
	sendDone := sendPatternAsync(c, 22, size)
	testsupport.Eventually(t, 30*time.Second, "the stream to be held", func() bool { return heldAt.Load() != 0 })
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		checkMemory(t, p)
	}
	t.Logf("delivered %d bytes while stream %d was held", sink.n.Load()-(heldAt.Load()-1), heldIdx)
	close(release)
	<-sink.done
	sink.checkAll(t, sendDone, size)
	for _, ag := range []*Agent{p.a, p.b} {
		if n := ag.Stats().Totals.SessionsAborted; n != 0 {
			t.Errorf("aborted: %+v", ag.Stats().RecentAborts)
		}
	}
}

// TestBlockingFrameIsReinjected holds one stream's frames in the man in
// the middle in the middle of a transfer, and the client-side agent's
// view of that stream (TCP_INFO's loss recovery, which loopback cannot
// produce) says it is recovering, as a stream whose segment was lost
// does. The frames stuck on it hold the server side's delivery; the
// client side must take them back and send them again on the healthy
// streams, so delivery goes on: the whole transfer reaches the server,
// byte for byte, while the stream is still held, without losing a stream
// (the stall timeout is far away) and with memory under the caps. The
// extra bytes are counted and bounded; the copies that arrive second,
// once the stream is released, are dropped as duplicates.
func TestBlockingFrameIsReinjected(t *testing.T) {
	const size = 64 << 20
	const heldIdx = 2
	const chunk = 65536
	var heldAt atomic.Int64
	var holding sync.Once
	release := make(chan struct{})
	sink := newCountingSink()
	lim := Limits{StallTimeout: 30 * time.Second}
	p := startPair(t, pairOptions{streams: 6, chunk: chunk, queue: -1, encryption: EncryptionAESGCM, viaMITM: true,
		limitsA: lim, limitsB: lim, troubleA: timedOut(func(stream int) bool { return stream == heldIdx && heldAt.Load() != 0 })}, sink.handle)
	p.mitm.hold = func(ms *mitmStream, dir stripe.Direction, frame []byte) {
		if ms.index != heldIdx || dir != stripe.Up || frame[0] != byte(stripe.FrameData) ||
			binary.BigEndian.Uint64(frame[8:]) < 200 {
			return
		}
		holding.Do(func() { heldAt.Store(sink.n.Load() + 1) })
		<-release
	}
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	c := p.dial(t)
	defer c.Close()
	sendDone := sendPatternAsync(c, 23, size)
	testsupport.Eventually(t, 30*time.Second, "the stream to be held", func() bool { return heldAt.Load() != 0 })
	select {
	case <-sink.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("delivery stopped behind the held stream: %d of %d bytes reached the server, %d of them after the hold began",
			sink.n.Load(), size, sink.n.Load()-(heldAt.Load()-1))
	}
	checkMemory(t, p)
	sink.checkAll(t, sendDone, size)
	tot := p.a.Stats().Totals
	t.Logf("delivered %d bytes after the hold began; %d frames (%d bytes) reinjected", size-(heldAt.Load()-1), tot.HeadOfLineFrames, tot.HeadOfLineBytes)
	if tot.HeadOfLineFrames == 0 || tot.HeadOfLineBytes == 0 {
		t.Errorf("nothing reinjected: %+v", tot)
	}
	if limit := uint64(size/holBudgetDiv + holBudgetFrames*chunk); tot.HeadOfLineBytes > limit {
		t.Errorf("reinjected %d bytes, above the bound of %d", tot.HeadOfLineBytes, limit)
	}
	close(release)
	testsupport.Eventually(t, 30*time.Second, "the held copies dropped as duplicates", func() bool {
		return p.b.Stats().Totals.DuplicatesDropped > 0
	})
	testsupport.Eventually(t, 30*time.Second, "the session to complete at both agents", func() bool {
		return p.a.Stats().Totals.SessionsCompleted == 1 && p.b.Stats().Totals.SessionsCompleted == 1
	})
	for _, ag := range []*Agent{p.a, p.b} {
		st := ag.Stats().Totals
		if st.SessionsAborted != 0 {
			t.Errorf("aborted: %+v", ag.Stats().RecentAborts)
		}
		if st.StreamsLost != 0 {
			t.Errorf("%d streams lost: the held stream's frames were resent as a lost stream's, not reinjected", st.StreamsLost)
		}
	}
}

// creditFrame is a CREDIT frame in mode none, as the server-side agent
// would send it on a stream.
func creditFrame(stream int, ctl, credit uint64) []byte {
	f := make([]byte, stripe.HeaderSize+stripe.CreditBodySize)
	stripe.Header{Type: stripe.FrameCredit, Stream: uint16(stream), Length: stripe.CreditBodySize, Seq: stripe.ControlSeq(ctl)}.Put(f)
	stripe.PutCreditBody(f[stripe.HeaderSize:], credit)
	return f
}

// TestHostileCredit: with encryption none a man in the middle can write
// frames of its own. Credit that is absurd, goes backwards on a stream or
// skips the control sequence aborts the session as a protocol violation;
// a large credit within the rules lets the client side send more than the
// server side granted, and the server side refuses that. In no case does
// either agent hold more than its caps.
func TestHostileCredit(t *testing.T) {
	chunk := 16384
	initial := stripe.InitialCredit(4, chunk)
	cases := []struct {
		name   string
		frames [][]byte
		says   string // what the protocol abort says
	}{
		{"absurd", [][]byte{creditFrame(0, 0, 1<<62)}, "too far ahead"},
		{"backwards", [][]byte{creditFrame(1, 0, initial+10<<20), creditFrame(1, 1, initial+5<<20)}, "below an earlier one"},
		{"out of sequence", [][]byte{creditFrame(2, 3, initial+10<<20)}, "control sequence"},
		{"beyond the grant", [][]byte{creditFrame(0, 0, 1<<33)}, "beyond the credit"},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			stop := make(chan struct{})
			p := startPair(t, pairOptions{streams: 4, chunk: chunk, queue: -1, encryption: EncryptionNone, viaMITM: true},
				func(c *net.TCPConn) {
					// Reads nothing until the test ends: the server side's
					// window fills and it grants nothing more.
					<-stop
					_ = c.Close()
				})
			defer close(stop)
			// The server side's own control frames (CREDIT, ACK) are
			// dropped on the way, so they can neither collide with the
			// forged ones' control sequence nor raise the grant: what the
			// client side sees is the forged credit alone, whatever the
			// timing.
			p.mitm.onFrame = func(ms *mitmStream, dir stripe.Direction, frame []byte) [][]byte {
				if t := stripe.FrameType(frame[0]); dir == stripe.Down && (t == stripe.FrameCredit || t == stripe.FrameAck) {
					return nil
				}
				return [][]byte{frame}
			}
			c := p.dial(t)
			defer c.Close()
			if _, err := c.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			// Every stream up at both agents: the streams after 0 join
			// the running session, and a frame written into a stream's
			// handshake would break the handshake, not test the credit.
			testsupport.Eventually(t, 30*time.Second, "the session's every stream at both agents", func() bool {
				for _, ag := range []*Agent{p.a, p.b} {
					ss := ag.Stats().Sessions
					if len(ss) != 1 || ss[0].StreamsLive != uint64(ss[0].Streams) {
						return false
					}
				}
				return true
			})
			for _, f := range tc.frames {
				idx := int(binary.BigEndian.Uint16(f[2:]))
				if err := p.mitm.stream(t, idx).write(stripe.Down, f); err != nil {
					t.Fatal(err)
				}
			}
			go func() {
				buf := make([]byte, 1<<20)
				for {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
			// The agent that reads the bad credit (or the frames beyond the
			// grant) aborts as a protocol violation; the other then reads
			// its ABORT.
			testsupport.Eventually(t, 30*time.Second, "a protocol abort saying "+tc.says, func() bool {
				checkMemory(t, p)
				for _, ag := range []*Agent{p.a, p.b} {
					for _, r := range ag.Stats().RecentAborts {
						if r.Reason == AbortProtocol && strings.Contains(r.Error, tc.says) {
							return true
						}
					}
				}
				return false
			})
			_, _ = io.Copy(io.Discard, c)
		})
	}
}

// TestGrantBefore: the window's growth check compares what arrived with
// the grant the sender held a round trip ago, taken from the history of
// announced grants.
func TestGrantBefore(t *testing.T) {
	s := &session{sessionParams: sessionParams{streams: 4, chunkSize: 60000}, n: 4}
	initial := uint64(stripe.InitialFrames(4, 60000))
	t0 := time.Unix(1000, 0)
	if g := s.grantBeforeLocked(t0); g != initial {
		t.Fatalf("no grant yet: %d, want the initial window %d", g, initial)
	}
	for i := range grantHistory + 8 {
		s.grants[s.grantsLen%grantHistory] = grantAt{t0.Add(time.Duration(i) * time.Second), initial + uint64(10*(i+1))}
		s.grantsLen++
	}
	// The last grant at or before t.
	at := t0.Add(time.Duration(grantHistory+5)*time.Second + time.Millisecond)
	if g, want := s.grantBeforeLocked(at), initial+uint64(10*(grantHistory+6)); g != want {
		t.Errorf("grant before %v: %d, want %d", at, g, want)
	}
	// Older than the history: the oldest remembered grant, a lower bound.
	if g, want := s.grantBeforeLocked(t0), initial+uint64(10*9); g != want {
		t.Errorf("grant before the history: %d, want the oldest kept %d", g, want)
	}
}

// TestPeerWindows: a session may grow its window to the largest of the
// sessions that share its path (same peer, same side), so one that
// started later is not held below the first for ever; sessions with
// another peer or on the other side do not count.
func TestPeerWindows(t *testing.T) {
	mk := func(peer string, sd side, frames int64, chunk int) *session {
		s := &session{sessionParams: sessionParams{peer: peer, side: sd, chunkSize: chunk}}
		s.windowNow.Store(frames)
		return s
	}
	first := mk("agent-b", clientSide, 1390, 60000)
	late := mk("agent-b", clientSide, 101, 60000)
	other := mk("agent-c", clientSide, 5000, 60000)
	server := mk("agent-b", serverSide, 7000, 60000)
	small := mk("agent-b", clientSide, 300, 1000)
	notePeerWindows([]*session{first, late, other, server, small})
	for _, c := range []struct {
		name string
		s    *session
		want int64
	}{
		{"first", first, 1390 * 60000},
		{"late", late, 1390 * 60000},
		{"small chunks", small, 1390 * 60000},
		{"other peer", other, 5000 * 60000},
		{"other side", server, 7000 * 60000},
	} {
		if got := c.s.peerWindow.Load(); got != c.want {
			t.Errorf("%s: peer window %d bytes, want %d", c.name, got, c.want)
		}
	}
}

// asyncSend is a sendPattern running in its own goroutine.
type asyncSend struct {
	done chan struct{}
	sent []byte
	err  error
}

// sendPatternAsync sends size bytes of the seed's pattern on c, then
// half-closes it, in a goroutine of its own.
func sendPatternAsync(c *net.TCPConn, seed uint64, size int64) *asyncSend {
	a := &asyncSend{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.sent, a.err = sendPattern(c, seed, size, rand.New(rand.NewPCG(seed, 1)), false)
		_ = c.CloseWrite()
	}()
	return a
}

// wait returns what the sender sent (its hash) and its error, once it is done.
func (a *asyncSend) wait() ([]byte, error) {
	<-a.done
	return a.sent, a.err
}

// TestStallNear checks when a frame on a stream in recovery is worth a
// copy: only when the session would run out of credit, or of retention
// at its cap, within a round trip at its send rate.
func TestStallNear(t *testing.T) {
	const chunk = 60000
	// 500 Mbit/s for 200 ms is 12.5 MB: 208.3 frames, so 209 are soon.
	const soon = 209
	fresh := func() *session {
		s := &session{sessionParams: sessionParams{chunkSize: chunk}}
		s.pathRTT.Store(int64(200 * time.Millisecond))
		s.rateSent.Store(f64bits(500e6))
		s.dataSent.Store(1000)
		s.retainFrames.Store(4096)
		return s
	}
	cases := []struct {
		name     string
		set      func(s *session)
		retained int
		want     bool
	}{
		{"no RTT yet", func(s *session) { s.pathRTT.Store(0); s.creditFrames.Store(1 << 20) }, 0, true},
		{"no rate yet", func(s *session) { s.rateSent.Store(0); s.creditFrames.Store(1 << 20) }, 0, true},
		{"credit for a round trip", func(s *session) { s.creditFrames.Store(1000 + soon) }, 100, false},
		{"credit for less", func(s *session) { s.creditFrames.Store(1000 + soon - 1) }, 100, true},
		{"credit used up", func(s *session) { s.creditFrames.Store(1000) }, 100, true},
		{"retention can grow", func(s *session) { s.creditFrames.Store(1 << 20) }, 4000, false},
		{"retention at its cap, room for a round trip", func(s *session) {
			s.creditFrames.Store(1 << 20)
			s.retainFull.Store(true)
		}, 4096 - soon, false},
		{"retention at its cap, room for less", func(s *session) {
			s.creditFrames.Store(1 << 20)
			s.retainFull.Store(true)
		}, 4096 - soon + 1, true},
	}
	for _, tc := range cases {
		s := fresh()
		tc.set(s)
		if got := s.stallNear(tc.retained); got != tc.want {
			t.Errorf("%s: stallNear(%d) = %v, want %v", tc.name, tc.retained, got, tc.want)
		}
	}
}

// TestWindowBoundCoversUnsentFrames checks how far a receive window may
// grow by the path: growthRTTs round trips at the arrival peak plus what
// the sender's streams hold unsent at their TCP_NOTSENT_LOWAT floor, or a
// larger window among the sessions sharing the path.
func TestWindowBoundCoversUnsentFrames(t *testing.T) {
	// 500 Mbit/s of 60000-byte frames: 1041.67 frames/s; 4 round trips of
	// 50 ms carry 208.3 of them.
	const peak = 500e6 / 8 / 60000
	cases := []struct {
		name       string
		peak       float64
		rtt        time.Duration
		streams    int
		chunk      int
		peerWindow int64
		want       float64
	}{
		{"64 stripes at 50 ms: two unsent chunks each", peak, 50 * time.Millisecond, 64, 60000, 0, 4*peak*0.05 + 128},
		{"one stripe", peak, 50 * time.Millisecond, 1, 60000, 0, 4*peak*0.05 + 2},
		{"small chunks: the 64 KiB floor", 1000, 200 * time.Millisecond, 8, 16384, 0, 800 + 8*4},
		{"no arrivals yet: the unsent part alone", 0, 200 * time.Millisecond, 16, 60000, 0, 32},
		{"a larger window beside it", peak, 50 * time.Millisecond, 64, 60000, 600 * 60000, 600},
		{"a smaller window beside it", peak, 50 * time.Millisecond, 64, 60000, 10 * 60000, 4*peak*0.05 + 128},
	}
	for _, tc := range cases {
		got := windowBound(tc.peak, tc.rtt, tc.streams, tc.chunk, tc.peerWindow)
		if d := got - tc.want; d > 1e-6 || d < -1e-6 {
			t.Errorf("%s: windowBound = %.3f frames, want %.3f", tc.name, got, tc.want)
		}
	}
}

// creditTestSession is a session of 4 streams of 60000-byte chunks with
// a reassembler of reasmWindow frames, enough for grants and the window's
// growth checks without streams or an agent.
func creditTestSession(t *testing.T, reasmWindow int) *session {
	t.Helper()
	reasm, err := stripe.NewReassembler[*chunk](4, reasmWindow)
	if err != nil {
		t.Fatal(err)
	}
	return &session{sessionParams: sessionParams{streams: 4, chunkSize: 60000}, n: 4, reasm: reasm, ctlWake: make(chan struct{}, 1)}
}

// TestCreditRoundTrip: a grant to a sender that had used all its credit
// starts a sample, which the first frame beyond that sender's old grant
// ends; a grant to a sender that still had credit starts none; a sample
// far beyond the path's round trip (an end host that paused) is not
// kept; the window's growth takes the median of the last samples.
func TestCreditRoundTrip(t *testing.T) {
	s := creditTestSession(t, 65)
	s.pathRTT.Store(int64(time.Millisecond))

	// The sender holds credit to 16 and has sent up to 10: a grant to 32
	// finds it still sending, so it times nothing.
	s.window, s.lastGrant, s.highest = 32, 16, 10
	s.grantLocked()
	if s.lastGrant != 32 || !s.probeAt.IsZero() {
		t.Fatalf("grant to 32 with credit left: last grant %d, probe %v; want 32 and no probe", s.lastGrant, s.probeAt)
	}
	// Frame 31 arrived: the sender used all of 32. The next grant times
	// the trip to the first frame beyond 32.
	s.highest = 32
	s.window = 64
	s.grantLocked()
	if s.lastGrant != 64 || s.probeAt.IsZero() || s.probeEdge != 32 {
		t.Fatalf("grant to 64 after the sender ran out: last grant %d, probe %v at edge %d; want 64 and a probe at 32", s.lastGrant, s.probeAt, s.probeEdge)
	}
	at := s.probeAt
	// Another grant while the probe is open leaves it as it is.
	s.highest, s.window = 64, 96
	s.grantLocked()
	if s.lastGrant != 96 || !s.probeAt.Equal(at) || s.probeEdge != 32 {
		t.Fatalf("grant to 96 with a probe open: last grant %d, probe at edge %d (moved: %v); want 96 and the probe kept", s.lastGrant, s.probeEdge, !s.probeAt.Equal(at))
	}
	s.noteFrameLocked(31, at.Add(time.Millisecond))
	if s.creditLen != 0 {
		t.Fatalf("a frame below the edge ended the sample")
	}
	s.noteFrameLocked(40, at.Add(3*time.Millisecond))
	if s.creditLen != 1 || s.creditRTTs[0] != 3*time.Millisecond || !s.probeAt.IsZero() {
		t.Fatalf("after the frame beyond the edge: %d samples, first %v, probe %v; want one of 3ms and no probe", s.creditLen, s.creditRTTs[0], s.probeAt)
	}
	if got := s.creditRTTLocked(); got != 3*time.Millisecond {
		t.Errorf("credit RTT after one sample: %v, want 3ms", got)
	}
	if got := time.Duration(s.creditRTT.Load()); got != 3*time.Millisecond {
		t.Errorf("the growth check's copy of the credit RTT: %v, want 3ms", got)
	}

	// A second's wait on a 1 ms path is a pause, not a round trip.
	s.probeAt, s.probeEdge = at, 64
	s.noteFrameLocked(64, at.Add(time.Second))
	if s.creditLen != 1 || !s.probeAt.IsZero() {
		t.Errorf("a 1 s sample on a 1 ms path: %d samples kept, probe %v; want it dropped and the probe ended", s.creditLen, s.probeAt)
	}

	// Samples of 2 to 9 ms (the 3 ms one pushed out): the median of the
	// last eight is the fifth smallest, 6 ms.
	for ms := 2; ms <= 9; ms++ {
		s.probeAt, s.probeEdge = at, 100
		s.noteFrameLocked(100, at.Add(time.Duration(ms)*time.Millisecond))
	}
	if got := s.creditRTTLocked(); got != 6*time.Millisecond {
		t.Errorf("credit RTT of 2..9 ms: %v, want the median 6ms", got)
	}
	if got := time.Duration(s.creditRTT.Load()); got != 6*time.Millisecond {
		t.Errorf("the growth check's copy of the credit RTT: %v, want 6ms", got)
	}
}

// TestWindowWaitsForARoundTrip: until a round trip is known (no tick's
// srtt, no credit sample), a window that limits its session does not
// grow, however often it is looked at: checks every growthCheck would
// otherwise double it every 10 ms, up to the largest window on the path.
func TestWindowWaitsForARoundTrip(t *testing.T) {
	s := creditTestSession(t, 33)
	s.established.Store(true)
	s.window, s.windowCap, s.lastGrant, s.highest = 32, 1<<20, 32, 32
	s.granted.Store(32)
	s.peerWindow.Store(4096 * 60000)
	now := time.Unix(1000, 0)
	for i := range 100 {
		s.windowLimited, s.hostWaiting = true, true
		s.framesArrived.Add(32)
		s.growTick(now.Add(time.Duration(i) * growthCheck))
	}
	if s.window != 32 || s.windowNow.Load() != 0 {
		t.Errorf("window %d (announced %d) after a second of checks with no round trip known, want 32 unchanged", s.window, s.windowNow.Load())
	}
}

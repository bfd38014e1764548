package relay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// killMiB is the volume of each direction in TestTransferSurvivesStreamKills:
// RELAY_KILL_MIB, 1024 (1 GiB) unless set.
func killMiB(t *testing.T) int64 {
	if v := os.Getenv("RELAY_KILL_MIB"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("RELAY_KILL_MIB=%q", v)
		}
		return n
	}
	if testing.Short() {
		return 64
	}
	return 1024
}

// killer resets streams between the agents until stopped: every every ..
// every+spread it picks 1 .. n-1 stream indices at random and resets their
// current connections, so at times all but one stream are down at once.
func killer(p *pair, n int, seed uint64, every, spread time.Duration) (stop func() int) {
	done := make(chan struct{})
	var kills atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 7))
		for {
			select {
			case <-done:
				return
			case <-time.After(every + rand.N(spread)):
			}
			cur := p.mitm.current()
			k := 1 + rng.IntN(n-1)
			for _, i := range rng.Perm(n)[:k] {
				if ms, ok := cur[i]; ok {
					reset(ms.a)
					reset(ms.b)
					kills.Add(1)
				}
			}
		}
	}()
	return func() int {
		close(done)
		wg.Wait()
		return int(kills.Load())
	}
}

// TestTransferSurvivesStreamKills moves RELAY_KILL_MIB (1 GiB by default)
// in each direction at once while a fault injector between the agents
// keeps resetting streams, up to all but one at a time. Every byte must
// arrive in order at both ends (sha256), the session must complete at
// both agents, frames must have been sent again, and the client side must
// have replaced streams. It replaces "one of 64 streams reset aborts both
// agents": losing a stream no longer fails a session.
func TestTransferSurvivesStreamKills(t *testing.T) {
	t.Parallel() // its own agents and path; mostly waiting on resets and timeouts
	const streams = 8
	size := killMiB(t) << 20
	lim := Limits{StallTimeout: 5 * time.Second, ReconnectTimeout: 20 * time.Second, HalfClosedIdle: time.Minute}
	p := startPair(t, pairOptions{streams: streams, chunk: 60000, viaMITM: true, limitsA: lim, limitsB: lim}, nil)
	stop := killer(p, streams, 1, 100*time.Millisecond, 300*time.Millisecond)
	start := time.Now()
	res := duplex(t, p, 99, size, size-12345, false)
	kills := stop()
	elapsed := time.Since(start)
	res.check(t, size, size-12345)
	testsupport.Eventually(t, 30*time.Second, "both agents to complete the session", func() bool {
		return p.a.Stats().Totals.SessionsCompleted == 1 && p.b.Stats().Totals.SessionsCompleted == 1
	})
	ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
	t.Logf("%d MiB each way in %v under %d stream resets", size>>20, elapsed.Round(time.Millisecond), kills)
	t.Logf("client side: lost %d, replaced %d, reinjected %d frames / %d bytes, duplicates dropped %d",
		ta.StreamsLost, ta.StreamsReplaced, ta.ReinjectedFrames, ta.ReinjectedBytes, ta.DuplicatesDropped)
	t.Logf("server side: lost %d, replaced %d, reinjected %d frames / %d bytes, duplicates dropped %d",
		tb.StreamsLost, tb.StreamsReplaced, tb.ReinjectedFrames, tb.ReinjectedBytes, tb.DuplicatesDropped)
	if ta.SessionsAborted+tb.SessionsAborted != 0 {
		t.Errorf("aborts: %+v %+v", p.a.Stats().RecentAborts, p.b.Stats().RecentAborts)
	}
	if ta.ReinjectedBytes == 0 || tb.ReinjectedBytes == 0 {
		t.Errorf("reinjected bytes: client side %d, server side %d; want both > 0", ta.ReinjectedBytes, tb.ReinjectedBytes)
	}
	if ta.StreamsReplaced == 0 || tb.StreamsReplaced == 0 || ta.StreamsLost == 0 {
		t.Errorf("streams lost %d, replaced %d (client side), admitted %d (server side)", ta.StreamsLost, ta.StreamsReplaced, tb.StreamsReplaced)
	}
	if ta.BytesUp != uint64(size) || tb.BytesDown != uint64(size-12345) {
		t.Errorf("counted %d up at the client side, %d down at the server side", ta.BytesUp, tb.BytesDown)
	}
}

// TestSilentStreamReplaced freezes one stream between the agents without
// closing it (its frames stop, its connection stays up). Past the stall
// timeout the receiver resets it, its frames go on the other streams, the
// client side replaces it and the transfer completes intact.
//
// The freeze is armed only once the first part of the upload has reached
// the end server; the stream that carries the next data frame is frozen.
// So the frozen frame is a first copy written to an idle stream (its TCP
// acknowledged it at once: no head-of-line reinjection took it back and
// delivered it elsewhere, which would leave nothing for the stall timeout
// to find). The client then holds the rest of its upload until the
// server side lost the stream and the replacement joined: the session
// cannot complete first (it did, at times, when the whole transfer went
// round the frozen stream before the stall timeout).
func TestSilentStreamReplaced(t *testing.T) {
	lim := Limits{StallTimeout: time.Second, HalfClosedIdle: time.Minute}
	log, logs := infoLogger(t)
	p := startPair(t, pairOptions{streams: 8, chunk: 16384, queue: 2, viaMITM: true, limitsA: lim, limitsB: lim, logger: log}, nil)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var armed atomic.Bool
	var frozen atomic.Pointer[mitmStream]
	p.mitm.hold = func(ms *mitmStream, dir stripe.Direction, frame []byte) {
		if armed.Load() && dir == stripe.Up && frame[0] == byte(stripe.FrameData) &&
			frame[1]&stripe.FlagRetransmit == 0 && frozen.CompareAndSwap(nil, ms) {
			<-release // hold this frame and everything after it on this connection
		}
	}
	const prefix, up, down = 8 << 20, 32 << 20, 1 << 20
	var frozenAt int64 // bytes the client had written when the freeze came
	waited := false
	gate := func(written int64, got *atomic.Int64) error {
		switch {
		case written == prefix:
			if !waitFor(30*time.Second, func() bool { return got.Load() == prefix }) {
				return fmt.Errorf("the first %d bytes did not reach the server", prefix)
			}
			armed.Store(true)
		case frozenAt == 0 && frozen.Load() != nil:
			frozenAt = written
		case frozenAt != 0 && !waited && written >= frozenAt+2<<20:
			// Frames after the frozen one are held at the server side:
			// delivery waits on the frozen stream.
			waited = true
			if !waitFor(30*time.Second, func() bool {
				// Every stream lost replaced (an idle one may be lost
				// with the frozen one) and admitted at the server side.
				ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
				return tb.StreamsLost > 0 && ta.StreamsLost > 0 &&
					ta.StreamsReplaced >= ta.StreamsLost && tb.StreamsReplaced >= ta.StreamsReplaced
			}) {
				return fmt.Errorf("frozen stream not lost and replaced: %+v / %+v", p.a.Stats().Totals, p.b.Stats().Totals)
			}
		}
		return nil
	}
	res := gatedDuplex(t, p, 5, up, down, prefix, gate)
	res.check(t, up, down)
	if frozen.Load() == nil {
		t.Fatal("no stream was frozen")
	}
	testsupport.Eventually(t, 30*time.Second, "both agents to complete the session", func() bool {
		return p.a.Stats().Totals.SessionsCompleted == 1 && p.b.Stats().Totals.SessionsCompleted == 1
	})
	ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
	t.Logf("frozen after %d bytes; server side lost %d streams, client side replaced %d and reinjected %d bytes",
		frozenAt, tb.StreamsLost, ta.StreamsReplaced, ta.ReinjectedBytes)
	if tb.StreamsLost == 0 || ta.StreamsReplaced == 0 || tb.StreamsReplaced == 0 || ta.ReinjectedBytes == 0 {
		t.Errorf("want the frozen stream lost, replaced and its frames reinjected: %+v / %+v", ta, tb)
	}
	if tb.HandshakeFailures != 0 {
		t.Errorf("server side counted %d handshake failures", tb.HandshakeFailures)
	}
	if n := ta.SessionsAborted + tb.SessionsAborted; n != 0 {
		t.Errorf("%d aborts: %+v %+v", n, p.a.Stats().RecentAborts, p.b.Stats().RecentAborts)
	}
	// Each side's last log line tells the same story: the streams it lost
	// and replaced, and what it sent again.
	for side, want := range map[string]map[string]uint64{
		"client": {"streams_lost": ta.StreamsLost, "streams_replaced": ta.StreamsReplaced, "reinjected_bytes": ta.ReinjectedBytes},
		"server": {"streams_lost": tb.StreamsLost, "streams_replaced": tb.StreamsReplaced, "reinjected_bytes": tb.ReinjectedBytes},
	} {
		line := completedLine(t, logs.String(), side)
		for key, v := range want {
			if got := logField(line, key); got != strconv.FormatUint(v, 10) {
				t.Errorf("%s side's completion line: %s=%q, want %d (%s)", side, key, got, v, line)
			}
		}
		for _, key := range []string{"window", "reorder_depth_max", "credit_waits", "streams_chosen", "head_of_line_bytes", "duplicates"} {
			if logField(line, key) == "" {
				t.Errorf("%s side's completion line has no %s: %s", side, key, line)
			}
		}
	}
}

// completedLine is the one "relay: session completed" line of side
// (client or server) in a text log.
func completedLine(t *testing.T, log, side string) string {
	t.Helper()
	var found []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `msg="relay: session completed"`) && logField(line, "side") == side {
			found = append(found, line)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d completion lines of the %s side, want 1:\n%s", len(found), side, strings.Join(found, "\n"))
	}
	return found[0]
}

// logField is the value of key=value in a slog text line, or "".
func logField(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// TestCompleteSessionEndsWithSilentStream: one stream goes silent toward
// the server side for good (the man in the middle forwards none of its
// frames and keeps its connection up) and the client side sees it in
// loss recovery, so it is given no data. Every byte goes on the other
// streams and is acknowledged both ways: nothing on the silent stream is
// missing, so no stall timeout fires for it, and the peer's final ACK and
// FIN on it never arrive. The session must still complete at both agents,
// counted as completed, not aborted, with no stream counted lost, and its
// streams closed. The bound is no timing claim: before, the server side
// waited for that FIN for ever; it now waits a stall timeout at most.
func TestCompleteSessionEndsWithSilentStream(t *testing.T) {
	const silentIdx = 3
	lim := Limits{StallTimeout: 2 * time.Second, ReconnectTimeout: 3 * time.Second, HalfClosedIdle: time.Minute}
	p := startPair(t, pairOptions{streams: 8, chunk: 16384, viaMITM: true, limitsA: lim, limitsB: lim,
		troubleA: timedOut(func(stream int) bool { return stream == silentIdx })}, nil)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var silent atomic.Pointer[mitmStream]
	var held atomic.Int64
	p.mitm.hold = func(ms *mitmStream, dir stripe.Direction, frame []byte) {
		// Its JOIN goes through (the stream is attached at both sides);
		// everything after it is held.
		if dir == stripe.Up && ms.index == silentIdx && frame[0] != byte(stripe.FrameJoin) &&
			(silent.CompareAndSwap(nil, ms) || silent.Load() == ms) {
			held.Add(1)
			<-release
		}
	}
	const up, down = 16 << 20, 4 << 20
	res := duplex(t, p, 7, up, down, false)
	res.check(t, up, down)
	bound := lim.StallTimeout + lim.ReconnectTimeout + 10*time.Second
	testsupport.Eventually(t, bound, "the silent stream to hold the client's final frame", func() bool { return held.Load() > 0 })
	testsupport.Eventually(t, bound, "both agents to complete the session", func() bool {
		return p.a.Stats().Totals.SessionsCompleted == 1 && p.b.Stats().Totals.SessionsCompleted == 1
	})
	ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
	if ta.SessionsAborted+tb.SessionsAborted != 0 {
		t.Errorf("aborts: %+v %+v", p.a.Stats().RecentAborts, p.b.Stats().RecentAborts)
	}
	if ta.StreamsLost+tb.StreamsLost != 0 {
		t.Errorf("streams lost: %d client side, %d server side; want the silent stream never missed", ta.StreamsLost, tb.StreamsLost)
	}
	if ta.SessionsActive+tb.SessionsActive+ta.StreamsActive+tb.StreamsActive != 0 {
		t.Errorf("left open: %+v / %+v", ta, tb)
	}
	t.Logf("silent stream held %d frames; head-of-line reinjected %d frames", held.Load(), ta.HeadOfLineFrames)
}

// waitFor polls cond every 5 ms until it holds or timeout passes; it
// reports whether it held. For goroutines other than the test's (which
// use testsupport.Eventually).
func waitFor(timeout time.Duration, cond func() bool) bool {
	for end := time.Now().Add(timeout); ; time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// gatedWriter hands what it writes to w in pieces that end at every
// multiple of step, and calls gate at each piece's end with the count
// written so far and the end server's received count.
type gatedWriter struct {
	w       io.Writer
	step    int64
	written int64
	got     *atomic.Int64
	gate    func(written int64, got *atomic.Int64) error
}

func (g *gatedWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		k := min(int64(len(b)), g.step-g.written%g.step)
		m, err := g.w.Write(b[:k])
		n += m
		g.written += int64(m)
		if err != nil {
			return n, err
		}
		if g.written%g.step == 0 {
			if err := g.gate(g.written, g.got); err != nil {
				return n, err
			}
		}
		b = b[k:]
	}
	return n, nil
}

// gatedDuplex is duplex (without pauses) whose upload passes a gate at
// every step bytes: the gate may hold the client's writes until the
// session got where the test wants it.
func gatedDuplex(t *testing.T, p *pair, seed uint64, up, down, step int64, gate func(written int64, got *atomic.Int64) error) duplexResult {
	t.Helper()
	var res duplexResult
	var got atomic.Int64
	srvDone := make(chan struct{})
	p.server.setHandler(func(c *net.TCPConn) {
		defer close(srvDone)
		defer c.Close()
		recvDone := make(chan struct{})
		go func() {
			defer close(recvDone)
			hr := &hashingReader{r: c, h: sha256.New()}
			n, err := io.Copy(io.Discard, countingReader{hr, &got})
			res.upN, res.upGot = n, hr.h.Sum(nil)
			if err != nil {
				res.srvErr = fmt.Errorf("server read: %w", err)
			}
		}()
		var err error
		res.downSent, err = sendPattern(c, seed+1, down, rand.New(rand.NewPCG(seed, 2)), false)
		if err != nil {
			res.srvErr = fmt.Errorf("server write: %w", err)
		} else {
			_ = c.CloseWrite()
		}
		<-recvDone
	})
	c := p.dial(t)
	defer c.Close()
	sendDone := make(chan struct{})
	go func() {
		defer close(sendDone)
		var err error
		g := &gatedWriter{w: c, step: step / 64, got: &got, gate: gate}
		res.upSent, err = sendPattern(g, seed, up, rand.New(rand.NewPCG(seed, 4)), false)
		if err != nil {
			res.clientErr = fmt.Errorf("client write: %w", err)
			reset(c)
			return
		}
		_ = c.CloseWrite()
	}()
	n, h, err := receiveAll(c, rand.New(rand.NewPCG(seed, 5)), false)
	res.downN, res.downGot = n, h
	<-sendDone
	if err != nil && res.clientErr == nil {
		res.clientErr = fmt.Errorf("client read: %w", err)
	}
	<-srvDone
	return res
}

// countingReader counts what passes through into n.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (cr countingReader) Read(p []byte) (int, error) {
	k, err := cr.r.Read(p)
	cr.n.Add(int64(k))
	return k, err
}

// TestAllStreamsLostAborts kills every stream at once and refuses new
// ones: after the reconnect timeout (not before) both agents abort, and
// both end hosts see a reset; the server got only what the client sent,
// in order.
func TestAllStreamsLostAborts(t *testing.T) {
	const reconnect = 2 * time.Second
	lim := Limits{StallTimeout: time.Minute, ReconnectTimeout: reconnect, HalfClosedIdle: time.Minute}
	p := startPair(t, pairOptions{streams: 8, chunk: 16384, viaMITM: true, limitsA: lim, limitsB: lim}, nil)
	w := uploadUntilAbort(t, p)
	testsupport.Eventually(t, 30*time.Second, "transfer under way", func() bool {
		st := p.b.Stats()
		return len(st.Sessions) == 1 && st.Sessions[0].BytesUp > 4<<20
	})
	p.mitm.refuse.Store(true)
	killed := time.Now()
	p.mitm.resetAll()
	ca, sa := w.checkAborted(t, p)
	t.Logf("aborted %v after the kill at the client side, %v at the server side: %s / %s",
		ca.At.Sub(killed).Round(time.Millisecond), sa.At.Sub(killed).Round(time.Millisecond), ca.Error, sa.Error)
	for _, r := range []AbortRecord{ca, sa} {
		if r.Reason != AbortStream || !strings.Contains(r.Error, "none re-established within "+reconnect.String()) {
			t.Errorf("%s side aborted for %s: %s", r.Side, r.Reason, r.Error)
		}
		if r.At.Sub(killed) < reconnect {
			t.Errorf("%s side aborted %v after the kill, before the reconnect timeout of %v", r.Side, r.At.Sub(killed), reconnect)
		}
	}
	if st := p.a.Stats().Totals; st.Rejected != nil && st.StreamsLost < 8 {
		t.Errorf("client side counted %d lost streams", st.StreamsLost)
	}
}

// TestFarAgentGoneAborts: the server-side agent is replaced by a fresh
// one (its process restarted: the session's state is gone). The client
// side's joins are refused as an unknown session, and it aborts at once
// instead of waiting out the reconnect timeout.
func TestFarAgentGoneAborts(t *testing.T) {
	lim := Limits{StallTimeout: time.Minute, ReconnectTimeout: time.Minute, HalfClosedIdle: time.Minute}
	p := startPair(t, pairOptions{streams: 4, chunk: 16384, viaMITM: true, limitsA: lim, limitsB: lim}, nil)
	w := uploadUntilAbort(t, p)
	testsupport.Eventually(t, 30*time.Second, "transfer under way", func() bool {
		st := p.b.Stats()
		return len(st.Sessions) == 1 && st.Sessions[0].BytesUp > 1<<20
	})
	fresh := startAgent(t, Config{
		Name:       "agent-b",
		DataListen: netip.MustParseAddrPort("127.0.0.1:0"),
		PSK:        testPSK,
		Server:     p.wlB,
		Limits:     lim,
	}, p.server.addr)
	p.mitm.setTarget(fresh.Addrs().Data)
	p.mitm.resetAll()
	testsupport.Eventually(t, 30*time.Second, "the client side to abort", func() bool { return len(p.a.Stats().RecentAborts) > 0 })
	r := p.a.Stats().RecentAborts[0]
	if r.Reason != AbortPeer || !strings.Contains(r.Error, "lost the session") {
		t.Errorf("client side aborted for %s: %s", r.Reason, r.Error)
	}
	// The old server-side agent still waits for joins; shut it down so
	// the end hosts see their resets.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.b.Shutdown(ctx)
	<-w.done
	if !sawReset(w.clientReadErr, w.clientWriteErr) {
		t.Errorf("client saw read %v, write %v; want a reset", w.clientReadErr, w.clientWriteErr)
	}
	if fresh.Stats().Totals.Rejected[rejectMismatch]+fresh.Stats().Totals.HandshakeFailures == 0 &&
		len(fresh.Stats().Sessions) != 0 {
		t.Errorf("the fresh agent took the join: %+v", fresh.Stats().Totals)
	}
}

// TestRetransmissionsDuplicatedAndReordered: while streams are reset,
// the path duplicates every retransmitted frame and swaps retransmitted
// frames pairwise (one left without a partner goes on 100 ms late). Duplicates are dropped, the order does not matter, and
// every byte arrives once, in order.
func TestRetransmissionsDuplicatedAndReordered(t *testing.T) {
	t.Parallel() // its own agents and path; mostly waiting on resets and timeouts
	for _, mode := range []string{EncryptionAESGCM, EncryptionNone} {
		t.Run(mode, func(t *testing.T) {
			lim := Limits{StallTimeout: 5 * time.Second, HalfClosedIdle: time.Minute}
			p := startPair(t, pairOptions{streams: 6, chunk: 16384, encryption: mode, viaMITM: true, limitsA: lim, limitsB: lim}, nil)
			var mu sync.Mutex
			type key struct {
				ms  *mitmStream
				dir stripe.Direction
			}
			held := map[key][]byte{}
			p.mitm.onFrame = func(ms *mitmStream, dir stripe.Direction, frame []byte) [][]byte {
				if frame[1]&stripe.FlagRetransmit == 0 {
					return [][]byte{frame}
				}
				mu.Lock()
				defer mu.Unlock()
				k := key{ms, dir}
				if prev, ok := held[k]; ok {
					delete(held, k)
					return [][]byte{frame, prev, frame, prev}
				}
				held[k] = frame
				// A retransmission no other follows on its stream (the
				// last of a transfer, or one frame taken back from a
				// stream in recovery) goes on, twice, a moment later:
				// held until its stream dies, a final one would go
				// round the streams for ever as the killer resets them.
				time.AfterFunc(100*time.Millisecond, func() {
					mu.Lock()
					cur, ok := held[k]
					if ok && &cur[0] == &frame[0] {
						delete(held, k)
					} else {
						ok = false
					}
					mu.Unlock()
					if ok {
						_ = ms.write(dir, frame)
						_ = ms.write(dir, frame)
					}
				})
				return nil
			}
			stop := killer(p, 6, 3, 20*time.Millisecond, 80*time.Millisecond)
			const up, down = 256 << 20, 128 << 20
			done := make(chan duplexResult)
			go func() { done <- duplex(t, p, 11, up, down, false) }()
			var res duplexResult
			select {
			case res = <-done:
			case <-time.After(2 * time.Minute):
				t.Fatal("transfer did not finish")
			}
			stop()
			// A held retransmission whose stream then died is sent again
			// anyway: nothing is lost by holding it.
			res.check(t, up, down)
			testsupport.Eventually(t, 30*time.Second, "both agents to complete", func() bool {
				return p.a.Stats().Totals.SessionsCompleted == 1 && p.b.Stats().Totals.SessionsCompleted == 1
			})
			ta, tb := p.a.Stats().Totals, p.b.Stats().Totals
			t.Logf("reinjected %d + %d frames, duplicates dropped %d + %d", ta.ReinjectedFrames, tb.ReinjectedFrames, ta.DuplicatesDropped, tb.DuplicatesDropped)
			if ta.DuplicatesDropped+tb.DuplicatesDropped == 0 {
				t.Errorf("no duplicate was dropped")
			}
		})
	}
}

// TestForgedStreamJoinsRefused mounts joins a key holder could try
// against a live session: a join for a session the agent does not hold
// (an authenticated refusal), a join whose JOIN frame proves another key
// (reset, counted, nothing attached), and a plain hello for a stream of
// the running session (refused). The live session goes on untouched.
func TestForgedStreamJoinsRefused(t *testing.T) {
	p := startPair(t, pairOptions{}, echo)
	c := p.dial(t)
	defer c.Close()
	if _, err := c.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	live := p.b.Stats().Sessions[0]
	var id stripe.SessionID
	if _, err := hex.Decode(id[:], []byte(live.ID)); err != nil {
		t.Fatal(err)
	}
	key, _ := stripe.NewHandshakeKey(testPSK)
	ofLive := func(join bool) func(h *stripe.Hello) {
		return func(h *stripe.Hello) { h.Session, h.Client, h.Stream, h.Join = id, live.Client, 3, join }
	}

	_, _, hb := helloFrom(t, p, func(h *stripe.Hello) { h.Join = true })
	conn, rb, err := sendHello(t, p.b.Addrs().Data, hb[:])
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if r, err := stripe.ParseReply(hb[:], rb[:], key); err != nil || r.Status != stripe.StatusUnknownSession {
		t.Errorf("join for an unknown session: %v, %v", r.Status, err)
	}

	_, _, hb = helloFrom(t, p, ofLive(false))
	conn, rb, err = sendHello(t, p.b.Addrs().Data, hb[:])
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if r, err := stripe.ParseReply(hb[:], rb[:], key); err != nil || r.Status != stripe.StatusDuplicateStream {
		t.Errorf("plain hello into the running session: %v, %v", r.Status, err)
	}

	before := p.b.Stats().Totals.HandshakeFailures
	_, eph, hb := helloFrom(t, p, ofLive(true))
	conn, rb, err = sendHello(t, p.b.Addrs().Data, hb[:])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := stripe.ParseReply(hb[:], rb[:], key)
	if err != nil || r.Status != stripe.StatusAccepted {
		t.Fatalf("join hello for the live session: %v, %v", r.Status, err)
	}
	secrets, err := stripe.Finish(key, eph, r.Ephemeral, hb[:], rb[:])
	if err != nil {
		t.Fatal(err)
	}
	confirm := secrets.Confirm()
	if _, err := conn.Write(confirm[:]); err != nil {
		t.Fatal(err)
	}
	codec, err := stripe.NewCodec(stripe.ModeAESGCM, &secrets.Keys, true, 3, 60000)
	if err != nil {
		t.Fatal(err)
	}
	wrong := secrets.SessionKey() // this stream's own, not the session's
	if err := sendJoin(conn, codec, secrets, &wrong, id); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, conn); !isReset(err) {
		t.Errorf("join with a bad proof: %v, want a reset", err)
	}
	testsupport.Eventually(t, 30*time.Second, "the bad join counted", func() bool {
		return p.b.Stats().Totals.HandshakeFailures > before
	})
	if st := p.b.Stats().Totals; st.StreamsReplaced != 0 || st.StreamsLost != 0 {
		t.Errorf("a forged join touched the session: lost %d, replaced %d", st.StreamsLost, st.StreamsReplaced)
	}

	msg := bytes.Repeat([]byte("still fine "), 10000)
	go func() { _, _ = c.Write(msg); _ = c.CloseWrite() }()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("session after forged joins: %d bytes, %v", len(got), err)
	}
}

// TestFarAgentFinAborts: every stream ends with a FIN in the middle of a
// transfer, as when the far agent's process exits and its kernel closes
// its sockets. That is no network failure to ride out: both agents abort
// at once (not after the reconnect timeout) and both end hosts get resets.
func TestFarAgentFinAborts(t *testing.T) {
	lim := Limits{StallTimeout: time.Minute, ReconnectTimeout: time.Minute, HalfClosedIdle: time.Minute}
	p := startPair(t, pairOptions{streams: 4, chunk: 16384, viaMITM: true, limitsA: lim, limitsB: lim}, nil)
	w := uploadUntilAbort(t, p)
	testsupport.Eventually(t, 30*time.Second, "transfer under way", func() bool {
		st := p.b.Stats()
		return len(st.Sessions) == 1 && st.Sessions[0].BytesUp > 1<<20
	})
	p.mitm.mu.Lock()
	for _, ms := range p.mitm.streams {
		_ = ms.a.CloseWrite()
		_ = ms.b.CloseWrite()
	}
	p.mitm.mu.Unlock()
	ca, sa := w.checkAborted(t, p)
	for _, r := range []AbortRecord{ca, sa} {
		if r.Reason != AbortPeer || !strings.Contains(r.Error, "far agent closed the stream") {
			t.Errorf("%s side aborted for %s: %s", r.Side, r.Reason, r.Error)
		}
	}
}

// TestRetentionWithinSessionCap: unacknowledged frames count in the
// session memory cap. With a small cap, a transfer in both directions
// (whose retention grows as far as the cap lets it) keeps every session's
// memory, window and retention together, under the cap, while streams are
// reset; and the transfer completes.
func TestRetentionWithinSessionCap(t *testing.T) {
	const streams, chunk = 4, 16384
	capBytes := 3 * stripe.SessionMemory(streams, chunk, stripe.InitialFrames(streams, chunk))
	lim := Limits{SessionMemory: capBytes, StallTimeout: 5 * time.Second, HalfClosedIdle: time.Minute}
	p := startPair(t, pairOptions{streams: streams, chunk: chunk, queue: -1, viaMITM: true, limitsA: lim, limitsB: lim}, nil)
	stop := killer(p, streams, 5, 200*time.Millisecond, 200*time.Millisecond)
	sampled := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			checkMemory(t, p)
			for _, ag := range []*Agent{p.a, p.b} {
				for _, s := range ag.Stats().Sessions {
					if s.Memory > capBytes || s.MemoryMax > capBytes {
						t.Errorf("%s side holds %d bytes (max %d), cap %d", s.Side, s.Memory, s.MemoryMax, capBytes)
					}
				}
			}
		}
	}()
	const up, down = 192 << 20, 128 << 20
	res := duplex(t, p, 21, up, down, false)
	close(done)
	<-sampled
	stop()
	res.check(t, up, down)
}

// TestHolDueTimesFramesFromLeavingTheSocket: the rule that takes a
// blocking frame back times a frame in flight from when it left its
// socket, not from its write, so a frame that merely queued behind its
// stream's others is not copied; a frame stuck on a recovering stream,
// or in flight twice over its RTT, still is.
func TestHolDueTimesFramesFromLeavingTheSocket(t *testing.T) {
	now := time.Unix(1000, 0)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	const rtt = 50 * time.Millisecond // slack: holSlackMin, 40 ms
	// The candidate's bytes are 1000..2000 of its stream.
	frame := func(written, left time.Duration) holCandidate {
		c := holCandidate{startOff: 1000, endOff: 2000, sentAt: ago(written)}
		if left >= 0 {
			c.leftAt = ago(left)
		}
		return c
	}
	inFlight := sendView{ok: true, rtt: rtt, acked: 500, sent: 2500}
	queued := sendView{ok: true, rtt: rtt, acked: 500, sent: 1500}
	unsent := sendView{ok: true, rtt: rtt, acked: 500, sent: 800}
	troubled := func(v sendView) sendView { v.troubled = true; return v }
	cases := []struct {
		name string
		c    holCandidate
		v    sendView
		near bool
		want bool
	}{
		{"queued 200 ms, left 30 ms ago, healthy", frame(200*time.Millisecond, 30*time.Millisecond), inFlight, true, false},
		{"queued 100 ms, left 10 ms ago, recovering", frame(100*time.Millisecond, 10*time.Millisecond), troubled(inFlight), true, false},
		{"left 95 ms ago, recovering, stall near", frame(200*time.Millisecond, 95*time.Millisecond), troubled(inFlight), true, true},
		{"left 95 ms ago, recovering, no stall near", frame(200*time.Millisecond, 95*time.Millisecond), troubled(inFlight), false, false},
		{"left 150 ms ago, healthy", frame(300*time.Millisecond, 150*time.Millisecond), inFlight, false, true},
		{"just seen to have left, not stamped", frame(500*time.Millisecond, -1), inFlight, true, false},
		{"still queued, written 200 ms ago, healthy", frame(200*time.Millisecond, -1), queued, false, false},
		{"still queued, written 250 ms ago, healthy", frame(250*time.Millisecond, -1), queued, false, true},
		{"still queued, written 100 ms ago, recovering, stall near", frame(100*time.Millisecond, -1), troubled(queued), true, true},
		{"unsent, recovering, stall near", frame(41*time.Millisecond, -1), troubled(unsent), true, true},
		{"unsent, recovering, no stall near", frame(41*time.Millisecond, -1), troubled(unsent), false, false},
		{"the far agent's TCP has it", frame(time.Second, time.Second), sendView{ok: true, rtt: rtt, acked: 2000, sent: 2500, troubled: true}, true, false},
		{"no socket view", frame(time.Second, time.Second), sendView{}, true, false},
	}
	for _, tc := range cases {
		if got := holDue(tc.c, tc.v, now, tc.near); got != tc.want {
			t.Errorf("%s: holDue = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestUnanswered: a stream counts as gone silent only while its TCP holds
// data for the peer and its own timer (a retransmission timeout, the
// Loss state, two zero-window probes in a row) stays unanswered, counted
// from the first tick that found the timer outstanding and never longer
// than since the last ACK; a tick that finds no timer outstanding starts
// the count again. The closed-window steps are what a stopped peer agent
// shows (found by review): each probe answered within a round trip, the
// gap between probes doubling.
func TestUnanswered(t *testing.T) {
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at   time.Duration
		info tcpInfo
		ok   bool
		want time.Duration
	}{
		{0, tcpInfo{}, true, 0}, // idle
		{time.Second, tcpInfo{unacked: 3, lastAckRecv: 40 * time.Second}, true, 0},                                  // written to after a long idle: no timer yet
		{2 * time.Second, tcpInfo{unacked: 3, rtoRetrans: 1, lastAckRecv: 41 * time.Second}, true, 0},               // the RTO fired: counted from here
		{5 * time.Second, tcpInfo{unacked: 3, rtoRetrans: 3, lastAckRecv: 44 * time.Second}, true, 3 * time.Second}, // still nothing
		{6 * time.Second, tcpInfo{unacked: 3, rtoRetrans: 0, lastAckRecv: 10 * time.Millisecond}, true, 0},          // an ACK came
		{7 * time.Second, tcpInfo{unacked: 3, caState: tcpCALoss, lastAckRecv: 900 * time.Millisecond}, true, 0},    // Loss without an RTO counted (a shrunk window)
		{9 * time.Second, tcpInfo{unacked: 3, caState: tcpCALoss, lastAckRecv: 2900 * time.Millisecond}, true, 2 * time.Second},
		{10 * time.Second, tcpInfo{notsent: 9000, lastAckRecv: 100 * time.Millisecond}, true, 0},                     // a closed window, its probes answered
		{40 * time.Second, tcpInfo{notsent: 9000, probes: 1, lastAckRecv: 30 * time.Second}, true, 0},                // a probe in flight after a long gap
		{40*time.Second + 250*time.Millisecond, tcpInfo{notsent: 9000, lastAckRecv: 50 * time.Millisecond}, true, 0}, // ... answered
		{100 * time.Second, tcpInfo{notsent: 9000, probes: 1, lastAckRecv: 60 * time.Second}, true, 0},               // a probe lost: one is not enough
		{220 * time.Second, tcpInfo{notsent: 9000, probes: 2, lastAckRecv: 180 * time.Second}, true, 0},              // the next unanswered too: counted from here
		{223 * time.Second, tcpInfo{notsent: 9000, probes: 2, lastAckRecv: 183 * time.Second}, true, 3 * time.Second},
		{224 * time.Second, tcpInfo{}, false, 0}, // no TCP_INFO: never
		{225 * time.Second, tcpInfo{unacked: 1, rtoRetrans: 2, lastAckRecv: time.Minute}, true, 0},
		{228 * time.Second, tcpInfo{unacked: 1, rtoRetrans: 4, lastAckRecv: time.Minute}, true, 3 * time.Second},
	}
	st := &stream{}
	for i, s := range steps {
		if got := st.unanswered(t0.Add(s.at), s.info, s.ok); got != s.want {
			t.Errorf("step %d at %s (%+v): %s, want %s", i, s.at, s.info, got, s.want)
		}
	}
}

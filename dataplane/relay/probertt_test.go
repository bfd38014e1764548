package relay

import (
	"io"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"golang.org/x/sys/unix"
)

func TestProbingRTT(t *testing.T) {
	for _, c := range []struct {
		info tcpInfo
		want bool
	}{
		{tcpInfo{cwnd: 4}, true},
		{tcpInfo{cwnd: 2}, true},
		{tcpInfo{cwnd: 5}, false},
		{tcpInfo{cwnd: 0}, false},                // no TCP_INFO
		{tcpInfo{cwnd: 4, caState: 3}, false},    // Recovery: counted as recovering
		{tcpInfo{cwnd: 1, caState: 4}, false},    // Loss
		{tcpInfo{cwnd: 4, rtoRetrans: 1}, false}, // RTO retransmits outstanding
		{tcpInfo{cwnd: 400, caState: 0}, false},  // cruising
	} {
		if got := probingRTT(c.info); got != c.want {
			t.Errorf("probingRTT(%+v) = %v, want %v", c.info, got, c.want)
		}
	}
}

// bbrInfo reads TCP_CC_INFO of a connection running BBR.
func bbrInfo(t *testing.T, c *net.TCPConn) *unix.TCPBBRInfo {
	t.Helper()
	var info *unix.TCPBBRInfo
	if err := onSocket(c, func(fd int) (err error) {
		info, err = unix.GetsockoptTCPCCBBRInfo(fd, unix.IPPROTO_TCP, unix.TCP_CC_INFO)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return info
}

func congestionOf(t *testing.T, c *net.TCPConn) string {
	t.Helper()
	var cc string
	if err := onSocket(c, func(fd int) (err error) {
		cc, err = unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return cc
}

// TestRestartBBR restarts the BBR of a connection that has measured its
// bandwidth: BBR's state starts over (its bandwidth filter is empty, its
// gain start-up's) and the connection still runs BBR. A connection on
// another congestion control is left alone.
func TestRestartBBR(t *testing.T) {
	ours, theirs := loopbackPair(t)
	if err := onSocket(ours, func(fd int) error {
		return unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, "bbr")
	}); err != nil {
		t.Fatalf("setting BBR (the agents' tuning needs the tcp_bbr module): %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, theirs) }()
	if _, err := ours.Write(make([]byte, 8<<20)); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 5*time.Second, "BBR to measure the bandwidth", func() bool {
		b := bbrInfo(t, ours)
		return (b.Bw_lo != 0 || b.Bw_hi != 0) && b.Pacing_gain != 0
	})
	testsupport.Eventually(t, 5*time.Second, "the write to be acknowledged", func() bool {
		info, ok := readTCPInfo(ours)
		return ok && info.inFlight == 0 && info.notsent == 0
	})
	restarted, err := restartBBR(ours)
	if err != nil || !restarted {
		t.Fatalf("restartBBR: %v, %v; want a restart", restarted, err)
	}
	if cc := congestionOf(t, ours); cc != "bbr" {
		t.Fatalf("after the restart the connection runs %q", cc)
	}
	// Nothing is in flight, so no ACK has fed the new state yet: BBR
	// sets its gains on the first one.
	if b := bbrInfo(t, ours); b.Bw_lo != 0 || b.Bw_hi != 0 || b.Pacing_gain != 0 || b.Min_rtt == 0 {
		t.Errorf("after the restart: bandwidth %d/%d, pacing gain %d/256, min RTT %d us; want BBR's state new but for the min RTT",
			b.Bw_hi, b.Bw_lo, b.Pacing_gain, b.Min_rtt)
	}

	other, _ := loopbackPair(t)
	if err := onSocket(other, func(fd int) error {
		return unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, "reno")
	}); err != nil {
		t.Fatal(err)
	}
	if restarted, err := restartBBR(other); err != nil || restarted {
		t.Errorf("restartBBR of a Reno connection: %v, %v; want nothing done", restarted, err)
	}
	if cc := congestionOf(t, other); cc != "reno" {
		t.Errorf("a Reno connection runs %q after restartBBR", cc)
	}
}

// TestProbeRTTSpread uploads over 8 BBR streams: once the client side's
// start-up is over, each of its streams has its BBR restarted once and
// still runs BBR; the server side, with nothing to send, restarts none;
// every byte arrives.
func TestProbeRTTSpread(t *testing.T) {
	const streams = 8
	var received atomic.Int64
	p := startPair(t, pairOptions{streams: streams, chunk: 65536, queue: -1, congestion: "bbr"}, func(c *net.TCPConn) {
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		received.Add(n)
	})
	c := p.dial(t)
	up := startUpload(c)
	restarts := func(a *Agent) (at []int64, ccs []string) {
		a.mu.Lock()
		defer a.mu.Unlock()
		for s := range a.sessions {
			for _, st := range s.establishedStreams() {
				at = append(at, st.ccRestarted.Load())
				ccs = append(ccs, congestionOf(t, st.conn))
			}
		}
		return at, ccs
	}
	var at []int64
	var ccs []string
	testsupport.Eventually(t, 45*time.Second, "every client-side stream's BBR to be restarted", func() bool {
		at, ccs = restarts(p.a)
		return len(at) == streams && !slices.Contains(at, 0)
	})
	for i, cc := range ccs {
		if cc != "bbr" {
			t.Errorf("stream %d runs %q after its restart", i, cc)
		}
	}
	// When each restart came is housekeeping's timing, which a loaded
	// machine squeezes; the offsets it was given are
	// TestProbeRTTScheduleSpread's.
	if bAt, _ := restarts(p.b); slices.ContainsFunc(bAt, func(v int64) bool { return v != 0 }) {
		t.Errorf("the server side, with nothing to send, restarted streams: %v", bAt)
	}
	if err := up.finish(); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "every byte at the server", func() bool { return received.Load() == up.sent.Load() })
}

// TestProbeRTTScheduleSpread: when a session's start-up ends, housekeeping
// gives each of its streams its own restart offset, from
// probeRTTSpread/n to probeRTTSpread; nothing is scheduled while it
// starts up; a stream scheduled once is not scheduled again, and one that
// joined since (a replacement, or auto's next count) is scheduled alone
// at the next start-up's end.
func TestProbeRTTScheduleSpread(t *testing.T) {
	const n = 8
	s := &session{}
	streams := make([]*stream, n)
	for i := range streams {
		streams[i] = &stream{index: i}
	}
	t0 := time.Unix(1_000_000, 0)
	s.spreadProbeRTT(t0, streams)
	for i, st := range streams {
		if st.ccScheduled || !st.ccRestartAt.IsZero() {
			t.Fatalf("stream %d scheduled during start-up: at %v", i, st.ccRestartAt)
		}
	}
	s.pacer.cruising = true
	t1 := t0.Add(3 * time.Second)
	s.spreadProbeRTT(t1, streams)
	seen := map[time.Time]bool{}
	for i, st := range streams {
		off := st.ccRestartAt.Sub(t1)
		if !st.ccScheduled || off <= 0 || off > probeRTTSpread {
			t.Errorf("stream %d: scheduled %v at offset %v, want within (0, %v]", i, st.ccScheduled, off, probeRTTSpread)
		}
		if seen[st.ccRestartAt] {
			t.Errorf("stream %d shares its offset %v with another stream", i, off)
		}
		seen[st.ccRestartAt] = true
	}
	first, last := streams[0].ccRestartAt.Sub(t1), streams[n-1].ccRestartAt.Sub(t1)
	if first != probeRTTSpread/n || last != probeRTTSpread {
		t.Errorf("offsets run from %v to %v, want %v to %v", first, last, probeRTTSpread/n, probeRTTSpread)
	}

	// A replacement joins while the session cruises; the session starts
	// up again (more streams) and cruises once more.
	planned := make([]time.Time, n)
	for i, st := range streams {
		planned[i] = st.ccRestartAt
	}
	late := &stream{index: n}
	all := append(streams[:n:n], late)
	s.pacer.cruising = false
	s.spreadProbeRTT(t1.Add(time.Second), all)
	s.pacer.cruising = true
	t2 := t1.Add(2 * time.Second)
	s.spreadProbeRTT(t2, all)
	for i, st := range streams {
		if !st.ccRestartAt.Equal(planned[i]) {
			t.Errorf("stream %d scheduled again: %v, first %v", i, st.ccRestartAt, planned[i])
		}
	}
	if !late.ccScheduled || late.ccRestartAt.Sub(t2) != probeRTTSpread {
		t.Errorf("the stream that joined later: scheduled %v at offset %v, want %v", late.ccScheduled, late.ccRestartAt.Sub(t2), probeRTTSpread)
	}
}

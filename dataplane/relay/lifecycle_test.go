package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// hold is an end server that reads what it gets and keeps the connection
// open until released.
func hold(release <-chan struct{}) func(c *net.TCPConn) {
	return func(c *net.TCPConn) {
		defer c.Close()
		go func() { _, _ = io.Copy(io.Discard, c) }()
		<-release
	}
}

// expectReset reads from c until it fails and wants a reset.
func expectReset(t *testing.T, c *net.TCPConn, why string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if !isReset(err) {
		t.Fatalf("%s: client saw %v, want a reset", why, err)
	}
}

// dialExpectReset connects as a client and wants a reset; the agent may
// reset so fast that connect() itself reports it.
func dialExpectReset(t *testing.T, p *pair, why string) {
	t.Helper()
	c, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(p.entry))
	if isReset(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	expectReset(t, c, why)
}

func TestConfigValidate(t *testing.T) {
	good := Config{
		Name:       "agent-b",
		DataListen: netip.MustParseAddrPort("127.0.0.1:0"),
		PSK:        testPSK,
		Server: []Whitelist{{Name: "w", Clients: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
			Server: netip.MustParseAddr("10.1.1.1"), Port: 80, Streams: 4, ChunkSize: 1000, QueueLength: 2, PeerName: "agent-a"}},
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	bad := good
	bad.DataListen = netip.AddrPort{}
	bad.PSK = []byte("short")
	bad.Encryption = "rot13"
	bad.RelayCPUs = []int{-1}
	bad.Name = ""
	bad.Server = []Whitelist{{Name: "x", Server: netip.MustParseAddr("2001:db8::1"),
		Clients: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Streams: 100000, ChunkSize: 0, QueueLength: -1}}
	bad.Client = []Whitelist{{Name: "y", Server: netip.MustParseAddr("10.1.1.1"), Port: 80,
		Clients: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Streams: 1, ChunkSize: 1, QueueLength: 1, PeerName: "agent-b"}}
	err := bad.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"listen address", "pre-shared key", "rot13", "relay CPU -1", "address family",
		"no server port", "streams 100000", "chunk size 0", "queue length -1", `agent name ""`,
		`peer agent name ""`, "whitelist y: client-side entry without a peer address"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
	capped := good
	capped.Limits.SessionMemory = stripe.SessionMemory(4, 1000, stripe.InitialFrames(4, 1000)) - 1
	if err := capped.Validate(); err == nil || !strings.Contains(err.Error(), "memory cap") {
		t.Errorf("whitelist above the memory cap: %v", err)
	}
	if _, err := New(Config{Name: "a", DataListen: good.DataListen, PSK: testPSK, Congestion: "no-such-cc"}, nil); err == nil ||
		!strings.Contains(err.Error(), "no-such-cc") {
		t.Errorf("unknown congestion control accepted: %v", err)
	}
}

func TestSessionLimit(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	p := startPair(t, pairOptions{limitsA: Limits{MaxSessions: 1}}, hold(release))
	first := p.dial(t)
	defer first.Close()
	if _, err := first.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "first session established", func() bool {
		s := p.a.Stats().Sessions
		return len(s) == 1 && s[0].State == "established"
	})
	// Over the limit the connection is not accelerated: it is carried
	// direct to the server, not reset.
	second := p.dial(t)
	defer second.Close()
	if _, err := second.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "second connection carried direct", func() bool { return p.server.accepted() == 2 })
	if n := p.a.Stats().Totals.Rejected[rejectSessionLimit]; n != 1 {
		t.Errorf("session_limit rejections = %d", n)
	}
	if n := p.a.Stats().Totals.Fallbacks; n != 1 {
		t.Errorf("fallbacks = %d, want 1", n)
	}
}

// TestServerSideRefusals: the server-side agent refuses streams with an
// authenticated reason; the client-side agent records the reason and
// carries the client's connection direct, unaccelerated.
func TestServerSideRefusals(t *testing.T) {
	// The server side matches the flow (any loopback server) but imposes
	// its own shape and limits on what the client side asks for.
	smallEntry := func(e Whitelist) []Whitelist {
		e.Streams, e.ChunkSize, e.QueueLength = 1, 1, 1
		return []Whitelist{e}
	}
	otherClients := func(e Whitelist) []Whitelist {
		e.Clients = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
		return []Whitelist{e}
	}
	cases := []struct {
		name   string
		opt    pairOptions
		reason string
		reject string
	}{
		{"not whitelisted", pairOptions{serverWhitelist: otherClients}, "not whitelisted", rejectNotWhitelisted},
		{"other shape", pairOptions{streams: 8, serverWhitelist: smallEntry}, "session shape", rejectShape},
		{"memory cap", pairOptions{streams: 8, limitsB: Limits{Memory: 1 << 20}}, "memory cap", rejectMemoryLimit},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := startPair(t, tc.opt, echo)
			roundTrip(t, p.entry, "carried direct: "+tc.name)
			testsupport.Eventually(t, 30*time.Second, "abort recorded", func() bool { return len(p.a.Stats().RecentAborts) == 1 })
			r := p.a.Stats().RecentAborts[0]
			if r.Reason != AbortSetup || !strings.Contains(r.Error, tc.reason) {
				t.Errorf("client-side abort %s: %s", r.Reason, r.Error)
			}
			if n := p.b.Stats().Totals.Rejected[tc.reject]; n == 0 {
				t.Errorf("server side counted no %s rejection: %v", tc.reject, p.b.Stats().Totals.Rejected)
			}
			if n := p.a.Stats().Totals.Fallbacks; n != 1 {
				t.Errorf("fallbacks = %d, want 1", n)
			}
			if p.server.accepted() != 1 {
				t.Errorf("the server accepted %d connections, want the direct one", p.server.accepted())
			}
			if len(p.b.Stats().RecentAborts) != 0 {
				t.Errorf("the server side ran a session: %+v", p.b.Stats().RecentAborts)
			}
		})
	}
}

func TestServerUnreachableResetsClient(t *testing.T) {
	p := startPair(t, pairOptions{}, echo)
	_ = p.server.ln.Close() // nothing listens at the server address now
	dialExpectReset(t, p, "server refused")
	expectServerUnreachableAborts(t, p)
}

// TestServerUnreachableAbortAfterRefusal: the server-side agent's ABORT,
// which names the unreachable server, reaches the client side only after
// that agent refused one of the session's joins as an unknown session (it
// had aborted): the client side still aborts for the reason in the ABORT,
// not for a lost session.
func TestServerUnreachableAbortAfterRefusal(t *testing.T) {
	p := startPair(t, pairOptions{viaMITM: true}, echo)
	_ = p.server.ln.Close()
	// Set under the mitm's lock, which every connection takes before its
	// pumps start: the dial below reaches the mitm through the agents'
	// sockets, which order nothing for the race detector.
	p.mitm.mu.Lock()
	p.mitm.hold = func(ms *mitmStream, dir stripe.Direction, frame []byte) {
		if dir != stripe.Down || stripe.FrameType(frame[0]) != stripe.FrameAbort {
			return
		}
		// Bounded: a run in which no join is refused goes on (and
		// fails below: it did not mount the race).
		for range 200 {
			if p.b.Stats().Totals.Rejected[rejectMismatch] > 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		// The refusal (a handshake reply, not held) has been written;
		// let it reach the client side first.
		time.Sleep(50 * time.Millisecond)
	}
	p.mitm.mu.Unlock()
	dialExpectReset(t, p, "server refused")
	expectServerUnreachableAborts(t, p)
	if p.b.Stats().Totals.Rejected[rejectMismatch] == 0 {
		t.Errorf("no join was refused: %+v", p.b.Stats().Totals.Rejected)
	}
}

// expectServerUnreachableAborts checks that both sides aborted, each for
// the server-side agent's failure to connect to the server.
func expectServerUnreachableAborts(t *testing.T, p *pair) {
	t.Helper()
	testsupport.Eventually(t, 30*time.Second, "aborts recorded", func() bool {
		return len(p.a.Stats().RecentAborts) == 1 && len(p.b.Stats().RecentAborts) == 1
	})
	if r := p.b.Stats().RecentAborts[0]; r.Reason != AbortSetup || !strings.Contains(r.Error, "connect to server") {
		t.Errorf("server side: %s: %s", r.Reason, r.Error)
	}
	if r := p.a.Stats().RecentAborts[0]; !strings.Contains(r.Error, "connect to server") {
		t.Errorf("client side does not carry the server side's reason: %s: %s", r.Reason, r.Error)
	}
}

func TestStatsAndHealth(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	p := startPair(t, pairOptions{streams: 6, chunk: 4096, queue: 3, congestion: "reno", socketBuffer: 1 << 20}, hold(release))
	withHealth := p.b.cfg.Load().Config
	withHealth.PSK = testPSK
	withHealth.HealthListen = netip.MustParseAddrPort("127.0.0.1:0")
	if err := p.b.Update(withHealth); err != nil {
		t.Fatal(err)
	}
	health := p.b.Addrs().Health
	resp, err := http.Get("http://" + health.String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok" {
		t.Fatalf("healthz: %d %q", resp.StatusCode, body)
	}

	c := p.dial(t)
	defer c.Close()
	payload := make([]byte, 1<<20)
	if _, err := c.Write(payload); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "bytes counted at the server side", func() bool {
		s := p.b.Stats().Sessions
		return len(s) == 1 && s[0].BytesUp == uint64(len(payload))
	})
	testsupport.Eventually(t, 30*time.Second, "throughput computed", func() bool { return p.a.Stats().Sessions[0].ThroughputUp > 0 })
	// GET /sessions lists the live session for the controller's pins.
	resp, err = http.Get("http://" + health.String() + "/sessions")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if s := p.b.Stats().Sessions[0]; resp.StatusCode != 200 || string(body) != fmt.Sprintf("test %s %s\n", s.Client, s.Server) {
		t.Errorf("sessions: %d %q", resp.StatusCode, body)
	}
	for _, ag := range []*Agent{p.a, p.b} {
		st := ag.Stats()
		s := st.Sessions[0]
		if s.Streams != 6 || len(s.PerStream) != 6 || s.State != "established" || s.BytesUp != 1<<20 ||
			s.Client.Addr() != netip.MustParseAddr("127.0.0.1") || s.Server != p.server.addr || s.Whitelist != "test" {
			t.Errorf("%s side session stats: %+v", s.Side, s)
		}
		if s.Memory <= 0 || s.Memory > s.MemoryMax || s.Window <= 0 || s.ReorderWindow != s.Window/s.ChunkSize+1 {
			t.Errorf("%s side memory %d of %d, window %d bytes, reorder window %d", s.Side, s.Memory, s.MemoryMax, s.Window, s.ReorderWindow)
		}
		var frames uint64
		for _, ps := range s.PerStream {
			frames += ps.FramesSent + ps.FramesReceived
			if ps.RTT <= 0 || ps.CongestionWindow == 0 || !ps.Remote.IsValid() {
				t.Errorf("%s side stream %d: %+v", s.Side, ps.Index, ps)
			}
		}
		if frames == 0 {
			t.Errorf("%s side: no frames counted", s.Side)
		}
		if st.Totals.SessionsActive != 1 || st.Totals.StreamsActive != 6 || st.Totals.SessionsStarted != 1 {
			t.Errorf("%s side totals: %+v", s.Side, st.Totals)
		}
	}
	// The stream sockets carry the configured tuning.
	for _, ag := range []*Agent{p.a, p.b} {
		for _, st := range liveStreams(ag) {
			cc, rcv := sockopts(t, st.conn)
			if cc != "reno" || rcv < 1<<20 {
				t.Errorf("stream %d: congestion %q, SO_RCVBUF %d", st.index, cc, rcv)
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := p.b.Shutdown(ctx); err == nil || !strings.Contains(err.Error(), "aborted 1 sessions") {
		t.Errorf("shutdown with a live session: %v", err)
	}
	if _, err := http.Get("http://" + health.String() + "/healthz"); err == nil {
		t.Error("health endpoint still answers after shutdown")
	}
	expectReset(t, c, "agent shut down")
	if n := p.b.Stats().Totals.Aborts[AbortShutdown]; n != 1 {
		t.Errorf("shutdown aborts = %d", n)
	}
}

func liveStreams(a *Agent) []*stream {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*stream
	for s := range a.sessions {
		s.mu.Lock()
		for _, st := range s.streams {
			if st != nil {
				out = append(out, st)
			}
		}
		s.mu.Unlock()
	}
	return out
}

func sockopts(t *testing.T, c *net.TCPConn) (cc string, rcvbuf int) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var err1, err2 error
	_ = rc.Control(func(fd uintptr) {
		cc, err1 = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		rcvbuf, err2 = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
	})
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	return strings.TrimRight(cc, "\x00"), rcvbuf
}

// TestUpdateKeepsLiveSessions: a reload that drops the whitelist entry
// refuses new connections but lets the live one finish; a reload that
// cannot bind its new listener changes nothing.
func TestUpdateKeepsLiveSessions(t *testing.T) {
	p := startPair(t, pairOptions{}, echo)
	live := p.dial(t)
	defer live.Close()
	if _, err := live.Write([]byte("before")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(live, buf); err != nil {
		t.Fatal(err)
	}
	cfg := p.a.cfg.Load().Config
	cfg.PSK = testPSK
	withoutEntry := cfg
	withoutEntry.Client = nil
	if err := p.a.Update(withoutEntry); err != nil {
		t.Fatal(err)
	}
	if got := p.a.Addrs().Transparent; got != p.entry {
		t.Fatalf("unchanged listener moved from %s to %s", p.entry, got)
	}
	dialExpectReset(t, p, "connection after the entry was removed")

	// A listener that cannot bind leaves the old configuration in force.
	taken, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	broken := cfg
	broken.TransparentListen = taken.Addr().(*net.TCPAddr).AddrPort()
	if err := p.a.Update(broken); err == nil {
		t.Fatal("update onto a taken port succeeded")
	}
	if got := p.a.Addrs().Transparent; got != p.entry {
		t.Fatalf("failed update moved the listener to %s", got)
	}
	if len(p.a.cfg.Load().Client) != 0 {
		t.Fatal("failed update replaced the configuration")
	}

	// The live session still works end to end.
	go func() { _, _ = live.Write([]byte("after")); _ = live.CloseWrite() }()
	rest, err := io.ReadAll(live)
	if err != nil || string(rest) != "after" {
		t.Fatalf("live session after reloads: %q, %v", rest, err)
	}

	// Moving the listener works and the old address stops accepting.
	moved := cfg
	moved.TransparentListen = netip.MustParseAddrPort("127.0.0.2:0")
	if err := p.a.Update(moved); err != nil {
		t.Fatal(err)
	}
	if p.a.Addrs().Transparent == p.entry {
		t.Fatal("listener did not move")
	}
	if c, err := net.DialTimeout("tcp4", p.entry.String(), time.Second); err == nil {
		c.Close()
		t.Error("old listener still accepts")
	}
}

func TestShutdownDrainsFinishingSessions(t *testing.T) {
	p := startPair(t, pairOptions{}, echo)
	c := p.dial(t)
	defer c.Close()
	if _, err := c.Write([]byte("first ")); err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 6)
	if _, err := io.ReadFull(c, first); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- p.a.Shutdown(ctx)
	}()
	// New connections are refused while the live one finishes. A probe
	// that got in before Shutdown closed the listener is a session of its
	// own, which the shutdown aborts: count them.
	probes := 0
	testsupport.Eventually(t, 30*time.Second, "listener closed", func() bool {
		conn, err := net.DialTimeout("tcp4", p.entry.String(), time.Second)
		if err == nil {
			probes++
			conn.Close()
		}
		return err != nil
	})
	go func() { _, _ = c.Write([]byte("last words")); _ = c.CloseWrite() }()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "last words" {
		t.Fatalf("draining session: %q, %v", got, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown after the session finished: %v", err)
	}
	// The drained session completed; only probes that got in before the
	// listener closed were aborted, and for the shutdown.
	if st := p.a.Stats().Totals; st.SessionsCompleted != 1 || st.SessionsAborted > uint64(probes) ||
		st.SessionsAborted != st.Aborts["shutdown"] {
		t.Errorf("totals after drain (%d probes got in): %+v", probes, st)
	}
}

// TestRelayCPUsPinTheProcess pins to one CPU and checks every thread,
// then that Shutdown restores the original affinity.
func TestRelayCPUsPinTheProcess(t *testing.T) {
	orig, err := threadAffinity(0)
	if err != nil {
		t.Fatal(err)
	}
	testsupport.Require(t, len(orig) >= 2, "needs two CPUs to pin to a subset, has %v", orig)
	target := []int{orig[len(orig)-1]}
	a, err := New(Config{Name: "a", DataListen: netip.MustParseAddrPort("127.0.0.1:0"), PSK: testPSK, RelayCPUs: target}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = a.Shutdown(context.Background())
		}
	}()
	for _, tid := range threads(t) {
		got, err := threadAffinity(tid)
		if err != nil && !errors.Is(err, unix.ESRCH) {
			t.Fatal(err)
		}
		if err == nil && !slices.Equal(got, target) {
			t.Errorf("thread %d on CPUs %v, want %v", tid, got, target)
		}
	}
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if got, _ := threadAffinity(0); !slices.Equal(got, orig) {
		t.Errorf("affinity after shutdown %v, want %v", got, orig)
	}
}

func threads(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, e := range ents {
		if id, err := strconv.Atoi(e.Name()); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

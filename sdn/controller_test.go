package sdn_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
	"go.uber.org/goleak"
)

// running is a controller under test.
type running struct {
	*sdn.Controller
	stop func()
	// logs holds what it logged.
	logs *testsupport.LockedBuffer
}

func startController(t *testing.T, cfg sdn.Config) *running {
	t.Helper()
	logs := &testsupport.LockedBuffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, logs), &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := sdn.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("controller Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("controller did not stop")
		}
	}
	t.Cleanup(stop)
	return &running{c, stop, logs}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	if testing.Verbose() {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func switchStatus(c *sdn.Controller, name string) sdn.SwitchStatus {
	for _, s := range c.Status().Switches {
		if s.Name == name {
			return s
		}
	}
	return sdn.SwitchStatus{}
}

// waitConverged waits for a convergence after the given count and returns
// the switch status then.
func waitConverged(t *testing.T, c *sdn.Controller, name string, after uint64) sdn.SwitchStatus {
	t.Helper()
	var st sdn.SwitchStatus
	testsupport.Eventually(t, 30*time.Second, fmt.Sprintf("switch %s to converge (after %d)", name, after), func() bool {
		st = switchStatus(c, name)
		return st.Connected && st.Converges > after
	})
	if st.LastError != "" {
		t.Fatalf("switch %s: %s", name, st.LastError)
	}
	return st
}

// healthServer is an agent health endpoint whose answer the test flips.
type healthServer struct {
	*httptest.Server
	up atomic.Bool
	// sessions, when set, is the GET /sessions body.
	sessions atomic.Pointer[string]
}

func newHealthServer(t *testing.T) *healthServer {
	h := &healthServer{}
	h.up.Store(true)
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && h.up.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		if body := h.sessions.Load(); r.URL.Path == "/sessions" && body != nil && h.up.Load() {
			_, _ = w.Write([]byte(*body))
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *healthServer) addr() string { return strings.TrimPrefix(h.URL, "http://") }

// lab is one bridge with a client, a server and an agent attached.
type lab struct {
	inst                  *ovstest.Instance
	br                    *ovstest.Bridge
	client, server, agent *ovstest.Host
}

// serve accepts TCP connections on addr inside host h until the test ends.
func serve(t *testing.T, h *ovstest.Host, addr string) {
	var ln net.Listener
	if err := h.InNamespace(func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

func dialFrom(h *ovstest.Host, addr string, timeout time.Duration) error {
	return h.InNamespace(func() error {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err == nil {
			c.Close()
		}
		return err
	})
}

var reCounter = regexp.MustCompile(`counter packets (\d+)`)

// steeredSYNCounter counts, inside the agent's namespace, TCP packets for
// the server's whitelisted port: they reach the agent only if steered.
func steeredSYNCounter(t *testing.T, agent *ovstest.Host) func() int {
	return nftCounter(t, agent, "ip", "ip", "daddr", "10.10.1.20", "tcp", "dport", "5201")
}

// nftCounter counts, inside the agent's namespace, the packets of nftables
// family (ip or ip6) that match selects at prerouting, and returns a
// function that reads the count.
func nftCounter(t *testing.T, agent *ovstest.Host, family string, match ...string) func() int {
	t.Helper()
	for _, args := range [][]string{
		{"add", "table", family, "steer"},
		{"add", "chain", family, "steer", "pre", "{ type filter hook prerouting priority -300 ; }"},
		append(append([]string{"add", "rule", family, "steer", "pre"}, match...), "counter"),
	} {
		if out, err := agent.Exec("nft", args...); err != nil {
			t.Fatalf("nft %v: %v\n%s", args, err, out)
		}
	}
	return func() int {
		out, err := agent.Exec("nft", "list", "chain", family, "steer", "pre")
		if err != nil {
			t.Fatal(err)
		}
		m := reCounter.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no counter in %s", out)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
}

func compile(t *testing.T, sw flows.Switch, down ...string) []flows.Flow {
	t.Helper()
	sw, _ = flows.FailOpen(sw, func(a string) bool { return slices.Contains(down, a) })
	fs, err := flows.Compile(sw)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestControllerWithOVS runs the controller against a real ovs-vswitchd
// through the life of a deployment: first convergence, steering of real
// TCP packets, fail-open and recovery, config edits that replace only what
// changed, reconnects and a controller restart that send nothing, and a
// foreign flow that survives it all.
func TestControllerWithOVS(t *testing.T) {
	ovstest.Require(t, append(ovstest.Binaries, "nft")...)
	inst := ovstest.Start(t)
	// The controller listens on every loopback address of the switch's
	// namespace, so the switch can be pointed at 127.0.0.2 to force a
	// reconnect: removing all its controllers would make OVS flush its
	// flows, which is OVS's doing, not a reconnect.
	ln, err := inst.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ctlAddr := fmt.Sprintf("127.0.0.1:%d", port)
	ln.Close()
	l := &lab{inst: inst}
	// The listener is reopened per controller below; the bridge keeps
	// dialing the same address.
	l.br = inst.AddBridge(t, "brc", 0xb1, "tcp:"+ctlAddr)
	l.client, l.server, l.agent = attachLAN(t, l.br)
	const foreignKey = "table=0,priority=100,udp,tp_dst=9999"
	if err := l.br.AddFlow("cookie=0x1234,priority=100,udp,tp_dst=9999,actions=drop"); err != nil {
		t.Fatal(err)
	}
	serve(t, l.server, "10.10.1.20:5201")
	serve(t, l.server, "10.10.1.20:5202")
	syns := steeredSYNCounter(t, l.agent)
	// The agent must not route what it receives back to the server, or a
	// steered connection would still succeed and prove nothing.
	if out, err := l.agent.Exec("sysctl", "-qw", "net.ipv4.ip_forward=0"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}

	healthA := newHealthServer(t)
	dataB, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dataBAddr := dataB.Addr().String()
	t.Cleanup(func() { dataB.Close() })
	agents := map[string]sdn.AgentHealth{
		"agent-a": {HTTP: healthA.addr(), Data: "127.0.0.1:1"},
		"agent-b": {Data: dataBAddr},
	}
	sw := siteSwitch(0xb1)
	cfg := func() sdn.Config {
		ln, err := inst.Listen("tcp", fmt.Sprintf("0.0.0.0:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		return sdn.Config{Listener: ln, Keepalive: time.Second, HealthInterval: 100 * time.Millisecond,
			RetryInterval: 200 * time.Millisecond, Switches: []flows.Switch{sw}, Agents: agents}
	}
	ctl := startController(t, cfg())
	st := waitConverged(t, ctl.Controller, "sw-a", 0)
	desired := compile(t, sw)
	requireSameFlows(t, l.br, desired)
	if st.DesiredFlows != len(desired) || st.LastChanges != len(desired) || len(st.Withdrawn) != 0 {
		t.Fatalf("status after first convergence: %+v", st)
	}

	t.Run("steered packets reach the agent port", func(t *testing.T) {
		before := syns()
		if err := dialFrom(l.client, "10.10.1.20:5201", 1500*time.Millisecond); err == nil {
			t.Fatal("a whitelisted connection reached the server directly")
		}
		if got := syns(); got <= before {
			t.Fatalf("agent saw %d steered packets, had %d", got, before)
		}
		if err := dialFrom(l.client, "10.10.1.20:5202", 5*time.Second); err != nil {
			t.Fatalf("a port outside the whitelist does not pass: %v", err)
		}
		_, all := ownedOnSwitch(t, l.br)
		steer := all["table=0,priority=2000,tcp,nw_src=10.10.1.0/28,nw_dst=10.10.1.20,tp_dst=5201"]
		if steer.Packets == 0 {
			t.Fatalf("steering flow counted no packets: %+v", steer)
		}
		t.Logf("agent received %d steered packets; steering flow counted %d", syns()-before, steer.Packets)
	})

	t.Run("fail-open withdraws and restores steering", func(t *testing.T) {
		n := switchStatus(ctl.Controller, "sw-a").Converges
		healthA.up.Store(false)
		testsupport.Eventually(t, 30*time.Second, "agent-a's whitelists to be withdrawn", func() bool {
			s := switchStatus(ctl.Controller, "sw-a")
			return s.Converges > n && slices.Equal(s.Withdrawn, []string{"iperf", "ssh"})
		})
		requireSameFlows(t, l.br, compile(t, sw, "agent-a"))
		if err := dialFrom(l.client, "10.10.1.20:5201", 5*time.Second); err != nil {
			t.Fatalf("with steering withdrawn the connection goes direct: %v", err)
		}
		healthA.up.Store(true)
		testsupport.Eventually(t, 30*time.Second, "steering to return", func() bool {
			return len(switchStatus(ctl.Controller, "sw-a").Withdrawn) == 0
		})
		requireSameFlows(t, l.br, desired)

		// agent-b has no health endpoint: its data port is checked.
		dataB.Close()
		testsupport.Eventually(t, 30*time.Second, "agent-b's whitelist to be withdrawn", func() bool {
			return slices.Equal(switchStatus(ctl.Controller, "sw-a").Withdrawn, []string{"iperf"})
		})
		requireSameFlows(t, l.br, compile(t, sw, "agent-b"))
		dataB, err = net.Listen("tcp", dataBAddr)
		if err != nil {
			t.Fatal(err)
		}
		testsupport.Eventually(t, 30*time.Second, "agent-b's whitelist to return", func() bool {
			return len(switchStatus(ctl.Controller, "sw-a").Withdrawn) == 0
		})
		requireSameFlows(t, l.br, desired)
		for _, a := range ctl.Status().Agents {
			if !a.Checked || !a.Healthy {
				t.Errorf("agent status %+v", a)
			}
		}
	})

	t.Run("config edits replace only what changed", func(t *testing.T) {
		_, before := ownedOnSwitch(t, l.br)
		time.Sleep(1100 * time.Millisecond) // let durations advance past a second
		edited := siteSwitch(0xb1)
		edited.Steers[0].Port = 5301                                                                       // iperf moves: one delete, one add
		edited.Steers[1].Clients = append(edited.Steers[1].Clients, netip.MustParsePrefix("10.10.8.0/24")) // ssh: one add
		n := switchStatus(ctl.Controller, "sw-a").Converges
		if err := ctl.Update([]flows.Switch{edited}, agents); err != nil {
			t.Fatal(err)
		}
		st := waitConverged(t, ctl.Controller, "sw-a", n)
		if st.LastChanges != 3 {
			t.Fatalf("edit sent %d flow mods, want 3", st.LastChanges)
		}
		requireSameFlows(t, l.br, compile(t, edited))
		_, after := ownedOnSwitch(t, l.br)
		kept := 0
		for key, b := range before {
			a, ok := after[key]
			if !ok {
				continue
			}
			kept++
			if a.Duration < b.Duration+time.Second || a.Packets < b.Packets {
				t.Errorf("unchanged flow was replaced: before %s\nafter %s", b.Line, a.Line)
			}
		}
		if kept != len(before)-1 {
			t.Errorf("%d of %d flows kept, want all but the moved one", kept, len(before))
		}

		// A new agent MAC changes the actions of every steering flow: they
		// are modified in place and keep their duration and counters.
		_, before = ownedOnSwitch(t, l.br)
		remac := edited
		remac.Steers = slices.Clone(edited.Steers)
		for i := range remac.Steers {
			remac.Steers[i].Agent.MAC = mustMAC("02:00:00:00:01:99")
		}
		n = st.Converges
		if err := ctl.Update([]flows.Switch{remac}, agents); err != nil {
			t.Fatal(err)
		}
		st = waitConverged(t, ctl.Controller, "sw-a", n)
		if st.LastChanges != 4 {
			t.Fatalf("new MAC sent %d flow mods, want 4", st.LastChanges)
		}
		requireSameFlows(t, l.br, compile(t, remac))
		_, after = ownedOnSwitch(t, l.br)
		for key, b := range before {
			if a := after[key]; a.Duration < b.Duration || a.Packets < b.Packets {
				t.Errorf("modified flow lost its duration or counters: before %s\nafter %s", b.Line, a.Line)
			}
		}
		// Back to the original configuration for the steps below.
		n = st.Converges
		if err := ctl.Update([]flows.Switch{sw}, agents); err != nil {
			t.Fatal(err)
		}
		waitConverged(t, ctl.Controller, "sw-a", n)
		requireSameFlows(t, l.br, desired)
	})

	t.Run("reconnect sends no flow mods", func(t *testing.T) {
		st := ctl.Status()
		sent, conns := st.Counters.FlowModsSent, st.Counters.Connections
		if err := l.br.SetControllers(fmt.Sprintf("tcp:127.0.0.2:%d", port)); err != nil {
			t.Fatal(err)
		}
		testsupport.Eventually(t, 30*time.Second, "the switch to reconnect and converge", func() bool {
			s := ctl.Status()
			return s.Counters.Connections > conns && switchStatus(ctl.Controller, "sw-a").Converges > 0 &&
				switchStatus(ctl.Controller, "sw-a").LastConverge.After(switchStatus(ctl.Controller, "sw-a").ConnectedSince)
		})
		if got := ctl.Status().Counters.FlowModsSent; got != sent {
			t.Fatalf("reconnect with an unchanged config sent %d flow mods", got-sent)
		}
	})

	t.Run("flows survive the controller and its restart sends nothing", func(t *testing.T) {
		_, before := ownedOnSwitch(t, l.br)
		ctl.stop()
		time.Sleep(2 * time.Second)
		requireSameFlows(t, l.br, desired)
		_, after := ownedOnSwitch(t, l.br)
		for key, b := range before {
			if a := after[key]; a.Duration < b.Duration {
				t.Errorf("flow was replaced while the controller was away: %s", a.Line)
			}
		}
		ctl = startController(t, cfg())
		st := waitConverged(t, ctl.Controller, "sw-a", 0)
		if st.LastChanges != 0 || ctl.Status().Counters.FlowModsSent != 0 {
			t.Fatalf("restarted controller sent %d flow mods", ctl.Status().Counters.FlowModsSent)
		}
	})

	_, all := ownedOnSwitch(t, l.br)
	if f, ok := all[foreignKey]; !ok || f.Cookie != 0x1234 || f.Actions != "drop" {
		t.Fatalf("foreign flow did not survive: %+v", f)
	}
}

// TestDeadLinkAndReconnect silences the switch without closing its socket
// (SIGSTOP) and checks the controller declares the link dead, then
// converges again with nothing to send once the switch is back.
func TestDeadLinkAndReconnect(t *testing.T) {
	// Not parallel: keepalive 300 ms: a 600 ms stall beside seven other tests would be a dead link.
	inst := ovstest.Start(t)
	ln, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inst.AddBridge(t, "brd", 0xd1, "tcp:"+ln.Addr().String())
	sw := siteSwitch(0xd1)
	sw.Name = "sw-d"
	const keepalive = 300 * time.Millisecond
	ctl := startController(t, sdn.Config{Listener: ln, Keepalive: keepalive, HealthInterval: time.Second,
		Switches: []flows.Switch{sw}})
	waitConverged(t, ctl.Controller, "sw-d", 0)
	sent := ctl.Status().Counters.FlowModsSent

	if err := inst.PauseSwitch(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			_ = inst.ResumeSwitch()
		}
	}()
	testsupport.Eventually(t, 30*time.Second, "the dead link to be noticed", func() bool { return !switchStatus(ctl.Controller, "sw-d").Connected })
	// Reported, not asserted: timings on a shared machine are noisy. The
	// bound the design promises is 2 x keepalive + 1 s.
	t.Logf("dead link noticed after %v (keepalive %v, promised within %v)", time.Since(paused), keepalive, 2*keepalive+time.Second)
	st := ctl.Status()
	if st.Counters.DeadLinks != 1 || !strings.Contains(switchStatus(ctl.Controller, "sw-d").LastError, "keepalive") {
		t.Fatalf("dead link not classified: %+v, %q", st.Counters, switchStatus(ctl.Controller, "sw-d").LastError)
	}
	if err := inst.ResumeSwitch(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	testsupport.Eventually(t, 30*time.Second, "the switch to come back", func() bool {
		s := switchStatus(ctl.Controller, "sw-d")
		return s.Connected && s.LastConverge.After(s.ConnectedSince)
	})
	if got := ctl.Status().Counters.FlowModsSent; got != sent {
		t.Fatalf("reconnect after a dead link sent %d flow mods", got-sent)
	}
}

// TestDialedSwitch covers a switch that listens (ptcp:): the controller
// dials it, and redials with backoff when the connection drops.
func TestDialedSwitch(t *testing.T) {
	inst := ovstest.Start(t)
	port := inst.FreePort(t)
	passive := fmt.Sprintf("ptcp:%d:127.0.0.1", port)
	br := inst.AddBridge(t, "brp", 0xe1, passive)
	sw := siteSwitch(0xe1)
	sw.Name, sw.Connect = "sw-p", fmt.Sprintf("tcp:127.0.0.1:%d", port)
	ctl := startDialingController(t, inst, sw)
	requireSameFlows(t, br, compile(t, sw))
	sent, conns := ctl.Status().Counters.FlowModsSent, ctl.Status().Counters.Connections

	// Moving the listener to another port drops the connection; the
	// controller keeps redialing until it is back. (Removing every
	// controller instead would make OVS flush its flows.)
	other := inst.FreePort(t)
	if err := br.SetControllers(fmt.Sprintf("ptcp:%d:127.0.0.1", other)); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "the connection to drop", func() bool { return !switchStatus(ctl.Controller, "sw-p").Connected })
	time.Sleep(time.Second) // several failed dials
	if err := br.SetControllers(passive); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "the controller to redial", func() bool {
		s := switchStatus(ctl.Controller, "sw-p")
		return s.Connected && ctl.Status().Counters.Connections > conns && s.LastConverge.After(s.ConnectedSince)
	})
	if got := ctl.Status().Counters.FlowModsSent; got != sent {
		t.Fatalf("redial sent %d flow mods", got-sent)
	}
}

// TestUnknownSwitchRefused connects a switch whose datapath id is not in
// the configuration: it is refused with a reason and left untouched.
func TestUnknownSwitchRefused(t *testing.T) {
	inst := ovstest.Start(t)
	ln, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	br := inst.AddBridge(t, "bru", 0xbad, "tcp:"+ln.Addr().String())
	ctl := startController(t, sdn.Config{Listener: ln, Keepalive: time.Second, HealthInterval: time.Second,
		Switches: []flows.Switch{siteSwitch(0x1)}})
	var refused []sdn.Refusal
	testsupport.Eventually(t, 30*time.Second, "the unknown switch to be refused", func() bool {
		refused = ctl.Status().Refused
		return len(refused) > 0
	})
	r := refused[0]
	if r.DatapathID != 0xbad || !strings.Contains(r.Reason, "00:00:00:00:00:00:0b:ad is not declared") {
		t.Fatalf("refusal %+v", r)
	}
	if owned, _ := ownedOnSwitch(t, br); len(owned) != 0 {
		t.Fatalf("refused switch got flows: %v", owned)
	}
	if st := switchStatus(ctl.Controller, "sw-a"); st.Connected {
		t.Fatalf("declared switch shows connected: %+v", st)
	}
}

// TestMain fails the package if any goroutine outlives the tests: every
// connection, keepalive and health check must end with its controller.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

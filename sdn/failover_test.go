package sdn_test

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

var agent2MAC = mustMAC("02:00:00:00:01:03")

// dialFromPort opens a TCP connection from the host's port to addr; the
// steered SYN is dropped at the agent, so it times out.
func dialFromPort(h *ovstest.Host, port int, addr string) {
	_ = h.InNamespace(func() error {
		d := net.Dialer{Timeout: 700 * time.Millisecond, LocalAddr: &net.TCPAddr{IP: net.ParseIP("10.10.1.10"), Port: port}}
		c, err := d.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// TestFailOverWithOVS runs two agents of one site behind a real
// ovs-vswitchd: each gets the SYNs of its buckets (bit 1 of the client's
// TCP port); when one goes down its bucket's SYNs reach the other (the
// site does not fail open); when it returns it takes its bucket back for
// new connections, while a session the survivor reports in that bucket
// keeps reaching the survivor through an exact-match flow, until the
// survivor stops reporting it.
func TestFailOverWithOVS(t *testing.T) {
	ovstest.Require(t, append(ovstest.Binaries, "nft")...)
	inst := ovstest.Start(t)
	ln, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	br := inst.AddBridge(t, "brs", 0xc1, "tcp:"+ln.Addr().String())
	client, _, a1 := attachLAN(t, br)
	a2 := br.AttachHost(t, 4, agent2MAC, netip.MustParsePrefix("10.10.1.3/24"))
	for _, h := range []*ovstest.Host{a1, a2} {
		if out, err := h.Exec("sysctl", "-qw", "net.ipv4.ip_forward=0"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	syn1, syn2 := steeredSYNCounter(t, a1), steeredSYNCounter(t, a2)
	reaches := func(port int) string {
		b1, b2 := syn1(), syn2()
		dialFromPort(client, port, "10.10.1.20:5201")
		switch n1, n2 := syn1()-b1, syn2()-b2; {
		case n1 > 0 && n2 == 0:
			return "a1"
		case n2 > 0 && n1 == 0:
			return "a2"
		case n1 == 0 && n2 == 0:
			return "none"
		}
		return "both"
	}

	ag1 := flows.Agent{Name: "a1", MAC: agentMAC, Port: 3}
	ag2 := flows.Agent{Name: "a2", MAC: agent2MAC, Port: 4}
	sw := flows.Switch{
		Name: "sw-s", DatapathID: 0xc1, Forwarding: "normal", Agents: []flows.Agent{ag1, ag2},
		Steers: []flows.Steer{{
			Whitelist: "iperf", Side: flows.ClientSide,
			Clients: []netip.Prefix{netip.MustParsePrefix("10.10.1.0/28")},
			Server:  netip.MustParseAddr("10.10.1.20"), Port: 5201,
			Agent: ag1, Agents: []flows.Agent{ag1, ag2}, Spread: spread.ModePort, SpreadBits: 1,
			DependsOnSites: [][]string{{"a1", "a2"}},
		}},
	}
	h1, h2 := newHealthServer(t), newHealthServer(t)
	empty := ""
	h1.sessions.Store(&empty)
	h2.sessions.Store(&empty)
	ctl := startController(t, sdn.Config{Listener: ln, Keepalive: time.Second, HealthInterval: 100 * time.Millisecond,
		RetryInterval: 200 * time.Millisecond, Switches: []flows.Switch{sw},
		Agents: map[string]sdn.AgentHealth{"a1": {HTTP: h1.addr()}, "a2": {HTTP: h2.addr()}}})
	waitConverged(t, ctl.Controller, "sw-s", 0)
	requireSameFlows(t, br, compile(t, sw))
	// Bucket 0 (bit 1 clear) is a1's, bucket 1 a2's.
	for _, c := range []struct {
		port int
		want string
	}{{40000, "a1"}, {40002, "a2"}, {40004, "a1"}, {40006, "a2"}} {
		if got := reaches(c.port); got != c.want {
			t.Fatalf("port %d: SYN reached %s, want %s", c.port, got, c.want)
		}
	}

	h2.up.Store(false)
	testsupport.Eventually(t, 30*time.Second, "a2's bucket to move to a1", func() bool {
		got, _ := ownedOnSwitch(t, br)
		return fmt.Sprint(got) == fmt.Sprint(compiledTexts(t, compile(t, sw, "a2")))
	})
	if st := switchStatus(ctl.Controller, "sw-s"); len(st.Withdrawn) != 0 {
		t.Fatalf("one agent down, yet withdrawn %v", st.Withdrawn)
	}
	shares := func() map[string]string {
		out := map[string]string{}
		for _, a := range ctl.Status().Agents {
			for _, sh := range a.Shares {
				out[a.Name] += fmt.Sprintf("%s/%s %d/%d;", sh.Whitelist, sh.Side, sh.Buckets, sh.Of)
			}
			out[a.Name] += fmt.Sprintf("sessions %d", a.Sessions)
		}
		return out
	}
	if got := shares(); got["a1"] != "iperf/client 2/2;sessions 0" || got["a2"] != "iperf/client 0/2;sessions 0" {
		t.Errorf("shares with a2 down: %v", got)
	}
	if got := reaches(40010); got != "a1" {
		t.Fatalf("a2's bucket with a2 down reaches %s", got)
	}

	// a1 now holds a session in a2's bucket; a2 returns.
	held := "iperf 10.10.1.10:40002 10.10.1.20:5201\n"
	h1.sessions.Store(&held)
	h2.up.Store(true)
	back, _ := flows.FailOpen(sw, func(string) bool { return false })
	pinned, err := flows.Compile(flows.PinSessions(back, map[string][]flows.Held{"a1": {{Whitelist: "iperf",
		Client: netip.MustParseAddrPort("10.10.1.10:40002"), Server: netip.MustParseAddrPort("10.10.1.20:5201")}}}))
	if err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "a2's bucket to return, the live session pinned to a1", func() bool {
		got, _ := ownedOnSwitch(t, br)
		return fmt.Sprint(got) == fmt.Sprint(compiledTexts(t, pinned))
	})
	if got := reaches(40002); got != "a1" {
		t.Errorf("the pinned session's packets reach %s, want a1", got)
	}
	if got := shares(); got["a1"] != "iperf/client 1/2;sessions 1" || got["a2"] != "iperf/client 1/2;sessions 0" {
		t.Errorf("shares after a2's return: %v", got)
	}
	if got := reaches(40006); got != "a2" {
		t.Errorf("a new connection in the returned bucket reaches %s, want a2", got)
	}

	// The session ends: the pin goes.
	h1.sessions.Store(&empty)
	testsupport.Eventually(t, 30*time.Second, "the pin to go", func() bool {
		got, _ := ownedOnSwitch(t, br)
		return fmt.Sprint(got) == fmt.Sprint(compiledTexts(t, compile(t, sw)))
	})
	if got := reaches(40002); got != "a2" {
		t.Errorf("after the session ended its bucket reaches %s, want a2", got)
	}

	// Both down: the site fails open and the SYN goes to the server.
	h1.up.Store(false)
	h2.up.Store(false)
	testsupport.Eventually(t, 30*time.Second, "the whitelist to fail open", func() bool {
		return len(switchStatus(ctl.Controller, "sw-s").Withdrawn) == 1
	})
	if got := reaches(40000); got != "none" {
		t.Errorf("with no agent up the SYN reached %s", got)
	}
}

// Address-mode shares use non-prefix masks on nw_src/nw_dst: Open vSwitch
// takes them as compiled (client site and server site).
func TestAddressSpreadFlowsOnOVS(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	inst := ovstest.Start(t)
	ln, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	br := inst.AddBridge(t, "bra", 0xc2, "tcp:"+ln.Addr().String())
	ag1 := flows.Agent{Name: "a1", MAC: agentMAC, Port: 3}
	ag2 := flows.Agent{Name: "a2", MAC: agent2MAC, Port: 4}
	steer := flows.Steer{
		Whitelist: "iperf", Side: flows.ClientSide,
		Clients: []netip.Prefix{netip.MustParsePrefix("10.10.1.0/28")},
		Server:  netip.MustParseAddr("10.10.2.20"), Port: 5201,
		Agent: ag1, Agents: []flows.Agent{ag1, ag2}, Spread: spread.ModeAddress, SpreadBits: 2,
		DependsOnSites: [][]string{{"a1", "a2"}},
	}
	reply := steer
	reply.Side = flows.ServerSide
	sw := flows.Switch{Name: "sw-a", DatapathID: 0xc2, Forwarding: "normal", Agents: []flows.Agent{ag1, ag2},
		Steers: []flows.Steer{steer, reply}}
	ctl := startController(t, sdn.Config{Listener: ln, Keepalive: time.Second, HealthInterval: time.Second,
		RetryInterval: 200 * time.Millisecond, Switches: []flows.Switch{sw}})
	waitConverged(t, ctl.Controller, "sw-a", 0)
	all := requireSameFlows(t, br, compile(t, sw))
	if _, ok := all["table=0,priority=2000,tcp,nw_src=10.10.1.1/255.255.255.241,nw_dst=10.10.2.20,tp_dst=5201"]; !ok {
		t.Errorf("no masked share flow among %v", all)
	}
}

package sdn_test

import (
	"fmt"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// TestPortRangeSteeringWithOVS converges a whitelist with a server prefix
// and a port range into a real Open vSwitch: the flows on the switch are
// the compiled value/mask matches, read back in ovs-ofctl's own text, and
// real TCP to a port inside the range reaches the agent while ports just
// outside it go straight to the server.
func TestPortRangeSteeringWithOVS(t *testing.T) {
	ovstest.Require(t, append(ovstest.Binaries, "nft")...)
	inst := ovstest.Start(t)
	port, err := inst.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	passive := fmt.Sprintf("ptcp:%d:127.0.0.1", port)
	br := inst.AddBridge(t, "brr", 0xd1, passive)
	client := br.AttachHost(t, 1, clientMAC, netip.MustParsePrefix("10.10.1.10/24"))
	server := br.AttachHost(t, 2, serverMAC, netip.MustParsePrefix("10.10.1.20/24"))
	agent := br.AttachHost(t, 3, agentMAC, netip.MustParsePrefix("10.10.1.2/24"))
	_ = client.Neighbor(netip.MustParseAddr("10.10.1.20"), serverMAC)
	_ = server.Neighbor(netip.MustParseAddr("10.10.1.10"), clientMAC)
	for _, p := range []string{"5199", "5203", "5207", "5208", "50500"} {
		serve(t, server, "10.10.1.20:"+p)
	}
	if out, err := agent.Exec("sysctl", "-qw", "net.ipv4.ip_forward=0"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// Count, in the agent, SYNs to the whitelisted ports: they reach it
	// only when steered.
	for _, args := range [][]string{
		{"add", "table", "ip", "steer"},
		{"add", "chain", "ip", "steer", "pre", "{ type filter hook prerouting priority -300 ; }"},
		{"add", "rule", "ip", "steer", "pre", "ip", "daddr", "10.10.1.20", "tcp", "flags", "syn", "counter"},
	} {
		if out, err := agent.Exec("nft", args...); err != nil {
			t.Fatalf("nft %v: %v\n%s", args, err, out)
		}
	}
	syns := func() int {
		out, err := agent.Exec("nft", "list", "chain", "ip", "steer", "pre")
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

	a := flows.Agent{Name: "agent-a", MAC: agentMAC, Port: 3}
	sw := flows.Switch{Name: "sw-r", DatapathID: 0xd1, Forwarding: "normal", Connect: fmt.Sprintf("tcp:127.0.0.1:%d", port),
		Agents: []flows.Agent{a},
		Steers: []flows.Steer{{
			Whitelist: "gridftp-data", Side: flows.ClientSide, Agent: a,
			Clients: []netip.Prefix{netip.MustParsePrefix("10.10.1.8/29")},
			Servers: []netip.Prefix{netip.MustParsePrefix("10.10.1.16/28")},
			Ports:   []portrange.Range{{Lo: 5200, Hi: 5207}, {Lo: 50000, Hi: 51000}},
		}}}
	ctl := startController(t, sdn.Config{Dial: inst.DialContext, Keepalive: time.Second, HealthInterval: time.Second,
		ReconnectMin: 50 * time.Millisecond, ReconnectMax: 400 * time.Millisecond, Switches: []flows.Switch{sw}})
	waitConverged(t, ctl.Controller, "sw-r", 0)
	desired := compile(t, sw)
	if want := 2 + 1 + 9; len(desired) != want {
		t.Fatalf("compiled %d flows, want %d (5200-5207 is one block, 50000-51000 nine)", len(desired), want)
	}
	requireSameFlows(t, br, desired)

	for _, c := range []struct {
		port    int
		steered bool
	}{{5203, true}, {5207, true}, {50500, true}, {5199, false}, {5208, false}} {
		before := syns()
		err := dialFrom(client, fmt.Sprintf("10.10.1.20:%d", c.port), 1500*time.Millisecond)
		after := syns()
		switch {
		case c.steered && (err == nil || after <= before):
			t.Errorf("port %d is in the range but was not steered: dial %v, agent SYNs %d -> %d", c.port, err, before, after)
		case !c.steered && (err != nil || after != before):
			t.Errorf("port %d is outside the range but was steered: dial %v, agent SYNs %d -> %d", c.port, err, before, after)
		}
	}
}

package sdn_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/portrange"
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
	br, connect := listeningBridge(t, inst, "brr", 0xd1)
	client, server, agent := attachLAN(t, br)
	for _, p := range []string{"5199", "5203", "5207", "5208", "50500"} {
		serve(t, server, "10.10.1.20:"+p)
	}
	if out, err := agent.Exec("sysctl", "-qw", "net.ipv4.ip_forward=0"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// Count, in the agent, SYNs to the whitelisted ports: they reach it
	// only when steered.
	syns := nftCounter(t, agent, "ip", "ip", "daddr", "10.10.1.20", "tcp", "flags", "syn")

	sw := steerSwitch("sw-r", 0xd1, connect, flows.Steer{
		Whitelist: "gridftp-data",
		Clients:   []netip.Prefix{netip.MustParsePrefix("10.10.1.8/29")},
		Servers:   []netip.Prefix{netip.MustParsePrefix("10.10.1.16/28")},
		Ports:     []portrange.Range{{Lo: 5200, Hi: 5207}, {Lo: 50000, Hi: 51000}},
	})
	startDialingController(t, inst, sw)
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

// steerSwitch is a switch dialed at connect with the agent on port 3 and
// one client-side whitelist, st, steered to it.
func steerSwitch(name string, dpid uint64, connect string, st flows.Steer) flows.Switch {
	a := flows.Agent{Name: "agent-a", MAC: agentMAC, Port: 3}
	st.Side, st.Agent = flows.ClientSide, a
	return flows.Switch{Name: name, DatapathID: dpid, Forwarding: "normal", Connect: connect,
		Agents: []flows.Agent{a}, Steers: []flows.Steer{st}}
}

// enableIPv6 gives a test host an IPv6 address without router
// solicitations or duplicate address detection.
func enableIPv6(t *testing.T, h *ovstest.Host, addr string) {
	t.Helper()
	for _, args := range [][]string{
		{"sysctl", "-qw", "net.ipv6.conf." + h.Interface + ".accept_ra=0", "net.ipv6.conf." + h.Interface + ".router_solicitations=0",
			"net.ipv6.conf." + h.Interface + ".disable_ipv6=0"},
		{"ip", "-6", "addr", "add", addr, "dev", h.Interface, "nodad"},
	} {
		if out, err := h.Exec(args[0], args[1:]...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
}

// TestIPv6SteeringWithOVS: an IPv6 whitelist is steered by tcp6 flows with
// ipv6_src/ipv6_dst; real IPv6 TCP to the whitelisted port reaches the
// agent, another port goes to the server.
func TestIPv6SteeringWithOVS(t *testing.T) {
	ovstest.Require(t, append(ovstest.Binaries, "nft")...)
	inst := ovstest.Start(t)
	br, connect := listeningBridge(t, inst, "br6", 0xd6)
	client, server, agent := attachLAN(t, br)
	enableIPv6(t, client, "2001:db8:1::10/64")
	enableIPv6(t, server, "2001:db8:1::20/64")
	enableIPv6(t, agent, "2001:db8:1::2/64")
	for _, n := range []struct {
		h    *ovstest.Host
		addr string
		mac  string
	}{{client, "2001:db8:1::20", serverMAC.String()}, {server, "2001:db8:1::10", clientMAC.String()}} {
		if out, err := n.h.Exec("ip", "-6", "neigh", "replace", n.addr, "lladdr", n.mac, "dev", n.h.Interface, "nud", "permanent"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	serve(t, server, "[2001:db8:1::20]:5201")
	serve(t, server, "[2001:db8:1::20]:5202")
	syns := nftCounter(t, agent, "ip6", "ip6", "daddr", "2001:db8:1::20", "tcp", "flags", "syn")
	sw := steerSwitch("sw-6", 0xd6, connect, flows.Steer{
		Whitelist: "v6",
		Clients:   []netip.Prefix{netip.MustParsePrefix("2001:db8:1::/120")},
		Servers:   []netip.Prefix{netip.MustParsePrefix("2001:db8:1::20/128")},
		Ports:     []portrange.Range{{Lo: 5201, Hi: 5201}},
	})
	startDialingController(t, inst, sw)
	all := requireSameFlows(t, br, compile(t, sw))
	if _, ok := all["table=0,priority=2000,tcp6,ipv6_src=2001:db8:1::/120,ipv6_dst=2001:db8:1::20,tp_dst=5201"]; !ok {
		t.Fatalf("no tcp6 steering flow on the switch: %v", all)
	}
	before := syns()
	if err := dialFrom(client, "[2001:db8:1::20]:5201", 1500*time.Millisecond); err == nil {
		t.Error("a whitelisted IPv6 connection reached the server directly")
	}
	if after := syns(); after <= before {
		t.Errorf("agent saw no steered IPv6 SYN (%d -> %d)", before, after)
	}
	before = syns()
	if err := dialFrom(client, "[2001:db8:1::20]:5202", 5*time.Second); err != nil {
		t.Errorf("an IPv6 port outside the whitelist does not pass: %v", err)
	}
	if after := syns(); after != before {
		t.Errorf("a port outside the whitelist reached the agent (%d -> %d)", before, after)
	}
}

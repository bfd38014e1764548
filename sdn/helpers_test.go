package sdn_test

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

var (
	agentMAC  = mustMAC("02:00:00:00:01:02")
	clientMAC = mustMAC("02:00:00:00:01:0a")
	serverMAC = mustMAC("02:00:00:00:01:14")
)

// attachLAN attaches to br the hosts siteSwitch expects: the client on
// port 1, the server on port 2 and the agent on port 3, one LAN, with the
// client and server knowing each other's MAC so that only TCP crosses.
func attachLAN(t *testing.T, br *ovstest.Bridge) (client, server, agent *ovstest.Host) {
	t.Helper()
	client = br.AttachHost(t, 1, clientMAC, netip.MustParsePrefix("10.10.1.10/24"))
	server = br.AttachHost(t, 2, serverMAC, netip.MustParsePrefix("10.10.1.20/24"))
	agent = br.AttachHost(t, 3, agentMAC, netip.MustParsePrefix("10.10.1.2/24"))
	_ = client.Neighbor(netip.MustParseAddr("10.10.1.20"), serverMAC)
	_ = server.Neighbor(netip.MustParseAddr("10.10.1.10"), clientMAC)
	return client, server, agent
}

// listeningBridge adds a bridge that listens for its controller (ptcp:)
// on a free loopback port, and returns the address to dial it at, for a
// flows.Switch's Connect.
func listeningBridge(t *testing.T, inst *ovstest.Instance, name string, dpid uint64) (*ovstest.Bridge, string) {
	t.Helper()
	port := inst.FreePort(t)
	br := inst.AddBridge(t, name, dpid, fmt.Sprintf("ptcp:%d:127.0.0.1", port))
	return br, fmt.Sprintf("tcp:127.0.0.1:%d", port)
}

// startDialingController starts a controller that dials sw (at its
// Connect address, in inst's namespace), redialing quickly, and waits for
// sw's first convergence.
func startDialingController(t *testing.T, inst *ovstest.Instance, sw flows.Switch) *running {
	t.Helper()
	ctl := startController(t, sdn.Config{Dial: inst.DialContext, Keepalive: time.Second, HealthInterval: time.Second,
		ReconnectMin: 50 * time.Millisecond, ReconnectMax: 400 * time.Millisecond, Switches: []flows.Switch{sw}})
	waitConverged(t, ctl.Controller, sw.Name, 0)
	return ctl
}

// siteSwitch is one switch with a client (port 1), a server (port 2) and
// an agent (port 3), and a whitelist that steers client -> server:5201 to
// the agent. (A real deployment has the server at another site; one
// switch is enough to see the steering.)
func siteSwitch(dpid uint64) flows.Switch {
	agent := flows.Agent{Name: "agent-a", MAC: agentMAC, Port: 3}
	return flows.Switch{
		Name: "sw-a", DatapathID: dpid, Forwarding: "normal",
		Agents: []flows.Agent{agent},
		Steers: []flows.Steer{{
			Whitelist: "iperf", Side: flows.ClientSide,
			Clients: []netip.Prefix{netip.MustParsePrefix("10.10.1.0/28")},
			Server:  netip.MustParseAddr("10.10.1.20"), Port: 5201, Agent: agent,
			DependsOn: []string{"agent-a", "agent-b"},
		}, {
			Whitelist: "ssh", Side: flows.ClientSide,
			Clients: []netip.Prefix{netip.MustParsePrefix("10.10.1.0/28"), netip.MustParsePrefix("10.10.9.0/24")},
			Server:  netip.MustParseAddr("10.10.1.20"), Port: 22, Agent: agent,
			DependsOn: []string{"agent-a"},
		}},
	}
}

// flowText is a flow as compared with ovs-ofctl dump-flows output.
func flowText(cookie uint64, priority uint16, match, actions string) string {
	return fmt.Sprintf("cookie=%#x priority=%d %s actions=%s", cookie, priority, match, actions)
}

func compiledTexts(t *testing.T, fs []flows.Flow) []string {
	t.Helper()
	var out []string
	for _, f := range fs {
		out = append(out, flowText(f.Cookie, f.Priority, f.Match.String(), f.ActionsString()))
	}
	slices.Sort(out)
	return out
}

// ownedOnSwitch reads the bridge with ovs-ofctl and returns the owned flows
// as text, and every flow by key.
func ownedOnSwitch(t *testing.T, br *ovstest.Bridge) ([]string, map[string]ovstest.DumpedFlow) {
	t.Helper()
	dumped, err := br.DumpFlows()
	if err != nil {
		t.Fatal(err)
	}
	var owned []string
	all := map[string]ovstest.DumpedFlow{}
	for _, d := range dumped {
		all[d.Key()] = d
		if flows.Owned(d.Cookie) {
			owned = append(owned, flowText(d.Cookie, d.Priority, d.Match, d.Actions))
		}
	}
	slices.Sort(owned)
	return owned, all
}

func requireSameFlows(t *testing.T, br *ovstest.Bridge, want []flows.Flow) map[string]ovstest.DumpedFlow {
	t.Helper()
	got, all := ownedOnSwitch(t, br)
	w := compiledTexts(t, want)
	if !slices.Equal(got, w) {
		t.Fatalf("flows on %s:\n  %s\nwant:\n  %s", br.Name, strings.Join(got, "\n  "), strings.Join(w, "\n  "))
	}
	return all
}

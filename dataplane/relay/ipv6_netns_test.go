package relay

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// ipv6Config is the namespace lab, dual-stack, as an sos.hcl: the agents
// reach each other over IPv6 and the whitelist is IPv6.
const ipv6Config = `
security { psk_file = "/etc/psk" }
controller { node = "ctl" }
site "client" {
  prefixes = ["10.10.1.0/24", "2001:db8:1::/64"]
  switch "sw-a" { datapath_id = "0x1" }
  agent "agent-a" {
    node = "na"
    switch = "sw-a"
    switch_port = 3
    mac = "02:00:00:00:00:01"
    address = "fd77::1"
    interface = "a0"
  }
}
site "server" {
  prefixes = ["10.10.2.0/24", "2001:db8:2::/64"]
  switch "sw-b" { datapath_id = "0x2" }
  agent "agent-b" {
    node = "nb"
    switch = "sw-b"
    switch_port = 3
    mac = "02:00:00:00:00:02"
    address = "fd77::2"
    interface = "s0"
  }
}
whitelist "iperf6" {
  clients      = ["2001:db8:1::/64"]
  servers      = ["2001:db8:2::1"]
  server_ports = ["5201"]
  streams      = 8
}
whitelist "iperf4" {
  clients      = ["10.10.1.0/24"]
  servers      = ["10.10.2.1"]
  server_ports = ["5202"]
  streams      = 8
}
`

// dualStack gives the namespace lab IPv6: the two LANs, and the WAN link
// between the agents, which then reach each other over IPv6 only.
func dualStack(t *testing.T, l *lab) {
	t.Helper()
	addr := func(ns, dev, a string) { sh(t, "ip", "-n", ns, "-6", "addr", "add", a, "dev", dev, "nodad") }
	addr(l.cli, "c0", "2001:db8:1::1/64")
	addr(l.agA, "a0", "2001:db8:1::2/64")
	addr(l.agA, "w0", "fd77::1/64")
	addr(l.agB, "w0", "fd77::2/64")
	addr(l.agB, "s0", "2001:db8:2::2/64")
	addr(l.srv, "s0", "2001:db8:2::1/64")
	sh(t, "ip", "-n", l.cli, "-6", "route", "add", "default", "via", "2001:db8:1::2")
	sh(t, "ip", "-n", l.srv, "-6", "route", "add", "default", "via", "2001:db8:2::2")
	sh(t, "ip", "-n", l.agA, "-6", "route", "add", "2001:db8:2::/64", "via", "fd77::2")
	sh(t, "ip", "-n", l.agB, "-6", "route", "add", "2001:db8:1::/64", "via", "fd77::1")
	for _, ns := range []string{l.agA, l.agB} {
		sh(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	}
}

// TestNetnsIPv6ThroughAgents runs an unmodified iperf3 over IPv6 through
// the agents, compiled from a dual-stack sos.hcl: the client-side agent
// accepts it with TPROXY for ip6 on its [::] listener, the agents stripe it
// over IPv6, and the server-side agent opens it with IPV6_TRANSPARENT
// from the client's address, which is what the server sees.
func TestNetnsIPv6ThroughAgents(t *testing.T) {
	// Not parallel: its transfers saturate both cores, which the silence thresholds of the parallel tests would feel.
	testsupport.RequireRoot(t, "ip", "nft", "iperf3", "ss")
	cfg := labConfig(t, "ipv6.hcl", ipv6Config)
	l := newLab(t)
	dualStack(t, l)
	agentA, agentB := startCompiledAgents(t, l, cfg, func(rcA, _ Config) {
		if rcA.TransparentListen.String() != "[::]:9876" || rcA.Client[0].Peer.String() != "[fd77::2]:9877" {
			t.Fatalf("agent A listens at %s and stripes to %s", rcA.TransparentListen, rcA.Client[0].Peer)
		}
	})

	// IPv6, and IPv4 through the same dual-stack listener.
	for _, c := range []struct {
		family, port   string
		client, server netip.Addr
	}{
		{"-6", "5201", netip.MustParseAddr("2001:db8:1::1"), netip.MustParseAddr("2001:db8:2::1")},
		{"-4", "5202", netip.MustParseAddr("10.10.1.1"), netip.MustParseAddr("10.10.2.1")},
	} {
		t.Run("iperf3 "+c.family, func(t *testing.T) { iperfThroughAgents(t, l, agentA, agentB, c.family, c.port, c.client, c.server) })
	}
}

// iperfThroughAgents runs iperf3 from the client to the server and checks
// that the server saw the client's address and that the agents carried it.
func iperfThroughAgents(t *testing.T, l *lab, agentA, agentB *nsProcess, family, port string, client, server netip.Addr) {
	run := startIperf(t, l.srv, l.cli, server, client, port, family, "-t", "2")
	for _, ag := range []struct {
		p    *nsProcess
		side string
	}{{agentA, "client"}, {agentB, "server"}} {
		awaitSession(t, ag.p, "a session at the "+ag.side+"-side agent", ag.side, client, server, nil)
	}
	// The stripes run over IPv6 between the agents' WAN addresses.
	if st := sh(t, "ip", "netns", "exec", l.agB, "ss", "-6tnH", "state", "established", "( sport = :9877 )"); !strings.Contains(st, "[fd77::1]:") {
		t.Errorf("no IPv6 stripe from agent A at agent B's data port:\n%s", st)
	}
	n := run.finish(t)
	t.Logf("%s through the agents: %d bytes; server saw:\n%s", family, n, run.peers)
}

package relay

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/appliance/desired"
	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// directionConfig is the namespace lab of netns_test.go as an sos.hcl: a
// GridFTP-like whitelist with a port range, carried in both directions.
const directionConfig = `
security { psk_file = "/etc/psk" }
site "client" {
  prefixes = ["10.10.1.0/24"]
  agent "agent-a" {
    node = "na"
    switch = "sw-a"
    switch_port = 3
    mac = "02:00:00:00:00:01"
    address = "192.168.77.1"
    interface = "a0"
  }
  switch "sw-a" { datapath_id = "0x1" }
}
site "server" {
  prefixes = ["10.10.2.0/24"]
  agent "agent-b" {
    node = "nb"
    switch = "sw-b"
    switch_port = 3
    mac = "02:00:00:00:00:02"
    address = "192.168.77.2"
    interface = "s0"
  }
  switch "sw-b" { datapath_id = "0x2" }
}
controller { node = "ctl" }
whitelist "gridftp" {
  clients      = ["10.10.1.0/24"]
  servers      = ["10.10.2.0/28"]
  server_ports = ["5000-5100"]
  direction    = "both"
  streams      = 8
}
`

// compiledAgent is what `sosappliance apply` would run on node: the relay
// spec with the PSK joined, and the steering spec its host items encode.
func compiledAgent(t *testing.T, cfg *config.Config, node string) (Config, item.SteeringSpec) {
	t.Helper()
	d, err := desired.Compile(cfg, node)
	if err != nil {
		t.Fatal(err)
	}
	rc := d.Agents[0].Relay
	rc.PSK = testPSK
	spec := item.SteeringSpec{Interface: d.Agents[0].Interface, ListenPort: rc.TransparentListen.Port()}
	for _, it := range d.Items {
		if it.Kind == item.KindSteering && it.Key == item.SteeringKeyNftables {
			rules, err := item.ParseTproxyRules(it.Value)
			if err != nil {
				t.Fatal(err)
			}
			spec.Divert = rules.Divert
		}
	}
	return rc, spec
}

// labConfig parses an sos.hcl written for a namespace lab.
func labConfig(t *testing.T, filename, src string) *config.Config {
	t.Helper()
	cfg, diags := config.Parse(config.Source{Filename: filename, Bytes: []byte(src)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return cfg
}

// startCompiledAgents compiles cfg for the lab's two agent nodes, na and
// nb, lets check look at both relay specs, then steers the agents'
// namespaces and starts the agents there as apply would.
func startCompiledAgents(t *testing.T, l *lab, cfg *config.Config, check func(rcA, rcB Config)) (agentA, agentB *nsProcess) {
	t.Helper()
	rcA, steerA := compiledAgent(t, cfg, "na")
	rcB, steerB := compiledAgent(t, cfg, "nb")
	check(rcA, rcB)
	steer(t, l.agA, steerA)
	steer(t, l.agB, steerB)
	return startLabAgent(t, l.agA, rcA), startLabAgent(t, l.agB, rcB)
}

type directionCase struct {
	name               string
	listenNS, dialNS   string
	listenAt, dialerIs netip.Addr
	port               string
	opener, far        *nsProcess
}

func (c directionCase) portNumber() uint16 {
	n, _ := strconv.Atoi(c.port)
	return uint16(n)
}

// TestNetnsDirectionBothThroughAgents: with direction = "both" a
// connection the server's site opens toward a client is carried too, and
// the agents swap roles: the server-site agent accepts it transparently and
// stripes it, the client-site agent opens it to the client from the
// server's own address. Connections the client opens still go the usual
// way, and both land on ports inside the whitelist's range.
func TestNetnsDirectionBothThroughAgents(t *testing.T) {
	// Not parallel: its transfers saturate both cores, which the silence thresholds of the parallel tests would feel.
	testsupport.RequireRoot(t, "ip", "nft", "iperf3", "ss")
	cfg := labConfig(t, "direction.hcl", directionConfig)
	l := newLab(t)
	agentA, agentB := startCompiledAgents(t, l, cfg, func(rcA, rcB Config) {
		if len(rcA.Client) != 1 || len(rcA.Server) != 1 || len(rcB.Client) != 1 || len(rcB.Server) != 1 {
			t.Fatalf("each agent needs a client and a server route: A %d/%d, B %d/%d",
				len(rcA.Client), len(rcA.Server), len(rcB.Client), len(rcB.Server))
		}
	})

	client, server := netip.MustParseAddr("10.10.1.1"), netip.MustParseAddr("10.10.2.1")
	for _, c := range []directionCase{
		{"client opens", l.srv, l.cli, server, client, "5001", agentA, agentB},
		{"server opens", l.cli, l.srv, client, server, "5099", agentB, agentA},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := c.opener.stats(t).Totals
			run := startIperf(t, c.listenNS, c.dialNS, c.listenAt, c.dialerIs, c.port, "-t", "2")
			// The roles follow who opened the connection: the agent at
			// the opener's site is its client side, the far one its
			// server side.
			for _, ag := range []struct {
				p    *nsProcess
				side string
			}{{c.opener, "client"}, {c.far, "server"}} {
				awaitSession(t, ag.p, "a "+ag.side+"-side session at the "+ag.side+"-side agent", ag.side, c.dialerIs, c.listenAt,
					func(s SessionStats) bool { return s.Whitelist == "gridftp" && s.Server.Port() == c.portNumber() })
			}
			n := run.finish(t)
			after := c.opener.stats(t).Totals
			if after.SessionsStarted < before.SessionsStarted+2 {
				t.Errorf("the opener's agent started %d sessions, want iperf3's two", after.SessionsStarted-before.SessionsStarted)
			}
			t.Logf("%s: %d bytes through the agents; listener saw:\n%s", c.name, n, run.peers)
		})
	}
}

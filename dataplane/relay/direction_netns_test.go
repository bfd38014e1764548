package relay

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

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
	testsupport.RequireRoot(t, "ip", "nft", "iperf3", "ss")
	cfg, diags := config.Parse(config.Source{Filename: "direction.hcl", Bytes: []byte(directionConfig)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	l := newLab(t)
	rcA, steerA := compiledAgent(t, cfg, "na")
	rcB, steerB := compiledAgent(t, cfg, "nb")
	if len(rcA.Client) != 1 || len(rcA.Server) != 1 || len(rcB.Client) != 1 || len(rcB.Server) != 1 {
		t.Fatalf("each agent needs a client and a server route: A %d/%d, B %d/%d",
			len(rcA.Client), len(rcA.Server), len(rcB.Client), len(rcB.Server))
	}
	steer(t, l.agA, steerA)
	steer(t, l.agB, steerB)
	agentA := startLabAgent(t, l.agA, rcA)
	agentB := startLabAgent(t, l.agB, rcB)

	client, server := netip.MustParseAddr("10.10.1.1"), netip.MustParseAddr("10.10.2.1")
	for _, c := range []directionCase{
		{"client opens", l.srv, l.cli, server, client, "5001", agentA, agentB},
		{"server opens", l.cli, l.srv, client, server, "5099", agentB, agentA},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := c.opener.stats(t).Totals
			srv := startInNetns(t, c.listenNS, "iperf3", "-s", "-1", "-p", c.port)
			time.Sleep(300 * time.Millisecond) // iperf3 has no readiness signal
			cmd := exec.Command("ip", "netns", "exec", c.dialNS, "iperf3", "-c", c.listenAt.String(), "-p", c.port, "-t", "2", "-J")
			var out bytes.Buffer
			cmd.Stdout = &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var peers string
			testsupport.Eventually(t, 30*time.Second, "iperf3 connections at the listener", func() bool {
				peers = sh(t, "ip", "netns", "exec", c.listenNS, "ss", "-tnH", "state", "established", "( sport = :"+c.port+" )")
				return strings.Count(peers, "\n") >= 2
			})
			for _, line := range strings.Split(strings.TrimSpace(peers), "\n") {
				f := strings.Fields(line)
				peer, err := netip.ParseAddrPort(f[len(f)-1])
				if err != nil || peer.Addr().Unmap() != c.dialerIs {
					t.Errorf("listener socket %q: peer is not the dialer %s", line, c.dialerIs)
				}
			}
			// The roles follow who opened the connection: the agent at
			// the opener's site is its client side, the far one its
			// server side.
			for _, ag := range []struct {
				p    *nsProcess
				side string
			}{{c.opener, "client"}, {c.far, "server"}} {
				testsupport.Eventually(t, 10*time.Second, "a "+ag.side+"-side session at the "+ag.side+"-side agent", func() bool {
					for _, s := range ag.p.stats(t).Sessions {
						if s.Side == ag.side && s.Whitelist == "gridftp" && s.Client.Addr().Unmap() == c.dialerIs &&
							s.Server.Addr().Unmap() == c.listenAt && s.Server.Port() == c.portNumber() {
							return true
						}
					}
					return false
				})
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("iperf3: %v\n%s", err, out.String())
			}
			var res struct {
				End struct {
					SumReceived struct {
						Bytes int64 `json:"bytes"`
					} `json:"sum_received"`
				} `json:"end"`
			}
			if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.End.SumReceived.Bytes == 0 {
				t.Fatalf("iperf3 moved nothing (%v):\n%s", err, out.String())
			}
			select {
			case <-srv.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("iperf3 server did not finish")
			}
			after := c.opener.stats(t).Totals
			if after.SessionsStarted < before.SessionsStarted+2 {
				t.Errorf("the opener's agent started %d sessions, want iperf3's two", after.SessionsStarted-before.SessionsStarted)
			}
			t.Logf("%s: %d bytes through the agents; listener saw:\n%s", c.name, res.End.SumReceived.Bytes, peers)
		})
	}
}

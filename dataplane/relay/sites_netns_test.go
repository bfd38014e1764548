package relay

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// threeSitesConfig is three sites, each a host behind its agent, with a
// whitelist from each site to the next.
const threeSitesConfig = `
security { psk_file = "/etc/psk" }
controller { node = "ctl" }
site "a" {
  prefixes = ["10.30.1.0/24"]
  switch "sw-a" { datapath_id = "0x1" }
  agent "agent-a" {
    node = "na"
    switch = "sw-a"
    switch_port = 3
    mac = "02:00:00:00:00:01"
    address = "192.168.80.1"
    interface = "h0"
  }
}
site "b" {
  prefixes = ["10.30.2.0/24"]
  switch "sw-b" { datapath_id = "0x2" }
  agent "agent-b" {
    node = "nb"
    switch = "sw-b"
    switch_port = 3
    mac = "02:00:00:00:00:02"
    address = "192.168.80.2"
    interface = "h0"
  }
}
site "c" {
  prefixes = ["10.30.3.0/24"]
  switch "sw-c" { datapath_id = "0x3" }
  agent "agent-c" {
    node = "nc"
    switch = "sw-c"
    switch_port = 3
    mac = "02:00:00:00:00:03"
    address = "192.168.80.3"
    interface = "h0"
  }
}
whitelist "a-to-b" {
  clients      = ["10.30.1.0/24"]
  servers      = ["10.30.2.10"]
  server_ports = ["5201"]
  streams      = 4
}
whitelist "b-to-c" {
  clients      = ["10.30.2.0/24"]
  servers      = ["10.30.3.10"]
  server_ports = ["5202"]
  streams      = 4
}
whitelist "c-to-a" {
  clients      = ["10.30.3.0/24"]
  servers      = ["10.30.1.10"]
  server_ports = ["5203"]
  streams      = 4
}
`

// TestNetnsThreeSites runs one transfer across each pair of three sites:
// a host and an agent per site, the agents on one WAN segment, every agent
// compiled from the same sos.hcl and serving as the client side of one
// pair and the server side of another.
func TestNetnsThreeSites(t *testing.T) {
	// Not parallel: its transfers saturate both cores, which the silence thresholds of the parallel tests would feel.
	testsupport.RequireRoot(t, "ip", "nft", "iperf3", "ss")
	cfg := labConfig(t, "three.hcl", threeSitesConfig)
	pid := os.Getpid()
	wan := fmt.Sprintf("sos3wan%d", pid)
	sh(t, "ip", "netns", "add", wan)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", wan).Run() })
	sh(t, "ip", "-n", wan, "link", "add", "br0", "type", "bridge")
	sh(t, "ip", "-n", wan, "link", "set", "br0", "up")
	type site struct {
		name, host, agent string
		hostAddr          netip.Addr
		proc              *nsProcess
	}
	var sites []*site
	for i, n := range []string{"a", "b", "c"} {
		s := &site{name: n, host: fmt.Sprintf("sos3h%s%d", n, pid), agent: fmt.Sprintf("sos3g%s%d", n, pid),
			hostAddr: netip.MustParseAddr(fmt.Sprintf("10.30.%d.10", i+1))}
		for _, ns := range []string{s.host, s.agent} {
			sh(t, "ip", "netns", "add", ns)
			t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
			sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
		}
		sh(t, "ip", "-n", s.host, "link", "add", "e0", "type", "veth", "peer", "name", "h0", "netns", s.agent)
		sh(t, "ip", "-n", s.host, "addr", "add", s.hostAddr.String()+"/24", "dev", "e0")
		sh(t, "ip", "-n", s.agent, "addr", "add", fmt.Sprintf("10.30.%d.2/24", i+1), "dev", "h0")
		sh(t, "ip", "-n", wan, "link", "add", "w"+n, "type", "veth", "peer", "name", "w0", "netns", s.agent)
		sh(t, "ip", "-n", wan, "link", "set", "w"+n, "master", "br0", "up")
		sh(t, "ip", "-n", s.agent, "addr", "add", fmt.Sprintf("192.168.80.%d/24", i+1), "dev", "w0")
		for _, l := range [][]string{{s.host, "e0"}, {s.agent, "h0"}, {s.agent, "w0"}} {
			sh(t, "ip", "-n", l[0], "link", "set", l[1], "up")
		}
		sh(t, "ip", "-n", s.host, "route", "add", "default", "via", fmt.Sprintf("10.30.%d.2", i+1))
		sh(t, "ip", "netns", "exec", s.agent, "sysctl", "-qw", "net.ipv4.ip_forward=1")
		sites = append(sites, s)
	}
	for i, s := range sites {
		for j := range sites {
			if j != i {
				sh(t, "ip", "-n", s.agent, "route", "add", fmt.Sprintf("10.30.%d.0/24", j+1), "via", fmt.Sprintf("192.168.80.%d", j+1))
			}
		}
		rc, spec := compiledAgent(t, cfg, "n"+s.name)
		if len(rc.Client) != 1 || len(rc.Server) != 1 {
			t.Fatalf("agent-%s: %d client and %d server routes, want one of each", s.name, len(rc.Client), len(rc.Server))
		}
		steer(t, s.agent, spec)
		s.proc = startLabAgent(t, s.agent, rc)
	}

	for i, from := range sites {
		to := sites[(i+1)%len(sites)]
		port := fmt.Sprint(5201 + i)
		t.Run(from.name+" to "+to.name, func(t *testing.T) {
			run := startIperf(t, to.host, from.host, to.hostAddr, from.hostAddr, port, "-t", "1")
			for _, ag := range []struct {
				s    *site
				side string
			}{{from, "client"}, {to, "server"}} {
				awaitSession(t, ag.s.proc, "a session at agent-"+ag.s.name, ag.side, from.hostAddr, to.hostAddr, nil)
			}
			n := run.finish(t)
			t.Logf("site %s to site %s: %d bytes through agent-%s and agent-%s", from.name, to.name, n, from.name, to.name)
		})
	}
}

package config

import (
	"bytes"
	"testing"
)

// r73ThreeAgentSite is a site of three agents on one switch, and two
// buckets.
const r73ThreeAgentSite = `
site "c" {
  prefixes = ["10.3.0.0/24"]
  switch "sw-c" { datapath_id = "0x3" }
  agent "c1" {
    node = "nc1"
    switch = "sw-c"
    switch_port = 3
    mac = "02:00:00:00:03:01"
    address = "10.3.0.2"
    interface = "eth1"
  }
  agent "c2" {
    node = "nc2"
    switch = "sw-c"
    switch_port = 4
    mac = "02:00:00:00:03:02"
    address = "10.3.0.3"
    interface = "eth1"
  }
  agent "c3" {
    node = "nc3"
    switch = "sw-c"
    switch_port = 5
    mac = "02:00:00:00:03:03"
    address = "10.3.0.4"
    interface = "eth1"
  }
}
spread { bits = 1 }
`

// TestSpreadBitsCountAWhitelistsAgentsNotTheSites: buckets are
// dealt per whitelist side over its client_agents/server_agents
// (sdn/flows compile: spread.Assign(..., len(st.Agents), ...)), not over
// the site's agents. A site of three agents whose whitelists each spread
// over at most two gives every agent a bucket with bits = 1, and such a
// file validated before 59f7bdb.
// Found by review (helper-73) of 59f7bdb, whose check counted a site's
// agents, not a whitelist's, and refused files that worked.
func TestSpreadBitsCountAWhitelistsAgentsNotTheSites(t *testing.T) {
	for name, wl := range map[string]string{
		"subsets": `
whitelist "w12" {
  clients = ["10.3.0.0/25"]
  server = "10.2.0.10"
  server_port = 5201
  client_agents = ["c1", "c2"]
}
whitelist "w3" {
  clients = ["10.3.0.128/25"]
  server = "10.2.0.11"
  server_port = 5201
  client_agent = "c3"
}`,
		"site unused by any whitelist": `
whitelist "wa" {
  clients = ["10.1.0.0/25"]
  server = "10.2.0.10"
  server_port = 5201
}`,
	} {
		t.Run(name, func(t *testing.T) {
			src := twoAgentSites(r73ThreeAgentSite + wl)
			cfg, diags := parseString(t, src)
			if diags.HasErrors() {
				var b bytes.Buffer
				WriteDiagnostics(&b, diags, []byte(src))
				t.Fatalf("every whitelist spreads over at most 2 agents, 2 buckets each get one, yet:\n%s", b.String())
			}
			for _, w := range cfg.Whitelists {
				for _, g := range [][]string{w.ClientAgents, w.ServerAgents} {
					if len(g) > 2 {
						t.Fatalf("whitelist %s spreads over %v", w.Name, g)
					}
				}
			}
		})
	}
}

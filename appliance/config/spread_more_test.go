package config

import (
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

// TestSpreadBitsTooFewForTheAgents: spread { bits = 1 } makes two
// buckets; a site with three agents then deals none to its third agent,
// which the controller and the relays never use (its buckets are 0: no
// flow, no session). The file passes without a word.
// Found by review (helper-70): before, the file passed without a word.
func TestSpreadBitsTooFewForTheAgents(t *testing.T) {
	third := `
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
whitelist "w" {
  clients = ["10.3.0.0/25"]
  server = "10.2.0.10"
  server_port = 5201
}`
	_, diags := parseString(t, twoAgentSites(third))
	for _, d := range diags {
		if d.Severity == hcl.DiagError && strings.Contains(d.Summary, "spread bits = 1") && strings.Contains(d.Summary, "c3") {
			return
		}
	}
	t.Errorf("agent c3 gets no bucket with bits = 1, and no error names it: %v", diags)
}

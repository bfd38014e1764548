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
	third := r73ThreeAgentSite + `whitelist "w" {
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

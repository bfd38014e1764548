package config

import (
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/sosappliance/sosappliance/sdn/spread"
)

// TestSpreadBitsTooFewInAddressMode: e72c0de checks "bits too
// few for a whitelist's agents" in port mode only. spread.Assign deals
// 2^bits buckets to the agents the same way in address mode (the bucket
// is the client address's low bits instead of its port's), so with
// bits = 1 and three agents the third gets no bucket in address mode too:
// no flow steers to it, no connection ever reaches it. 59f7bdb refused
// such a file in either mode; now it validates.
// Found by review (helper-76) of e72c0de, whose check ran in port mode only.
func TestSpreadBitsTooFewInAddressMode(t *testing.T) {
	b, err := spread.Assign(spread.ModeAddress, 1, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.Count(2) != 0 {
		t.Fatalf("scenario: agent 3 holds %d buckets in address mode", b.Count(2))
	}
	src := twoAgentSites(strings.Replace(r73ThreeAgentSite, `spread { bits = 1 }`, `spread {
  mode = "address"
  bits = 1
}`, 1) + `
whitelist "w" {
  clients = ["10.3.0.0/25"]
  server = "10.2.0.10"
  server_port = 5201
  client_agents = ["c1", "c2", "c3"]
}`)
	cfg, diags := parseString(t, src)
	for _, d := range diags {
		if d.Severity == hcl.DiagError && strings.Contains(d.Summary, "c3") {
			return
		}
	}
	if cfg != nil {
		t.Logf("spread mode %q bits %d", cfg.Spread.Mode, cfg.Spread.Bits)
	}
	t.Errorf("spread { mode = \"address\" bits = 1 }: agent c3 of whitelist w holds %d of %d buckets (spread.Assign), so it never gets a connection, yet the file validates: %v",
		b.Count(2), len(b.Owner), diags)
}

package config

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
)

// TestPoolBlock: a pool block toward an agent decodes with its defaults,
// and a bad one is a diagnostic naming the problem and its place.
func TestPoolBlock(t *testing.T) {
	lab, err := os.ReadFile("../../examples/lab/sos.hcl")
	if err != nil {
		t.Fatal(err)
	}
	base := func(extra string) string { return string(lab) + extra }
	if got := mustParse(t, base("")).PoolToward("agent-b"); got != (agentspec.Pool{}) {
		t.Errorf("no pool block, pool %+v", got)
	}
	c := mustParse(t, base(`pool "agent-b" {}`))
	if got := c.PoolToward("agent-b"); got != (agentspec.Pool{MinIdle: DefaultPoolMinIdle, Max: DefaultPoolMax, IdleTimeout: DefaultPoolIdleTimeout}) {
		t.Errorf("default pool %+v", got)
	}
	c = mustParse(t, base(`pool "agent-b" {
  min_idle     = 16
  max          = 100
  idle_timeout = "90s"
}`))
	if got := c.PoolToward("agent-b"); got != (agentspec.Pool{MinIdle: 16, Max: 100, IdleTimeout: 90 * time.Second}) {
		t.Errorf("pool %+v", got)
	}
	if c.Limits.PooledPerPeer != DefaultPooledPerPeer {
		t.Errorf("limits.pooled_per_peer defaults to %d, want %d", c.Limits.PooledPerPeer, DefaultPooledPerPeer)
	}
	if c.Limits.SessionsPerPeer != 0 {
		t.Errorf("limits.sessions_per_peer defaults to %d, want 0 (max_sessions)", c.Limits.SessionsPerPeer)
	}
	if c := mustParse(t, base("limits {\n  sessions_per_peer = 40\n}\n")); c.Limits.SessionsPerPeer != 40 {
		t.Errorf("limits.sessions_per_peer = 40 decoded as %d", c.Limits.SessionsPerPeer)
	}
	c = mustParse(t, base("limits {\n  pooled_per_peer = 0\n}\n"))
	if c.Limits.PooledPerPeer != 0 {
		t.Errorf("limits.pooled_per_peer = 0 decoded as %d", c.Limits.PooledPerPeer)
	}
	for src, want := range map[string]string{
		`pool "agent-x" {}`: `pool names agent "agent-x"`,
		`pool "agnet-b" {}`: `Did you mean "agent-b"?`, // helper-81
		`pool "agent-b" {}` + "\n" + `pool "agent-b" {}`:                                 `Duplicate pool toward agent "agent-b"`,
		`pool "agent-b" {` + "\n  min_idle = 8\n  max = 4\n}":                            "max 4 is below min_idle 8",
		`pool "agent-b" {` + "\n  min_idle = 0\n}":                                       "min_idle",
		`pool "agent-b" {` + "\n  depth = 3\n}":                                          "depth",
		"limits {\n  pooled_per_peer = 0\n}\n" + `pool "agent-b" {}`:                     "max 64 is above limits.pooled_per_peer 0",
		"limits {\n  pooled_per_peer = 16\n}\n" + `pool "agent-b" {` + "\n  max = 32\n}": "max 32 is above limits.pooled_per_peer 16",
		"limits {\n  pooled_per_peer = -1\n}":                                            "pooled_per_peer must be between 0 and 65536",
		"limits {\n  pooled_per_peer = 70000\n}":                                         "pooled_per_peer must be between 0 and 65536",
	} {
		_, diags := parseString(t, base(src))
		if !diags.HasErrors() || !strings.Contains(diags.Error(), want) || !strings.Contains(diags.Error(), ".hcl:") {
			t.Errorf("%s: %v, want %q at a place in the file", src, diags, want)
		}
	}
}

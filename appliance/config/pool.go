package config

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
)

// Pool is a warm pool of authenticated idle streams that every client-side
// agent with whitelists toward the named (server-side) agent keeps open to
// it, so a new connection starts without opening its stripes across the
// WAN:
//
//	pool "agent-utah" {
//	  min_idle     = 8    # idle streams kept open
//	  max          = 64   # at most, idle and opening (a burst raises the target)
//	  idle_timeout = "5m" # idle streams beyond min_idle close after this
//	}
//
// Without a pool block toward an agent, connections toward it open their
// stripes when they start, as before.
type Pool struct {
	Peer        string
	MinIdle     int
	Max         int
	IdleTimeout time.Duration
	Range       hcl.Range
}

// Defaults of a pool block's attributes.
const (
	DefaultPoolMinIdle     = 8
	DefaultPoolMax         = 64
	DefaultPoolIdleTimeout = agentspec.DefaultPoolIdleTimeout
)

var poolSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "min_idle"}, {Name: "max"}, {Name: "idle_timeout"},
}}

func decodePool(b *hcl.Block, diags *hcl.Diagnostics) *Pool {
	a, _ := newAttrs(b.Body, poolSchema, diags)
	p := &Pool{
		Peer:        b.Labels[0],
		MinIdle:     int(a.integer("min_idle", DefaultPoolMinIdle, 1, agentspec.MaxPoolSize)),
		IdleTimeout: a.duration("idle_timeout", DefaultPoolIdleTimeout),
		Range:       b.DefRange,
	}
	p.Max = int(a.integer("max", int64(max(DefaultPoolMax, p.MinIdle)), 1, agentspec.MaxPoolSize))
	if p.Max < p.MinIdle {
		a.errorf("max", "pool %q: max %d is below min_idle %d", "Raise max to at least min_idle, or lower min_idle.", p.Peer, p.Max, p.MinIdle)
	}
	return p
}

// validatePools checks that each pool names an agent, once.
func validatePools(cfg *Config, add func(rng hcl.Range, hint, format string, args ...any)) {
	seen := map[string]hcl.Range{}
	for _, p := range cfg.Pools {
		if prev, dup := seen[p.Peer]; dup {
			add(p.Range, fmt.Sprintf("Merge them; the first pool toward %q is at %s.", p.Peer, prev), "Duplicate pool toward agent %q", p.Peer)
			continue
		}
		seen[p.Peer] = p.Range
		if cfg.Agent(p.Peer) == nil {
			var agents []string
			for _, site := range cfg.Sites {
				agents = append(agents, agentNames(site)...)
			}
			add(p.Range, "Name the server-side agent the client-side agents keep streams open to."+didYouMean(p.Peer, agents),
				"pool names agent %q, which no site declares", p.Peer)
		}
		if bound := cfg.Limits.PooledPerPeer; p.Max > bound {
			add(p.Range, fmt.Sprintf("Lower the pool's max, or raise limits.pooled_per_peer (%s).", where(cfg.Limits)),
				"pool %q: max %d is above limits.pooled_per_peer %d; agent %q would refuse the streams beyond it", p.Peer, p.Max, bound, p.Peer)
		}
	}
}

// PoolToward is the relay's pool setting toward the named agent: zero
// (no pool) without a pool block for it.
func (c *Config) PoolToward(agent string) agentspec.Pool {
	for _, p := range c.Pools {
		if p.Peer == agent {
			return agentspec.Pool{MinIdle: p.MinIdle, Max: p.Max, IdleTimeout: p.IdleTimeout}
		}
	}
	return agentspec.Pool{}
}

// where names the place of limits.pooled_per_peer, or its default.
func where(l Limits) string {
	if l.PooledPerPeerRange.Filename == "" {
		return fmt.Sprintf("default %d", DefaultPooledPerPeer)
	}
	return l.PooledPerPeerRange.String()
}

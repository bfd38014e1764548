package desired

import (
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/dataplane/agentspec"
)

// TestPoolReachesClientRoutes: a pool block toward an agent sizes the pool
// of every client-side route toward it, and only those.
func TestPoolReachesClientRoutes(t *testing.T) {
	cfg := loadExample(t)
	d, err := Compile(cfg, "agent-clemson")
	if err != nil {
		t.Fatal(err)
	}
	rc := d.Agents[0].Relay
	if len(rc.Client) == 0 {
		t.Fatal("the example's agent has no client routes")
	}
	peer := rc.Client[0].PeerName
	for _, r := range rc.Client {
		if r.Pool != (agentspec.Pool{}) {
			t.Errorf("route %s has a pool without a pool block: %+v", r.Name, r.Pool)
		}
	}
	cfg.Pools = []*config.Pool{{Peer: peer, MinIdle: 4, Max: 12, IdleTimeout: time.Minute}}
	if d, err = Compile(cfg, "agent-clemson"); err != nil {
		t.Fatal(err)
	}
	rc = d.Agents[0].Relay
	for _, r := range rc.Client {
		want := agentspec.Pool{}
		if r.PeerName == peer {
			want = agentspec.Pool{MinIdle: 4, Max: 12, IdleTimeout: time.Minute}
		}
		if r.Pool != want {
			t.Errorf("route %s toward %s: pool %+v, want %+v", r.Name, r.PeerName, r.Pool, want)
		}
	}
	for _, r := range rc.Server {
		if r.Pool != (agentspec.Pool{}) {
			t.Errorf("server route %s has a pool", r.Name)
		}
	}
	rc.PSK = make([]byte, 32)
	if err := rc.Validate(); err != nil {
		t.Errorf("relay spec with a pool: %v", err)
	}
}

// TestPooledPerPeerReachesTheRelay: limits.pooled_per_peer bounds the idle
// pooled streams every agent holds per peer; 0 turns them off.
func TestPooledPerPeerReachesTheRelay(t *testing.T) {
	for set, want := range map[int]int{
		config.DefaultPooledPerPeer: agentspec.DefaultMaxPooledPerPeer,
		32:                          32,
		0:                           agentspec.NoPooledStreams,
	} {
		cfg := loadExample(t)
		cfg.Limits.PooledPerPeer = set
		d, err := Compile(cfg, "agent-clemson")
		if err != nil {
			t.Fatal(err)
		}
		rc := d.Agents[0].Relay
		if got := rc.Limits.MaxPooledPerPeer; got != want {
			t.Errorf("pooled_per_peer %d: relay bound %d, want %d", set, got, want)
		}
		if got := rc.Limits.WithDefaults().MaxPooledPerPeer; got != want {
			t.Errorf("pooled_per_peer %d: the relay's defaults make it %d, want %d", set, got, want)
		}
	}
}

// TestSpreadRoutePoolPerFarAgent: a route spread over several far agents
// keeps a pool toward each sized by that agent's own pool block, and none
// toward an agent without one.
func TestSpreadRoutePoolPerFarAgent(t *testing.T) {
	cfg, _, diags := config.LoadFile("../../examples/two-agents.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	cfg.Pools = []*config.Pool{{Peer: "west-2", MinIdle: 4, Max: 12, IdleTimeout: time.Minute}}
	d, err := Compile(cfg, "east-2")
	if err != nil {
		t.Fatal(err)
	}
	bulk := d.Agents[0].Relay.Client[0]
	if len(bulk.Peers) != 2 {
		t.Fatalf("bulk: %+v", bulk)
	}
	for _, p := range bulk.Peers {
		want := agentspec.Pool{}
		if p.Name == "west-2" {
			want = agentspec.Pool{MinIdle: 4, Max: 12, IdleTimeout: time.Minute}
		}
		if p.Pool != want {
			t.Errorf("far agent %s: pool %+v, want %+v", p.Name, p.Pool, want)
		}
	}
}

// TestSessionsPerPeerReachesTheRelay: limits.sessions_per_peer bounds the
// server-side sessions of one client-side agent; unset, the relay's bound
// is max_sessions.
func TestSessionsPerPeerReachesTheRelay(t *testing.T) {
	for _, c := range []struct{ max, perPeer, want int }{
		{256, 0, 256},
		{256, 32, 32},
		{100, 0, 100},
	} {
		cfg := loadExample(t)
		cfg.Limits.MaxSessions, cfg.Limits.SessionsPerPeer = c.max, c.perPeer
		d, err := Compile(cfg, "agent-clemson")
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Agents[0].Relay.Limits.WithDefaults().MaxSessionsPerPeer; got != c.want {
			t.Errorf("max_sessions %d, sessions_per_peer %d: relay bound %d, want %d", c.max, c.perPeer, got, c.want)
		}
	}
}

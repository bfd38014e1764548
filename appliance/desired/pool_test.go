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

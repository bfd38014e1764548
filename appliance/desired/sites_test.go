package desired

import (
	"slices"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/sdn/flows"
)

// TestCompileThreeSites compiles examples/three-sites.hcl: whitelists
// between every pair of three sites, dual-stack. Each agent carries the
// routes of the pairs it is part of, each switch steers those pairs only,
// IPv6 goes by ipv6_src/ipv6_dst, and the agents stripe to each other's
// IPv6 addresses.
func TestCompileThreeSites(t *testing.T) {
	const file = "../../examples/three-sites.hcl"
	cfg, _, diags := config.LoadFile(file)
	if diags.HasErrors() {
		t.Fatalf("%s: %v", file, diags)
	}
	type route struct{ name, peer string }
	want := map[string]struct{ client, server []route }{
		// clemson-utah both ways: clemson is client side of its own
		// connections and of none of the servers'.
		"agent-clemson": {
			client: []route{{"clemson-utah-v6", "agent-utah"}, {"clemson-utah-v4", "agent-utah"}},
			server: []route{{"clemson-utah-v6", "agent-utah"}, {"clemson-utah-v4", "agent-utah"}, {"chicago-clemson", "agent-chicago"}},
		},
		"agent-utah": {
			client: []route{{"clemson-utah-v6", "agent-clemson"}, {"clemson-utah-v4", "agent-clemson"}, {"utah-chicago", "agent-chicago"}},
			server: []route{{"clemson-utah-v6", "agent-clemson"}, {"clemson-utah-v4", "agent-clemson"}},
		},
		"agent-chicago": {
			client: []route{{"chicago-clemson", "agent-clemson"}},
			server: []route{{"utah-chicago", "agent-utah"}},
		},
	}
	for node, w := range want {
		d, err := Compile(cfg, node)
		if err != nil {
			t.Fatal(err)
		}
		rc := d.Agents[0].Relay
		var client, server []route
		for _, r := range rc.Client {
			client = append(client, route{r.Name, r.PeerName})
			if peer := cfg.Agent(r.PeerName); r.Peer != peer.DataAddr() || !r.Peer.Addr().Is6() {
				t.Errorf("%s: route %s stripes to %s, want %s's IPv6 data address", node, r.Name, r.Peer, r.PeerName)
			}
		}
		for _, r := range rc.Server {
			server = append(server, route{r.Name, r.PeerName})
		}
		if !slices.Equal(client, w.client) || !slices.Equal(server, w.server) {
			t.Errorf("%s: client routes %v server routes %v\nwant %v and %v", node, client, server, w.client, w.server)
		}
		if rc.TransparentListen.String() != "[::]:9876" {
			t.Errorf("%s: transparent listener %s, want [::]:9876 for its IPv6 client routes", node, rc.TransparentListen)
		}
		nft, _ := itemValue(d, item.KindSteering, item.SteeringKeyNftables)
		rules, err := item.ParseTproxyRules(nft)
		if err != nil || len(rules.Divert) != len(w.client) {
			t.Errorf("%s: %d diverts for %d client routes: %s (%v)", node, len(rules.Divert), len(w.client), nft, err)
		}
	}

	d, err := Compile(cfg, "ctl-clemson")
	if err != nil {
		t.Fatal(err)
	}
	steered := map[string][]string{}
	for _, sw := range d.Controller.Switches {
		fs, err := flows.Compile(sw)
		if err != nil {
			t.Fatalf("%s: %v", sw.Name, err)
		}
		for _, st := range sw.Steers {
			if !slices.Contains(steered[sw.Name], st.Whitelist) {
				steered[sw.Name] = append(steered[sw.Name], st.Whitelist)
			}
		}
		v6 := 0
		for _, f := range fs {
			if strings.Contains(f.Match.String(), "tcp6,ipv6_src=") {
				v6++
			}
		}
		if v6 == 0 {
			t.Errorf("%s: no IPv6 steering flow", sw.Name)
		}
	}
	wantSteered := map[string][]string{
		"sw-clemson": {"chicago-clemson", "clemson-utah-v4", "clemson-utah-v6"},
		"sw-utah":    {"clemson-utah-v4", "clemson-utah-v6", "utah-chicago"},
		"sw-chicago": {"chicago-clemson", "utah-chicago"},
	}
	for sw, names := range wantSteered {
		if !slices.Equal(steered[sw], names) {
			t.Errorf("%s steers %v, want %v", sw, steered[sw], names)
		}
	}
}

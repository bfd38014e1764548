package desired

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// routeCovers says whether a relay route takes a connection from opener to
// listener.
func routeCovers(r agentspec.Route, opener, listener netip.AddrPort) bool {
	in := func(ps []netip.Prefix, a netip.Addr) bool {
		return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	servers := in(r.Servers, listener.Addr()) || r.Server == listener.Addr()
	port := r.Port == listener.Port() || slices.ContainsFunc(r.Ports, func(pr portrange.Range) bool { return pr.Contains(listener.Port()) })
	return in(r.Clients, opener.Addr()) && servers && port
}

// A connection whose two ports are both in a whitelist's range matches a
// flow of each direction on both switches: with direction = "both", or two
// whitelists in opposite directions. For every such connection, opened from
// either site, in both spread modes, the switches and the agents must agree
// on one path: the opener's packets reach an agent that carries them (one
// of its client-side routes takes the connection), and the listener's
// replies reach the far agent that agent dials (its server-side route
// admits the session). Flows of one priority with different actions for
// one packet are a failure too: the switch may break the tie either way.
// Before the server side's flows ranked above the client side's, half of
// these connections with two agents per site had their replies at the
// wrong agent (helper-107 saw 8 of 16 on Open vSwitch).
func TestBothPortsInRangeOneAgentPerConnection(t *testing.T) {
	both := `
whitelist "gridftp" {
  clients      = ["10.1.0.0/24"]
  server       = "10.2.0.10"
  server_ports = ["50000-50031"]
  direction    = "both"
}`
	opposite := `
whitelist "a-to-b" {
  clients      = ["10.1.0.0/24"]
  server       = "10.2.0.10"
  server_ports = ["50000-50031"]
}
whitelist "b-to-a" {
  clients      = ["10.2.0.0/24"]
  server       = "10.1.0.10"
  server_ports = ["50000-50031"]
}`
	// Agents by switch and port, as twoAgentsPerSite places them.
	agentAt := map[string]map[uint32]string{"sw-a": {3: "a1", 4: "a2"}, "sw-b": {7: "b1", 8: "b2"}}
	nodes := map[string]string{"a1": "na1", "a2": "na2", "b1": "nb1", "b2": "nb2"}
	host := func(site byte) func(i int) netip.Addr {
		return func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, site, 0, byte(20 + i%7)}) }
	}
	one := func(a string) func(int) netip.Addr { return func(int) netip.Addr { return netip.MustParseAddr(a) } }
	// open is one direction of connections: from the opener's site and
	// switch to the listener's, the i-th opener and listener.
	type open struct {
		from, to         string
		opener, listener func(i int) netip.Addr
	}
	for _, c := range []struct {
		name, wl string
		opens    []open
	}{
		{"direction both", both, []open{{"sw-a", "sw-b", host(1), one("10.2.0.10")}, {"sw-b", "sw-a", one("10.2.0.10"), host(1)}}},
		// The hosts that are each other's whitelisted servers.
		{"opposite whitelists", opposite, []open{{"sw-a", "sw-b", one("10.1.0.10"), one("10.2.0.10")}, {"sw-b", "sw-a", one("10.2.0.10"), one("10.1.0.10")}}},
	} {
		for _, mode := range []string{"port", "address"} {
			src := strings.Replace(twoAgentsPerSite, "spread { bits = 4 }", fmt.Sprintf("spread {\n  mode = %q\n  bits = 4\n}", mode), 1) + c.wl
			sws := compiledSwitches(t, src)
			cfg := parse(t, src)
			routes := map[string]*Agent{}
			for name, node := range nodes {
				d, err := Compile(cfg, node)
				if err != nil {
					t.Fatal(err)
				}
				routes[name] = d.Agents[0]
			}
			bad := 0
			n := 0
			for _, o := range c.opens {
				for p1 := 50000; p1 < 50032; p1++ {
					for p2 := 50000; p2 < 50032; p2++ {
						n++
						opener := netip.AddrPortFrom(o.opener(p1+p2), uint16(p1))
						listener := netip.AddrPortFrom(o.listener(p1*3+p2), uint16(p2))
						fail := func(format string, args ...any) {
							bad++
							if bad <= 5 {
								t.Errorf("%s, spread %s, %s -> %s: %s", c.name, mode, opener, listener, fmt.Sprintf(format, args...))
							}
						}
						vo := t0Lookup(sws[o.from], t0Packet{1, opener, listener})
						vl := t0Lookup(sws[o.to], t0Packet{1, listener, opener})
						if len(vo.ties)+len(vl.ties) > 0 {
							fail("ties: %s %v; %s %v", vo.actions, vo.ties, vl.actions, vl.ties)
							continue
						}
						near, ok := agentAt[o.from][t0OutPort(vo.actions)]
						if !ok || !vo.steered() {
							fail("the opener's switch does not steer it to an agent: %s", vo.actions)
							continue
						}
						i := slices.IndexFunc(routes[near].Relay.Client, func(r agentspec.Route) bool { return routeCovers(r, opener, listener) })
						if i < 0 {
							fail("steered to %s (%s), which has no client-side route for it", near, vo.reason)
							continue
						}
						r := routes[near].Relay.Client[i]
						far := r.PeerName
						if len(r.Peers) > 0 {
							b, err := spread.Assign(spread.Mode(r.Spread), r.SpreadBits, len(r.Peers), nil)
							if err != nil {
								t.Fatal(err)
							}
							far = r.Peers[b.Agent(opener)].Name
						}
						got, ok := agentAt[o.to][t0OutPort(vl.actions)]
						if !ok || !vl.steered() || got != far {
							fail("%s dials %s, but the listener's switch sends the replies to %q (%s)", near, far, got, vl.actions)
							continue
						}
						if !slices.ContainsFunc(routes[far].Relay.Server, func(r agentspec.Route) bool { return routeCovers(r, opener, listener) }) {
							fail("the far agent %s has no server-side route for it", far)
						}
					}
				}
			}
			if bad > 0 {
				t.Errorf("%s, spread %s: %d of %d connections fail", c.name, mode, bad, n)
			}
		}
	}
}

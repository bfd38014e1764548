package desired

// (Review, helper-111.) fail-over, IPv6 and the upgrade from the old priorities, for
// connections whose two ports are both in a whitelist's range.

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/dataplane/agentspec"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

type r111Open struct {
	from, to         string
	opener, listener func(i int) netip.Addr
}

// r111Agree checks, for every connection of opens (both ports in
// 50000-50031), that the opener's switch sends it to an agent with a
// client-side route for it, that agent's far agent (farAgent over the far
// site's agents with farDown left out, as the client-side agent has learnt
// it) is where the listener's switch sends the replies, and that the far
// agent has a server-side route. down are the agents the controller sees
// down; no agent in down may be chosen. It returns the failures.
func r111Agree(t *testing.T, src string, agentAt map[string]map[uint32]string, nodes map[string]string, opens []r111Open, down []string, lo, hi int) (bad, n int, first []string) {
	t.Helper()
	sws := r111Switches(t, src)
	fs := map[string][]flows.Flow{}
	for name, sw := range sws {
		fs[name] = r111Flows(t, sw, down, nil)
	}
	cfg := parse(t, src)
	routes := map[string]*Agent{}
	for name, node := range nodes {
		d, err := Compile(cfg, node)
		if err != nil {
			t.Fatal(err)
		}
		routes[name] = d.Agents[0]
	}
	fail := func(format string, args ...any) {
		bad++
		if len(first) < 3 {
			first = append(first, fmt.Sprintf(format, args...))
		}
	}
	for _, o := range opens {
		for p1 := lo; p1 <= hi; p1++ {
			for p2 := lo; p2 <= hi; p2++ {
				n++
				opener := netip.AddrPortFrom(o.opener(p1+p2), uint16(p1))
				listener := netip.AddrPortFrom(o.listener(p1*3+p2), uint16(p2))
				vo := t0Lookup(fs[o.from], t0Packet{1, opener, listener})
				vl := t0Lookup(fs[o.to], t0Packet{1, listener, opener})
				if len(vo.ties)+len(vl.ties) > 0 {
					fail("%s -> %s: ties %v %v", opener, listener, vo.ties, vl.ties)
					continue
				}
				near, ok := agentAt[o.from][t0OutPort(vo.actions)]
				if !ok || slices.Contains(down, near) {
					fail("%s -> %s: opener's switch: %s", opener, listener, vo.actions)
					continue
				}
				i := slices.IndexFunc(routes[near].Relay.Client, func(r agentspec.Route) bool { return routeCovers(r, opener, listener) })
				if i < 0 {
					fail("%s -> %s: %s has no client route", opener, listener, near)
					continue
				}
				r := routes[near].Relay.Client[i]
				far := r.PeerName
				if len(r.Peers) > 0 {
					up := make([]bool, len(r.Peers))
					for j, p := range r.Peers {
						up[j] = !slices.Contains(down, p.Name)
					}
					b, err := spread.Assign(spread.Mode(r.Spread), r.SpreadBits, len(r.Peers), up)
					if err != nil {
						t.Fatal(err)
					}
					far = r.Peers[b.Agent(opener)].Name
				}
				got := agentAt[o.to][t0OutPort(vl.actions)]
				if got != far {
					fail("%s -> %s: %s dials %s, replies go to %q (%s)", opener, listener, near, far, got, vl.reason)
					continue
				}
				if !slices.ContainsFunc(routes[far].Relay.Server, func(r agentspec.Route) bool { return routeCovers(r, opener, listener) }) {
					fail("%s -> %s: far %s has no server route", opener, listener, far)
				}
			}
		}
	}
	return bad, n, first
}

// TestFailOverBothPortsInRange: with one agent of either site
// down (the controller's fail-over, and the client-side agents having
// learnt the far one down), both ends still agree on every connection
// whose two ports are in range, opened from either site, both spread modes.
func TestFailOverBothPortsInRange(t *testing.T) {
	agentAt := map[string]map[uint32]string{"sw-a": {3: "a1", 4: "a2"}, "sw-b": {7: "b1", 8: "b2"}}
	nodes := map[string]string{"a1": "na1", "a2": "na2", "b1": "nb1", "b2": "nb2"}
	opens := []r111Open{{"sw-a", "sw-b", r111Host(1), r111One("10.2.0.10")}, {"sw-b", "sw-a", r111One("10.2.0.10"), r111Host(1)}}
	for _, mode := range []string{"port", "address"} {
		src := strings.Replace(twoAgentsPerSite, "spread { bits = 4 }", fmt.Sprintf("spread {\n  mode = %q\n  bits = 4\n}", mode), 1) + r111Both
		for _, down := range [][]string{nil, {"a1"}, {"a2"}, {"b1"}, {"b2"}, {"a1", "b2"}} {
			if bad, n, first := r111Agree(t, src, agentAt, nodes, opens, down, 50000, 50031); bad > 0 {
				t.Errorf("spread %s, down %v: %d of %d fail: %v", mode, down, bad, n, first)
			}
		}
	}
}

// TestIPv6BothPortsInRange: the same over IPv6 (address mode
// takes the low 32 bits of the address).
func TestIPv6BothPortsInRange(t *testing.T) {
	v6 := strings.NewReplacer(`"10.1.0.0/24"`, `"fd00:1::/64"`, `"10.2.0.0/24"`, `"fd00:2::/64"`,
		`"10.1.0.2"`, `"fd00:1::2"`, `"10.1.0.3"`, `"fd00:1::3"`, `"10.2.0.2"`, `"fd00:2::2"`, `"10.2.0.3"`, `"fd00:2::3"`)
	both := strings.NewReplacer(`"10.1.0.0/24"`, `"fd00:1::/64"`, `"10.2.0.10"`, `"fd00:2::10"`).Replace(r111Both)
	agentAt := map[string]map[uint32]string{"sw-a": {3: "a1", 4: "a2"}, "sw-b": {7: "b1", 8: "b2"}}
	nodes := map[string]string{"a1": "na1", "a2": "na2", "b1": "nb1", "b2": "nb2"}
	host := func(i int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("fd00:1::%x", 0x20+i%7)) }
	srv := func(int) netip.Addr { return netip.MustParseAddr("fd00:2::10") }
	opens := []r111Open{{"sw-a", "sw-b", host, srv}, {"sw-b", "sw-a", srv, host}}
	for _, mode := range []string{"port", "address"} {
		src := strings.Replace(v6.Replace(twoAgentsPerSite), "spread { bits = 4 }", fmt.Sprintf("spread {\n  mode = %q\n  bits = 4\n}", mode), 1) + both
		for _, down := range [][]string{nil, {"a2"}, {"b1"}} {
			if bad, n, first := r111Agree(t, src, agentAt, nodes, opens, down, 50000, 50031); bad > 0 {
				t.Errorf("IPv6, spread %s, down %v: %d of %d fail: %v", mode, down, bad, n, first)
			}
		}
	}
}

// TestUpgradeFromEqualPriorities: a controller of this version
// takes over a switch that carries the previous version's flows (server
// side at 2000 like the client side, exceptions at 2001, pins at 2002).
// Diff adds the new entries first and deletes the old ones last, so no
// segment is ever without a steering flow; this walks through every
// intermediate table and records where two matching flows of one priority
// disagree (a tie the switch may break either way).
func TestUpgradeFromEqualPriorities(t *testing.T) {
	src := strings.Replace(twoAgentsPerSite, "spread { bits = 4 }", "spread {\n  mode = \"port\"\n  bits = 1\n}", 1) + r111Both
	sw := r111Switches(t, src)["sw-b"]
	// A survivor's pin, so pins move too (bucket of port 40002 is b2's).
	held := map[string][]flows.Held{"b1": {{Whitelist: "gridftp", Client: ap("10.1.0.20:40002"), Server: ap("10.2.0.10:50010")}}}
	now := r111Flows(t, sw, nil, held)
	var old []flows.Flow
	for _, f := range now {
		switch {
		case f.Priority == flows.PrioritySession:
			f.Priority = flows.PrioritySteer + 2
		case f.Priority == flows.PriorityUnsteered:
			f.Priority = flows.PrioritySteer + 1
		case f.Priority == flows.PriorityReply:
			f.Priority = flows.PrioritySteer
		}
		old = append(old, f)
	}
	ch := flows.Diff(now, old)
	if len(ch.Modify) != 0 {
		t.Fatalf("modify: %v", ch.Modify)
	}
	table := slices.Clone(old)
	// Segments as switch b sees them from its LAN.
	pkts := []t0Packet{
		{1, ap("10.2.0.10:50002"), ap("10.1.0.20:50001")}, // both in range
		{1, ap("10.2.0.10:50003"), ap("10.1.0.21:40000")}, // reply to a's client
		{1, ap("10.2.0.10:40000"), ap("10.1.0.22:50004")}, // b's server opens to a's client
		{1, ap("10.2.0.10:50005"), ap("10.1.0.2:50006")},  // reply to agent a1's own address (exception)
		{1, ap("10.2.0.10:50010"), ap("10.1.0.20:40002")}, // the pinned session
	}
	if v := t0Lookup(now, pkts[4]); v.actions != "set_field:02:00:00:00:00:02->eth_dst,output:7" {
		t.Fatalf("the pin is not in place: %s (%s)", v.actions, v.reason)
	}
	oldTies := map[string]bool{}
	for _, p := range pkts {
		if v := t0Lookup(old, p); len(v.ties) > 0 {
			oldTies[p.String()] = true
			t.Logf("tie in the old flows (the defect fixed): %s: %s vs %v", p, v.actions, v.ties)
		}
	}
	ties := map[string]bool{}
	for step, c := range ch.List() {
		switch c.Op {
		case flows.OpAdd:
			table = append(table, c.Flow)
		case flows.OpDelete:
			table = slices.DeleteFunc(table, func(f flows.Flow) bool { return f.Key() == c.Flow.Key() })
		}
		for _, p := range pkts {
			v := t0Lookup(table, p)
			if !v.steered() && p != pkts[3] {
				t.Errorf("step %d (%s): %s is not steered: %s", step, c, p, v.actions)
			}
			if p == pkts[4] && v.actions != "set_field:02:00:00:00:00:02->eth_dst,output:7" {
				t.Errorf("step %d (%s): the pinned session goes %s", step, c, v.actions)
			}
			if len(v.ties) > 0 && !oldTies[p.String()] {
				ties[fmt.Sprintf("%s: %s vs %v", p, v.actions, v.ties)] = true
			}
		}
	}
	for k := range ties {
		t.Logf("transient tie during the upgrade: %s", k)
	}
	if len(ties) > 0 {
		t.Errorf("%d packets meet a tie between the adds and the deletes of the upgrade", len(ties))
	}
	if got := t0Lookup(table, pkts[3]); got.steered() || len(got.ties) > 0 {
		t.Errorf("after the upgrade the reply to the agent's own address: %s %v", got.actions, got.ties)
	}
}

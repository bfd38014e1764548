package desired

// (Review, helper-111.) session pins (flows.PinSessions) for connections whose two
// ports are both in a whitelist's range, now that the server side's flows
// (priority 2001) rank above the client side's (2000).

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/sdn/flows"
)

const r111Both = `
whitelist "gridftp" {
  clients      = ["10.1.0.0/24"]
  server       = "10.2.0.10"
  server_ports = ["50000-50031"]
  direction    = "both"
}`

const r111Opposite = `
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

// r111Switches are the controller's switch specs for cfg (not compiled:
// FailOpen and PinSessions apply to them).
func r111Switches(t *testing.T, src string) map[string]flows.Switch {
	t.Helper()
	d, err := Compile(parse(t, src), "ctl")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]flows.Switch{}
	for _, sw := range d.Controller.Switches {
		out[sw.Name] = sw
	}
	return out
}

// r111Flows is what the controller installs on sw with the agents in down
// down and the sessions held reported (desiredFor: FailOpen, then
// PinSessions, then Compile).
func r111Flows(t *testing.T, sw flows.Switch, down []string, held map[string][]flows.Held) []flows.Flow {
	t.Helper()
	isDown := func(a string) bool {
		for _, d := range down {
			if d == a {
				return true
			}
		}
		return false
	}
	s, _ := flows.FailOpen(sw, isDown)
	s = flows.PinSessions(s, held)
	fs, err := flows.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

type r111Conn struct {
	wl               string // the whitelist the holder reports
	opener, listener netip.AddrPort
}

// r111Conns are connections opened at one site whose two ports are both in
// the range, with the whitelist name an agent reports for them.
func r111Conns(wl string, opener, listener func(i int) netip.Addr) []r111Conn {
	var out []r111Conn
	for p1 := 50000; p1 < 50032; p1++ {
		for p2 := 50000; p2 < 50032; p2++ {
			out = append(out, r111Conn{wl, netip.AddrPortFrom(opener(p1+p2), uint16(p1)), netip.AddrPortFrom(listener(p1*3+p2), uint16(p2))})
		}
	}
	return out
}

func r111Host(site byte) func(int) netip.Addr {
	return func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, site, 0, byte(20 + i%7)}) }
}

func r111One(a string) func(int) netip.Addr {
	return func(int) netip.Addr { return netip.MustParseAddr(a) }
}

var r111AgentAt = map[string]map[uint32]string{"sw-a": {3: "a1", 4: "a2"}, "sw-b": {7: "b1", 8: "b2"}}

// TestPinsKeepSessionsAtTheOpenersSite: an agent of the opener's
// site is down; connections opened meanwhile (both ports in range) go to
// the survivor, which carries them as their client-side agent. The agent
// comes back; the survivor reports the sessions at GET /sessions, and the
// controller pins those whose bucket is no longer the survivor's. Every
// segment of those connections must keep reaching the survivor: any other
// agent has no socket for them, passes them on to the server, and the
// connection is cut.
//
// PinSessions decides whether a session needs a pin from the bucket of the
// session's own whitelist direction at that switch (the client side's, by
// the opener's port or address); but the flow that now carries the
// opener's segments is the other direction's server-side flow (2001),
// whose bucket is the listener's. Where the two buckets disagree, a
// session the survivor holds in the returning agent's bucket gets no pin.
func TestPinsKeepSessionsAtTheOpenersSite(t *testing.T) {
	for _, c := range []struct {
		name, wl        string
		sw, down, alive string
		conns           []r111Conn
	}{
		{"direction both, opened at site a", r111Both, "sw-a", "a2", "a1", r111Conns("gridftp", r111Host(1), r111One("10.2.0.10"))},
		{"direction both, opened at site b", r111Both, "sw-b", "b2", "b1", r111Conns("gridftp", r111One("10.2.0.10"), r111Host(1))},
		{"opposite whitelists, opened at site a", r111Opposite, "sw-a", "a2", "a1", r111Conns("a-to-b", r111One("10.1.0.10"), r111One("10.2.0.10"))},
	} {
		for _, mode := range []string{"port", "address"} {
			src := strings.Replace(twoAgentsPerSite, "spread { bits = 4 }", fmt.Sprintf("spread {\n  mode = %q\n  bits = 4\n}", mode), 1) + c.wl
			sw := r111Switches(t, src)[c.sw]
			during := r111Flows(t, sw, []string{c.down}, nil)
			var held []flows.Held
			for _, k := range c.conns {
				v := t0Lookup(during, t0Packet{1, k.opener, k.listener})
				if got := r111AgentAt[c.sw][t0OutPort(v.actions)]; got != c.alive || len(v.ties) > 0 {
					t.Fatalf("%s, %s: with %s down %s -> %s goes to %q (%s), ties %v", c.name, mode, c.down, k.opener, k.listener, got, v.actions, v.ties)
				}
				held = append(held, flows.Held{Whitelist: k.wl, Client: k.opener, Server: k.listener})
			}
			after := r111Flows(t, sw, nil, map[string][]flows.Held{c.alive: held})
			moved := 0
			for _, k := range c.conns {
				v := t0Lookup(after, t0Packet{1, k.opener, k.listener})
				if got := r111AgentAt[c.sw][t0OutPort(v.actions)]; got != c.alive {
					moved++
					if moved <= 3 {
						t.Errorf("%s, spread %s: %s came back; %s's session %s -> %s now goes to %q (%s)", c.name, mode, c.down, c.alive, k.opener, k.listener, got, v.reason)
					}
				}
			}
			if moved > 0 {
				t.Errorf("%s, spread %s: %d of %d live sessions on %s lose their agent when %s comes back", c.name, mode, moved, len(c.conns), c.alive, c.down)
			}
		}
	}
}

// TestPinsAtTheListenersSite: the same at the listener's site,
// where the replies take the session's own server-side flow: an agent of
// the listener's site is down, the survivor serves connections opened from
// the far site meanwhile, and after the return its pins keep them.
func TestPinsAtTheListenersSite(t *testing.T) {
	for _, mode := range []string{"port", "address"} {
		src := strings.Replace(twoAgentsPerSite, "spread { bits = 4 }", fmt.Sprintf("spread {\n  mode = %q\n  bits = 4\n}", mode), 1) + r111Both
		sw := r111Switches(t, src)["sw-b"]
		conns := r111Conns("gridftp", r111Host(1), r111One("10.2.0.10"))
		var held []flows.Held
		during := r111Flows(t, sw, []string{"b2"}, nil)
		for _, k := range conns {
			v := t0Lookup(during, t0Packet{1, k.listener, k.opener})
			if got := r111AgentAt["sw-b"][t0OutPort(v.actions)]; got != "b1" {
				t.Fatalf("spread %s: with b2 down the reply %s -> %s goes to %q", mode, k.listener, k.opener, got)
			}
			held = append(held, flows.Held{Whitelist: k.wl, Client: k.opener, Server: k.listener})
		}
		after := r111Flows(t, sw, nil, map[string][]flows.Held{"b1": held})
		for _, k := range conns {
			v := t0Lookup(after, t0Packet{1, k.listener, k.opener})
			if got := r111AgentAt["sw-b"][t0OutPort(v.actions)]; got != "b1" {
				t.Errorf("spread %s: after b2's return the reply %s -> %s goes to %q", mode, k.listener, k.opener, got)
			}
		}
	}
}

// TestNoPinsWithoutFailOver: with every agent up all along, each
// agent holds exactly the sessions the switches send it, so no bucket
// changed owner and no session needs a pin (README: pins are for sessions
// "in a bucket that is no longer its own"). For connections with both
// ports in range, PinSessions pins every session whose holder (chosen by
// the other direction's server-side flow) is not the agent of its own
// direction's client-side bucket: an exact-match flow per such session on
// the switch, and a flow-mod each time one starts or ends, for nothing.
func TestNoPinsWithoutFailOver(t *testing.T) {
	for _, mode := range []string{"port", "address"} {
		src := strings.Replace(twoAgentsPerSite, "spread { bits = 4 }", fmt.Sprintf("spread {\n  mode = %q\n  bits = 4\n}", mode), 1) + r111Both
		sw := r111Switches(t, src)["sw-a"]
		base := r111Flows(t, sw, nil, nil)
		held := map[string][]flows.Held{}
		conns := r111Conns("gridftp", r111Host(1), r111One("10.2.0.10"))
		for _, k := range conns {
			v := t0Lookup(base, t0Packet{1, k.opener, k.listener})
			a := r111AgentAt["sw-a"][t0OutPort(v.actions)]
			held[a] = append(held[a], flows.Held{Whitelist: k.wl, Client: k.opener, Server: k.listener})
		}
		pinned := 0
		for _, f := range r111Flows(t, sw, nil, held) {
			if f.Priority == flows.PrioritySession {
				pinned++
			}
		}
		if pinned > 0 {
			t.Errorf("spread %s: no agent was ever down, yet %d of %d sessions are pinned", mode, pinned, len(conns))
		}
	}
}

// TestPinsOnReloadAddingAnAgent: a reload adds a third agent to
// site a, which deals the buckets again (16 -> 32 by default; here bits
// stays 4, so only the dealing changes). The controller installs the new
// dealing with a pin for every live session whose bucket moved
// (README "Adding or removing an agent"). For connections opened at site
// a with both ports in range, the sessions a1 and a2 hold must keep their
// agent.
func TestPinsOnReloadAddingAnAgent(t *testing.T) {
	a3 := `
  agent "a3" {
    node = "na3"
    switch = "sw-a"
    switch_port = 5
    mac = "02:00:00:00:00:05"
    address = "10.1.0.4"
    interface = "eth1"
  }
}
site "b" {`
	before := strings.Replace(twoAgentsPerSite, "spread { bits = 4 }", "spread {\n  mode = \"port\"\n  bits = 4\n}", 1) + r111Both
	after := strings.Replace(before, "}\nsite \"b\" {", a3, 1)
	if after == before {
		t.Fatal("no third agent added")
	}
	at := map[uint32]string{3: "a1", 4: "a2", 5: "a3"}
	old := r111Flows(t, r111Switches(t, before)["sw-a"], nil, nil)
	conns := r111Conns("gridftp", r111Host(1), r111One("10.2.0.10"))
	// The control: opener ports outside the range, one flow each; their
	// pins hold.
	var control []r111Conn
	for p1 := 40000; p1 < 40064; p1++ {
		control = append(control, r111Conn{"gridftp", netip.AddrPortFrom(r111Host(1)(p1), uint16(p1)), ap("10.2.0.10:50001")})
	}
	conns = append(control, conns...)
	held := map[string][]flows.Held{}
	holder := map[r111Conn]string{}
	for _, k := range conns {
		a := at[t0OutPort(t0Lookup(old, t0Packet{1, k.opener, k.listener}).actions)]
		holder[k] = a
		held[a] = append(held[a], flows.Held{Whitelist: k.wl, Client: k.opener, Server: k.listener})
	}
	now := r111Flows(t, r111Switches(t, after)["sw-a"], nil, held)
	moved := 0
	for _, k := range conns {
		v := t0Lookup(now, t0Packet{1, k.opener, k.listener})
		if got := at[t0OutPort(v.actions)]; got != holder[k] {
			if k.opener.Port() < 50000 {
				t.Errorf("control: %s -> %s held by %s now goes to %s", k.opener, k.listener, holder[k], got)
			}
			moved++
			if moved <= 2 {
				t.Errorf("%s -> %s held by %s now goes to %s (%s)", k.opener, k.listener, holder[k], got, v.reason)
			}
		}
	}
	if moved > 0 {
		t.Errorf("%d of %d live sessions lose their agent at the reload", moved, len(conns))
	}
}

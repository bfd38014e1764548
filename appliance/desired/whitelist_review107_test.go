//go:build review107

// Reproductions by review (helper-107) of defects in steering and the
// choice of far agent, now fixed, and properties that held: run with
// go test -tags review107 -run Review107. The server-opened connections
// it found black-holed are tested with the agents' real steering tables
// in passon_ovs_test.go (the switches still steer them to the agents,
// which send them on), so its switch-only reproductions are gone.

package desired

// Review 107: whitelist matching and steering, end to end from the HCL file
// to the flows each switch carries. The flows are evaluated here by a small
// OpenFlow 1.3 table-0 matcher (highest priority wins; two matching flows
// of one priority with different actions are a tie the switch may break
// either way); whitelist_ovs_review107_test.go checks the same packets
// against Open vSwitch itself with ofproto/trace.

import (
	"fmt"
	"github.com/sosappliance/sosappliance/appliance/config"
	"net/netip"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// r107Sites is two sites of one agent each; site a's hosts are 10.1.0.0/24
// (agent ag-a on port 3), site b's 10.2.0.0/24 (agent ag-b on port 7).
const r107Sites = `
security { psk_file = "/etc/psk" }
controller { node = "ctl" }
site "a" {
  prefixes = ["10.1.0.0/24", "fd01::/64"]
  switch "sw-a" { datapath_id = "0x1" }
  agent "ag-a" {
    node = "na"
    switch = "sw-a"
    switch_port = 3
    mac = "02:00:00:00:00:01"
    address = "10.1.0.2"
    interface = "eth1"
  }
}
site "b" {
  prefixes = ["10.2.0.0/24", "fd02::/64"]
  switch "sw-b" { datapath_id = "0x2" }
  agent "ag-b" {
    node = "nb"
    switch = "sw-b"
    switch_port = 7
    mac = "02:00:00:00:00:02"
    address = "10.2.0.2"
    interface = "eth1"
  }
}
`

// TestReview107WhitelistFormsSteerExactly: for each form of whitelist entry,
// both directions of a whitelisted connection reach the agent of their site
// on both switches, and near misses (one port outside the range, a server
// just outside the prefix, the other family) go NORMAL. Host port 1 is a
// plain host on each switch.
func TestReview107WhitelistFormsSteerExactly(t *testing.T) {
	type conn struct {
		client, server string // as the opener and listener
		want           bool
	}
	cases := []struct {
		name, wl string
		conns    []conn
	}{
		{"single port", `whitelist "w" {
  clients = ["10.1.0.0/25"]
  server = "10.2.0.10"
  server_port = 5201
}`, []conn{
			{"10.1.0.5:40000", "10.2.0.10:5201", true},
			{"10.1.0.5:40000", "10.2.0.10:5202", false},
			{"10.1.0.200:40000", "10.2.0.10:5201", false},
			{"10.1.0.5:40000", "10.2.0.11:5201", false},
		}},
		{"port range", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_ports = ["2811", "50000-51000"]
}`, []conn{
			{"10.1.0.5:40000", "10.2.0.10:2811", true},
			{"10.1.0.5:40000", "10.2.0.10:50000", true},
			{"10.1.0.5:40000", "10.2.0.10:51000", true},
			{"10.1.0.5:40000", "10.2.0.10:50512", true},
			{"10.1.0.5:40000", "10.2.0.10:49999", false},
			{"10.1.0.5:40000", "10.2.0.10:51001", false},
			{"10.1.0.5:40000", "10.2.0.10:2810", false},
		}},
		{"server prefix", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  servers = ["10.2.0.16/28", "10.2.0.64/30"]
  server_port = 80
}`, []conn{
			{"10.1.0.5:40000", "10.2.0.16:80", true},
			{"10.1.0.5:40000", "10.2.0.31:80", true},
			{"10.1.0.5:40000", "10.2.0.67:80", true},
			{"10.1.0.5:40000", "10.2.0.32:80", false},
			{"10.1.0.5:40000", "10.2.0.15:80", false},
			{"10.1.0.5:40000", "10.2.0.68:80", false},
		}},
		{"ipv6", `whitelist "w" {
  clients = ["fd01::/64"]
  servers = ["fd02::10/124"]
  server_port = 443
}`, []conn{
			{"[fd01::5]:40000", "[fd02::10]:443", true},
			{"[fd01::5]:40000", "[fd02::1f]:443", true},
			{"[fd01::5]:40000", "[fd02::20]:443", false},
			{"10.1.0.5:40000", "10.2.0.16:443", false},
		}},
		{"both directions", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_port = 2811
  direction = "both"
}`, []conn{
			{"10.1.0.5:40000", "10.2.0.10:2811", true},
			{"10.2.0.10:40000", "10.1.0.5:2811", true},
			{"10.2.0.11:40000", "10.1.0.5:2811", false},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sws := compiledSwitches(t, r107Sites+c.wl)
			for _, cn := range c.conns {
				cl, sv := ap(cn.client), ap(cn.server)
				// Which site opened it: the switch at the opener's site
				// sees opener->listener from a host port; the other sees
				// listener->opener from its host port.
				openerSw, listenerSw := "sw-a", "sw-b"
				if strings.HasPrefix(cn.client, "10.2.") || strings.HasPrefix(cn.client, "[fd02") {
					openerSw, listenerSw = "sw-b", "sw-a"
				}
				fwd := t0Lookup(sws[openerSw], t0Packet{1, cl, sv})
				back := t0Lookup(sws[listenerSw], t0Packet{1, sv, cl})
				for _, v := range []struct {
					where string
					v     t0Verdict
				}{{openerSw + " opener->listener", fwd}, {listenerSw + " listener->opener", back}} {
					if v.v.steered() != cn.want {
						t.Errorf("%s -> %s at %s: steered=%v want %v (%s: %s)", cl, sv, v.where, v.v.steered(), cn.want, v.v.actions, v.v.reason)
					}
					if len(v.v.ties) > 0 {
						t.Errorf("%s -> %s at %s: tie: %s vs %v", cl, sv, v.where, v.v.actions, v.v.ties)
					}
				}
				// The agents' own traffic is never steered.
				agentPort := map[string]uint32{"sw-a": 3, "sw-b": 7}[openerSw]
				if v := t0Lookup(sws[openerSw], t0Packet{agentPort, cl, sv}); v.steered() {
					t.Errorf("packet from agent port re-steered: %s", v.reason)
				}
			}
		})
	}
}

// TestReview107BothDirectionsRangeTie: direction = "both" with a port range
// and two agents per site. A connection the client opens from an
// ephemeral port that happens to lie in the range, to a server port of the
// range, matches on each switch two steering flows of priority 2000: its
// own direction's (bucket from the opener's port) and the reverse
// direction's (bucket from the listener's port, read as the reverse
// opener's). When the two ports fall in buckets of different agents, the
// flows send the connection to different agents and the switch picks one
// of the tie: the server's replies can reach an agent other than the one
// the client-side agent dialed, which holds no socket for them.
func TestReview107BothDirectionsRangeTie(t *testing.T) {
	sws := compiledSwitches(t, twoAgentsPerSite+`
whitelist "gridftp" {
  clients      = ["10.1.0.0/24"]
  server       = "10.2.0.10"
  server_ports = ["50000-50031"]
  direction    = "both"
}`)
	// 50002>>1 = 25001, bucket 9 (odd: a2/b2); 50000>>1 = 25000, bucket 8 (a1/b1).
	client, server := ap("10.1.0.5:50002"), ap("10.2.0.10:50000")
	b, _ := spread.Assign(spread.ModePort, 4, 2, nil)
	t.Logf("bucket of client port %d: agent %d; of server port %d read as opener: agent %d", client.Port(), b.Agent(client), server.Port(), b.Agent(server))
	for _, c := range []struct {
		sw string
		p  t0Packet
	}{
		{"sw-a", t0Packet{1, client, server}},
		{"sw-b", t0Packet{1, server, client}},
	} {
		v := t0Lookup(sws[c.sw], c.p)
		if len(v.ties) > 0 {
			t.Errorf("%s %s: flows of one priority send the packet to different agents: %s (%s) and %v", c.sw, c.p, v.actions, v.reason, v.ties)
		}
	}
}

// TestReview107OppositeWhitelistsRangeTie: two whitelists of the default
// direction, a->b and b->a, on one port range. validate finds no overlap
// (it compares opener with opener), yet on switch b the a->b whitelist's
// server-side flow (tcp_src in range) and the b->a whitelist's client-side
// flow (tcp_dst in range) both match a packet whose two ports are in the
// range, at priority 2000, toward different agents with two agents.
func TestReview107OppositeWhitelistsRangeTie(t *testing.T) {
	src := twoAgentsPerSite + `
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
	sws := compiledSwitches(t, src)
	client, server := ap("10.1.0.10:50002"), ap("10.2.0.10:50000") // an a-to-b connection
	for _, c := range []struct {
		sw string
		p  t0Packet
	}{
		{"sw-b", t0Packet{1, server, client}},
	} {
		v := t0Lookup(sws[c.sw], c.p)
		if len(v.ties) > 0 {
			t.Errorf("%s %s: flows of one priority send the packet to different agents: %s (%s) and %v", c.sw, c.p, v.actions, v.reason, v.ties)
		}
	}
}

// TestReview107SpreadBothEndsAgree: with two agents per site, the switch at
// the client site, the client-side agent's choice of far agent (the relay's
// spread, same function) and the switch at the server site agree for every
// bucket: the far agent the relay dials is the one the server site's switch
// sends the replies to.
func TestReview107SpreadBothEndsAgree(t *testing.T) {
	sws := compiledSwitches(t, twoAgentsPerSite+`
whitelist "bulk" {
  clients      = ["10.1.0.0/24"]
  server       = "10.2.0.10"
  server_ports = ["5201-5204"]
}`)
	b, _ := spread.Assign(spread.ModePort, 4, 2, nil)
	clientPorts := map[uint32]int{3: 0, 4: 1}
	serverPorts := map[uint32]int{7: 0, 8: 1}
	for port := 32768; port < 32768+64; port++ {
		cl, sv := netip.AddrPortFrom(netip.MustParseAddr("10.1.0.5"), uint16(port)), ap("10.2.0.10:5203")
		want := b.Agent(cl)
		va := t0Lookup(sws["sw-a"], t0Packet{1, cl, sv})
		vb := t0Lookup(sws["sw-b"], t0Packet{1, sv, cl})
		outA, outB := t0OutPort(va.actions), t0OutPort(vb.actions)
		if clientPorts[outA] != want || serverPorts[outB] != want || len(va.ties)+len(vb.ties) > 0 {
			t.Errorf("client port %d: relay picks agent %d; switch a -> port %d, switch b -> port %d (ties %v %v)", port, want, outA, outB, va.ties, vb.ties)
		}
	}
}

// TestReview107RepeatsCompile: a client prefix or server prefix written
// twice in one whitelist passes validate (and desired.Compile, which
// validate runs for every node), but the controller's flow compile refuses
// the switch ("need the same flow entry"), so the controller leaves the
// switch as it was and logs an error at run time.
func TestReview107RepeatsCompile(t *testing.T) {
	for _, wl := range []string{`whitelist "w" {
  clients = ["10.1.0.0/24", "10.1.0.0/24"]
  server = "10.2.0.10"
  server_port = 5201
}`, `whitelist "w" {
  clients = ["10.1.0.0/24"]
  servers = ["10.2.0.16/28", "10.2.0.16/28"]
  server_port = 5201
}`, `whitelist "w" {
  clients = ["10.1.0.0/24"]
  servers = ["10.2.0.16/28", "10.2.0.16/29"]
  server_port = 5201
}`} {
		cfg, diags := config.Parse(config.Source{Filename: "test.hcl", Bytes: []byte(r107Sites + wl)})
		if diags.HasErrors() {
			continue // validate refuses it: the controller never sees it
		}
		d, err := Compile(cfg, "ctl")
		if err != nil {
			t.Fatal(err)
		}
		for _, sw := range d.Controller.Switches {
			if _, err := flows.Compile(sw); err != nil {
				t.Errorf("validate accepts\n%s\nbut switch %s's flows do not compile: %v", wl, sw.Name, err)
			}
		}
	}
}

// r107ThreeServerAgents is twoAgentsPerSite with a third agent b3 at site b.
var r107ThreeServerAgents = strings.Replace(twoAgentsPerSite, `  agent "b2" {`, `  agent "b3" {
    node = "nb3"
    switch = "sw-b"
    switch_port = 9
    mac = "02:00:00:00:00:06"
    address = "10.2.0.4"
    interface = "eth1"
  }
  agent "b2" {`, 1)

// r107ReplyPort is the switch port the server site's switch sends the
// server's reply of a connection to, with the held sessions pinned.
func r107ReplyPort(t *testing.T, src string, held map[string][]flows.Held, client, server netip.AddrPort) uint32 {
	t.Helper()
	cfg := parse(t, src)
	d, err := Compile(cfg, "ctl")
	if err != nil {
		t.Fatal(err)
	}
	for _, sw := range d.Controller.Switches {
		if sw.Name != "sw-b" {
			continue
		}
		sw, _ = flows.FailOpen(sw, func(string) bool { return false })
		fs, err := flows.Compile(flows.PinSessions(sw, held))
		if err != nil {
			t.Fatal(err)
		}
		v := t0Lookup(fs, t0Packet{1, server, client})
		if len(v.ties) > 0 {
			t.Fatalf("tie: %v", v.ties)
		}
		return t0OutPort(v.actions)
	}
	t.Fatal("no sw-b")
	return 0
}

// TestReview107ReloadAddsAndRemovesAgent: a reload that adds an agent to
// the server site (b1, b2 -> b1, b3, b2, with spread bits left to their
// default, which grow from 4 to 5 with the third agent) or removes one
// re-deals the buckets of the agents that stay too. Sessions in flight
// keep their agent only through the pins the controller makes from the
// agents' /sessions answers; a session opened after the controller's last
// read of /sessions is moved, and its replies reach an agent without its
// socket. Logged: how many of 64 sessions move with and without pins.
func TestReview107ReloadAddsAndRemovesAgent(t *testing.T) {
	strip := func(s string) string { return strings.Replace(s, "spread { bits = 4 }\n", "", 1) }
	two, three := strip(twoAgentsPerSite), strip(r107ThreeServerAgents)
	wl := `
whitelist "bulk" {
  clients      = ["10.1.0.0/24"]
  server       = "10.2.0.10"
  server_port  = 5201
}`
	port := map[uint32]string{7: "b1", 8: "b2", 9: "b3"}
	server := ap("10.2.0.10:5201")
	for _, c := range []struct{ name, before, after string }{
		{"add b3", two + wl, three + wl},
		{"remove b3", three + wl, two + wl},
	} {
		var sessions []netip.AddrPort
		held := map[string][]flows.Held{}
		owner := map[netip.AddrPort]uint32{}
		for p := 40000; p < 40000+128; p += 2 {
			cl := netip.AddrPortFrom(netip.MustParseAddr("10.1.0.5"), uint16(p))
			o := r107ReplyPort(t, c.before, nil, cl, server)
			owner[cl] = o
			sessions = append(sessions, cl)
			held[port[o]] = append(held[port[o]], flows.Held{Whitelist: "bulk", Client: cl, Server: server})
		}
		movedUnpinned, movedPinned, lost := 0, 0, 0
		for _, cl := range sessions {
			if c.name == "remove b3" && port[owner[cl]] == "b3" {
				lost++ // its agent is gone with the file
				continue
			}
			if r107ReplyPort(t, c.after, nil, cl, server) != owner[cl] {
				movedUnpinned++
			}
			if r107ReplyPort(t, c.after, held, cl, server) != owner[cl] {
				movedPinned++
			}
		}
		t.Logf("%s: of %d sessions in flight, %d on the removed agent; the reload moves %d of the others' replies to another agent unless pinned, %d with every session pinned",
			c.name, len(sessions), lost, movedUnpinned, movedPinned)
		if movedPinned > 0 {
			t.Errorf("%s: %d sessions the agents reported still move", c.name, movedPinned)
		}
	}
}

// TestReview107SpreadIPv6BothEndsAgree: the IPv6 form of
// TestReview107SpreadBothEndsAgree, in both spread modes, with clients
// varying in address and port.
func TestReview107SpreadIPv6BothEndsAgree(t *testing.T) {
	for _, mode := range []string{"port", "address"} {
		src := strings.NewReplacer(`prefixes = ["10.1.0.0/24"]`, `prefixes = ["10.1.0.0/24", "fd01::/64"]`,
			`prefixes = ["10.2.0.0/24"]`, `prefixes = ["10.2.0.0/24", "fd02::/64"]`,
			`spread { bits = 4 }`, `spread {
  bits = 4
  mode = "`+mode+`"
}`).Replace(twoAgentsPerSite) + `
whitelist "v6" {
  clients      = ["fd01::/64"]
  servers      = ["fd02::10/126"]
  server_ports = ["443", "8000-8099"]
}`
		sws := compiledSwitches(t, src)
		b, _ := spread.Assign(spread.Mode(mode), 4, 2, nil)
		clientPorts := map[uint32]int{3: 0, 4: 1}
		serverPorts := map[uint32]int{7: 0, 8: 1}
		for i := range 48 {
			cl := netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf("fd01::%x", 0x100+i*7)), uint16(33000+i*3))
			sv := netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf("fd02::%x", 0x10+i%4)), []uint16{443, 8000, 8063, 8099}[i%4])
			want := b.Agent(cl)
			va := t0Lookup(sws["sw-a"], t0Packet{1, cl, sv})
			vb := t0Lookup(sws["sw-b"], t0Packet{1, sv, cl})
			outA, outB := t0OutPort(va.actions), t0OutPort(vb.actions)
			if !va.steered() || !vb.steered() || clientPorts[outA] != want || serverPorts[outB] != want || len(va.ties)+len(vb.ties) > 0 {
				t.Errorf("%s %s -> %s: relay picks agent %d; switch a -> %q, switch b -> %q (ties %v %v)", mode, cl, sv, want, va.actions, vb.actions, va.ties, vb.ties)
			}
		}
		// Not whitelisted: the next server address and port.
		for _, sv := range []string{"[fd02::14]:443", "[fd02::10]:8100", "[fd02::10]:442"} {
			if v := t0Lookup(sws["sw-a"], t0Packet{1, ap("[fd01::5]:40000"), ap(sv)}); v.steered() {
				t.Errorf("%s: [fd01::5]:40000 -> %s steered: %s", mode, sv, v.reason)
			}
		}
	}
}

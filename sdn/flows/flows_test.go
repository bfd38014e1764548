package flows

import (
	"encoding/hex"
	"math/rand/v2"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

var (
	agentClemson = Agent{Name: "agent-clemson", MAC: mustMAC("02:00:00:00:01:02"), Port: 3}
	agentUtah    = Agent{Name: "agent-utah", MAC: mustMAC("02:00:00:00:02:02"), Port: 4}
)

// clemson is the client-site switch of the design's example.
func clemson() Switch {
	return Switch{
		Name: "s4810-clemson", DatapathID: 1, Forwarding: "normal",
		Agents: []Agent{agentClemson},
		Steers: []Steer{{
			Whitelist: "iperf-to-utah", Side: ClientSide,
			Clients: []netip.Prefix{netip.MustParsePrefix("10.10.1.0/24"), netip.MustParsePrefix("10.10.3.7/32")},
			Server:  netip.MustParseAddr("10.10.2.1"), Port: 5201, Agent: agentClemson,
			DependsOn: []string{"agent-clemson", "agent-utah"},
		}},
	}
}

func utah() Switch {
	return Switch{
		Name: "s4810-utah", DatapathID: 2, Forwarding: "normal",
		Agents: []Agent{agentUtah},
		Steers: []Steer{{
			Whitelist: "iperf-to-utah", Side: ServerSide,
			Clients: []netip.Prefix{netip.MustParsePrefix("10.10.1.0/24")},
			Server:  netip.MustParseAddr("10.10.2.1"), Port: 5201, Agent: agentUtah,
			DependsOn: []string{"agent-clemson", "agent-utah"},
		}},
	}
}

func strs(flows []Flow) []string {
	out := make([]string, len(flows))
	for i, f := range flows {
		out[i] = f.String()
	}
	return out
}

func TestCompile(t *testing.T) {
	wl := WhitelistID("iperf-to-utah")
	if wl != WhitelistID("iperf-to-utah") || wl == WhitelistID("other") || wl >= 1<<40 {
		t.Fatalf("whitelist id %#x is not a stable 40-bit hash", wl)
	}
	cases := []struct {
		sw   Switch
		want []string
	}{
		{clemson(), []string{
			"cookie=0x5053010000000003, table=0, priority=3000,in_port=3 actions=NORMAL",
			"cookie=" + hexCookie(KindSteerClient, wl) + ", table=0, priority=2000,tcp,nw_src=10.10.1.0/24,nw_dst=10.10.2.1,tp_dst=5201 actions=set_field:02:00:00:00:01:02->eth_dst,output:3",
			"cookie=" + hexCookie(KindSteerClient, wl) + ", table=0, priority=2000,tcp,nw_src=10.10.3.7,nw_dst=10.10.2.1,tp_dst=5201 actions=set_field:02:00:00:00:01:02->eth_dst,output:3",
			"cookie=0x5053040000000000, table=0, priority=1000 actions=NORMAL",
		}},
		{utah(), []string{
			"cookie=0x5053010000000004, table=0, priority=3000,in_port=4 actions=NORMAL",
			"cookie=" + hexCookie(KindSteerServer, wl) + ", table=0, priority=2001,tcp,nw_src=10.10.2.1,nw_dst=10.10.1.0/24,tp_src=5201 actions=set_field:02:00:00:00:02:02->eth_dst,output:4",
			"cookie=0x5053040000000000, table=0, priority=1000 actions=NORMAL",
		}},
	}
	// The client-side agent's own address lies in the client prefix: the
	// server's replies to it (a connection it carries direct) are not
	// steered; an address outside every client prefix needs no flow.
	withAgent := utah()
	withAgent.Name = "s4810-utah-unsteered"
	withAgent.Steers[0].Unsteered = []netip.Addr{netip.MustParseAddr("10.10.1.2"), netip.MustParseAddr("10.10.9.2")}
	cases = append(cases, struct {
		sw   Switch
		want []string
	}{withAgent, []string{
		"cookie=0x5053010000000004, table=0, priority=3000,in_port=4 actions=NORMAL",
		"cookie=" + hexCookie(KindSteerServer, wl) + ", table=0, priority=2002,tcp,nw_src=10.10.2.1,nw_dst=10.10.1.2,tp_src=5201 actions=NORMAL",
		"cookie=" + hexCookie(KindSteerServer, wl) + ", table=0, priority=2001,tcp,nw_src=10.10.2.1,nw_dst=10.10.1.0/24,tp_src=5201 actions=set_field:02:00:00:00:02:02->eth_dst,output:4",
		"cookie=0x5053040000000000, table=0, priority=1000 actions=NORMAL",
	}})
	for _, c := range cases {
		got, err := Compile(c.sw)
		if err != nil {
			t.Fatalf("%s: %v", c.sw.Name, err)
		}
		if !slices.Equal(strs(got), c.want) {
			t.Errorf("%s:\n got %s\nwant %s", c.sw.Name, strings.Join(strs(got), "\n     "), strings.Join(c.want, "\n     "))
		}
		for _, f := range got {
			if !Owned(f.Cookie) || f.Reason == "" {
				t.Errorf("%s: flow %s: cookie owned %v, reason %q", c.sw.Name, f, Owned(f.Cookie), f.Reason)
			}
		}
		again, _ := Compile(c.sw)
		if !Diff(got, again).Empty() {
			t.Errorf("%s: compiling twice gives different flows", c.sw.Name)
		}
	}
}

func hexCookie(k Kind, id uint64) string {
	return "0x" + strings.TrimLeft(hex.EncodeToString(u64(Cookie(k, id))), "0")
}

func u64(v uint64) []byte {
	return []byte{byte(v >> 56), byte(v >> 48), byte(v >> 40), byte(v >> 32), byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}

func TestCompileRefusesWhatItCannotExpress(t *testing.T) {
	bad := map[string]func(*Switch){
		"forwarding":  func(s *Switch) { s.Forwarding = "flood" },
		"ipv6 server": func(s *Switch) { s.Steers[0].Server = netip.MustParseAddr("2001:db8::1") },
		"ipv6 client": func(s *Switch) { s.Steers[0].Clients[0] = netip.MustParsePrefix("2001:db8::/64") },
		"no clients":  func(s *Switch) { s.Steers[0].Clients = nil },
		"short mac":   func(s *Switch) { s.Steers[0].Agent.MAC = net.HardwareAddr{1, 2} },
		"side":        func(s *Switch) { s.Steers[0].Side = "both" },
		"same entry twice": func(s *Switch) {
			dup := s.Steers[0]
			dup.Whitelist = "copy"
			s.Steers = append(s.Steers, dup)
		},
	}
	for name, mutate := range bad {
		sw := clemson()
		sw.Steers[0].Clients = slices.Clone(sw.Steers[0].Clients)
		mutate(&sw)
		if flows, err := Compile(sw); err == nil {
			t.Errorf("%s: compiled to %v", name, strs(flows))
		}
	}
}

func TestFailOpen(t *testing.T) {
	sw := clemson()
	sw.Steers = append(sw.Steers, Steer{Whitelist: "local-only", Side: ClientSide,
		Clients: []netip.Prefix{netip.MustParsePrefix("10.10.1.0/24")}, Server: netip.MustParseAddr("10.10.9.9"),
		Port: 22, Agent: agentClemson, DependsOn: []string{"agent-clemson", "agent-other"}})
	down := func(names ...string) func(string) bool {
		return func(a string) bool { return slices.Contains(names, a) }
	}
	kept, gone := FailOpen(sw, down("agent-utah"))
	if !slices.Equal(gone, []string{"iperf-to-utah"}) || len(kept.Steers) != 1 || kept.Steers[0].Whitelist != "local-only" {
		t.Errorf("utah down: withdrew %v, kept %+v", gone, kept.Steers)
	}
	if len(sw.Steers) != 2 {
		t.Error("FailOpen changed its input")
	}
	kept, gone = FailOpen(sw, down("agent-clemson"))
	if !slices.Equal(gone, []string{"iperf-to-utah", "local-only"}) || len(kept.Steers) != 0 {
		t.Errorf("clemson down: withdrew %v, kept %+v", gone, kept.Steers)
	}
	flows, err := Compile(kept)
	if err != nil || len(flows) != 2 {
		t.Errorf("with every steer withdrawn the switch keeps bypass and normal: %v, %v", strs(flows), err)
	}
	kept, gone = FailOpen(sw, down())
	if len(gone) != 0 || len(kept.Steers) != 2 {
		t.Errorf("nothing down: withdrew %v", gone)
	}
}

// foreign is a flow someone else installed, with the same match as one of
// ours but another cookie.
func foreign() Flow {
	return Flow{Priority: 2000, Cookie: 0x1234, Match: ofp13.NewMatch(ofp13.InPort(9)),
		Instructions: []ofp13.Instruction{&ofp13.ApplyActions{}}}
}

func TestDiff(t *testing.T) {
	desired, _ := Compile(clemson())
	if c := Diff(desired, nil); len(c.Add) != len(desired) || len(c.Modify)+len(c.Delete) != 0 {
		t.Fatalf("empty switch: %v", c)
	}
	// The switch reports the same flows with its own field order and mask
	// style: nothing to do.
	actual := reencoded(desired)
	actual = append(actual, foreign(), Flow{Cookie: 0x77, Priority: 1000, Instructions: normal()})
	if c := Diff(desired, actual); !c.Empty() {
		t.Fatalf("same flows, reordered, plus foreign ones: %v", c)
	}

	// Whitelist edited: the second client prefix is gone, a new one is
	// there, the agent moved to another port.
	edited := clemson()
	edited.Steers[0].Clients = []netip.Prefix{netip.MustParsePrefix("10.10.1.0/24"), netip.MustParsePrefix("10.10.4.0/24")}
	edited.Steers[0].Agent.Port = 5
	next, _ := Compile(edited)
	c := Diff(next, actual)
	got := strings.Split(strings.TrimSpace(c.String()), "\n")
	wl := hexCookie(KindSteerClient, WhitelistID("iperf-to-utah"))
	want := []string{
		"+ cookie=" + wl + ", table=0, priority=2000,tcp,nw_src=10.10.4.0/24,nw_dst=10.10.2.1,tp_dst=5201 actions=set_field:02:00:00:00:01:02->eth_dst,output:5",
		"~ cookie=" + wl + ", table=0, priority=2000,tcp,nw_src=10.10.1.0/24,nw_dst=10.10.2.1,tp_dst=5201 actions=set_field:02:00:00:00:01:02->eth_dst,output:5 (was actions=set_field:02:00:00:00:01:02->eth_dst,output:3)",
		"- cookie=" + wl + ", table=0, priority=2000,tcp,nw_src=10.10.3.7,nw_dst=10.10.2.1,tp_dst=5201 actions=set_field:02:00:00:00:01:02->eth_dst,output:3",
	}
	if !slices.Equal(got, want) {
		t.Errorf("plan:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
	mods := c.FlowMods()
	cmds := make([]ofp13.FlowModCommand, len(mods))
	for i, m := range mods {
		cmds[i] = m.Command
		if m.Command != ofp13.FlowAdd && m.CookieMask != ^uint64(0) {
			t.Errorf("%v touches flows of other cookies: mask %#x", m.Command, m.CookieMask)
		}
	}
	if !slices.Equal(cmds, []ofp13.FlowModCommand{ofp13.FlowAdd, ofp13.FlowModifyStrict, ofp13.FlowDeleteStrict}) {
		t.Errorf("flow mod commands %v", cmds)
	}

	// A cookie change cannot be made by an OpenFlow 1.3 modify.
	renamed := clemson()
	renamed.Steers[0].Whitelist = "iperf-renamed"
	next, _ = Compile(renamed)
	c = Diff(next, actual)
	if len(c.Modify) != 2 || !c.Modify[0].CookieChanges() || c.FlowMods()[0].Command != ofp13.FlowAdd {
		t.Errorf("renamed whitelist: %v", c)
	}
}

// reencoded returns the flows as a switch reports them: through the wire
// format, with match fields in another order and exact masks spelled out.
func reencoded(flows []Flow) []Flow {
	out := make([]Flow, len(flows))
	for i, f := range flows {
		fields := slices.Clone(f.Match.Fields)
		slices.Reverse(fields)
		for j, o := range fields {
			if o.Mask == nil && o.IsBasic(ofp13.FieldIPv4Dst) {
				fields[j].Mask = []byte{255, 255, 255, 255}
			}
		}
		s := ofp13.FlowStats{TableID: f.Table, Priority: f.Priority, Cookie: f.Cookie, Match: ofp13.Match{Fields: fields},
			Instructions: f.Instructions, DurationSec: 5, PacketCount: 10}
		reply := &ofp13.FlowStatsReply{Stats: []ofp13.FlowStats{s}}
		raw, err := reply.MarshalBinary()
		if err != nil {
			panic(err)
		}
		m, err := ofp13.Unmarshal(raw)
		if err != nil {
			panic(err)
		}
		out[i] = FromStats(m.(*ofp13.FlowStatsReply).Stats[0])
	}
	return out
}

// TestDiffConverges applies each diff to a flow table the way OpenFlow
// defines the commands and checks that the next diff is empty, over random
// sequences of configurations.
func TestDiffConverges(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	prefixes := []string{"10.10.1.0/24", "10.10.3.7/32", "10.10.4.0/22", "10.20.0.0/16"}
	var table []Flow
	table = append(table, foreign())
	for step := 0; step < 200; step++ {
		sw := clemson()
		sw.Steers = nil
		for w := 0; w < rng.IntN(4); w++ {
			var clients []netip.Prefix
			for _, p := range prefixes {
				if rng.IntN(2) == 0 {
					clients = append(clients, netip.MustParsePrefix(p))
				}
			}
			if len(clients) == 0 {
				continue
			}
			agent := agentClemson
			agent.Port = uint32(3 + rng.IntN(2))
			sw.Steers = append(sw.Steers, Steer{Whitelist: []string{"a", "b", "c"}[w], Side: ClientSide,
				Clients: clients, Server: netip.MustParseAddr("10.10.2." + string(rune('1'+w))), Port: 5201, Agent: agent})
		}
		desired, err := Compile(sw)
		if err != nil {
			t.Fatal(err)
		}
		table = apply(table, Diff(desired, table))
		if c := Diff(desired, table); !c.Empty() {
			t.Fatalf("step %d: not converged: %v", step, c)
		}
		if !slices.ContainsFunc(table, func(f Flow) bool { return f.Cookie == foreign().Cookie }) {
			t.Fatalf("step %d: the foreign flow is gone", step)
		}
	}
}

// apply carries out flow mods on a table by OpenFlow 1.3's rules.
func apply(table []Flow, c Changes) []Flow {
	for _, fm := range c.FlowMods() {
		f := Flow{Table: fm.TableID, Priority: fm.Priority, Cookie: fm.Cookie, Match: fm.Match.Canonical(),
			Instructions: fm.Instructions, IdleTimeout: fm.IdleTimeout, HardTimeout: fm.HardTimeout, Flags: fm.Flags}
		i := slices.IndexFunc(table, func(o Flow) bool { return o.Key() == f.Key() })
		cookieOK := i >= 0 && table[i].Cookie&fm.CookieMask == fm.Cookie&fm.CookieMask
		switch fm.Command {
		case ofp13.FlowAdd:
			if i >= 0 {
				table[i] = f
			} else {
				table = append(table, f)
			}
		case ofp13.FlowModifyStrict:
			if cookieOK {
				table[i].Instructions = f.Instructions
			}
		case ofp13.FlowDeleteStrict:
			if cookieOK {
				table = slices.Delete(table, i, i+1)
			}
		}
	}
	return table
}

// TestOVSReadsCompiledFlows hands the FLOW_MODs of compiled flows to
// ovs-ofctl ofp-print: Open vSwitch must read the same match and actions
// that Flow.String shows an operator.
func TestOVSReadsCompiledFlows(t *testing.T) {
	testsupport.RequireBinaries(t, "ovs-ofctl")
	for _, sw := range []Switch{clemson(), utah()} {
		flows, err := Compile(sw)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range flows {
			raw, err := f.AddMod().MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("ovs-ofctl", "ofp-print", hex.EncodeToString(raw)).CombinedOutput()
			if err != nil {
				t.Fatalf("ofp-print: %v: %s", err, out)
			}
			want := "ADD " + f.MatchString() + " cookie:" + hexCookieRaw(f.Cookie) + " actions=" + f.ActionsString()
			if !strings.HasSuffix(strings.TrimSpace(string(out)), want) {
				t.Errorf("ovs-ofctl reads\n%s\nwant suffix\n%s", out, want)
			}
		}
	}
}

func hexCookieRaw(c uint64) string { return "0x" + strings.TrimLeft(hex.EncodeToString(u64(c)), "0") }

func TestCookieScheme(t *testing.T) {
	c := Cookie(KindSteerServer, WhitelistID("x"))
	if !Owned(c) || CookieKind(c) != KindSteerServer || Owned(0x1234) || Owned(0) {
		t.Errorf("cookie %#x: owned %v kind %v", c, Owned(c), CookieKind(c))
	}
	if Cookie(KindBypass, 1<<41|5) != Cookie(KindBypass, 5) {
		t.Error("id bits spill into the kind")
	}
}

// TestCompilePortRangesAndServerPrefixes: a range becomes its aligned
// value/mask blocks in both directions, server prefixes multiply them, a
// switch without masked port matches takes one flow per port, and the
// steering of connections opened by servers reads as such.
func TestCompilePortRangesAndServerPrefixes(t *testing.T) {
	wl := WhitelistID("gridftp")
	ports := []portrange.Range{{Lo: 2811, Hi: 2811}, {Lo: 50000, Hi: 50019}}
	client := Switch{Name: "a", Agents: []Agent{agentClemson}, Steers: []Steer{{
		Whitelist: "gridftp", Side: ClientSide, Clients: []netip.Prefix{netip.MustParsePrefix("10.10.1.0/24")},
		Servers: []netip.Prefix{netip.MustParsePrefix("10.10.2.16/28")}, Ports: ports, Agent: agentClemson,
	}}}
	got, err := Compile(client)
	if err != nil {
		t.Fatal(err)
	}
	act := " actions=set_field:02:00:00:00:01:02->eth_dst,output:3"
	c := "cookie=" + hexCookie(KindSteerClient, wl) + ", table=0, priority=2000,tcp,nw_src=10.10.1.0/24,nw_dst=10.10.2.16/28,"
	want := []string{
		"cookie=0x5053010000000003, table=0, priority=3000,in_port=3 actions=NORMAL",
		c + "tp_dst=0xc350/0xfff0" + act, // 50000-50015
		c + "tp_dst=0xc360/0xfffc" + act, // 50016-50019
		c + "tp_dst=2811" + act,
		"cookie=0x5053040000000000, table=0, priority=1000 actions=NORMAL",
	}
	if !slices.Equal(strs(got), want) {
		t.Errorf("client side:\n got %s\nwant %s", strings.Join(strs(got), "\n     "), strings.Join(want, "\n     "))
	}
	if n := SteerFlowCount(client.Steers[0], false); n != 3 {
		t.Errorf("SteerFlowCount = %d, want 3", n)
	}

	server := Switch{Name: "b", Agents: []Agent{agentUtah}, Steers: []Steer{{
		Whitelist: "gridftp", Side: ServerSide, Clients: []netip.Prefix{netip.MustParsePrefix("10.10.1.0/24")},
		Servers: []netip.Prefix{netip.MustParsePrefix("10.10.2.16/28"), netip.MustParsePrefix("10.10.2.40/32")},
		Ports:   []portrange.Range{{Lo: 50000, Hi: 50003}}, Agent: agentUtah,
		Unsteered: []netip.Addr{netip.MustParseAddr("10.10.1.2")},
	}}}
	got, err = Compile(server)
	if err != nil {
		t.Fatal(err)
	}
	sc := "cookie=" + hexCookie(KindSteerServer, wl) + ", table=0, "
	want = []string{
		"cookie=0x5053010000000004, table=0, priority=3000,in_port=4 actions=NORMAL",
		sc + "priority=2002,tcp,nw_src=10.10.2.16/28,nw_dst=10.10.1.2,tp_src=0xc350/0xfffc actions=NORMAL",
		sc + "priority=2002,tcp,nw_src=10.10.2.40,nw_dst=10.10.1.2,tp_src=0xc350/0xfffc actions=NORMAL",
		sc + "priority=2001,tcp,nw_src=10.10.2.16/28,nw_dst=10.10.1.0/24,tp_src=0xc350/0xfffc actions=set_field:02:00:00:00:02:02->eth_dst,output:4",
		sc + "priority=2001,tcp,nw_src=10.10.2.40,nw_dst=10.10.1.0/24,tp_src=0xc350/0xfffc actions=set_field:02:00:00:00:02:02->eth_dst,output:4",
		"cookie=0x5053040000000000, table=0, priority=1000 actions=NORMAL",
	}
	if !slices.Equal(strs(got), want) {
		t.Errorf("server side:\n got %s\nwant %s", strings.Join(strs(got), "\n     "), strings.Join(want, "\n     "))
	}

	exact := server
	exact.NoPortMasks = true
	exact.Steers = []Steer{server.Steers[0]}
	exact.Steers[0].Unsteered = nil
	exact.Steers[0].Reverse = true
	got, err = Compile(exact)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2+2*4 || SteerFlowCount(exact.Steers[0], true) != 8 {
		t.Fatalf("without port masks: %d flows, want one per port and server:\n%s", len(got), strings.Join(strs(got), "\n"))
	}
	for _, f := range got[1 : len(got)-1] {
		if !strings.Contains(f.Reason, "opened by servers") || strings.Contains(f.String(), "/0xff") {
			t.Errorf("flow %s (%s): want exact ports and a reason naming the servers' direction", f, f.Reason)
		}
	}

	bad := client
	bad.Steers = []Steer{client.Steers[0]}
	bad.Steers[0].Ports = []portrange.Range{{Lo: 10, Hi: 9}}
	if _, err := Compile(bad); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("an empty range compiles: %v", err)
	}
}

// TestCompileIPv6 steers an IPv6 whitelist with eth_type 0x86dd and
// ipv6_src/ipv6_dst, printed as ovs-ofctl prints them, with the agent's
// own IPv6 address left unsteered on the reply side.
func TestCompileIPv6(t *testing.T) {
	wl := WhitelistID("v6")
	st := Steer{Whitelist: "v6", Side: ServerSide, Agent: agentUtah,
		Clients:   []netip.Prefix{netip.MustParsePrefix("2001:db8:1::/48")},
		Servers:   []netip.Prefix{netip.MustParsePrefix("2001:db8:2::10/128")},
		Ports:     []portrange.Range{{Lo: 5201, Hi: 5201}},
		Unsteered: []netip.Addr{netip.MustParseAddr("2001:db8:1::2"), netip.MustParseAddr("10.10.1.2")}}
	client := st
	client.Side, client.Agent, client.Unsteered = ClientSide, agentClemson, nil
	got, err := Compile(Switch{Name: "b", Agents: []Agent{agentUtah}, Steers: []Steer{st, client}})
	if err != nil {
		t.Fatal(err)
	}
	sc, cc := "cookie="+hexCookie(KindSteerServer, wl)+", table=0, ", "cookie="+hexCookie(KindSteerClient, wl)+", table=0, "
	want := []string{
		"cookie=0x5053010000000004, table=0, priority=3000,in_port=4 actions=NORMAL",
		sc + "priority=2002,tcp6,ipv6_src=2001:db8:2::10,ipv6_dst=2001:db8:1::2,tp_src=5201 actions=NORMAL",
		sc + "priority=2001,tcp6,ipv6_src=2001:db8:2::10,ipv6_dst=2001:db8:1::/48,tp_src=5201 actions=set_field:02:00:00:00:02:02->eth_dst,output:4",
		cc + "priority=2000,tcp6,ipv6_src=2001:db8:1::/48,ipv6_dst=2001:db8:2::10,tp_dst=5201 actions=set_field:02:00:00:00:01:02->eth_dst,output:3",
		"cookie=0x5053040000000000, table=0, priority=1000 actions=NORMAL",
	}
	if !slices.Equal(strs(got), want) {
		t.Errorf("IPv6:\n got %s\nwant %s", strings.Join(strs(got), "\n     "), strings.Join(want, "\n     "))
	}
}

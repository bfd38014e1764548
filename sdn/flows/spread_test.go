package flows

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/sdn/ofp13"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

var (
	agentA1 = Agent{Name: "a1", MAC: mustMAC("02:00:00:00:01:01"), Port: 3}
	agentA2 = Agent{Name: "a2", MAC: mustMAC("02:00:00:00:01:02"), Port: 4}
	agentB1 = Agent{Name: "b1", MAC: mustMAC("02:00:00:00:02:01"), Port: 3}
	agentB2 = Agent{Name: "b2", MAC: mustMAC("02:00:00:00:02:02"), Port: 4}
)

func spreadSwitch(side Side, mode spread.Mode, bits int, agents ...Agent) Switch {
	return Switch{
		Name: "sw", DatapathID: 1, Forwarding: "normal", Agents: agents,
		Steers: []Steer{{
			Whitelist: "w", Side: side,
			Clients: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")},
			Server:  netip.MustParseAddr("10.2.0.10"), Port: 5201,
			Agent: agents[0], Agents: agents, Spread: mode, SpreadBits: bits,
			DependsOnSites: [][]string{{"a1", "a2"}, {"b1", "b2"}},
		}},
	}
}

func steerLines(t *testing.T, sw Switch) []string {
	t.Helper()
	fs, err := Compile(sw)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		if k := CookieKind(f.Cookie); k == KindSteerClient || k == KindSteerServer {
			out = append(out, strings.SplitN(f.String(), ", ", 2)[1])
		}
	}
	return out
}

// Two agents per site, two buckets: the client site spreads the requests
// by bit 1 of tcp_src, the server site the replies by bit 1 of tcp_dst;
// address mode by the low bit of nw_src/nw_dst, merged with the prefix.
func TestSpreadGoldens(t *testing.T) {
	cases := []struct {
		sw   Switch
		want []string
	}{
		{spreadSwitch(ClientSide, spread.ModePort, 1, agentA1, agentA2), []string{
			"table=0, priority=2000,tcp,nw_src=10.1.0.0/24,nw_dst=10.2.0.10,tp_src=0x0/0x2,tp_dst=5201 actions=set_field:02:00:00:00:01:01->eth_dst,output:3",
			"table=0, priority=2000,tcp,nw_src=10.1.0.0/24,nw_dst=10.2.0.10,tp_src=0x2/0x2,tp_dst=5201 actions=set_field:02:00:00:00:01:02->eth_dst,output:4",
		}},
		{spreadSwitch(ServerSide, spread.ModePort, 1, agentB1, agentB2), []string{
			"table=0, priority=2001,tcp,nw_src=10.2.0.10,nw_dst=10.1.0.0/24,tp_src=5201,tp_dst=0x0/0x2 actions=set_field:02:00:00:00:02:01->eth_dst,output:3",
			"table=0, priority=2001,tcp,nw_src=10.2.0.10,nw_dst=10.1.0.0/24,tp_src=5201,tp_dst=0x2/0x2 actions=set_field:02:00:00:00:02:02->eth_dst,output:4",
		}},
		{spreadSwitch(ClientSide, spread.ModeAddress, 1, agentA1, agentA2), []string{
			"table=0, priority=2000,tcp,nw_src=10.1.0.0/255.255.255.1,nw_dst=10.2.0.10,tp_dst=5201 actions=set_field:02:00:00:00:01:01->eth_dst,output:3",
			"table=0, priority=2000,tcp,nw_src=10.1.0.1/255.255.255.1,nw_dst=10.2.0.10,tp_dst=5201 actions=set_field:02:00:00:00:01:02->eth_dst,output:4",
		}},
	}
	for i, c := range cases {
		got := steerLines(t, c.sw)
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("case %d:\ngot:\n%s\nwant:\n%s", i, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
}

// Fail-over changes only the flows of the dead agent's buckets: with one
// of three agents down, every flow of the survivors stays as it was, and
// the dead agent's flows are replaced by flows of the same buckets toward
// the survivors. When no agent of a site is left, the whitelist fails
// open.
func TestFailOverDiffTouchesOnlyTheDeadAgentsBuckets(t *testing.T) {
	a3 := Agent{Name: "a3", MAC: mustMAC("02:00:00:00:01:03"), Port: 5}
	sw := spreadSwitch(ClientSide, spread.ModePort, 4, agentA1, agentA2, a3)
	sw.Steers[0].DependsOnSites = [][]string{{"a1", "a2", "a3"}, {"b1"}}
	before, err := Compile(sw)
	if err != nil {
		t.Fatal(err)
	}
	down := map[string]bool{"a2": true}
	failed, withdrawn := FailOpen(sw, func(a string) bool { return down[a] })
	if len(withdrawn) != 0 {
		t.Fatalf("withdrawn %v with two agents left", withdrawn)
	}
	after, err := Compile(failed)
	if err != nil {
		t.Fatal(err)
	}
	ch := Diff(after, before)
	touched := append(append([]Flow{}, ch.Delete...), ch.Add...)
	for _, m := range ch.Modify {
		touched = append(touched, m.Before)
	}
	if len(touched) == 0 {
		t.Fatal("no flow changed with an agent down")
	}
	for _, f := range ch.Delete {
		if !strings.Contains(f.Reason, "agent a2") {
			t.Errorf("deleted a survivor's flow: %s", f)
		}
	}
	for _, m := range ch.Modify {
		if !strings.Contains(m.Before.Reason, "agent a2") {
			t.Errorf("modified a survivor's flow: %s -> %s", m.Before, m.After)
		}
	}
	for _, f := range after {
		if CookieKind(f.Cookie) == KindSteerClient && strings.Contains(f.Reason, "agent a2") {
			t.Errorf("dead agent still steered to: %s", f)
		}
	}
	// The moved flows match exactly the dead agent's buckets: for every
	// client port, the survivors' flows take it iff a2 no longer does.
	owner := func(fs []Flow, port uint16) string {
		for _, f := range fs {
			if CookieKind(f.Cookie) != KindSteerClient {
				continue
			}
			for _, o := range f.Match.Fields {
				if o.IsBasic(ofp13.FieldTCPSrc) && len(o.Mask) == 2 {
					v, m := uint16(o.Value[0])<<8|uint16(o.Value[1]), uint16(o.Mask[0])<<8|uint16(o.Mask[1])
					if port&m == v {
						return f.Reason[strings.LastIndex(f.Reason, " ")+1:]
					}
				}
			}
		}
		return ""
	}
	for port := range 64 {
		b, a := owner(before, uint16(port)), owner(after, uint16(port))
		if b != "a2" && a != b {
			t.Errorf("port %d moved from live %s to %s", port, b, a)
		}
		if b == "a2" && (a == "" || a == "a2") {
			t.Errorf("port %d of the dead agent went to %q", port, a)
		}
	}
	down["a1"], down["a3"] = true, true
	if _, withdrawn := FailOpen(sw, func(a string) bool { return down[a] }); len(withdrawn) != 1 {
		t.Errorf("no agent left: withdrawn %v, want the whitelist", withdrawn)
	}
	// Its return restores the split exactly.
	back, _ := FailOpen(sw, func(string) bool { return false })
	again, err := Compile(back)
	if err != nil {
		t.Fatal(err)
	}
	if ch := Diff(again, before); len(ch.Add)+len(ch.Modify)+len(ch.Delete) != 0 {
		t.Errorf("the split did not come back: %+v", ch)
	}
}

func TestPortSpreadNeedsPortMasks(t *testing.T) {
	sw := spreadSwitch(ClientSide, spread.ModePort, 2, agentA1, agentA2)
	sw.NoPortMasks = true
	if _, err := Compile(sw); err == nil || !strings.Contains(err.Error(), `spread mode "address"`) {
		t.Errorf("port spread on a switch without port masks: %v", err)
	}
	sw.Steers[0].Spread = spread.ModeAddress
	if _, err := Compile(sw); err != nil {
		t.Errorf("address spread without port masks: %v", err)
	}
}

// When an agent comes back, its buckets return to it for new connections,
// and each live session the survivor took over in them keeps one
// exact-match flow to the survivor: nothing else changes, and the
// survivor's sessions in its own buckets get no pin.
func TestReturningAgentLeavesLiveSessionsOnTheSurvivor(t *testing.T) {
	sw := spreadSwitch(ClientSide, spread.ModePort, 1, agentA1, agentA2)
	failed, _ := FailOpen(sw, func(a string) bool { return a == "a2" })
	during, err := Compile(failed)
	if err != nil {
		t.Fatal(err)
	}
	server := netip.MustParseAddrPort("10.2.0.10:5201")
	moved := Held{Whitelist: "w", Client: netip.MustParseAddrPort("10.1.0.7:40002"), Server: server} // bucket 1: a2's
	own := Held{Whitelist: "w", Client: netip.MustParseAddrPort("10.1.0.7:40000"), Server: server}   // bucket 0: a1's
	other := Held{Whitelist: "x", Client: netip.MustParseAddrPort("10.1.0.7:40006"), Server: server}
	held := map[string][]Held{"a1": {moved, own, other}}
	back, _ := FailOpen(sw, func(string) bool { return false })
	after, err := Compile(PinSessions(back, held))
	if err != nil {
		t.Fatal(err)
	}
	ch := Diff(after, during)
	if len(ch.Add) != 1 || len(ch.Delete) != 0 || len(ch.Modify) != 1 {
		t.Fatalf("changes: %d add, %d modify, %d delete, want 1 pin and a2's bucket back:\n%+v", len(ch.Add), len(ch.Modify), len(ch.Delete), ch)
	}
	pin := ch.Add[0]
	want := "priority=2003,tcp,nw_src=10.1.0.7,nw_dst=10.2.0.10,tp_src=40002,tp_dst=5201 actions=set_field:02:00:00:00:01:01->eth_dst,output:3"
	if !strings.Contains(pin.String(), want) {
		t.Errorf("pin %s\nwant %s", pin, want)
	}
	if m := ch.Modify[0]; !strings.Contains(m.Before.Reason, "agent a1") || !strings.Contains(m.After.Reason, "agent a2") {
		t.Errorf("bucket move: %s -> %s", m.Before.Reason, m.After.Reason)
	}
	// The session ends: its pin goes, nothing else changes.
	final, err := Compile(PinSessions(back, map[string][]Held{"a1": {own}}))
	if err != nil {
		t.Fatal(err)
	}
	if ch := Diff(final, after); len(ch.Delete) != 1 || len(ch.Add)+len(ch.Modify) != 0 || ch.Delete[0].Priority != PrioritySession {
		t.Errorf("session end: %+v", ch)
	}
}

func TestSpreadFlowCount(t *testing.T) {
	sw := spreadSwitch(ClientSide, spread.ModePort, 4, agentA1, agentA2)
	fs := steerLines(t, sw)
	if n := SteerFlowCount(sw.Steers[0], false); n != len(fs) || n != 2 {
		t.Errorf("count %d, compiled %d", n, len(fs))
	}
	if d := SteerFlowDetail(sw.Steers[0], false); !strings.Contains(d, "x 2 bucket patterns (spread by port over 2 agents, 16 buckets)") {
		t.Errorf("detail %q", d)
	}
}

// Agents' reports of their sessions need not agree: a session an agent
// lists twice gets one pin, and one that two agents claim gets none (at
// most one of them holds it). Before, either made Compile refuse the
// switch's whole flow set, so one agent's health answer froze the switch
// (no fail-over, no fail-open, no reload).
func TestInconsistentSessionReportsStillCompile(t *testing.T) {
	agentA3 := Agent{Name: "a3", MAC: mustMAC("02:00:00:00:01:03"), Port: 5}
	sw := spreadSwitch(ClientSide, spread.ModePort, 2, agentA1, agentA2, agentA3)
	b, err := spread.Assign(spread.ModePort, 2, 3, []bool{true, true, true})
	if err != nil {
		t.Fatal(err)
	}
	server := netip.MustParseAddrPort("10.2.0.10:5201")
	held := map[string][]Held{}
	want := map[uint16]string{} // client port -> the agent its pin names
	for port := uint16(40000); port < 40016; port++ {
		h := Held{Whitelist: "w", Client: netip.AddrPortFrom(netip.MustParseAddr("10.1.0.7"), port), Server: server}
		held["a1"] = append(held["a1"], h, h) // each listed twice
		held["a3"] = append(held["a3"], h)
		switch b.Agent(h.Client) {
		case 0: // a1's bucket: only a3's claim is a pin
			want[port] = "a3"
		case 2: // a3's bucket: only a1's
			want[port] = "a1"
		} // a2's bucket: claimed by a1 and a3, pinned to neither
	}
	fs, err := Compile(PinSessions(sw, held))
	if err != nil {
		t.Fatalf("a duplicated and a conflicting report left the switch without a flow set: %v", err)
	}
	got := map[uint16]string{}
	for _, f := range fs {
		if f.Priority != PrioritySession {
			continue
		}
		line := f.String()
		var port uint16
		if _, err := fmt.Sscanf(line[strings.Index(line, "tp_src="):], "tp_src=%d", &port); err != nil {
			t.Fatalf("pin %s: %v", line, err)
		}
		for _, a := range []Agent{agentA1, agentA3} {
			if strings.Contains(line, a.MAC.String()) {
				got[port] = a.Name
			}
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("pins by client port %v, want %v", got, want)
	}
}

package flows

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/sdn/spread"
)

// (Review, helper-112.) PinSessions after 04d8469.

// TestMappedReportStillCompiles: one session reported once with
// its IPv4 addresses and once IPv4-mapped (by one agent, or by two) is one
// session: winningSteer and pinFlows unmap, but the pin key does not, so
// two pins with the same match come out and Compile refuses the whole
// flow set. The controller then leaves the switch as it is (no fail-over,
// no return) for as long as the report stands. PinSessions' doc: "no
// report can make the switch's flow set fail to compile".
func TestMappedReportStillCompiles(t *testing.T) {
	sw := spreadSwitch(ClientSide, spread.ModePort, 1, agentA1, agentA2)
	server := netip.MustParseAddrPort("10.2.0.10:5201")
	plain := netip.MustParseAddrPort("10.1.0.7:40002") // bucket 1: a2's
	mapped := netip.AddrPortFrom(netip.AddrFrom16(plain.Addr().As16()), plain.Port())
	for _, tc := range []struct {
		name string
		held map[string][]Held
	}{
		{"one agent, both spellings", map[string][]Held{"a1": {{"w", plain, server}, {"w", mapped, server}}}},
		{"two agents, one spelling each", map[string][]Held{"a1": {{"w", plain, server}}, "a2": {{"w", mapped, server}}}},
		// Three agents: a1 and a3 both claim a session in a2's bucket,
		// which must be pinned to neither.
		{"two claims in a third agent's bucket", map[string][]Held{"a1": {{"w", plain, server}}, "a3": {{"w", mapped, server}}}},
	} {
		sw := sw
		if strings.HasPrefix(tc.name, "two claims") {
			sw = spreadSwitch(ClientSide, spread.ModePort, 2, agentA1, agentA2, Agent{Name: "a3", MAC: mustMAC("02:00:00:00:01:03"), Port: 5})
		}
		fs, err := Compile(PinSessions(sw, tc.held))
		if err != nil {
			t.Errorf("%s: the switch is left without a flow set: %v", tc.name, err)
			continue
		}
		pins := 0
		for _, f := range fs {
			if f.Priority == PrioritySession {
				pins++
			}
		}
		// a1 holding it in a2's bucket: one pin. a2 claiming it too (its
		// own bucket, so no pin of its own) leaves a1's claim; the rule
		// "claimed by two, pinned to neither" does not apply as a2 needs
		// none. Either way at most one pin.
		if pins > 1 || strings.HasPrefix(tc.name, "two claims") && pins > 0 {
			t.Errorf("%s: %d pins for one session", tc.name, pins)
		}
	}
}

// TestPinDoesNotOverrideUnsteered: the server side's replies to
// a (client-side) agent's own address are taken out of steering at 2002
// (Unsteered): that agent carries such a connection direct. winningSteer
// does not see the exception, so a server-side agent's report of a session
// with that address as its client pins the replies (2003, above the
// exception) to the reporting agent, which cuts the direct connection.
// No server-side agent can hold such a session through the flows (the
// exception sends its replies to NORMAL), so only a wrong or stale report
// makes it; the code before 04d8469 did the same.
func TestPinDoesNotOverrideUnsteered(t *testing.T) {
	sw := spreadSwitch(ServerSide, spread.ModePort, 1, agentB1, agentB2)
	agentAddr := netip.MustParseAddr("10.1.0.3")
	sw.Steers[0].Unsteered = []netip.Addr{agentAddr}
	client := netip.AddrPortFrom(agentAddr, 40002) // bucket 1: b2's
	held := map[string][]Held{"b1": {{"w", client, netip.MustParseAddrPort("10.2.0.10:5201")}}}
	fs, err := Compile(PinSessions(sw, held))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Priority == PrioritySession && strings.Contains(f.String(), "nw_dst=10.1.0.3") {
			t.Errorf("the replies to agent address %s, which the exception sends to NORMAL, are pinned: %s", agentAddr, f)
		}
	}
}

// TestPinsIndependentOfReportOrder: the same reports in another
// order give the same flows, and a session two agents claim in a bucket
// of neither is pinned to neither.
func TestPinsIndependentOfReportOrder(t *testing.T) {
	agentA3 := Agent{Name: "a3", MAC: mustMAC("02:00:00:00:01:03"), Port: 5}
	sw := spreadSwitch(ClientSide, spread.ModePort, 2, agentA1, agentA2, agentA3)
	server := netip.MustParseAddrPort("10.2.0.10:5201")
	var fwd, rev []Held
	for port := uint16(40000); port < 40016; port++ {
		fwd = append(fwd, Held{"w", netip.AddrPortFrom(netip.MustParseAddr("10.1.0.7"), port), server})
	}
	for i := len(fwd) - 1; i >= 0; i-- {
		rev = append(rev, fwd[i])
	}
	text := func(held map[string][]Held) string {
		fs, err := Compile(PinSessions(sw, held))
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, f := range fs {
			b.WriteString(f.String() + "\n")
		}
		return b.String()
	}
	a := text(map[string][]Held{"a1": fwd, "a3": fwd})
	b := text(map[string][]Held{"a3": rev, "a1": rev})
	if a != b {
		t.Errorf("pins depend on the order of the reports:\n%s\nvs\n%s", a, b)
	}
	// a2's buckets (index 1) are claimed by a1 and a3: no pin to either.
	bk, _ := spread.Assign(spread.ModePort, 2, 3, []bool{true, true, true})
	for _, h := range fwd {
		if bk.Agent(h.Client) != 1 {
			continue
		}
		if strings.Contains(a, "tp_src="+itoa(h.Client.Port())+",") {
			t.Errorf("session %s claimed by a1 and a3 is pinned", h.Client)
		}
	}
}

func itoa(p uint16) string {
	s := ""
	for {
		s = string(rune('0'+p%10)) + s
		p /= 10
		if p == 0 {
			return s
		}
	}
}

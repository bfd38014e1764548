package plan

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/sdn/flows"
)

// The plan shows per switch how many flows each whitelist takes: a port
// range as value/mask blocks, or one flow per port on a switch without
// masked port matches.
func TestSteeringFlowCountsInPlan(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	a := flows.Agent{Name: "ag", MAC: mac, Port: 3}
	st := flows.Steer{Whitelist: "gridftp", Side: flows.ClientSide, Agent: a,
		Clients: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")},
		Servers: []netip.Prefix{netip.MustParsePrefix("10.2.0.16/28"), netip.MustParsePrefix("10.2.0.40/32")},
		Ports:   []portrange.Range{{Lo: 2811, Hi: 2811}, {Lo: 50000, Hi: 51000}}}
	back := st
	back.Side, back.Reverse = flows.ServerSide, true
	sw := flows.Switch{Name: "sw", Agents: []flows.Agent{a}, Steers: []flows.Steer{st, back,
		{Whitelist: "iperf", Side: flows.ClientSide, Agent: a, Clients: st.Clients, Server: netip.MustParseAddr("10.2.0.1"), Port: 5201}}}
	got := SteeringFlowCounts(sw)
	want := []WhitelistFlows{
		{Whitelist: "gridftp", Flows: 40, Detail: []string{
			"client side: 1 client prefix x 2 server prefixes x 10 port matches (value/mask)",
			"server side, connections opened by servers: 1 client prefix x 2 server prefixes x 10 port matches (value/mask)"}},
		{Whitelist: "iperf", Flows: 1, Detail: []string{"client side: 1 client prefix x 1 server prefix x 1 port match (value/mask)"}},
	}
	if !slices.EqualFunc(got, want, func(a, b WhitelistFlows) bool {
		return a.Whitelist == b.Whitelist && a.Flows == b.Flows && slices.Equal(a.Detail, b.Detail)
	}) {
		t.Fatalf("counts %+v\nwant %+v", got, want)
	}
	fs, err := flows.Compile(sw)
	if err != nil || len(fs) != 2+40+1 {
		t.Fatalf("compiled %d flows (%v), want the counted 41 and bypass and normal", len(fs), err)
	}
	sw.NoPortMasks = true
	if c := SteeringFlowCounts(sw); c[0].Flows != 2*2*1002 || !strings.Contains(c[0].Detail[0], "one per port") {
		t.Errorf("without masks: %+v", c[0])
	}
	p := Plan{Node: "ctl", Switches: []SwitchPlan{{Switch: "sw", Connected: true, Changes: []FlowChange{}, Whitelists: got}}}
	text := p.Text()
	for _, line := range []string{"whitelist gridftp: 40 steering flow(s)", "# client side: 1 client prefix x 2 server prefixes x 10 port matches (value/mask)"} {
		if !strings.Contains(text, line) {
			t.Errorf("plan text lacks %q:\n%s", line, text)
		}
	}
}

package sdn_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// TestReloadAddingAnAgentPinsSessionsFirst: a reload that adds a second
// agent to a site re-deals the buckets of the first. A session the first
// agent started after the controller last read its live sessions must not
// see its bucket's flow move to the new agent before its pin is on the
// switch: the controller converges the re-dealt buckets only once a health
// round has read every agent's sessions since the reload, and the pin goes
// in with them. The new agent's health check answers slowly here (0.8 s),
// so a convergence before that round is seen on the switch. Before, the
// reload converged at once, and the session's packets reached the new
// agent, which holds no socket for them, until the round's end (up to the
// health timeout, with a slow agent).
func TestReloadAddingAnAgentPinsSessionsFirst(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	inst := ovstest.Start(t)
	ln, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	br := inst.AddBridge(t, "brr", 0xd1, "tcp:"+ln.Addr().String())
	ag1 := flows.Agent{Name: "a1", MAC: agentMAC, Port: 3}
	ag2 := flows.Agent{Name: "a2", MAC: agent2MAC, Port: 4}
	steer := flows.Steer{
		Whitelist: "iperf", Side: flows.ClientSide,
		Clients: []netip.Prefix{netip.MustParsePrefix("10.10.1.0/28")},
		Server:  netip.MustParseAddr("10.10.1.20"), Port: 5201,
		Agent: ag1, DependsOnSites: [][]string{{"a1"}},
	}
	one := flows.Switch{Name: "sw-r", DatapathID: 0xd1, Forwarding: "normal", Agents: []flows.Agent{ag1}, Steers: []flows.Steer{steer}}
	two := one
	two.Agents = []flows.Agent{ag1, ag2}
	steer.Agents, steer.Spread, steer.SpreadBits = []flows.Agent{ag1, ag2}, spread.ModePort, 1
	steer.DependsOnSites = [][]string{{"a1", "a2"}}
	two.Steers = []flows.Steer{steer}

	h1 := newHealthServer(t)
	none := ""
	h1.sessions.Store(&none)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(800 * time.Millisecond)
		if r.URL.Path == "/sessions" {
			return // holds none
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(slow.Close)
	ctl := startController(t, sdn.Config{Listener: ln, Keepalive: time.Second, HealthInterval: time.Hour,
		RetryInterval: 200 * time.Millisecond, Switches: []flows.Switch{one},
		Agents: map[string]sdn.AgentHealth{"a1": {HTTP: h1.addr()}}})
	waitConverged(t, ctl.Controller, "sw-r", 0)
	requireSameFlows(t, br, compile(t, one))
	before, _ := ownedOnSwitch(t, br)

	// a1 takes a session in what will be a2's bucket (bit 1 of the
	// client's port set) after the controller's last read.
	session := "iperf 10.10.1.10:40002 10.10.1.20:5201\n"
	h1.sessions.Store(&session)
	if err := ctl.Update([]flows.Switch{two}, map[string]sdn.AgentHealth{"a1": {HTTP: h1.addr()},
		"a2": {HTTP: strings.TrimPrefix(slow.URL, "http://")}}); err != nil {
		t.Fatal(err)
	}
	pin := "priority=2003 tcp,nw_src=10.10.1.10,nw_dst=10.10.1.20,tp_src=40002,tp_dst=5201 actions=set_field:02:00:00:00:01:02->eth_dst,output:3"
	// Watch the switch until the new dealing is on it.
	var seen []string
	testsupport.Eventually(t, 10*time.Second, "the new agent's bucket on the switch", func() bool {
		owned, _ := ownedOnSwitch(t, br)
		if slices.Equal(owned, before) {
			return false
		}
		text := strings.Join(owned, "\n")
		if strings.Contains(text, "output:4") && !strings.Contains(text, pin) {
			seen = owned
		}
		return strings.Contains(text, "output:4") && strings.Contains(text, pin)
	})
	if seen != nil {
		t.Errorf("the switch sent a2's bucket to a2 before the session a1 holds in it was pinned to a1:\n%s", strings.Join(seen, "\n"))
	}
	owned, _ := ownedOnSwitch(t, br)
	if text := strings.Join(owned, "\n"); !strings.Contains(text, pin) {
		t.Errorf("no pin %s:\n%s", pin, text)
	}
}

package sdn_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// TestRedealDeferralHoldsOnEveryPath (review, helper-112): the
// re-deal deferral of 2821aee only skips Update's kick; every other
// convergence (a periodic resync, a switch that reconnects, a retry, an
// agent flip, SetRole) compiles c.switches, which already holds the new
// dealing, with the pins read before the reload. A session the first agent
// started after the last read then loses its path before the health round
// that would pin it ends, the very thing the commit sets out to prevent.
// Each subtest watches the switch while a1's health check is slow (2 s) and
// fails when a2's bucket is on the switch without the session's pin.
func TestRedealDeferralHoldsOnEveryPath(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	for _, tc := range []struct {
		name   string
		resync time.Duration
		// reconnect makes the bridge drop and re-open its controller
		// connection right after the reload.
		reconnect bool
	}{
		{name: "resync", resync: 300 * time.Millisecond},
		{name: "reconnect", reconnect: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := ovstest.Start(t)
			ln, err := inst.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			target := "tcp:" + ln.Addr().String()
			br := inst.AddBridge(t, "brq", 0xd2, target)
			ag1 := flows.Agent{Name: "a1", MAC: agentMAC, Port: 3}
			ag2 := flows.Agent{Name: "a2", MAC: agent2MAC, Port: 4}
			steer := flows.Steer{
				Whitelist: "iperf", Side: flows.ClientSide,
				Clients: []netip.Prefix{netip.MustParsePrefix("10.10.1.0/28")},
				Server:  netip.MustParseAddr("10.10.1.20"), Port: 5201,
				Agent: ag1, DependsOnSites: [][]string{{"a1"}},
			}
			one := flows.Switch{Name: "sw-q", DatapathID: 0xd2, Forwarding: "normal", Agents: []flows.Agent{ag1}, Steers: []flows.Steer{steer}}
			two := one
			two.Agents = []flows.Agent{ag1, ag2}
			steer.Agents, steer.Spread, steer.SpreadBits = []flows.Agent{ag1, ag2}, spread.ModePort, 1
			steer.DependsOnSites = [][]string{{"a1", "a2"}}
			two.Steers = []flows.Steer{steer}

			// a1, which holds the session, answers slowly once the
			// reload is made (a congested path); a2 answers at once.
			var slowA1 atomic.Bool
			var a1Sessions atomic.Pointer[string]
			none := ""
			a1Sessions.Store(&none)
			h1 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if slowA1.Load() {
					time.Sleep(2 * time.Second)
				}
				if r.URL.Path == "/sessions" {
					_, _ = w.Write([]byte(*a1Sessions.Load()))
					return
				}
				w.WriteHeader(http.StatusOK)
			}))
			t.Cleanup(h1.Close)
			h1addr := strings.TrimPrefix(h1.URL, "http://")
			h2 := newHealthServer(t)
			h2.sessions.Store(&none)
			resync := tc.resync
			if resync == 0 {
				resync = -1
			}
			ctl := startController(t, sdn.Config{Listener: ln, Keepalive: time.Second, HealthInterval: time.Hour,
				HealthTimeout: 10 * time.Second, ResyncInterval: resync,
				RetryInterval: 200 * time.Millisecond, Switches: []flows.Switch{one},
				Agents: map[string]sdn.AgentHealth{"a1": {HTTP: h1addr}}})
			waitConverged(t, ctl.Controller, "sw-q", 0)
			requireSameFlows(t, br, compile(t, one))

			session := "iperf 10.10.1.10:40002 10.10.1.20:5201\n"
			a1Sessions.Store(&session)
			slowA1.Store(true)
			if err := ctl.Update([]flows.Switch{two}, map[string]sdn.AgentHealth{"a1": {HTTP: h1addr},
				"a2": {HTTP: h2.addr()}}); err != nil {
				t.Fatal(err)
			}
			if tc.reconnect {
				if err := br.SetControllers(); err != nil {
					t.Fatal(err)
				}
				if err := br.SetControllers(target); err != nil {
					t.Fatal(err)
				}
			}
			pin := "priority=2003 tcp,nw_src=10.10.1.10,nw_dst=10.10.1.20,tp_src=40002,tp_dst=5201 actions=set_field:02:00:00:00:01:02->eth_dst,output:3"
			var seen []string
			testsupport.Eventually(t, 15*time.Second, "the new dealing and the pin on the switch", func() bool {
				owned, _ := ownedOnSwitch(t, br)
				text := strings.Join(owned, "\n")
				if strings.Contains(text, "output:4") && !strings.Contains(text, pin) && seen == nil {
					seen = slices.Clone(owned)
				}
				return strings.Contains(text, "output:4") && strings.Contains(text, pin)
			})
			if seen != nil {
				t.Errorf("a2's bucket went to a2 before the session a1 holds in it was pinned (deferral bypassed by %s):\n%s",
					tc.name, strings.Join(seen, "\n"))
			}
		})
	}
}

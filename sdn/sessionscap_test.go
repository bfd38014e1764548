package sdn

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// TestSessionReportCappedAtMaxSessions: an agent (or whatever answers on
// its health address) could list any number of live sessions in GET
// /sessions, up to the 1 MiB body, and each one in another agent's bucket
// became an exact-match flow on every switch of the site. An agent holds
// at most max_sessions sessions, so a longer answer is now refused as a
// failed read: the sessions read before stay pinned, the refusal is
// logged once, and an answer within the cap is pinned again.
func TestSessionReportCappedAtMaxSessions(t *testing.T) {
	sw := twoAgentSwitch()
	const maxSessions = 8
	ags := newReportingAgents(t)
	ags.report(4)
	var logs testsupport.LockedBuffer
	c, err := New(Config{HealthInterval: time.Second, Switches: []flows.Switch{sw}, Agents: ags.health(maxSessions)},
		slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	count := func(when string) int {
		t.Helper()
		fl, _, err := c.desiredFor("sw")
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		return len(fl)
	}
	base := count("before any health round")

	// Four sessions, two of them in a2's bucket: two pins.
	c.healthRound(ctx)
	honest := count("four sessions")
	if honest != base+2 {
		t.Fatalf("four sessions reported, two in the other agent's bucket: %d flows, want %d+2", honest, base)
	}

	// A hostile answer: 4,000 sessions, 2,000 of them foreign.
	ags.report(4000)
	for range 3 {
		c.healthRound(ctx)
	}
	if n := count("4,000 sessions"); n != honest {
		t.Errorf("an agent with max_sessions %d reported 4,000 sessions: %d flows (%d pins), want the %d flows of its last answer within the cap", maxSessions, n, n-base, honest)
	}
	if n := strings.Count(logs.String(), "cannot read the agent's live sessions"); n != 1 || !strings.Contains(logs.String(), "max_sessions (8)") {
		t.Errorf("the refusal was logged %d times in three rounds, want once, naming max_sessions:\n%s", n, logs.String())
	}
	sessionsError := func(agent string) string {
		for _, a := range c.Status().Agents {
			if a.Name == agent {
				return a.SessionsError
			}
		}
		return "no such agent"
	}
	if e := sessionsError("a1"); !strings.Contains(e, "max_sessions (8)") {
		t.Errorf("status of a1, whose report was refused: sessions error %q, want the cap named", e)
	}
	if e := sessionsError("a2"); e != "" {
		t.Errorf("status of a2, which reports nothing: sessions error %q", e)
	}

	// Exactly the cap is an honest answer: four pins.
	ags.report(maxSessions)
	c.healthRound(ctx)
	if n := count("eight sessions"); n != base+4 {
		t.Errorf("eight sessions reported, four foreign: %d flows, want %d+4", n, base)
	}
	if !strings.Contains(logs.String(), "reading the agent's live sessions again") {
		t.Errorf("the recovery was not logged:\n%s", logs.String())
	}
	if e := sessionsError("a1"); e != "" {
		t.Errorf("status of a1 after a report within the cap still says %q", e)
	}
}

// twoAgentSwitch is a switch spreading one whitelist over agents a1 and a2
// by the client port's bucket (one bit): a session either reports in the
// other's bucket is pinned to it.
func twoAgentSwitch() flows.Switch {
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	a1 := flows.Agent{Name: "a1", MAC: mac("02:00:00:00:01:01"), Port: 3}
	a2 := flows.Agent{Name: "a2", MAC: mac("02:00:00:00:01:02"), Port: 4}
	return flows.Switch{
		Name: "sw", DatapathID: 1, Forwarding: "normal", Agents: []flows.Agent{a1, a2},
		Steers: []flows.Steer{{
			Whitelist: "w", Side: flows.ClientSide,
			Clients: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")},
			Server:  netip.MustParseAddr("10.2.0.10"), Port: 5201,
			Agent: a1, Agents: []flows.Agent{a1, a2}, Spread: spread.ModePort, SpreadBits: 1,
			DependsOnSites: [][]string{{"a1", "a2"}},
		}},
	}
}

// reportingAgents answer the controller for agents a1 and a2 of
// twoAgentSwitch: a1's GET /sessions lists what report set, a2 holds none.
type reportingAgents struct {
	body   atomic.Value // string
	a1, a2 *httptest.Server
}

func newReportingAgents(t *testing.T) *reportingAgents {
	r := &reportingAgents{}
	r.body.Store("")
	r.a1 = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/sessions" {
			_, _ = w.Write([]byte(r.body.Load().(string)))
		}
	}))
	r.a2 = httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(func() {
		r.a1.Close()
		r.a2.Close()
	})
	return r
}

// report makes a1 list n sessions, client ports 40000 on.
func (r *reportingAgents) report(n int) {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "w 10.1.0.7:%d 10.2.0.10:5201\n", 40000+i)
	}
	r.body.Store(b.String())
}

// health is the controller's view of both, with max_sessions maxSessions.
func (r *reportingAgents) health(maxSessions int) map[string]AgentHealth {
	return map[string]AgentHealth{
		"a1": {HTTP: strings.TrimPrefix(r.a1.URL, "http://"), MaxSessions: maxSessions},
		"a2": {HTTP: strings.TrimPrefix(r.a2.URL, "http://"), MaxSessions: maxSessions},
	}
}

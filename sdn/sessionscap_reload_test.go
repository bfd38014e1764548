package sdn

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn/flows"
)

// TestLoweredMaxSessionsKeepsPinsCurrent: a reload that lowers
// limits.max_sessions leaves the agent's live sessions running
// (relay.Agent.Update), so an honest agent reports more than its new
// max_sessions until enough of them end. Its answers are read against the
// old cap until one fits the new cap, so its pins follow the sessions it
// holds, and nothing is logged against it; past that, the new cap holds.
// Found by review of the cap's first version, which froze the pins.
func TestLoweredMaxSessionsKeepsPinsCurrent(t *testing.T) {
	sw := twoAgentSwitch()
	ags := newReportingAgents(t)
	ags.report(8)
	agents := ags.health
	var logs testsupport.LockedBuffer
	c, err := New(Config{HealthInterval: time.Second, Switches: []flows.Switch{sw}, Agents: agents(8)},
		slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	count := func() int {
		fl, _, err := c.desiredFor("sw")
		if err != nil {
			t.Fatal(err)
		}
		return len(fl)
	}
	base := count()
	// pins is how many of n reported sessions are pinned with no cap: the
	// ones in the other agent's bucket.
	pins := func(n int) int {
		ref, err := New(Config{HealthInterval: time.Second, Switches: []flows.Switch{sw}, Agents: agents(0)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		saved := ags.body.Load()
		ags.report(n)
		ref.healthRound(ctx)
		ags.body.Store(saved)
		fl, _, err := ref.desiredFor("sw")
		if err != nil {
			t.Fatal(err)
		}
		return len(fl) - base
	}
	c.healthRound(ctx)
	if n, want := count()-base, pins(8); n != want || want == 0 {
		t.Fatalf("8 sessions: %d pins, want %d", n, want)
	}
	// Reload: max_sessions 8 -> 4; the agent's 8 sessions live on, then
	// two of them (one foreign) end.
	if err := c.Update([]flows.Switch{sw}, agents(4)); err != nil {
		t.Fatal(err)
	}
	ags.report(6)
	c.healthRound(ctx)
	if n, want := count()-base, pins(6); n != want || want == pins(8) {
		t.Errorf("the agent holds 6 sessions after max_sessions was lowered to 4: %d pins, want %d (not the %d read before the reload)", n, want, pins(8))
	}
	if strings.Contains(logs.String(), "cannot read the agent's live sessions") {
		t.Errorf("logged for an honest agent:\n%s", logs.String())
	}
	// Its sessions fall within the new cap; then more than 4 is refused.
	ags.report(4)
	c.healthRound(ctx)
	if n, want := count()-base, pins(4); n != want {
		t.Errorf("4 sessions: %d pins, want %d", n, want)
	}
	ags.report(6)
	c.healthRound(ctx)
	if n, want := count()-base, pins(4); n != want {
		t.Errorf("6 sessions once the cap of 4 held: %d pins, want the %d read before", n, want)
	}
	if !strings.Contains(logs.String(), "cannot read the agent's live sessions") {
		t.Errorf("6 sessions over the new cap of 4 was not logged:\n%s", logs.String())
	}
}

// TestFailedCheckKeepsPins: one failed health check (a check lost in a
// flood, a slow answer) no longer drops the agent's pins, which would move
// the sessions it holds to the other agent and break them; they go once
// the agent is down. Found by review.
func TestFailedCheckKeepsPins(t *testing.T) {
	sw := twoAgentSwitch()
	var failing, sessionsFailing atomic.Bool
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() || sessionsFailing.Load() && r.URL.Path == "/sessions" {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path == "/sessions" {
			for i := range 8 {
				fmt.Fprintf(w, "w 10.1.0.7:%d 10.2.0.10:5201\n", 40000+i)
			}
		}
	}))
	defer agent.Close()
	quiet := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer quiet.Close()
	c, err := New(Config{HealthInterval: time.Second, HealthFall: 2, Switches: []flows.Switch{sw}, Agents: map[string]AgentHealth{
		"a1": {HTTP: strings.TrimPrefix(agent.URL, "http://"), MaxSessions: 8},
		"a2": {HTTP: strings.TrimPrefix(quiet.URL, "http://"), MaxSessions: 8},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	held := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.heldLocked()["a1"])
	}
	c.healthRound(ctx)
	if n := held(); n != 8 {
		t.Fatalf("%d sessions held, want 8", n)
	}
	failing.Store(true)
	c.healthRound(ctx)
	if n := held(); n != 8 {
		t.Errorf("one failed check: %d of the agent's 8 sessions still pinned", n)
	}
	c.healthRound(ctx)
	c.mu.Lock()
	down := c.downLocked("a1")
	c.mu.Unlock()
	if n := held(); !down || n != 0 {
		t.Errorf("two failed checks: agent down %v, %d sessions still pinned; want down and none", down, n)
	}
	// Back up, its sessions unread: the pins from before the outage do
	// not come back.
	failing.Store(false)
	sessionsFailing.Store(true)
	for range 5 {
		c.healthRound(ctx)
	}
	c.mu.Lock()
	down = c.downLocked("a1")
	c.mu.Unlock()
	if n := held(); down || n != 0 {
		t.Errorf("back up with its sessions unread: agent down %v, %d sessions pinned from before the outage; want up and none", down, n)
	}
}

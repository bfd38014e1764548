package sdn

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn/flows"
)

// TestSessionsErrorClearedWhenDown: an agent that goes down loses its pins,
// and with them what was wrong with its last report; status no longer says
// "the last report was not taken" beside sessions that were dropped, not
// kept (found by review).
func TestSessionsErrorClearedWhenDown(t *testing.T) {
	sw := twoAgentSwitch()
	ags := newReportingAgents(t)
	ags.report(4000)
	c, err := New(Config{HealthInterval: time.Second, Switches: []flows.Switch{sw}, Agents: ags.health(8)},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c.healthRound(ctx)
	for _, a := range c.Status().Agents {
		if a.Name == "a1" && a.SessionsError == "" {
			t.Fatal("a1's report of 4,000 sessions over max_sessions 8 was taken")
		}
	}
	ags.a1.Close()
	for range 10 {
		c.healthRound(ctx)
	}
	for _, a := range c.Status().Agents {
		if a.Name == "a1" {
			if a.Healthy {
				t.Fatal("a1 still up")
			}
			if a.SessionsError != "" {
				t.Errorf("a1 is down with %d sessions, yet status says its last report was not taken: %q", a.Sessions, a.SessionsError)
			}
		}
	}
}

package relay

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

// TestHealthFollowsTheAgent: an agent is healthy only while it serves, so
// the daemon's status and the controller's probe never report a relay that
// has not started or is shutting down as up.
func TestHealthFollowsTheAgent(t *testing.T) {
	a, err := New(Config{Name: "agent-a", PSK: testPSK, DataListen: netip.MustParseAddrPort("127.0.0.1:0")}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := a.Health(); ok || why != "not started" {
		t.Errorf("before start: %v, %q", ok, why)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ok, why := a.Health(); !ok {
		t.Errorf("started: %v, %q", ok, why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, why := a.Health(); ok || why != "shutting down" {
		t.Errorf("after shutdown: %v, %q", ok, why)
	}
}

package relay

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// TestFailedUpdateKeepsOldAllowList: an Update refused because the CPUs
// cannot be pinned keeps the old configuration, its health allow list
// included. Found by review: the listeners (and the allow list) were
// reconciled before the pinning, so a refused reload shut the controller
// out while the node said it ran the last good config; Update now pins
// first.
func TestFailedUpdateKeepsOldAllowList(t *testing.T) {
	controller, other := "127.0.9.1", "127.0.9.2"
	cfg := Config{Name: "agent-a", PSK: testPSK,
		DataListen:   netip.MustParseAddrPort("127.0.0.1:0"),
		HealthListen: netip.MustParseAddrPort("127.0.0.1:0"),
		HealthAllow:  []netip.Prefix{netip.MustParsePrefix(controller + "/32")},
	}
	a, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	})
	health := a.Addrs().Health.String()
	kept := dialFromAddr(t, controller, health)
	if err := getOn(kept, "/healthz"); err != nil {
		t.Fatal(err)
	}

	bad := cfg
	bad.HealthAllow = []netip.Prefix{netip.MustParsePrefix(other + "/32")}
	bad.RelayCPUs = []int{1000} // valid for Validate (< 1024), no such CPU here
	if err := a.Update(bad); err == nil {
		t.Fatal("pinning to CPU 1000 succeeded; the test needs a refused Update")
	} else {
		t.Logf("Update refused as expected: %v", err)
	}
	if got := a.cfg.Load().HealthAllow; !slices.Equal(got, cfg.HealthAllow) {
		t.Fatalf("the agent's config after a refused Update has health allow %v", got)
	}
	if err := getOn(kept, "/healthz"); err != nil {
		t.Errorf("the refused Update closed the controller's kept-alive connection: %v", err)
	}
	if err := getFrom(controller, health, "/healthz"); err != nil {
		t.Errorf("after a refused Update (old config %v kept), the controller's source is shut out: %v", cfg.HealthAllow, err)
	}
	if err := getFrom(other, health, "/healthz"); err == nil {
		t.Errorf("after a refused Update, %s (only in the refused config's list) is served", other)
	}
}

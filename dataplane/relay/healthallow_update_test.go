package relay

import (
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"net/netip"
	"slices"
	"testing"
)

// TestFailedUpdateKeepsOldAllowList: an Update refused because the CPUs
// cannot be pinned keeps the old configuration, its health allow list
// included. Found by review: the listeners (and the allow list) were
// reconciled before the pinning, so a refused reload shut the controller
// out while the node said it ran the last good config; Update now pins
// first.
func TestFailedUpdateKeepsOldAllowList(t *testing.T) {
	controller, other := "127.0.9.1", "127.0.9.2"
	allow := []netip.Prefix{netip.MustParsePrefix(controller + "/32")}
	a := startHealthAgentWith(t, allow)
	cfg := healthAgentConfig(allow)
	health := a.Addrs().Health.String()
	kept, err := testsupport.DialFrom(controller, health)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	if _, err := testsupport.GetOn(kept, "/healthz"); err != nil {
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
	if _, err := testsupport.GetOn(kept, "/healthz"); err != nil {
		t.Errorf("the refused Update closed the controller's kept-alive connection: %v", err)
	}
	if _, err := testsupport.GetFrom(controller, health, "/healthz"); err != nil {
		t.Errorf("after a refused Update (old config %v kept), the controller's source is shut out: %v", cfg.HealthAllow, err)
	}
	if _, err := testsupport.GetFrom(other, health, "/healthz"); err == nil {
		t.Errorf("after a refused Update, %s (only in the refused config's list) is served", other)
	}
}

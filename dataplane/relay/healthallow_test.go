package relay

import (
	"net/netip"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestHealthAllowList mounts the attacks SECURITY.md listed against the
// health port of a real agent with health_allow: a host outside the list
// asks for /sessions (every live session's whitelist, client and server)
// and floods the port. It is closed unread each time, the controller's
// source is answered throughout, and a reload that narrows the list closes
// the kept-alive connection of a source it no longer admits.
func TestHealthAllowList(t *testing.T) {
	controller, other := "127.0.9.1", "127.0.9.2"
	allow := []netip.Prefix{netip.MustParsePrefix(controller + "/32")}
	a := startHealthAgentWith(t, allow)
	cfg := healthAgentConfig(allow)
	health := a.Addrs().Health.String()

	if n, err := testsupport.Unanswered(other, health, "/sessions"); n != 0 || err == nil {
		t.Fatalf("a source outside health_allow read %d bytes of /sessions (err %v)", n, err)
	}
	if _, err := testsupport.GetFrom(controller, health, "/sessions"); err != nil {
		t.Fatalf("the controller's source: %v", err)
	}
	flood := testsupport.SilentFlood(t, health)
	if _, err := testsupport.GetFrom(controller, health, "/healthz"); err != nil {
		t.Fatalf("the controller's check after a flood of %d from outside: %v", len(flood), err)
	}
	if open := testsupport.EstablishedOn(t, a.Addrs().Health.Port()); open > 1 {
		t.Errorf("the health port holds %d connections after a flood from outside its allow list", open)
	}
	closed := a.Stats().Totals.HealthClosed
	if closed.Denied < uint64(len(flood))+1 || closed.Evicted != 0 || closed.Refused != 0 {
		t.Errorf("health port closed %+v; want %d denied and no other", closed, len(flood)+1)
	}

	// A reload narrowing the list closes the open connection of the source
	// it no longer admits and admits the new one; the endpoint is not
	// rebound.
	kept, err := testsupport.DialFrom(controller, health)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	if _, err := testsupport.GetOn(kept, "/healthz"); err != nil {
		t.Fatal(err)
	}
	cfg.HealthAllow = []netip.Prefix{netip.MustParsePrefix(other + "/32")}
	if err := a.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := testsupport.GetOn(kept, "/healthz"); err == nil {
		t.Error("a kept-alive connection from a source the reload no longer admits is still served")
	}
	if _, err := testsupport.GetFrom(other, health, "/healthz"); err != nil {
		t.Errorf("the newly admitted source after the reload: %v", err)
	}
	if got := a.Addrs().Health.String(); got != health {
		t.Errorf("the health endpoint moved from %s to %s on an allow-list change", health, got)
	}
}

package relay

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestHealthPortFloodBounded: the health endpoint took every connection
// offered and kept each until its header timeout, so anyone reaching the
// port could hold as many sockets, goroutines and buffers as the process
// may open files, and the relay's own listeners then failed to accept
// (a limit SECURITY.md listed). Now it keeps at most healthMaxConns open
// (healthMaxConnsPerSource from one address), closing the oldest silent
// ones, and the controller's check made after the flood is answered.
func TestHealthPortFloodBounded(t *testing.T) {
	health := startHealthAgent(t)
	flood := testsupport.SilentFlood(t, health.String())
	// The controller's check, after the flood: the listener accepts in
	// order, so every flood connection has been accepted once it is
	// answered.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + health.String() + "/healthz")
	if err != nil {
		t.Fatalf("health check after %d silent connections: %v", len(flood), err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Errorf("health check after the flood: %s %q", resp.Status, body)
	}
	open := testsupport.EstablishedOn(t, health.Port())
	t.Logf("%d silent connections offered, %d held by the health endpoint", len(flood), open)
	if open > healthMaxConns {
		t.Errorf("the health endpoint holds %d of %d silent connections, want at most %d", open, len(flood), healthMaxConns)
	}
}

// startHealthAgent starts an agent with a health endpoint on loopback,
// stopped when the test ends, and returns the endpoint's address.
func startHealthAgent(t *testing.T) netip.AddrPort {
	t.Helper()
	return startHealthAgentWith(t, nil).Addrs().Health
}

// startHealthAgentWith starts agent-a with a data listener and a health
// endpoint on loopback, accepting the sources in allow (any when empty),
// and stops it when the test ends.
func startHealthAgentWith(t *testing.T, allow []netip.Prefix) *Agent {
	t.Helper()
	a, err := New(healthAgentConfig(allow), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return a
}

// healthAgentConfig is startHealthAgentWith's configuration.
func healthAgentConfig(allow []netip.Prefix) Config {
	return Config{Name: "agent-a", PSK: testPSK,
		DataListen:   netip.MustParseAddrPort("127.0.0.1:0"),
		HealthListen: netip.MustParseAddrPort("127.0.0.1:0"),
		HealthAllow:  allow,
	}
}

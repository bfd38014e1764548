package relay

import (
	"context"
	"fmt"
	"io"
	"net"
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
	a, err := New(Config{Name: "agent-a", PSK: testPSK,
		DataListen:   netip.MustParseAddrPort("127.0.0.1:0"),
		HealthListen: netip.MustParseAddrPort("127.0.0.1:0"),
	}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	health := a.Addrs().Health
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	dial := func(from string) {
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", health.String())
		if err != nil {
			t.Fatalf("flood connection %d from %s: %v", len(flood), from, err)
		}
		flood = append(flood, c)
	}
	// 600 silent connections from one address, 2 each from 300 others.
	for range 600 {
		dial("127.0.0.1")
	}
	for i := range 300 {
		from := fmt.Sprintf("127.0.%d.%d", 2+i/250, 1+i%250)
		dial(from)
		dial(from)
	}
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

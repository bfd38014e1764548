package appliance

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestMetricsPortFloodBounded: the metrics server took every connection
// offered and kept each until its header timeout, so anyone reaching the
// port (it may face the network) could hold as many sockets, goroutines
// and buffers as the process may open files, starving the relay's
// listeners of descriptors. Now it keeps at most
// metricsMaxConns open (metricsMaxConnsPerSource from one address),
// closing the oldest silent ones, and a scrape after the flood is
// answered.
func TestMetricsPortFloodBounded(t *testing.T) {
	m := newMetrics(func() liveStats { return liveStats{Sessions: 3} })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := m.serveOn(ln)
	t.Cleanup(stop)
	addr := ln.Addr().(*net.TCPAddr)
	flood := testsupport.SilentFlood(t, addr.String())
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatalf("scrape after %d silent connections: %v", len(flood), err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "sosappliance_sessions 3") {
		t.Errorf("scrape after the flood: %s", resp.Status)
	}
	open := testsupport.EstablishedOn(t, uint16(addr.Port))
	t.Logf("%d silent connections offered, %d held by the metrics server", len(flood), open)
	if open > metricsMaxConns {
		t.Errorf("the metrics server holds %d of %d silent connections, want at most %d", open, len(flood), metricsMaxConns)
	}
}

package appliance

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/appliance/store"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestMetricsAllowInForceAtStart: metrics_allow is in force from the
// metrics server's first connection. Found by review: it was applied at
// the end of the first switch, so during start-up any source's request was
// read, and when start-up failed (here the state database is held by
// another opener, as `sosappliance apply` would, until the 5 s lock
// timeout) the waiting scrape was answered to a source outside the list.
func TestMetricsAllowInForceAtStart(t *testing.T) {
	root, dir := tempHost(t), t.TempDir()
	cfgPath := filepath.Join(dir, "sos.hcl")
	writeFile(t, cfgPath, daemonConfig("100000")+"\ndaemon {\n  metrics_allow = [\"127.0.0.2\"]\n}\n")
	statePath := filepath.Join(dir, "state.db")
	held, err := store.Open(statePath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logs := &testsupport.LockedBuffer{}
	d, err := NewDaemon(Options{
		ConfigPath: cfgPath, Node: "host1", StatePath: statePath, ControlSocket: filepath.Join(dir, "control.sock"),
		MetricsListen: &addr, Root: root, Executors: tempHostExecutors(root),
		Settle: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		t.Logf("run: %v\n%s", <-done, logs.String())
	}()

	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
			return dl.DialContext(ctx, network, a)
		},
	}}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := client.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Logf("scrape: %v", err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.Contains(string(body), "sosappliance_") {
			t.Errorf("127.0.0.3, outside metrics_allow [127.0.0.2], scraped /metrics (%d bytes) while the daemon was starting", len(body))
			return
		}
	}
}

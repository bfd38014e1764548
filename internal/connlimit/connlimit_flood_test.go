package connlimit

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// serveSlow is serve, and a /slow path whose handler, once entered,
// signals entered and waits for release before it writes anything: a
// request that has been read whole but not yet answered (a scrape being
// gathered, a health check being served).
func serveSlow(t *testing.T, total, perSource int) (*Listener, string, chan struct{}, chan struct{}) {
	t.Helper()
	return serveSlowGrace(t, total, perSource, servedGrace)
}

// serveSlowGrace is serveSlow with a request counted as served for grace
// instead of servedGrace.
func serveSlowGrace(t *testing.T, total, perSource int, grace time.Duration) (*Listener, string, chan struct{}, chan struct{}) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := New(raw, total, perSource)
	ln.grace = grace
	entered, release := make(chan struct{}, 4), make(chan struct{})
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				entered <- struct{}{}
				<-release
			}
			_, _ = io.WriteString(w, "ok")
		}),
		ReadHeaderTimeout: time.Minute,
		IdleTimeout:       time.Minute,
	}
	ln.Track(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln, raw.Addr().String(), entered, release
}

// TestServedRequestNotClosedForAFlood: a request being served is never
// closed to make room. Found by review of the first version, which closed
// the oldest connection the server had not written to: a client holding
// 64 answered keep-alive connections from 8 addresses (8 each, the caps
// the health and metrics servers use) then had every new connection of
// its own close the controller's check (a fresh connection each,
// agentClient) while its handler ran.
func TestServedRequestNotClosedForAFlood(t *testing.T) {
	// A grace longer than the test, so that the check counts as served
	// however slowly the machine takes the flood. (What this test tells
	// apart is which source loses a connection: the check's is never the
	// busiest; TestNewConnectionClosedWhenAllAreServed checks that a
	// served connection is kept.)
	ln, addr, entered, release := serveSlowGrace(t, 64, 8, time.Hour)
	for s := 1; s <= 8; s++ {
		for range 8 {
			c := dialFrom(t, fmt.Sprintf("127.0.9.%d", s), addr)
			if err := get(c); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The controller's check: a fresh connection, a whole request.
	ctl := dialFrom(t, "127.0.0.50", addr)
	_ = ctl.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(ctl, "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the check's handler never ran")
	}
	// One more connection of the flooder, from its source that lost a
	// connection to the check's arrival (below its cap of 8).
	for s := 1; s <= 8; s++ {
		dialFrom(t, fmt.Sprintf("127.0.9.%d", s), addr)
	}
	// Let the accept loop take them.
	deadline := time.Now().Add(5 * time.Second)
	for ln.Evicted() < 9 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	resp, err := http.ReadResponse(bufio.NewReader(ctl), nil)
	if err != nil {
		t.Fatalf("the controller's check, read whole and being served, was closed to make room for an idle keep-alive flood: %v (evicted %d)", err, ln.Evicted())
	}
	resp.Body.Close()
}

// TestOldestKeepAliveKeptOnATie: a client's long-lived keep-alive
// connection (Prometheus's) stays open when 64 other addresses hold one
// answered connection each: every source ties at one connection, and of
// idle connections the newest goes. Found by review of the first version,
// which closed the oldest.
func TestOldestKeepAliveKeptOnATie(t *testing.T) {
	_, addr := serve(t, 64, 8)
	keeper := dialFrom(t, "127.0.0.2", addr)
	if err := get(keeper); err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		if err := get(dialFrom(t, fmt.Sprintf("127.0.10.%d", i+1), addr)); err != nil {
			t.Fatal(err)
		}
	}
	if err := get(keeper); err != nil {
		t.Errorf("the oldest keep-alive connection, its source's only one, was closed for 64 one-connection sources: %v", err)
	}
}

// When every connection is being served, the new one is closed instead;
// when the oldest request has been served past the grace, it goes for the
// new one. Each case runs with a grace that makes it hold however fast the
// machine is: an hour (every request is within it) and a nanosecond (every
// request is past it).
func TestNewConnectionClosedWhenAllAreServed(t *testing.T) {
	for _, c := range []struct {
		name  string
		grace time.Duration
		stale bool
	}{
		{"within the grace", time.Hour, false},
		{"past the grace", time.Nanosecond, true},
	} {
		t.Run(c.name, func(t *testing.T) { newConnectionWhenAllAreServed(t, c.grace, c.stale) })
	}
}

func newConnectionWhenAllAreServed(t *testing.T, grace time.Duration, stale bool) {
	ln, addr, entered, release := serveSlowGrace(t, 2, 2, grace)
	var ctls []net.Conn
	for range 2 {
		c := dialFrom(t, "127.0.0.1", addr)
		if _, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-entered:
		case <-time.After(30 * time.Second):
			t.Fatal("the handler never ran")
		}
		ctls = append(ctls, c)
	}
	late := dialFrom(t, "127.0.0.1", addr)
	// Wait for the listener to decide on late: it refuses it or evicts.
	deadline := time.Now().Add(30 * time.Second)
	for ln.Refused()+ln.Evicted() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	refused, evicted := ln.Refused(), ln.Evicted()
	close(release)
	var errs []error
	for _, c := range ctls {
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			resp.Body.Close()
		}
		errs = append(errs, err)
	}
	if !stale {
		if refused != 1 || evicted != 0 {
			t.Fatalf("a third connection with both places serving: refused %d, evicted %d; want 1 and 0", refused, evicted)
		}
		if !closed(late) {
			t.Error("a third connection was kept with both places serving")
		}
		for i, err := range errs {
			if err != nil {
				t.Errorf("request %d, being served, was closed: %v", i, err)
			}
		}
		return
	}
	if refused != 0 || evicted != 1 {
		t.Fatalf("both requests past the grace: refused %d, evicted %d; want 0 and 1", refused, evicted)
	}
	if !stillOpen(late) {
		t.Error("the third connection was closed although a stale request was evicted for it")
	}
	if errs[0] == nil {
		t.Error("the oldest request, served past its grace, was answered: another connection was evicted")
	}
	if errs[1] != nil {
		t.Errorf("the newer request was closed: %v", errs[1])
	}
}

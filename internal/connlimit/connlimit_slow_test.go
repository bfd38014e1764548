package connlimit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestSlowReadersDoNotPinEveryPlace: a handler writing an answer larger
// than the socket buffers (a Prometheus scrape, GET /sessions on a busy
// agent) blocks in Write while its client does not read, until
// WriteTimeout. A request counts as being served only for servedGrace, so
// eight sources holding eight such requests each cannot fill the total cap
// with connections that are never closed to make room. Found by review of
// the cap's second version, which refused the scraper's connection.
func TestSlowReadersDoNotPinEveryPlace(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := New(raw, 64, 8)
	ln.grace = 100 * time.Millisecond
	big := strings.Repeat("x", 8<<20)
	var started atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			started.Add(1)
			_, _ = io.WriteString(w, big)
		}),
		ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute,
	}
	ln.Track(srv)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := raw.Addr().String()
	slow := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024) })
	}}
	for s := 1; s <= 8; s++ {
		for range 8 {
			slow.LocalAddr = &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.11.%d", s))}
			c, err := slow.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The handlers start and block in Write, and then serve past the
	// grace: wait for all 64 to have started, however long a loaded
	// machine takes, then for the grace (a request counts as served from
	// just before its handler starts).
	deadline := time.Now().Add(30 * time.Second)
	for started.Load() < 64 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := started.Load(); n < 64 {
		t.Fatalf("%d of 64 handlers started within 30 s (open %d, refused %d, evicted %d)", n, ln.Open(), ln.Refused(), ln.Evicted())
	}
	time.Sleep(ln.grace + 100*time.Millisecond)
	scraper := dialFrom(t, "127.0.0.60", addr)
	_ = scraper.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(scraper, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(scraper), nil)
	if err != nil {
		t.Fatalf("the scrape was locked out by 64 non-reading connections from 8 sources: %v (open %d, refused %d, evicted %d)",
			err, ln.Open(), ln.Refused(), ln.Evicted())
	}
	resp.Body.Close()
}

// A handler that panics: net/http recovers it; the serving count must
// come back to zero so the connection can be closed later.
func TestPanickingHandlerIsNotLeftServing(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := New(raw, 1, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic(http.ErrAbortHandler)
		}
		_, _ = io.WriteString(w, "ok")
	}), ErrorLog: nil}
	ln.Track(srv)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	c := dialFrom(t, "127.0.0.1", raw.Addr().String())
	_, _ = io.WriteString(c, "GET /panic HTTP/1.1\r\nHost: x\r\n\r\n")
	if !closed(c) {
		t.Fatal("the panicking request's connection stayed open")
	}
	if err := get(dialFrom(t, "127.0.0.1", raw.Addr().String())); err != nil {
		t.Fatalf("after a panic, a new connection is not served: %v (open %d refused %d)", err, ln.Open(), ln.Refused())
	}
}

// Shutdown with an in-flight request and idle keep-alives: returns once
// the request is answered and leaves nothing counted open.
func TestShutdownLeavesNothingOpen(t *testing.T) {
	ln, addr, entered, release := serveSlow(t, 64, 8)
	idle := dialFrom(t, "127.0.0.2", addr)
	if err := get(idle); err != nil {
		t.Fatal(err)
	}
	busy := dialFrom(t, "127.0.0.3", addr)
	_, _ = io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered
	_ = ln // the server is owned by serveSlow; reach it through Shutdown on a copy is not possible,
	// so close the listener and release the handler: the open count must drain.
	_ = ln.Close()
	close(release)
	resp, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	idle.Close()
	busy.Close()
	deadline := time.Now().Add(5 * time.Second)
	for ln.Open() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if ln.Open() != 0 {
		t.Fatalf("%d connections still counted open after the clients left", ln.Open())
	}
	_ = context.Background()
}

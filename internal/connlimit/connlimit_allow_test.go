package connlimit

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"
)

// refusedUnread says whether the server closed c without writing a byte,
// although a whole request was sent on it.
func refusedUnread(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	n, err := c.Read(make([]byte, 512))
	return n == 0 && err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// A source outside the allow list is closed as it is accepted, before a
// byte is read or written, and a flood from outside takes no place from
// the allowed sources.
func TestAllowListClosesOthersAtAccept(t *testing.T) {
	ln, addr := serve(t, 16, 8)
	ln.Allow([]netip.Prefix{netip.MustParsePrefix("127.0.0.2/32"), netip.MustParsePrefix("2001:db8::/64")})
	keeper := dialFrom(t, "127.0.0.2", addr)
	if err := get(keeper); err != nil {
		t.Fatalf("an allowed source: %v", err)
	}
	if !refusedUnread(t, dialFrom(t, "127.0.0.3", addr)) {
		t.Fatal("a source outside the allow list got an answer or was left open")
	}
	for i := range 200 {
		dialFrom(t, fmt.Sprintf("127.0.1.%d", i+1), addr)
	}
	if err := get(dialFrom(t, "127.0.0.2", addr)); err != nil {
		t.Fatalf("an allowed source after a flood from outside: %v", err)
	}
	if err := get(keeper); err != nil {
		t.Errorf("the allowed keep-alive was closed for a flood from outside: %v", err)
	}
	if n := ln.Open(); n > 2 {
		t.Errorf("%d connections open, want the 2 allowed ones", n)
	}
	if d := ln.Denied(); d != 201 {
		t.Errorf("denied %d, want 201", d)
	}
	if e, r := ln.Evicted(), ln.Refused(); e != 0 || r != 0 {
		t.Errorf("evicted %d and refused %d: denied connections took places", e, r)
	}
}

// Narrowing the allow list closes the open connections it no longer
// admits; widening it admits them again.
func TestNarrowedAllowClosesOpenConnections(t *testing.T) {
	ln, addr := serve(t, 16, 8)
	kept, dropped := dialFrom(t, "127.0.0.2", addr), dialFrom(t, "127.0.0.3", addr)
	for _, c := range []net.Conn{kept, dropped} {
		if err := get(c); err != nil {
			t.Fatal(err)
		}
	}
	ln.Allow([]netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")})
	if !closed(dropped) {
		t.Error("a keep-alive connection from a source no longer allowed is still open")
	}
	if err := get(kept); err != nil {
		t.Errorf("an allowed keep-alive was closed: %v", err)
	}
	if n, d := ln.Open(), ln.Denied(); n != 1 || d != 1 {
		t.Errorf("open %d, denied %d after narrowing; want 1 and 1", n, d)
	}
	ln.Allow(nil)
	if err := get(dialFrom(t, "127.0.0.3", addr)); err != nil {
		t.Errorf("no allow list admits any source again: %v", err)
	}
}

// On a dual-stack socket an IPv4 client arrives IPv4-mapped; the allow list
// matches it against IPv4 prefixes all the same.
func TestAllowMatchesIPv4OnDualStack(t *testing.T) {
	raw, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := New(raw, 16, 8)
	ln.Allow([]netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), ReadHeaderTimeout: 10 * time.Second}
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
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(raw.Addr().(*net.TCPAddr).Port))
	if err := get(dialFrom(t, "127.0.0.2", addr)); err != nil {
		t.Fatalf("an allowed IPv4 source on a dual-stack socket: %v", err)
	}
	if !refusedUnread(t, dialFrom(t, "127.0.0.3", addr)) {
		t.Error("an IPv4 source outside the list got through a dual-stack socket")
	}
}

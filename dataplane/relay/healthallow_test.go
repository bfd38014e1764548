package relay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

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
		if err := a.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	health := a.Addrs().Health.String()

	if n, err := rawGet(other, health, "/sessions"); n != 0 || err == nil {
		t.Fatalf("a source outside health_allow read %d bytes of /sessions (err %v)", n, err)
	}
	if err := getFrom(controller, health, "/sessions"); err != nil {
		t.Fatalf("the controller's source: %v", err)
	}
	flood := testsupport.SilentFlood(t, health)
	if err := getFrom(controller, health, "/healthz"); err != nil {
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
	kept := dialFromAddr(t, controller, health)
	if err := getOn(kept, "/healthz"); err != nil {
		t.Fatal(err)
	}
	cfg.HealthAllow = []netip.Prefix{netip.MustParsePrefix(other + "/32")}
	if err := a.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if err := getOn(kept, "/healthz"); err == nil {
		t.Error("a kept-alive connection from a source the reload no longer admits is still served")
	}
	if err := getFrom(other, health, "/healthz"); err != nil {
		t.Errorf("the newly admitted source after the reload: %v", err)
	}
	if got := a.Addrs().Health.String(); got != health {
		t.Errorf("the health endpoint moved from %s to %s on an allow-list change", health, got)
	}
}

// dialFromAddr connects to addr from the loopback address from.
func dialFromAddr(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// getOn sends GET path on c (kept alive) and wants 200.
func getOn(c net.Conn, path string) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

// getFrom makes one request on a fresh connection from from.
func getFrom(from, addr, path string) error {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return getOn(c, path)
}

// rawGet sends GET path from from and returns how many bytes came back
// before the connection ended (err is how it ended).
func rawGet(from, addr, path string) (int64, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
	n, err := io.Copy(io.Discard, c)
	if err == nil {
		err = io.EOF // the server closed it
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return n, nil // left open: not refused
	}
	return n, err
}

package appliance

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMetricsServerLimits mounts the usual attacks on a client-facing HTTP
// server against the real /metrics server on loopback, with its timeouts
// shortened: slowloris connections and idle keep-alive connections are
// closed by the server, an oversized header gets 431, and a scrape made
// while the attackers hold their connections is answered.
func TestMetricsServerLimits(t *testing.T) {
	m := newMetrics(func() liveStats { return liveStats{Sessions: 3} })
	m.limits.readHeader = 300 * time.Millisecond
	m.limits.read = 600 * time.Millisecond
	m.limits.idle = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := m.serveOn(ln)
	t.Cleanup(stop)
	addr := ln.Addr().String()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	const request = "GET /metrics HTTP/1.1\r\nHost: sosappliance\r\nAccept: text/plain;version=0.0.4\r\n"

	// Slowloris: a header that never ends, one byte at a time.
	var trickling sync.WaitGroup
	slow := make([]net.Conn, 20)
	for i := range slow {
		c := dial()
		slow[i] = c
		trickling.Add(1)
		go func() {
			defer trickling.Done()
			if _, err := io.WriteString(c, request+"X-Slow: "); err != nil {
				return
			}
			for {
				if _, err := c.Write([]byte{'a'}); err != nil {
					return // closed by the server, or by the test's end
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}

	// Idle: one complete request on a keep-alive connection, then silence.
	idle := make([]net.Conn, 20)
	for i := range idle {
		c := dial()
		idle[i] = c
		if _, err := io.WriteString(c, request+"\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("keep-alive request: %s, close %v", resp.Status, resp.Close)
		}
	}

	// A scrape while the attackers hold their connections.
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape during the attack: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "sosappliance_sessions 3") {
		t.Errorf("scrape during the attack: %s\n%s", resp.Status, body)
	}

	// An oversized header, written while the answer is read, as the
	// server stops reading at its limit.
	big := dial()
	go io.WriteString(big, request+"X-Big: "+strings.Repeat("a", 2*m.limits.maxHeaderBytes)+"\r\n\r\n")
	big.SetReadDeadline(time.Now().Add(30 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(big), nil); err != nil {
		t.Errorf("oversized header: %v", err)
	} else if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("oversized header: %s, want 431", resp.Status)
	}

	deadline := time.Now().Add(30 * time.Second) // far beyond every limit under test
	for i, c := range slow {
		if err := closedByServer(c, deadline); err != nil {
			t.Errorf("slowloris connection %d: %v", i, err)
		}
	}
	for i, c := range idle {
		if err := closedByServer(c, deadline); err != nil {
			t.Errorf("idle connection %d: %v", i, err)
		}
	}
	for _, c := range slow {
		c.Close()
	}
	trickling.Wait()
}

// closedByServer waits until deadline for the server to close c without
// answering.
func closedByServer(c net.Conn, deadline time.Time) error {
	c.SetReadDeadline(deadline)
	n, err := c.Read(make([]byte, 4096))
	switch {
	case n > 0:
		return errors.New("the server answered instead of closing")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errors.New("still open at the deadline")
	case err == nil:
		return errors.New("read nothing and no error")
	}
	return nil // EOF or reset: closed
}

// Hang-ups after a valid hello reach /metrics next to the handshake
// failures, each from its own counter.
func TestMetricsHandshakeCounters(t *testing.T) {
	m := newMetrics(func() liveStats { return liveStats{HandshakeFailures: 3, HandshakesAbandoned: 7} })
	body := scrapeMetrics(t, m)
	for _, want := range []string{
		"# TYPE sosappliance_handshakes_abandoned_total counter",
		"\nsosappliance_handshake_failures_total 3\n",
		"\nsosappliance_handshakes_abandoned_total 7\n",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("no %q in\n%s", want, body)
		}
	}
}

// scrapeMetrics serves m on a loopback port for the test and returns one
// scrape of /metrics.
func scrapeMetrics(t *testing.T, m *metrics) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.serveOn(ln))
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

package connlimit

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestSlowHandlerPastGraceGoesLast: a request whose handler has worked for
// more than servedGrace loses its protection, but its connection goes only
// after every silent and idle one of its source: eight newer silent
// connections from the same source close one another, not it. Found by
// review of the grace's first version, which closed it first.
func TestSlowHandlerPastGraceGoesLast(t *testing.T) {
	ln, addr, entered, release := serveSlow(t, 64, 8)
	c := dialFrom(t, "127.0.0.5", addr)
	if _, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	<-entered
	time.Sleep(servedGrace + 300*time.Millisecond) // the handler is still computing
	var flood []net.Conn
	for range 8 {
		flood = append(flood, dialFrom(t, "127.0.0.5", addr))
	}
	time.Sleep(200 * time.Millisecond)
	close(release)
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Errorf("a request served for %v with its client reading lost its connection to 8 newer silent ones: %v (evicted %d)",
			servedGrace+300*time.Millisecond, err, ln.Evicted())
		return
	}
	resp.Body.Close()
}

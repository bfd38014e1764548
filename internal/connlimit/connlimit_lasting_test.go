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
// more than the grace (servedGrace) loses its protection, but its connection goes only
// after every silent and idle one of its source: eight newer silent
// connections from the same source close one another, not it. Found by
// review of the grace's first version, which closed it first.
func TestSlowHandlerPastGraceGoesLast(t *testing.T) {
	const grace = 50 * time.Millisecond
	ln, addr, entered, release := serveSlowGrace(t, 64, 8, grace)
	c := dialFrom(t, "127.0.0.5", addr)
	if _, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	<-entered
	time.Sleep(2 * grace) // the handler is still computing, past the grace
	var flood []net.Conn
	for range 8 {
		flood = append(flood, dialFrom(t, "127.0.0.5", addr))
	}
	// Nine connections of a source of cap 8: one goes.
	deadline := time.Now().Add(30 * time.Second)
	for ln.Evicted()+ln.Refused() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if ln.Evicted() != 1 || ln.Refused() != 0 {
		t.Errorf("nine connections of a source of cap 8: evicted %d, refused %d; want 1 and 0", ln.Evicted(), ln.Refused())
	}
	close(release)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Errorf("a request served past the grace with its client reading lost its connection to 8 newer silent ones: %v (evicted %d)",
			err, ln.Evicted())
		return
	}
	resp.Body.Close()
}

package appliance

import (
	"net"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestScrapesAnsweredDuringFlood: while a client on 16 addresses keeps
// opening connections to the metrics port, each answered once (GET / is a
// 404) and then idle, scrapes on fresh connections are answered: none is
// closed or reset for the flood. Found by review of the first connection
// cap, which closed a scrape being gathered for the flood's connections
// (35 of 40 failed).
func TestScrapesAnsweredDuringFlood(t *testing.T) {
	m := newMetrics(func() liveStats { return liveStats{Sessions: 3} })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.serveOn(ln))
	addr := ln.Addr().String()
	stop := testsupport.Flood(addr, 31, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(300 * time.Millisecond)
	const scrapes = 40
	failed, timedOut, first := testsupport.GetEach("http://"+addr+"/metrics", scrapes)
	stop()
	t.Logf("scrapes failed: %d of %d (first: %v); not answered within 30 s: %d", failed, scrapes, first, timedOut)
	// A scrape closed or reset by the server is the bug; one a busy
	// machine is slow to answer is not, and is only reported.
	if failed > 0 {
		t.Errorf("%d of %d scrapes failed during the flood; the first: %v", failed, scrapes, first)
	}
	if timedOut == testsupport.MaxTimeouts {
		t.Errorf("%d scrapes went unanswered for 30 s each during the flood", timedOut)
	}
}

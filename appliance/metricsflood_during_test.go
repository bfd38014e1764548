package appliance

import (
	"net"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestScrapesAnsweredDuringFlood: while a client on 16 addresses keeps
// opening connections to the metrics port, each answered once (GET / is a
// 404) and then idle, scrapes on fresh connections are answered. Found by
// review of the first connection cap, which closed a scrape being
// gathered for the flood's connections (35 of 40 failed).
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
	failed, first := testsupport.GetEach("http://"+addr+"/metrics", scrapes)
	stop()
	if failed > 0 {
		t.Errorf("%d of %d scrapes failed during the flood; the first: %v", failed, scrapes, first)
	}
}

package appliance

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
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
	stopSrv := m.serveOn(ln)
	t.Cleanup(stopSrv)
	addr := ln.Addr().String()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.31.%d", w+1))}}
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					continue
				}
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err == nil {
					if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
				held = append(held, c)
				if len(held) > 4 {
					held[0].Close()
					held = held[1:]
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
	const scrapes = 40
	failed := 0
	var firstErr error
	for range scrapes {
		resp, err := client.Get("http://" + addr + "/metrics")
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if failed > 0 {
		t.Errorf("%d of %d scrapes failed during the flood; the first: %v", failed, scrapes, firstErr)
	}
}

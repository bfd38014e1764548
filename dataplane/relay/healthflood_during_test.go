package relay

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestHealthChecksAnsweredDuringFlood: while a client on 16 addresses
// keeps opening connections to the health port, either sending one GET
// /healthz on each and then idling, or sending nothing, the controller's
// checks (a fresh connection each, as agentClient makes them) are all
// answered. Found by review of the first connection cap, which closed
// the checks it was serving for the flood's connections: 16-19 of 60
// failed with the answered flood, 9 with the silent one, and two failed
// checks in a row take an agent down.
func TestHealthChecksAnsweredDuringFlood(t *testing.T) {
	for _, silent := range []bool{false, true} {
		name := "answered flood"
		if silent {
			name = "silent flood"
		}
		t.Run(name, func(t *testing.T) { healthChecksDuringFlood(t, silent) })
	}
}

func healthChecksDuringFlood(t *testing.T, silent bool) {
	a, err := New(Config{Name: "agent-a", PSK: testPSK,
		DataListen:   netip.MustParseAddrPort("127.0.0.1:0"),
		HealthListen: netip.MustParseAddrPort("127.0.0.1:0"),
	}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	}()
	health := a.Addrs().Health.String()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var floodOK atomic.Int64
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.30.%d", w+1))}}
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
				c, err := d.Dial("tcp", health)
				if err != nil {
					continue
				}
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				if silent {
					held = append(held, c)
					if len(held) > 4 {
						held[0].Close()
						held = held[1:]
					}
					continue
				}
				if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err == nil {
					if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						floodOK.Add(1)
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
	const checks = 60
	failed := 0
	var firstErr error
	for range checks {
		resp, err := client.Get("http://" + health + "/healthz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s", resp.Status)
			}
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
	t.Logf("flood requests answered: %d; controller-like checks failed: %d of %d (first: %v)", floodOK.Load(), failed, checks, firstErr)
	if failed > 0 {
		t.Errorf("%d of %d health checks failed during the flood; the first: %v", failed, checks, firstErr)
	}
}

package testsupport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// SilentFlood opens 1,200 connections to addr that send nothing: 600 from
// 127.0.0.1 and 2 each from 300 other loopback addresses (127.0.2.1 on;
// any of 127/8 is local on Linux). They are closed when the test ends.
func SilentFlood(t testing.TB, addr string) []net.Conn {
	t.Helper()
	var flood []net.Conn
	t.Cleanup(func() {
		for _, c := range flood {
			c.Close()
		}
	})
	dial := func(from string) {
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("flood connection %d from %s: %v", len(flood), from, err)
		}
		flood = append(flood, c)
	}
	for range 600 {
		dial("127.0.0.1")
	}
	for i := range 300 {
		from := fmt.Sprintf("127.0.%d.%d", 2+i/250, 1+i%250)
		dial(from)
		dial(from)
	}
	return flood
}

// Flood keeps opening connections to addr from 16 loopback addresses,
// 127.0.net.1 to 127.0.net.16, each keeping its newest 5 open. With a
// request, it sends it on each connection and reads the answer before
// going on (the connection then idles, answered); without, it sends
// nothing. stop ends it, closes its connections and returns how many
// answers it read.
func Flood(addr string, net8 int, request string) (stop func() int64) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var answered atomic.Int64
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.%d.%d", net8, w+1))}}
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			for {
				select {
				case <-done:
					return
				default:
				}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					continue
				}
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				if request != "" {
					if _, err := io.WriteString(c, request); err == nil {
						if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							answered.Add(1)
						}
					}
				}
				held = append(held, c)
				if len(held) > 5 {
					held[0].Close()
					held = held[1:]
				}
			}
		}()
	}
	return func() int64 {
		close(done)
		wg.Wait()
		return answered.Load()
	}
}

// MaxTimeouts is how many GETs GetEach lets go unanswered for 30 s
// before it gives up.
const MaxTimeouts = 3

// GetEach makes n GETs of url, each on a fresh connection, 20 ms apart.
// It returns how many failed (the connection closed or reset before the
// whole answer came, or an answer other than 200) and the first failure,
// and apart from those how many got no answer within 30 s: a machine
// too busy to answer in time is slow, not wrong, so callers report a
// timeout without failing on it. It stops after MaxTimeouts of them: a
// server that answers nothing would otherwise hold it n times 30 s.
func GetEach(url string, n int) (failed, timedOut int, first error) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	for range n {
		resp, err := client.Get(url)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s", resp.Status)
			}
		}
		var ne net.Error
		switch {
		case err == nil:
		case errors.As(err, &ne) && ne.Timeout():
			if timedOut++; timedOut == MaxTimeouts {
				return failed, timedOut, first
			}
		default:
			failed++
			if first == nil {
				first = err
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return failed, timedOut, first
}

package relay

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

// refuseFreshHellos has p's far agent, whose one session is taken, refuse
// n fresh hellos for stream 0 of new session ids (a key holder's, 8 at a
// time), each settling its id as refused.
func refuseFreshHellos(t *testing.T, p *pair, n int) {
	t.Helper()
	p.b.mu.Lock()
	before := len(p.b.settled.ids)
	p.b.mu.Unlock()
	// A key holder's fresh hellos for stream 0, each refused (the far
	// agent's one place is taken), each settling a new id.
	hellos := make([][stripe.HelloSize]byte, n)
	for i := range hellos {
		_, _, hellos[i] = helloFrom(t, p, nil)
	}
	start := time.Now()
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(hellos)) {
					return
				}
				fc, err := net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(p.b.Addrs().Data))
				if err != nil {
					failed.Add(1)
					continue
				}
				_ = fc.SetDeadline(time.Now().Add(10 * time.Second))
				var rb [stripe.ReplySize]byte
				if _, err := fc.Write(hellos[i][:]); err == nil {
					_, err = io.ReadFull(fc, rb[:])
					if err != nil {
						failed.Add(1)
					}
				}
				_ = fc.Close()
			}
		}()
	}
	wg.Wait()
	p.b.mu.Lock()
	after := len(p.b.settled.ids)
	p.b.mu.Unlock()
	t.Logf("%d refused hellos in %v (%d failed); settled ids %d -> %d", len(hellos), time.Since(start), failed.Load(), before, after)
}

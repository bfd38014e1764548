package sdn_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// latentConn delivers what it reads delay after it arrived: the round
// trip of a long link, all of it on the way back.
type latentConn struct {
	net.Conn
	delay time.Duration
	mu    sync.Mutex
	cond  *sync.Cond
	q     []latentChunk
	err   error
}

type latentChunk struct {
	at time.Time
	b  []byte
}

func newLatentConn(c net.Conn, delay time.Duration) *latentConn {
	l := &latentConn{Conn: c, delay: delay}
	l.cond = sync.NewCond(&l.mu)
	go func() {
		for {
			b := make([]byte, 64<<10)
			n, err := c.Read(b)
			l.mu.Lock()
			if n > 0 {
				l.q = append(l.q, latentChunk{time.Now().Add(delay), b[:n]})
			}
			if err != nil {
				l.err = err
			}
			l.cond.Broadcast()
			l.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return l
}

func (l *latentConn) Read(b []byte) (int, error) {
	l.mu.Lock()
	for len(l.q) == 0 && l.err == nil {
		l.cond.Wait()
	}
	if len(l.q) == 0 {
		err := l.err
		l.mu.Unlock()
		return 0, err
	}
	at := l.q[0].at
	l.mu.Unlock()
	time.Sleep(time.Until(at))
	l.mu.Lock()
	defer l.mu.Unlock()
	n := copy(b, l.q[0].b)
	l.q[0].b = l.q[0].b[n:]
	if len(l.q[0].b) == 0 {
		l.q = l.q[1:]
	}
	return n, nil
}

// TestOVSOverALatentLink is TestConvergenceOverALatentLink with real Open
// vSwitch: the controller dials a bridge across a link with a 300 ms round
// trip (1 s keepalive) and deletes 5,000 stale owned flows. Open vSwitch
// works through them in well under a second; the first batch sizing took
// the round trip for its work and had not finished in 30 s (1.5 s before
// it). Found by review (helper-54).
func TestOVSOverALatentLink(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	inst := ovstest.Start(t)
	port := inst.FreePort(t)
	sw := flows.Switch{Name: "sw-lat", DatapathID: 0x5e54, Forwarding: "normal", Connect: fmt.Sprintf("tcp:127.0.0.1:%d", port)}
	br := inst.AddBridge(t, "brlat", sw.DatapathID, fmt.Sprintf("ptcp:%d:127.0.0.1", port))
	var spec strings.Builder
	const stale = 5000
	for i := range stale {
		fmt.Fprintf(&spec, "table=0,priority=%d,cookie=%#x,actions=drop\n", i+1, flows.CookiePrefix|0x7777)
	}
	file := filepath.Join(t.TempDir(), "stale.flows")
	if err := os.WriteFile(file, []byte(spec.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := br.Ofctl("add-flows", file); err != nil {
		t.Fatalf("add-flows: %v %s", err, out)
	}
	const rtt = 300 * time.Millisecond
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := inst.DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return newLatentConn(c, rtt), nil
	}
	start := time.Now()
	ctl := startController(t, sdn.Config{Keepalive: time.Second, ResyncInterval: -1, Dial: dial, Switches: []flows.Switch{sw}})
	ok := testsupport.Poll(30*time.Second, func() bool {
		st := switchStatus(ctl.Controller, sw.Name)
		return st.Converges > 0 && st.LastError == ""
	})
	st := switchStatus(ctl.Controller, sw.Name)
	t.Logf("after %v: connected %v, %d convergences, last changes %d, last error %q; flow mods sent %d, owned flows left on the bridge %d",
		time.Since(start).Round(time.Millisecond), st.Connected, st.Converges, st.LastChanges, st.LastError,
		ctl.Status().Counters.FlowModsSent, ownedFlowCount(t, br))
	if !ok {
		t.Errorf("deleting %d stale flows from Open vSwitch across a %v round trip did not finish within 30 s", stale, rtt)
	}
}

func ownedFlowCount(t *testing.T, br *ovstest.Bridge) int {
	fs, err := br.DumpFlows()
	if err != nil {
		t.Log(err)
		return -1
	}
	n := 0
	for _, f := range fs {
		if f.Cookie&flows.CookieMask == flows.CookiePrefix {
			n++
		}
	}
	return n
}

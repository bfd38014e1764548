package sdn_test

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// TestHandshakeFloodFromManySourcesLetsSwitchIn mounts a slowloris from
// 8 addresses, each below its own cap (8 of them hold all 64 places of
// MaxHandshakes), with a handshake timeout of a minute, and opening a
// new connection as soon as one of theirs is closed. A real switch
// connects meanwhile: it takes the place of the oldest handshake of a
// source holding the most, and converges. (Before, a connection that
// found every place taken was closed on accept, and the switch waited
// for the flood's handshakes to time out.)
func TestHandshakeFloodFromManySourcesLetsSwitchIn(t *testing.T) {
	inst := ovstest.Start(t)
	ln, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	sw := siteSwitch(0xca)
	ctl := startController(t, sdn.Config{Listener: ln, Keepalive: time.Second, HealthInterval: time.Second,
		HandshakeTimeout: time.Minute, MaxHandshakes: 64, MaxHandshakesPerSource: 8, Switches: []flows.Switch{sw}})

	const sources, perSource, redials = 8, 8, 20
	var (
		mu      sync.Mutex
		open    = map[net.Conn]bool{}
		stopped bool
		held    atomic.Int64 // connections the controller greeted
		dials   atomic.Int64
		wg      sync.WaitGroup
	)
	stop := func() {
		mu.Lock()
		stopped = true
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
	t.Cleanup(stop)
	// hold keeps one place: dial, send half a hello, read the
	// controller's hello, wait to be closed; again, at most redials times.
	hold := func(local string) {
		defer wg.Done()
		for range redials {
			var c net.Conn
			if err := inst.InNamespace(func() error {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 10 * time.Second}
				var err error
				c, err = d.Dial("tcp", addr)
				return err
			}); err != nil {
				return
			}
			dials.Add(1)
			mu.Lock()
			if stopped {
				mu.Unlock()
				c.Close()
				return
			}
			open[c] = true
			mu.Unlock()
			_ = c.SetDeadline(time.Now().Add(90 * time.Second))
			greeted := false
			if _, err := c.Write([]byte{ofp13.Version, byte(ofp13.TypeHello), 0, 8}); err == nil {
				var hello [ofp13.HeaderLen]byte
				if _, err := io.ReadFull(c, hello[:]); err == nil {
					greeted = true
					held.Add(1)
					_, _ = io.Copy(io.Discard, c) // until the controller closes it
					held.Add(-1)
				}
			}
			mu.Lock()
			delete(open, c)
			done := stopped
			mu.Unlock()
			c.Close()
			if done {
				return
			}
			if !greeted {
				time.Sleep(10 * time.Millisecond) // closed on accept
			}
		}
	}
	for s := range sources {
		for range perSource {
			wg.Add(1)
			go hold(fmt.Sprintf("127.0.0.%d", 10+s))
		}
	}
	testsupport.Eventually(t, 30*time.Second, "the flood to hold every handshake place", func() bool {
		return held.Load() == sources*perSource
	})
	if n := ctl.Status().Counters.HandshakeEvictions; n != 0 {
		t.Fatalf("%d evictions before the places were all taken", n)
	}
	start := time.Now()
	br := inst.AddBridge(t, "brv", sw.DatapathID, "tcp:"+addr)
	waitConverged(t, ctl.Controller, "sw-a", 0)
	requireSameFlows(t, br, compile(t, sw))
	t.Logf("the switch converged %s after connecting into a full flood", time.Since(start).Round(time.Millisecond))
	st := ctl.Status().Counters
	if st.HandshakeEvictions == 0 {
		t.Errorf("the switch got in with no eviction: %+v", st)
	}
	// The holder evicted for the switch dials again and the flood holds
	// every place again, evicting holders of its own now (the switch's
	// session, past its handshake, holds no place); a ninth address
	// joins in. The switch's session stays up throughout.
	before := switchStatus(ctl.Controller, "sw-a")
	testsupport.Eventually(t, 30*time.Second, "the flood to hold every place again", func() bool {
		return held.Load() == sources*perSource
	})
	for range perSource {
		wg.Add(1)
		go hold("127.0.0.30")
	}
	testsupport.Eventually(t, 30*time.Second, "the ninth address's connections to evict holders", func() bool {
		return ctl.Status().Counters.HandshakeEvictions >= st.HandshakeEvictions+perSource
	})
	if after := switchStatus(ctl.Controller, "sw-a"); !after.Connected || !after.ConnectedSince.Equal(before.ConnectedSince) {
		t.Errorf("the switch's session after the flood went on: %+v (before %+v)", after, before)
	}
	stop()
	t.Logf("%d dials by the flood, %d evictions, %d closed on accept", dials.Load(),
		ctl.Status().Counters.HandshakeEvictions, ctl.Status().Counters.HandshakeOverflows)
}

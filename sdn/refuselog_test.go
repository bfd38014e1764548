package sdn_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// TestRefusalsInHandshakeLogBounded: refusals at accept are logged at
// most once a second (refuseFlood) because anyone can cause any number of
// them; before, a connection refused a moment later, in its handshake,
// was logged at Warn every time. Anyone who reaches the listener opens
// 2,000 connections, one after another, and closes each without sending
// a byte: each cost the controller's log a line of about 150 bytes. Now
// refusals before a datapath id was named are logged at most once a
// second too (refuseAnonymous), with a count of those left out; every one
// is still counted and listed in the status. The bound is refuseFlood's:
// a line a second, with room for slow machines. Found by review
// (helper-53).
func TestRefusalsInHandshakeLogBounded(t *testing.T) {
	ctl, ln, before := refusingController(t)
	start := time.Now()
	const n = 2000
	for range n {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	testsupport.Poll(10*time.Second, func() bool { return ctl.Status().Counters.Refused >= n })
	elapsed := time.Since(start)
	lines := strings.Count(ctl.logs.String(), `msg="refusing switch" `) - before
	t.Logf("%d empty connections in %v: %d refusals counted, %d \"refusing switch\" lines logged (%d bytes of log in all)",
		n, elapsed.Round(time.Millisecond), ctl.Status().Counters.Refused, lines, len(ctl.logs.String()))
	if bound := int(elapsed/time.Second) + 10; lines > bound {
		t.Errorf("%d refusal lines for %d connections that sent nothing, over %v (a line a second would be %d)",
			lines, n, elapsed.Round(time.Millisecond), bound)
	}
}

// TestFlowModRefusalsLogBounded: the errors a switch sends for no
// request, malformed messages and role changes are logged at most once a
// second per connection. Before, converge logged one Warn line per
// refused change: a declared switch that lists 4,000 stale owned flows in
// its dump (56 bytes each) and refuses each delete with a 12-byte ERROR
// got a line each, every convergence. Now a convergence logs and lists
// the first 20 and a count of the rest. The bar is
// TestSwitchMessageStormLogsBounded's: no more log than the switch sent.
// Found by review (helper-53).
func TestFlowModRefusalsLogBounded(t *testing.T) {
	ctl, conn, dump := dumpingSession(t, sdn.Config{Keepalive: 2 * time.Second, ResyncInterval: -1, RetryInterval: time.Hour}, hostileSwitch)
	sent := 0
	const stale = 4000
	for _, part := range staleDump(dump.TransactionID(), stale) {
		b, err := part.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
		sent += len(b)
	}
	before := len(ctl.logs.String())
	// Every delete refused, every barrier answered, until all were.
	if err := conn.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	sent += refuseFlowMods(t, conn, stale, nil)
	mods := stale
	// The last barrier.
	barrier := readUntil(t, conn, func(m ofp13.Message) bool { return m.MessageType() == ofp13.TypeBarrierRequest })
	if err := writeOF(conn, &ofp13.BarrierReply{XID: barrier.TransactionID()}); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 20*time.Second, "the convergence to end", func() bool {
		return switchStatus(ctl.Controller, hostileSwitch.Name).Converges > 0
	})
	logged := len(ctl.logs.String()) - before
	t.Logf("switch sent %d bytes (dump of %d stale flows, %d errors); the controller logged %d bytes, %d lines of refused changes",
		sent, stale, mods, logged, strings.Count(ctl.logs.String(), "switch refused a flow change"))
	if logged > sent {
		t.Errorf("the controller's log grew by %d bytes for %d bytes from one switch: one Warn line per refused flow mod", logged, sent)
	}
}

// refusingController starts a controller on a listener of its own that
// declares one switch, for tests that connect and get refused; it returns
// them and how many "refusing switch" lines the log held at the start.
func refusingController(t *testing.T) (*running, net.Listener, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctl := startController(t, sdn.Config{Listener: ln, Keepalive: time.Second, ResyncInterval: -1,
		Switches: []flows.Switch{siteSwitch(0x5e60)}})
	return ctl, ln, strings.Count(ctl.logs.String(), `msg="refusing switch" `)
}

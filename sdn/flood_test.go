package sdn_test

import (
	"errors"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/ofp13"
	"github.com/sosappliance/sosappliance/sdn/ovstest"
)

// hostileSwitch is declared in the configuration, so it passes every
// check at the door; then it misbehaves.
var hostileSwitch = flows.Switch{Name: "sw-h", DatapathID: 0xd1, Forwarding: "normal"}

// connectHostile opens the hostile switch's session beside the real one.
func connectHostile(t *testing.T, g *guarded) net.Conn {
	t.Helper()
	conn := dialIn(t, g.inst, "127.0.0.1", g.addr)
	if _, err := claimDatapath(conn, hostileSwitch.DatapathID); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, "the hostile switch's session", func() bool {
		return switchStatus(g.ctl.Controller, hostileSwitch.Name).Connected
	})
	g.conns = g.ctl.Status().Counters.Connections
	return conn
}

// TestEchoFloodFromSwitchThatNeverReads: a connected switch sends 20,000
// echo requests of 8 KiB and never reads a reply. The controller answers
// from a bounded queue and leaves the excess unanswered: its goroutines
// and heap stay flat, and the real switch beside it keeps its session.
func TestEchoFloodFromSwitchThatNeverReads(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	g := startGuarded(t, sdn.Config{}, siteSwitch(0xc5), func(addr string) string { return "tcp:" + addr }, nil, hostileSwitch)
	conn := connectHostile(t, g)

	const echoes, batch = 20000, 100
	var buf []byte
	for i := range batch {
		var err error
		buf, err = (&ofp13.EchoRequest{XID: uint32(1000 + i), Data: make([]byte, 8<<10)}).AppendBinary(buf)
		if err != nil {
			t.Fatal(err)
		}
	}
	p := newPeak()
	sent := 0
	if err := conn.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for sent < echoes {
		if _, err := conn.Write(buf); err != nil {
			t.Logf("the controller hung up after %d echoes: %v", sent, err)
			break
		}
		sent += batch
		if sent%1000 == 0 {
			p.sample()
		}
	}
	p.sample()
	t.Logf("sent %d echo requests of 8 KiB, read no reply", sent)
	p.requireBelow(t, 100, 96<<20)
	g.requireUntouched(t, "sw-a")
}

// TestEndlessMultipartMore: a connected switch answers the controller's
// flow dump with parts that all say MORE. The controller cuts it off once
// the reply exceeds the limit sized from the expected flow count; heap
// stays bounded and the real switch beside it keeps its session.
func TestEndlessMultipartMore(t *testing.T) {
	ovstest.Require(t, ovstest.Binaries...)
	g := startGuarded(t, sdn.Config{}, siteSwitch(0xc6), func(addr string) string { return "tcp:" + addr }, nil, hostileSwitch)
	conn := connectHostile(t, g)
	if err := conn.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	var dump ofp13.Message
	for dump == nil {
		m, err := readOF(conn)
		if err != nil {
			t.Fatalf("waiting for the flow dump: %v", err)
		}
		if m.MessageType() == ofp13.TypeMultipartRequest {
			dump = m
		}
	}
	// Parts of about 56 KB: a thousand owned flow entries each.
	part := &ofp13.FlowStatsReply{XID: dump.TransactionID(), Flags: ofp13.MultipartMore}
	for i := range 1000 {
		part.Stats = append(part.Stats, ofp13.FlowStats{Cookie: flows.CookiePrefix | uint64(i), Priority: 1})
	}
	buf, err := part.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	p := newPeak()
	parts := 0
	for ; parts < 100000; parts++ {
		if _, err := conn.Write(buf); err != nil {
			t.Logf("the controller hung up after %d parts (%.1f MiB): %v", parts, float64(parts*len(buf))/(1<<20), err)
			break
		}
		if parts%20 == 0 {
			p.sample()
		}
	}
	p.sample()
	if parts == 100000 {
		t.Fatalf("the controller took %d parts of %d bytes without hanging up", parts, len(buf))
	}
	p.requireBelow(t, 100, 96<<20)
	testsupport.Eventually(t, 30*time.Second, "the hostile switch to be cut off", func() bool {
		st := switchStatus(g.ctl.Controller, hostileSwitch.Name)
		return !st.Connected && strings.Contains(st.LastError, "exceeds its limit")
	})
	t.Logf("hostile switch: %s", switchStatus(g.ctl.Controller, hostileSwitch.Name).LastError)
	g.requireUntouched(t, "sw-a")
}

// TestHalfOpenHandshakesCapped mounts a slowloris from one address: 2,000
// connections that send half a header and wait. The controller keeps at
// most MaxHandshakesPerSource of them, closes the rest on accept, times
// the kept ones out, and a real switch connects meanwhile.
func TestHalfOpenHandshakesCapped(t *testing.T) {
	inst := ovstest.Start(t)
	ln, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	sw := siteSwitch(0xc7)
	ctl := startController(t, sdn.Config{Listener: ln, Keepalive: time.Second, HealthInterval: time.Second,
		HandshakeTimeout: 3 * time.Second, Switches: []flows.Switch{sw}})
	p := newPeak()
	conns := openHalfHandshakes(t, inst, "127.0.0.2", addr, 2000, p)
	br := inst.AddBridge(t, "brs", sw.DatapathID, "tcp:"+addr)
	waitConverged(t, ctl.Controller, "sw-a", 0)
	requireSameFlows(t, br, compile(t, sw))
	p.sample()
	p.requireBelow(t, 100, 32<<20)
	requireAllClosed(t, conns)
	if n := ctl.Status().Counters.HandshakeOverflows; n == 0 {
		t.Fatal("no connection was refused for the handshake cap")
	} else {
		t.Logf("%d connections closed on accept", n)
	}
}

// TestHandshakeBuffers holds 1,000 handshakes open after half a header,
// with the caps raised to let them all in: each costs no read buffer until
// a whole header says how much to read.
func TestHandshakeBuffers(t *testing.T) {
	inst := ovstest.Start(t)
	ln, err := inst.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctl := startController(t, sdn.Config{Listener: ln, HandshakeTimeout: 5 * time.Second,
		MaxHandshakes: 2000, MaxHandshakesPerSource: 2000, Switches: []flows.Switch{siteSwitch(0xc8)}})
	p := newPeak()
	conns := openHalfHandshakes(t, inst, "127.0.0.1", ln.Addr().String(), 1000, p)
	testsupport.Eventually(t, 30*time.Second, "the controller to hold every handshake", func() bool {
		p.sample()
		return runtime.NumGoroutine() >= p.baseGoroutines+1000
	})
	if n := ctl.Status().Counters.HandshakeOverflows; n != 0 {
		t.Fatalf("%d connections over the raised caps", n)
	}
	// A 64 KiB buffer per connection would be 62.5 MiB.
	p.requireBelow(t, 1000+100, 16<<20)
	requireAllClosed(t, conns)
}

// openHalfHandshakes opens n connections from local that send the first
// half of an OpenFlow header and then nothing.
func openHalfHandshakes(t *testing.T, inst *ovstest.Instance, local, addr string, n int, p *peak) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = dialIn(t, inst, local, addr)
		if _, err := conns[i].Write([]byte{ofp13.Version, byte(ofp13.TypeHello), 0, 8}); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			p.sample()
		}
	}
	return conns
}

// requireAllClosed reads every connection to its end: the controller must
// have closed each, at accept or when its handshake timed out.
func requireAllClosed(t *testing.T, conns []net.Conn) {
	t.Helper()
	buf := make([]byte, 64)
	for i, c := range conns {
		if err := c.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		for {
			_, err := c.Read(buf)
			if err == nil {
				continue // the hello of a handshake that was let in
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection %d still open after a minute", i)
			}
			break
		}
	}
}

package sdn_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/connlimit"
	"github.com/sosappliance/sosappliance/internal/netnstest"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/tuning"
)

// TestHandshakeCapPerIPv6Prefix: one host holding an IPv6 /64 opens
// each connection to the controller from another of its addresses and
// never finishes a handshake. A /64 holds at most half of the
// controller-wide handshake cap (connlimit.PerNetwork), so a switch from
// elsewhere still gets a handshake (the controller's HELLO); counted per
// address only, the flood would take every place and each of its
// connections would evict another handshake (the oldest of the source
// holding the most).
func TestHandshakeCapPerIPv6Prefix(t *testing.T) {
	ns := netnstest.AnyIPv6(t, "sossdn6f")
	var ln net.Listener
	if err := tuning.RunInNamedNetns(ns, func() error {
		var err error
		ln, err = net.Listen("tcp6", "[2001:db8:ff::1]:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	const total, perSource = 16, 4
	ctl := startController(t, sdn.Config{Listener: ln, HandshakeTimeout: time.Minute,
		MaxHandshakes: total, MaxHandshakesPerSource: perSource, Switches: []flows.Switch{siteSwitch(0xc9)}})
	addr := ln.Addr().String()
	dial := func(src netip.Addr) net.Conn {
		t.Helper()
		return netnstest.Dial(t, ns, addr, src)[0]
	}
	const flood = 100
	for i := range flood {
		dial(netip.MustParseAddr(fmt.Sprintf("2001:db8:66::%x", 0x100+i)))
	}
	perNet := connlimit.PerNetwork(perSource, total)
	testsupport.Eventually(t, 20*time.Second, "the flood's excess closed on accept", func() bool {
		return ctl.Status().Counters.HandshakeOverflows >= uint64(flood-perNet)
	})
	if n := ctl.Status().Counters.HandshakeOverflows; n != uint64(flood-perNet) {
		t.Errorf("%d of %d connections from one /64 closed on accept, want %d", n, flood, flood-perNet)
	}
	// A switch from another /64 still gets its handshake: the
	// controller answers its HELLO with its own, rather than close.
	sw := dial(netip.MustParseAddr("2001:db8:10::1"))
	_ = sw.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := sw.Write([]byte{0x04, 0, 0, 8, 0, 0, 0, 1}); err != nil { // HELLO, xid 1
		t.Fatal(err)
	}
	var hdr [8]byte
	if _, err := io.ReadFull(sw, hdr[:]); err != nil {
		t.Fatalf("a connection from another source got no HELLO: %v", err)
	}
	if hdr[0] != 0x04 || hdr[1] != 0 {
		t.Errorf("a connection from another source read %x, want an OpenFlow 1.3 HELLO", hdr)
	}
}

package sdn_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/netnstest"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/tuning"
)

// ipv6Controller starts a controller listening in a namespace of its
// own where any address of 2001:db8::/32 may be dialed from, with the
// handshake caps given and a handshake timeout of a minute; it returns
// the controller, the namespace and the listening address.
func ipv6Controller(t *testing.T, prefix string, total, perSource int) (*running, string, string) {
	t.Helper()
	ns := netnstest.AnyIPv6(t, prefix)
	var ln net.Listener
	if err := tuning.RunInNamedNetns(ns, func() error {
		var err error
		ln, err = net.Listen("tcp6", "[2001:db8:ff::1]:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ctl := startController(t, sdn.Config{Listener: ln, HandshakeTimeout: time.Minute,
		MaxHandshakes: total, MaxHandshakesPerSource: perSource, Switches: []flows.Switch{siteSwitch(0xc9)}})
	return ctl, ns, ln.Addr().String()
}

// TestSwitchOfAFullIPv6LANGetsItsHandshake: hosts of a switch's IPv6 /64
// hold the /64's handshake places (half of MaxHandshakes) from 4
// addresses, each below its own cap, and never finish. A switch of that
// /64, from its own address, still gets its handshake (the controller's
// HELLO): at the /64's cap the oldest handshake of the /64's busiest
// address makes room. (Found by review: it was closed on accept, for as
// long as the flood held the places.)
func TestSwitchOfAFullIPv6LANGetsItsHandshake(t *testing.T) {
	const total, perSource = 16, 2 // the /64 holds at most 8
	ctl, ns, addr := ipv6Controller(t, "sossdn6r", total, perSource)
	// Each of the flood's connections sends half a HELLO and reads the
	// controller's: it is in handshake, holding its place.
	for a := range 4 {
		for range perSource {
			c := netnstest.Dial(t, ns, addr, netip.MustParseAddr(fmt.Sprintf("2001:db8:66::bad:%x", a+1)))[0]
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			var hello [8]byte
			if _, err := c.Write([]byte{0x04, 0, 0, 8}); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, hello[:]); err != nil {
				t.Fatalf("the flood's connection from address %d got no HELLO: %v", a+1, err)
			}
		}
	}
	sw := netnstest.Dial(t, ns, addr, netip.MustParseAddr("2001:db8:66::1"))[0]
	_ = sw.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := sw.Write([]byte{0x04, 0, 0, 8, 0, 0, 0, 1}); err != nil { // HELLO, xid 1
		t.Fatal(err)
	}
	var hdr [8]byte
	if _, err := io.ReadFull(sw, hdr[:]); err != nil {
		st := ctl.Status().Counters
		t.Errorf("a switch of the flood's /64, from an address of its own, got no HELLO (%v) while %d of %d places are free: "+
			"%d closed on accept, %d evictions", err, total-total/2, total, st.HandshakeOverflows, st.HandshakeEvictions)
	}
}

// TestFloodSparesSwitchesOfOneIPv6LAN: 6 switches of one IPv6 /64 are
// in handshake at once (a fail-over: each from its own address, one
// handshake each); a flood from 5 other /64s holds the other 10 of 16
// places, 2 each (each below its cap). The flood's next connection, from
// a sixth /64, takes the place of one of the flood's handshakes: the
// address holding the most goes first, not the /64 holding the most.
// (Found by review: counted by /64, the switches' LAN was the busiest
// source and lost its oldest switch's handshake.)
func TestFloodSparesSwitchesOfOneIPv6LAN(t *testing.T) {
	const total, perSource = 16, 2
	ctl, ns, addr := ipv6Controller(t, "sossdn6e", total, perSource)
	// inHandshake dials from src, sends half a HELLO and reads the
	// controller's: the connection holds a place.
	inHandshake := func(src string) net.Conn {
		t.Helper()
		c := netnstest.Dial(t, ns, addr, netip.MustParseAddr(src))[0]
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		var hello [8]byte
		if _, err := c.Write([]byte{0x04, 0, 0, 8}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, hello[:]); err != nil {
			t.Fatalf("%s got no HELLO: %v", src, err)
		}
		return c
	}
	switches := map[string]bool{}
	for i := range 6 {
		c := inHandshake(fmt.Sprintf("2001:db8:1::%x", i+1))
		switches[c.LocalAddr().String()] = true
	}
	for n := range 5 {
		for range perSource {
			inHandshake(fmt.Sprintf("2001:db8:%x::bad", 0xa0+n))
		}
	}
	if st := ctl.Status().Counters; st.HandshakeEvictions != 0 || st.HandshakeOverflows != 0 {
		t.Fatalf("before the cap: %+v", st)
	}
	inHandshake("2001:db8:af::bad") // the flood's next
	st := ctl.Status()
	if st.Counters.HandshakeEvictions != 1 {
		t.Fatalf("%d evictions, want 1", st.Counters.HandshakeEvictions)
	}
	for _, r := range st.Refused {
		if switches[r.Remote] {
			t.Errorf("the flood's connection evicted switch %s's handshake (%s), though every flood address holds more than any switch's",
				r.Remote, r.Reason)
		}
	}
}

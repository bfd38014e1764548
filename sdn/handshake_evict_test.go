package sdn

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/sosappliance/sosappliance/internal/connlimit"
)

// newHandshakeController is a controller whose handshake places alone
// are used: total in all, perSource per address.
func newHandshakeController(total, perSource int) *Controller {
	return &Controller{cfg: Config{MaxHandshakes: total, MaxHandshakesPerSource: perSource},
		handshaking: map[netip.Prefix]int{}, handshakingNet: map[netip.Prefix]int{}}
}

// TestEvictionSparesSwitchesOfOneIPv6LAN: 20 switches of one IPv6
// management /64 reconnect at once (a controller fail-over), each from
// its own address, and are all admitted. A flood from 6 IPv4 addresses
// of the allowed ranges holds the other 44 places, each address below its
// own cap of 8. The flood's next connections take the places of its own
// handshakes, those of the addresses holding the most, though the
// switches are older. (Found by review: counted by /64, the LAN was the
// source holding the most, 20, and lost a switch to each connection.)
func TestEvictionSparesSwitchesOfOneIPv6LAN(t *testing.T) {
	c := newHandshakeController(64, 8)
	switches := map[*handshakeSlot]bool{}
	for i := 1; i <= 20; i++ {
		s, v := c.admitHandshake(netip.MustParseAddr(fmt.Sprintf("2001:db8:1::%x", i)), nil)
		if s == nil || v != nil {
			t.Fatalf("switch %d: slot %v, victim %v", i, s, v)
		}
		switches[s] = true
	}
	flood := 0
	for a := 1; flood < 44; a++ {
		for n := 0; n < 8 && flood < 44; n++ {
			if s, v := c.admitHandshake(netip.MustParseAddr(fmt.Sprintf("192.0.2.%d", a)), nil); s == nil || v != nil {
				t.Fatalf("flood %d: slot %v, victim %v", flood, s, v)
			}
			flood++
		}
	}
	if c.handshakes != 64 {
		t.Fatalf("%d in handshake, want 64", c.handshakes)
	}
	evicted := 0
	for i := range 8 {
		// 192.0.2.6 holds 4 of its 8; 192.0.2.7 none.
		addr := "192.0.2.6"
		if i >= 4 {
			addr = "192.0.2.7"
		}
		s, v := c.admitHandshake(netip.MustParseAddr(addr), nil)
		if s == nil {
			t.Fatalf("flood connection %d refused", i)
		}
		if switches[v] {
			evicted++
		}
	}
	if evicted > 0 {
		t.Errorf("8 more connections of a flood from 7 IPv4 addresses (at most 8 each) evicted %d handshakes of switches "+
			"of one IPv6 /64 that hold one each: the /64 (%d) counts as the busiest source", evicted,
			c.handshakingNet[connlimit.SourceOf(netip.MustParseAddr("2001:db8:1::1"))])
	}
}

// TestSwitchOfAFullIPv6LANNotShutOut: other hosts of a switch's IPv6 /64
// (a management LAN shared with servers, or one host using addresses of
// the /64 as SLAAC lets it) hold the /64's 32 handshake places from 4
// addresses at 8 each. A switch of that /64, from its own address that
// holds none, takes the place of the oldest handshake of the busiest
// address of the /64. (Found by review: at the /64's cap it was closed
// on accept, for as long as the flood went on, with 32 of the 64 places
// free.)
func TestSwitchOfAFullIPv6LANNotShutOut(t *testing.T) {
	c := newHandshakeController(64, 8)
	for a := 1; a <= 4; a++ {
		for range 8 {
			if s, _ := c.admitHandshake(netip.MustParseAddr(fmt.Sprintf("2001:db8:1::bad:%x", a)), nil); s == nil {
				t.Fatalf("flood from address %d refused below the caps", a)
			}
		}
	}
	s, v := c.admitHandshake(netip.MustParseAddr("2001:db8:1::5"), nil)
	if s == nil {
		t.Errorf("a switch of the /64 from its own address (none in handshake) closed on accept while %d of %d places are free: "+
			"the /64's %d places are the flood's, and none is evicted", 64-c.handshakes, 64, c.handshakingNet[connlimit.SourceOf(netip.MustParseAddr("2001:db8:1::5"))])
	} else if v == nil || v.src != connlimit.AddressOf(netip.MustParseAddr("2001:db8:1::bad:1")) {
		t.Errorf("the switch admitted with victim %+v, want the oldest handshake of the flood's first address", v)
	}
}

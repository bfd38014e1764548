package sdn

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/sosappliance/sosappliance/internal/connlimit"
)

// TestHandshakeCapPerAddressOnOneSubnet: switches of one management
// subnet reconnecting at once (a controller restart or fail-over), each
// from its own address, are all admitted to their handshake on IPv4 and
// on an IPv6 /64 alike; one address still gets MaxHandshakesPerSource,
// and one /64 at most half of MaxHandshakes, however many addresses it
// uses. (Found by review: with the /64 as the only source, 8 of 20
// switches of an IPv6 LAN were admitted.)
func TestHandshakeCapPerAddressOnOneSubnet(t *testing.T) {
	newController := func() *Controller {
		return &Controller{cfg: Config{MaxHandshakes: 64, MaxHandshakesPerSource: 8},
			handshaking: map[netip.Prefix]int{}, handshakingNet: map[netip.Prefix]int{}}
	}
	for _, subnet := range []string{"10.0.0.%d", "2001:db8:1::%x"} {
		c := newController()
		admitted := 0
		for i := 1; i <= 20; i++ {
			if c.admitHandshake(netip.MustParseAddr(fmt.Sprintf(subnet, i))) {
				admitted++
			}
		}
		if admitted != 20 {
			t.Errorf("%s: %d of 20 switches admitted, want all", subnet, admitted)
		}
	}
	c := newController()
	one := netip.MustParseAddr("2001:db8:1::1")
	admitted := 0
	for range 20 {
		if c.admitHandshake(one) {
			admitted++
		}
	}
	if admitted != 8 {
		t.Errorf("one address: %d handshakes admitted, want 8", admitted)
	}
	c = newController()
	admitted = 0
	for i := 1; i <= 100; i++ {
		if c.admitHandshake(netip.MustParseAddr(fmt.Sprintf("2001:db8:66::%x", i))) {
			admitted++
		}
	}
	if want := connlimit.PerNetwork(8, 64); admitted != want {
		t.Errorf("one /64 from 100 addresses: %d admitted, want %d", admitted, want)
	}
	// Released handshakes give their places back.
	for i := 1; i <= 100; i++ {
		if i <= admitted {
			c.releaseHandshake(netip.MustParseAddr(fmt.Sprintf("2001:db8:66::%x", i)))
		}
	}
	if c.handshakes != 0 || len(c.handshaking) != 0 || len(c.handshakingNet) != 0 {
		t.Errorf("after every release: %d in handshake, %v, %v", c.handshakes, c.handshaking, c.handshakingNet)
	}
}

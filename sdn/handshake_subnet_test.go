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
// and one /64 holds at most half of MaxHandshakes, however many addresses
// it uses: beyond that its oldest handshakes make room for its newest.
// (Found by review: with the /64 as the only source, 8 of 20 switches of
// an IPv6 LAN were admitted.)
func TestHandshakeCapPerAddressOnOneSubnet(t *testing.T) {
	newController := func() *Controller { return newHandshakeController(64, 8) }
	for _, subnet := range []string{"10.0.0.%d", "2001:db8:1::%x"} {
		c := newController()
		admitted := 0
		for i := 1; i <= 20; i++ {
			if slot, _ := c.admitHandshake(netip.MustParseAddr(fmt.Sprintf(subnet, i)), nil); slot != nil {
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
		if slot, _ := c.admitHandshake(one, nil); slot != nil {
			admitted++
		}
	}
	if admitted != 8 {
		t.Errorf("one address: %d handshakes admitted, want 8", admitted)
	}
	c = newController()
	perNet := connlimit.PerNetwork(8, 64)
	var slots []*handshakeSlot
	evicted := map[*handshakeSlot]bool{}
	for i := 1; i <= 100; i++ {
		slot, victim := c.admitHandshake(netip.MustParseAddr(fmt.Sprintf("2001:db8:66::%x", i)), nil)
		if slot == nil {
			t.Fatalf("connection %d of the /64 closed on accept; want it to take the place of the /64's oldest", i)
		}
		slots = append(slots, slot)
		if victim != nil {
			evicted[victim] = true
			if victim != slots[len(evicted)-1] {
				t.Fatalf("connection %d evicted %+v, want the /64's oldest", i, victim)
			}
		}
	}
	if live := c.handshakingNet[connlimit.SourceOf(netip.MustParseAddr("2001:db8:66::1"))]; live != perNet || len(evicted) != 100-perNet {
		t.Errorf("one /64 from 100 addresses: %d in handshake, %d evicted; want %d and %d", live, len(evicted), perNet, 100-perNet)
	}
	// Released handshakes give their places back; an evicted one says
	// so and gives back nothing.
	for _, slot := range slots {
		if c.releaseHandshake(slot) == evicted[slot] {
			t.Errorf("a slot released: evicted %v, release says the opposite", evicted[slot])
		}
		c.releaseHandshake(slot) // a second release gives back nothing more
	}
	if c.handshakes != 0 || len(c.handshaking) != 0 || len(c.handshakingNet) != 0 || c.handshakeOrder.Len() != 0 {
		t.Errorf("after every release: %d in handshake, %v, %v, %d in order", c.handshakes, c.handshaking, c.handshakingNet, c.handshakeOrder.Len())
	}
}

// TestHandshakeEvictionTakesTheBusiestSource: with every place taken, a
// new connection takes the place of the oldest handshake of the address
// holding the most, never one of an address holding fewer (four
// addresses of one IPv6 /64 hold one each, as switches of one LAN do);
// the evicted slot's release reports it and gives back nothing twice; an
// address at its own cap is refused, evicting nothing.
func TestHandshakeEvictionTakesTheBusiestSource(t *testing.T) {
	c := newHandshakeController(16, 4)
	admit := func(addr string) (*handshakeSlot, *handshakeSlot) {
		t.Helper()
		return c.admitHandshake(netip.MustParseAddr(addr), nil)
	}
	// A switch first, then 3 addresses holding 4, 4 and 3, and 4
	// switches of one IPv6 /64, one address each: 16 in all.
	sw, _ := admit("10.0.0.1")
	var holders, switches6 []*handshakeSlot
	for _, a := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		for range 4 {
			if s, _ := admit(a); s != nil && len(holders) < 11 {
				holders = append(holders, s)
			} else if s != nil {
				c.releaseHandshake(s)
			}
		}
	}
	for i := range 4 {
		s, v := admit(fmt.Sprintf("2001:db8:7::%x", i+1))
		if s == nil || v != nil {
			t.Fatalf("/64 handshake %d: slot %v, victim %v", i, s, v)
		}
		switches6 = append(switches6, s)
	}
	if c.handshakes != 16 {
		t.Fatalf("%d in handshake, want 16", c.handshakes)
	}
	// The sources holding the most (4) are 192.0.2.1, .2 and the /64;
	// the oldest of theirs is 192.0.2.1's first.
	s, v := admit("10.0.0.2")
	if s == nil || v != holders[0] {
		t.Fatalf("a new switch at the cap: slot %v, victim %+v, want %+v", s, v, holders[0])
	}
	if c.releaseHandshake(v) {
		t.Error("the evicted slot's release does not say it was evicted")
	}
	if c.handshakes != 16 || c.handshaking[connlimit.AddressOf(netip.MustParseAddr("192.0.2.1"))] != 3 {
		t.Errorf("after the eviction: %d in handshake, %v", c.handshakes, c.handshaking)
	}
	// Next: 192.0.2.2 (4, its first is the oldest of those holding 4).
	if _, v := admit("10.0.0.3"); v != holders[4] {
		t.Errorf("second eviction took %+v, want 192.0.2.2's oldest %+v", v, holders[4])
	}
	// The switches, holding one each, are not taken while any address
	// holds more: 6 more places are held beyond one per address (3, 3
	// and 3 at the flooding addresses). Then all hold one, and the oldest
	// of all goes: the first switch's.
	switches := map[*handshakeSlot]bool{sw: true, s: true}
	for _, s6 := range switches6 {
		switches[s6] = true
	}
	for i := range 6 {
		n, v := admit(fmt.Sprintf("10.0.1.%d", i+1))
		if switches[v] {
			t.Fatalf("eviction %d took a switch's handshake while others held more", i)
		}
		switches[n] = true
	}
	if _, v := admit("10.0.2.1"); v != sw {
		t.Errorf("with every source at one, eviction took %+v, want the oldest, %+v", v, sw)
	}
	// A flood from one address at the cap: once it holds the most, it
	// evicts only its own.
	others := 0
	for range 10 {
		n, v := admit("198.51.100.7")
		if n == nil {
			t.Fatal("the flood's connection refused below its address's cap")
		}
		if v.src != n.src {
			others++
		}
	}
	if others != 2 {
		t.Errorf("a flood from one address evicted %d handshakes of others, want 2 (until it holds the most)", others)
	}
	// With room, an address at its own cap is refused and evicts nothing.
	c = newHandshakeController(16, 4)
	for range 4 {
		admit("198.51.100.7")
	}
	if s, v := admit("198.51.100.7"); s != nil || v != nil || c.handshakes != 4 {
		t.Errorf("an address past its cap: slot %v, victim %v, %d in handshake (want 4)", s, v, c.handshakes)
	}
}

package sdn

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/sosappliance/sosappliance/internal/connlimit"
)

// modelSlot is the reference model's handshake: its address and /64 as
// plain strings, computed independently of connlimit.
type modelSlot struct {
	id        int
	addr, net string
	evicted   bool
	live      bool
	real      *handshakeSlot
}

// modelKeys is the reference model's idea of an address's keys: the
// address without zone or IPv4 mapping, and its IPv4 address or IPv6 /64.
func modelKeys(a netip.Addr) (addr, net string) {
	a = a.WithZone("")
	if a.Is4In6() {
		a = a.Unmap()
	}
	if a.Is4() {
		return a.String(), a.String() + "/32"
	}
	b := a.As16()
	for i := 8; i < 16; i++ {
		b[i] = 0
	}
	return a.String(), netip.AddrFrom16(b).String() + "/64"
}

// TestHandshakeAccountingModel drives admitHandshake and
// releaseHandshake with random sequences (IPv4, IPv4-mapped IPv6, several
// /64s, link-local addresses with zones, double releases, releases of
// evicted slots) and checks every answer and the accounting against a
// simple reference model:
//
//   - a connection is refused only when its own address is at its cap;
//   - at its /64's cap the victim is the oldest handshake of the address
//     of that /64 holding the most; otherwise at the overall cap the
//     oldest of the address holding the most anywhere; otherwise none;
//   - handshakes, handshaking, handshakingNet and handshakeOrder always
//     equal the model's live slots (no zero entries left in the maps);
//   - no cap is ever exceeded; releaseHandshake reports false exactly for
//     evicted slots, and a second release gives nothing back.
func TestHandshakeAccountingModel(t *testing.T) {
	addrs := []string{
		"10.0.0.1", "::ffff:10.0.0.1", "10.0.0.2", "::ffff:10.0.0.3", "10.0.0.3",
		"2001:db8:1::1", "2001:db8:1::2", "2001:db8:1::3", "2001:db8:1::4", "2001:db8:1::5",
		"2001:db8:1:0:ffff::1", "2001:db8:2::1", "2001:db8:2::2",
		"fe80::1%eth0", "fe80::1%eth1", "fe80::2%eth0", "fe80::3",
	}
	rng := rand.New(rand.NewPCG(39, 39))
	for iter := range 3000 {
		total := 1 + rng.IntN(12)
		perSource := 1 + rng.IntN(6)
		perNet := connlimit.PerNetwork(perSource, total)
		c := newHandshakeController(total, perSource)
		var order []*modelSlot // live, oldest first
		var all []*modelSlot
		byReal := map[*handshakeSlot]*modelSlot{}
		count := func(key func(*modelSlot) string, k string) int {
			n := 0
			for _, s := range order {
				if key(s) == k {
					n++
				}
			}
			return n
		}
		byAddr := func(s *modelSlot) string { return s.addr }
		byNet := func(s *modelSlot) string { return s.net }
		oldestOfBusiest := func(in func(*modelSlot) bool) *modelSlot {
			var v *modelSlot
			most := 0
			for _, s := range order {
				if in(s) {
					if n := count(byAddr, s.addr); n > most {
						v, most = s, n
					}
				}
			}
			return v
		}
		remove := func(s *modelSlot) {
			s.live = false
			for i, o := range order {
				if o == s {
					order = append(order[:i], order[i+1:]...)
					return
				}
			}
		}
		var log []string
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("iteration %d (total %d, per address %d, per /64 %d), after %v: %s",
				iter, total, perSource, perNet, log, fmt.Sprintf(format, args...))
		}
		for step := range 80 {
			if rng.IntN(3) > 0 || len(all) == 0 {
				ip := netip.MustParseAddr(addrs[rng.IntN(len(addrs))])
				a, n := modelKeys(ip)
				log = append(log, "+"+ip.String())
				// Model.
				var want *modelSlot
				refuse := false
				switch {
				case count(byAddr, a) >= perSource:
					refuse = true
				case count(byNet, n) >= perNet:
					want = oldestOfBusiest(func(s *modelSlot) bool { return s.net == n })
				case len(order) >= total:
					want = oldestOfBusiest(func(*modelSlot) bool { return true })
				}
				slot, victim := c.admitHandshake(ip, nil)
				if refuse {
					if slot != nil || victim != nil {
						fail("step %d: %s at its address's cap admitted (victim %v)", step, ip, victim)
					}
				} else {
					if slot == nil {
						fail("step %d: %s refused below its address's cap (%d of %d)", step, ip, count(byAddr, a), perSource)
					}
					got := byReal[victim]
					if victim != nil && got == nil {
						fail("step %d: victim %+v unknown to the model", step, victim)
					}
					if got != want {
						fail("step %d: %s evicted %+v, model wants %+v", step, ip, got, want)
					}
					if want != nil {
						want.evicted = true
						remove(want)
					}
					s := &modelSlot{id: len(all), addr: a, net: n, live: true, real: slot}
					all = append(all, s)
					order = append(order, s)
					byReal[slot] = s
				}
			} else {
				s := all[rng.IntN(len(all))]
				log = append(log, fmt.Sprintf("-%d", s.id))
				if got := c.releaseHandshake(s.real); got != !s.evicted {
					fail("step %d: release of slot %d (evicted %v) says %v", step, s.id, s.evicted, got)
				}
				remove(s)
			}
			// Invariants.
			if c.handshakes != len(order) || c.handshakeOrder.Len() != len(order) {
				fail("handshakes %d, order %d; model %d", c.handshakes, c.handshakeOrder.Len(), len(order))
			}
			i := 0
			for e := c.handshakeOrder.Front(); e != nil; e = e.Next() {
				if byReal[e.Value.(*handshakeSlot)] != order[i] {
					fail("handshakeOrder[%d] is not the model's %+v", i, order[i])
				}
				i++
			}
			wantAddr, wantNet := map[string]int{}, map[string]int{}
			for _, s := range order {
				wantAddr[s.addr]++
				wantNet[s.net]++
			}
			if len(c.handshaking) != len(wantAddr) || len(c.handshakingNet) != len(wantNet) {
				fail("maps %v %v; model %v %v", c.handshaking, c.handshakingNet, wantAddr, wantNet)
			}
			for k, n := range c.handshaking {
				if n <= 0 || wantAddr[k.Addr().String()] != n || k.Bits() != k.Addr().BitLen() {
					fail("handshaking %v; model %v", c.handshaking, wantAddr)
				}
				if n > perSource {
					fail("address %v holds %d > %d", k, n, perSource)
				}
			}
			for k, n := range c.handshakingNet {
				if n <= 0 || wantNet[k.String()] != n {
					fail("handshakingNet %v; model %v", c.handshakingNet, wantNet)
				}
				if n > perNet {
					fail("/64 %v holds %d > %d", k, n, perNet)
				}
			}
			if len(order) > total {
				fail("%d in handshake > %d", len(order), total)
			}
		}
		// Everything released: nothing left.
		for _, s := range all {
			c.releaseHandshake(s.real)
		}
		if c.handshakes != 0 || len(c.handshaking) != 0 || len(c.handshakingNet) != 0 || c.handshakeOrder.Len() != 0 {
			fail("after releasing all: %d, %v, %v, %d", c.handshakes, c.handshaking, c.handshakingNet, c.handshakeOrder.Len())
		}
	}
}

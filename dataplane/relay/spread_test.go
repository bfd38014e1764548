package relay

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn/spread"
)

// The client side dials the far agent of the connection's bucket; a far
// agent whose streams failed is left out (its buckets dealt as the
// controller deals them) until farDownFor has passed.
func TestFarAgentFollowsTheSpread(t *testing.T) {
	w := Whitelist{
		Name:   "w",
		Peers:  []Peer{{Name: "b1", Addr: netip.MustParseAddrPort("10.2.0.2:9000")}, {Name: "b2", Addr: netip.MustParseAddrPort("10.2.0.3:9000")}},
		Spread: "port", SpreadBits: 4, PeerName: "b1", Peer: netip.MustParseAddrPort("10.2.0.2:9000"),
	}
	var f farHealth
	now := time.Unix(1000, 0)
	r := rand.New(rand.NewPCG(5, 6))
	count := map[string]int{}
	for range 1000 {
		c := netip.AddrPortFrom(netip.MustParseAddr("10.1.0.7"), uint16(r.IntN(65536)))
		name, addr := farAgent(w, c, f.up(w.Peers, now))
		b, _ := spread.Assign(spread.ModePort, 4, 2, nil)
		if want := w.Peers[b.Agent(c)]; name != want.Name || addr != want.Addr {
			t.Fatalf("%s: dials %s %s, want %+v", c, name, addr, want)
		}
		count[name]++
	}
	if count["b1"] < 350 || count["b2"] < 350 {
		t.Errorf("one client's connections are not spread: %v", count)
	}
	f.markDown("b2", now)
	for p := range 64 {
		c := netip.AddrPortFrom(netip.MustParseAddr("10.1.0.7"), uint16(p))
		if name, _ := farAgent(w, c, f.up(w.Peers, now.Add(time.Second))); name != "b1" {
			t.Fatalf("port %d dials %s while b2 is down", p, name)
		}
	}
	c := netip.AddrPortFrom(netip.MustParseAddr("10.1.0.7"), 2) // bucket 1: b2's
	if name, _ := farAgent(w, c, f.up(w.Peers, now.Add(farDownFor))); name != "b2" {
		t.Errorf("after %v the bucket still dials %s", farDownFor, name)
	}
}

func TestServerEntryAdmitsEveryClientAgent(t *testing.T) {
	w := Whitelist{PeerName: "a1", PeerNames: []string{"a1", "a2"}}
	if !w.Admits("a1") || !w.Admits("a2") || w.Admits("a3") {
		t.Error("PeerNames not honoured")
	}
	if one := (Whitelist{PeerName: "a1"}); !one.Admits("a1") || one.Admits("a2") {
		t.Error("PeerName alone not honoured")
	}
}

package spread

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func matchesField(ms []Match, field uint32) bool {
	for _, m := range ms {
		if field&m.Mask == m.Value {
			return true
		}
	}
	return false
}

func field(b Buckets, c netip.AddrPort) uint32 {
	if b.Mode == ModeAddress {
		a := c.Addr().Unmap().As16()
		return uint32(a[12])<<24 | uint32(a[13])<<16 | uint32(a[14])<<8 | uint32(a[15])
	}
	return uint32(c.Port())
}

func randomClient(r *rand.Rand) netip.AddrPort {
	if r.IntN(2) == 0 {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))}), uint16(r.IntN(65536)))
	}
	var a [16]byte
	a[0], a[1] = 0x20, 0x01
	for i := 2; i < 16; i++ {
		a[i] = byte(r.IntN(256))
	}
	return netip.AddrPortFrom(netip.AddrFrom16(a), uint16(r.IntN(65536)))
}

// For random shapes, health states and connections: the bucket's owner is
// the one live agent whose matches take the connection (so the client
// site's flows, the server site's flows and the agents agree, each
// computing the same function), and a dead agent takes nothing.
func TestEveryConnectionMapsToExactlyOneLiveAgent(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 400 {
		n := 1 + r.IntN(6)
		nbits := r.IntN(MaxBits + 1)
		mode := []Mode{ModePort, ModeAddress}[r.IntN(2)]
		up := make([]bool, n)
		for i := range up {
			up[i] = r.IntN(4) != 0
		}
		b, err := Assign(mode, nbits, n, up)
		if err != nil {
			t.Fatal(err)
		}
		matches := make([][]Match, n)
		for i := range n {
			matches[i] = b.Matches(i)
			if !up[i] && len(matches[i]) != 0 {
				t.Fatalf("n=%d bits=%d up=%v: dead agent %d has matches %v", n, nbits, up, i, matches[i])
			}
		}
		anyUp := slices.Contains(up, true)
		for range 200 {
			c := randomClient(r)
			owner := b.Agent(c)
			var takers []int
			for i := range n {
				if matchesField(matches[i], field(b, c)) {
					takers = append(takers, i)
				}
			}
			switch {
			case !anyUp:
				if owner != -1 || len(takers) != 0 {
					t.Fatalf("no agent up, yet %v owns %v (takers %v)", owner, c, takers)
				}
			case owner < 0 || !up[owner]:
				t.Fatalf("n=%d bits=%d up=%v: %v owned by %d", n, nbits, up, c, owner)
			case len(takers) != 1 || takers[0] != owner:
				t.Fatalf("n=%d bits=%d up=%v mode=%s: %v owned by %d, matched by %v", n, nbits, up, mode, c, owner, takers)
			}
		}
	}
}

// An agent going down moves its buckets only; coming back restores the
// assignment exactly.
func TestFailOverMovesOnlyTheDeadAgentsShare(t *testing.T) {
	for n := 2; n <= 5; n++ {
		all, _ := Assign(ModePort, DefaultBits(n), n, nil)
		for dead := range n {
			up := make([]bool, n)
			for i := range up {
				up[i] = i != dead
			}
			after, _ := Assign(ModePort, DefaultBits(n), n, up)
			moved := map[int]int{}
			for k := range all.Owner {
				if all.Owner[k] != dead && after.Owner[k] != all.Owner[k] {
					t.Errorf("n=%d, agent %d down: bucket %d of agent %d moved to %d", n, dead, k, all.Owner[k], after.Owner[k])
				}
				if all.Owner[k] == dead {
					moved[after.Owner[k]]++
				}
			}
			// The dead agent's share is dealt evenly to the survivors.
			lo, hi := 1<<30, 0
			for i := range n {
				if i != dead {
					lo, hi = min(lo, moved[i]), max(hi, moved[i])
				}
			}
			if hi-lo > 1 {
				t.Errorf("n=%d, agent %d down: its buckets went %v", n, dead, moved)
			}
		}
		back, _ := Assign(ModePort, DefaultBits(n), n, slices.Repeat([]bool{true}, n))
		if !slices.Equal(back.Owner, all.Owner) {
			t.Errorf("n=%d: all up again gives %v, want %v", n, back.Owner, all.Owner)
		}
	}
}

// Even spread for the two workloads the issue names: many connections
// from one client (Linux connect() walks even ports, so consecutive
// connections differ by 2) and many clients with random ports.
func TestSpreadIsEven(t *testing.T) {
	for n := 2; n <= 4; n++ {
		b, _ := Assign(ModePort, DefaultBits(n), n, nil)
		count := make([]int, n)
		client := netip.MustParseAddr("10.10.1.10")
		start := uint16(40000)
		const conns = 64 * 4
		for i := range conns {
			count[b.Agent(netip.AddrPortFrom(client, start+uint16(2*i)))]++
		}
		for i, c := range count {
			if c < conns/n-conns/(4*n) || c > conns/n+conns/(4*n) {
				t.Errorf("n=%d, one client's consecutive even ports: agent %d got %d of %d (%v)", n, i, c, conns, count)
			}
		}
		r := rand.New(rand.NewPCG(3, uint64(n)))
		count = make([]int, n)
		const many = 20000
		for range many {
			count[b.Agent(randomClient(r))]++
		}
		for i, c := range count {
			share := float64(c) / many
			if share < 0.9/float64(n) || share > 1.1/float64(n) {
				t.Errorf("n=%d, random clients: agent %d got %.3f", n, i, share)
			}
		}
	}
}

// Goldens: the value/mask pairs sdn/flows compiles, for the shapes a lab
// and a typical site use.
func TestMatchesGolden(t *testing.T) {
	for _, c := range []struct {
		mode Mode
		bits int
		up   []bool
		want [][]Match
	}{
		// Two agents, port mode: bit 1 of the client port decides.
		{ModePort, 4, []bool{true, true}, [][]Match{{{0x0, 0x2}}, {{0x2, 0x2}}}},
		// Four agents: bits 1 and 2.
		{ModePort, 5, nil, [][]Match{{{0x0, 0x6}}, {{0x2, 0x6}}, {{0x4, 0x6}}, {{0x6, 0x6}}}},
		// One of two down: the survivor takes every port.
		{ModePort, 4, []bool{true, false}, [][]Match{{{0x0, 0x0}}, nil}},
		// Three agents, 16 buckets in address mode: 0,3,6,9,12,15 /
		// 1,4,7,10,13 / 2,5,8,11,14 have no common bits, so one exact
		// pattern each after merging what merges.
		{ModeAddress, 4, nil, [][]Match{
			{{0x0, 0xf}, {0x3, 0xf}, {0x6, 0xf}, {0x9, 0xf}, {0xc, 0xf}, {0xf, 0xf}},
			{{0x1, 0xf}, {0x4, 0xf}, {0x7, 0xf}, {0xa, 0xf}, {0xd, 0xf}},
			{{0x2, 0xf}, {0x5, 0xf}, {0x8, 0xf}, {0xb, 0xf}, {0xe, 0xf}},
		}},
	} {
		n := len(c.want)
		b, err := Assign(c.mode, c.bits, n, c.up)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if got := b.Matches(i); !slices.Equal(got, c.want[i]) {
				t.Errorf("%s bits=%d up=%v agent %d: %#v, want %#v", c.mode, c.bits, c.up, i, got, c.want[i])
			}
		}
	}
}

func TestAssignRefusesBadShapes(t *testing.T) {
	for _, c := range []struct {
		mode Mode
		bits int
		n    int
		up   []bool
	}{
		{"hash", 4, 2, nil}, {ModePort, -1, 2, nil}, {ModePort, MaxBits + 1, 2, nil},
		{ModePort, 4, 0, nil}, {ModePort, 4, 2, []bool{true}},
	} {
		if _, err := Assign(c.mode, c.bits, c.n, c.up); err == nil {
			t.Errorf("Assign(%q, %d, %d, %v) accepted it", c.mode, c.bits, c.n, c.up)
		}
	}
	if DefaultBits(1) != 4 || DefaultBits(2) != 4 || DefaultBits(3) != 5 || DefaultBits(64) != MaxBits {
		t.Errorf("DefaultBits: %d %d %d %d", DefaultBits(1), DefaultBits(2), DefaultBits(3), DefaultBits(64))
	}
}

// Matches stays small: never more patterns than buckets, and for every
// agent count up to 8 at the default bits no agent needs more than its
// bucket count.
func FuzzCover(f *testing.F) {
	f.Add(uint8(4), uint64(0xaaaa))
	f.Add(uint8(8), uint64(0x0123456789abcdef))
	f.Fuzz(func(t *testing.T, nb uint8, set uint64) {
		nbits := int(nb % 7) // at most 64 minterms from the 64-bit set
		full := 1 << nbits
		var mins []uint32
		for k := range full {
			if set>>k&1 == 1 {
				mins = append(mins, uint32(k))
			}
		}
		cs := cover(mins, nbits)
		if len(cs) > len(mins) {
			t.Fatalf("%d patterns for %d minterms", len(cs), len(mins))
		}
		for k := range full {
			in := slices.Contains(mins, uint32(k))
			got := false
			for _, c := range cs {
				if c.covers(uint32(k)) {
					got = true
				}
			}
			if got != in {
				t.Fatalf("bits=%d set=%x: bucket %d covered=%v, member=%v (%v)", nbits, set, k, got, in, cs)
			}
		}
	})
}

// Shares partitions each agent's buckets into its home patterns, which
// never change while it lives, and the patterns of the buckets it took
// over: the union matches exactly the buckets Owner gives it.
func TestSharesKeepHomePatternsThroughFailOver(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 300 {
		n := 1 + r.IntN(6)
		nbits := r.IntN(MaxBits + 1)
		mode := []Mode{ModePort, ModeAddress}[r.IntN(2)]
		up := make([]bool, n)
		for i := range up {
			up[i] = r.IntN(3) != 0
		}
		all, _ := Assign(mode, nbits, n, nil)
		b, err := Assign(mode, nbits, n, up)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			got := b.Shares(i, n)
			if !up[i] {
				if len(got) != 0 {
					t.Fatalf("dead agent %d has shares %v", i, got)
				}
				continue
			}
			home := all.Matches(i)
			if len(got) < len(home) || !slices.Equal(got[:len(home)], home) {
				t.Fatalf("n=%d bits=%d up=%v agent %d: shares %v do not start with its home patterns %v", n, nbits, up, i, got, home)
			}
			for k := range b.Owner {
				f := uint32(k)
				if mode == ModePort {
					f <<= 1
				}
				hits := 0
				for _, m := range got {
					if f&m.Mask == m.Value {
						hits++
					}
				}
				// Patterns of one agent may overlap (same action); no
				// pattern takes another agent's bucket.
				if want := b.Owner[k] == i; (hits > 0) != want {
					t.Fatalf("n=%d bits=%d up=%v agent %d bucket %d: %d patterns match, owner %d", n, nbits, up, i, k, hits, b.Owner[k])
				}
			}
		}
	}
}

package spread

import (
	"net/netip"
	"testing"
)

// TestExhaustiveShapes checks every shape up to 7 agents and every
// bit count, under every health state: a live home keeps its bucket, a
// bucket never goes to a dead agent (nor -1 while one lives), every agent
// gets a share when the buckets allow, and Matches and Shares of the agents
// partition the bucket space exactly, with masks only on the bucket bits.
// Written by review (helper-70); it passed.
func TestExhaustiveShapes(t *testing.T) {
	for _, mode := range []Mode{ModePort, ModeAddress} {
		for n := 1; n <= 7; n++ {
			for nbits := 0; nbits <= MaxBits; nbits++ {
				for state := 0; state < 1<<n; state++ {
					up := make([]bool, n)
					live := 0
					for i := range up {
						up[i] = state&(1<<i) != 0
						if up[i] {
							live++
						}
					}
					moreCheckShape(t, mode, nbits, n, up, live)
				}
			}
		}
	}
}

func moreCheckShape(t *testing.T, mode Mode, nbits, n int, up []bool, live int) {
	t.Helper()
	b, err := Assign(mode, nbits, n, up)
	if err != nil {
		t.Fatalf("Assign(%s,%d,%d,%v): %v", mode, nbits, n, up, err)
	}
	if len(b.Owner) != 1<<nbits {
		t.Fatalf("%d owners for %d bits", len(b.Owner), nbits)
	}
	shift := 1
	if mode == ModeAddress {
		shift = 0
	}
	bucketBits := uint32(1<<nbits-1) << shift
	for k, o := range b.Owner {
		switch {
		case live == 0 && o != -1:
			t.Fatalf("%v: bucket %d owned by %d with no agent up", up, k, o)
		case live > 0 && (o < 0 || o >= n || !up[o]):
			t.Fatalf("%s bits %d n %d %v: bucket %d owned by %d", mode, nbits, n, up, k, o)
		case up[k%n] && o != k%n:
			t.Fatalf("%v: bucket %d left its live home %d for %d", up, k, k%n, o)
		}
	}
	for i := range n {
		for _, pair := range [][]Match{b.Matches(i), b.Shares(i, n)} {
			for _, m := range pair {
				if m.Mask&^bucketBits != 0 || m.Value&^m.Mask != 0 {
					t.Fatalf("%s bits %d agent %d: match %+v outside the bucket bits %#x", mode, nbits, i, m, bucketBits)
				}
			}
			for k, o := range b.Owner {
				field := uint32(k) << shift
				hits := 0
				for _, m := range pair {
					if field&m.Mask == m.Value {
						hits++
					}
				}
				if (o == i) != (hits > 0) {
					t.Fatalf("%s bits %d n %d %v agent %d bucket %d (owner %d): %d matches of %v", mode, nbits, n, up, i, k, o, hits, pair)
				}
			}
		}
	}
	// The function the relay uses (Agent) agrees with the owner table on
	// real ports and addresses, whatever the bits outside the bucket.
	for k := range b.Owner {
		var c netip.AddrPort
		if mode == ModePort {
			c = netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(0xa000|k<<1|1))
		} else {
			c = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 9, byte(k >> 8), byte(k)}), 40000)
		}
		if got := b.Agent(c); got != b.Owner[b.Of(c)] || b.Of(c) != k {
			t.Fatalf("%s bits %d: client %v in bucket %d (want %d), agent %d", mode, nbits, c, b.Of(c), k, got)
		}
	}
}

// TestEveryAgentGetsAShare: with the default bits for n agents,
// every live agent holds at least one bucket, and with everything up the
// counts differ by at most one.
func TestEveryAgentGetsAShare(t *testing.T) {
	for n := 1; n <= 32; n++ {
		b, err := Assign(ModePort, DefaultBits(n), n, nil)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := 1<<30, 0
		for i := range n {
			c := b.Count(i)
			lo, hi = min(lo, c), max(hi, c)
		}
		if lo == 0 || hi-lo > 1 {
			t.Errorf("n=%d bits=%d: counts from %d to %d", n, DefaultBits(n), lo, hi)
		}
	}
}

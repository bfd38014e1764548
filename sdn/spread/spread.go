// Package spread is the function that assigns each accelerated connection
// to one agent of its site when a site runs several: the switch flows and
// the agents compute it the same way, so that a connection's packets, its
// replies and the server-side agent the client-side agent dials all meet
// at the agent that holds the connection, with no controller round trip
// per session. It is pure (standard library only) and knows nothing of
// OpenFlow: it gives value/mask pairs that sdn/flows turns into matches.
//
// A connection falls into one of 2^Bits buckets, taken from bits of the
// client's side of the connection that a switch can match with a mask in
// both directions (the request's source is the reply's destination):
//
//   - ModePort: bits 1..Bits of the client's TCP port. Bit 0 is skipped
//     because Linux's connect() prefers even source ports (and bind() to
//     port 0 odd ones), so bit 0 is nearly constant; consecutive
//     connections of one client step through the buckets by a few at a
//     time (2-8 at random on the lab's Linux 6.18: the kernel adds small
//     random increments to its port offsets), and many clients' hashed
//     port offsets spread uniformly. Needs masked tcp_src/tcp_dst
//     matches, which Open vSwitch supports.
//   - ModeAddress: the low Bits bits of the client's IP address. Needs only
//     masked ipv4_src/ipv4_dst (or ipv6) matches, which every OpenFlow 1.3
//     switch has, but is even only across many clients: every connection
//     of one client lands on one agent.
//
// Buckets are dealt to the site's agents round-robin in the order the
// configuration lists them, so the split is as even as 2^Bits allows. When
// an agent is down its buckets, and only its buckets, are dealt to the
// live agents in turn: against all agents up, no other bucket changes
// owner, so connections on the other agents see no flow change. Between
// two states with agents down (two down, then one back), the buckets of
// an agent still down are dealt again over the new live set, evenly, so
// live agents may trade some of them (the controller pins the sessions
// already open, which keep their agent); dealing them by a hash of the
// bucket and the live set instead would move only the returning agent's
// share, but split a dead agent's buckets unevenly.
package spread

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
)

// Mode says which part of the connection picks the bucket.
type Mode string

// The modes.
const (
	ModePort    Mode = "port"
	ModeAddress Mode = "address"
)

// MaxBits bounds the buckets: 2^8 = 256 flows per whitelist and direction
// at worst, before merging.
const MaxBits = 8

// DefaultBits is the bucket count for n agents: at least eight buckets per
// agent, at least 16 in all, so that fail-over spreads a dead agent's share
// over the survivors evenly.
func DefaultBits(n int) int {
	b := 4
	for b < MaxBits && 1<<b < 8*n {
		b++
	}
	return b
}

// Buckets is a site's assignment of buckets to agents.
type Buckets struct {
	Mode Mode
	Bits int
	// Owner[k] is the index of the agent (in the configuration's order)
	// that holds bucket k, or -1 when no agent of the site is up.
	Owner []int
}

// Assign deals 2^bits buckets to n agents, of which up[i] says which are
// alive (nil: all are).
func Assign(mode Mode, nbits, n int, up []bool) (Buckets, error) {
	if mode != ModePort && mode != ModeAddress {
		return Buckets{}, fmt.Errorf("spread mode %q: want %q or %q", mode, ModePort, ModeAddress)
	}
	if nbits < 0 || nbits > MaxBits {
		return Buckets{}, fmt.Errorf("spread bits %d: want 0..%d", nbits, MaxBits)
	}
	if n < 1 {
		return Buckets{}, errors.New("spread: a site needs at least one agent")
	}
	if up != nil && len(up) != n {
		return Buckets{}, fmt.Errorf("spread: %d health states for %d agents", len(up), n)
	}
	alive := func(i int) bool { return up == nil || up[i] }
	var live []int
	for i := range n {
		if alive(i) {
			live = append(live, i)
		}
	}
	b := Buckets{Mode: mode, Bits: nbits, Owner: make([]int, 1<<nbits)}
	// A dead agent's buckets go to the live agents in turn, continuing
	// from where the previous dead agent's left off, so that two dead
	// agents do not both pile onto the first survivor.
	next := 0
	for k := range b.Owner {
		home := k % n
		switch {
		case alive(home):
			b.Owner[k] = home
		case len(live) == 0:
			b.Owner[k] = -1
		default:
			b.Owner[k] = live[next%len(live)]
			next++
		}
	}
	return b, nil
}

// Of returns the bucket of a connection from its client's address and TCP
// port (the request's source, the reply's destination).
func (b Buckets) Of(client netip.AddrPort) int {
	m := uint32(1)<<b.Bits - 1
	if b.Mode == ModeAddress {
		a := client.Addr().Unmap().As16()
		low := uint32(a[12])<<24 | uint32(a[13])<<16 | uint32(a[14])<<8 | uint32(a[15])
		return int(low & m)
	}
	return int(uint32(client.Port()>>1) & m)
}

// Agent returns the index of the agent that holds the connection, or -1
// when the site has none up.
func (b Buckets) Agent(client netip.AddrPort) int { return b.Owner[b.Of(client)] }

// Count is how many buckets agent i holds.
func (b Buckets) Count(i int) int {
	n := 0
	for _, o := range b.Owner {
		if o == i {
			n++
		}
	}
	return n
}

// Match is a value/mask pair on the client's TCP port (ModePort) or on the
// low 32 bits of the client's address (ModeAddress); a field matches when
// field&Mask == Value.
type Match struct {
	Value, Mask uint32
}

// Matches returns the fewest value/mask pairs (prime implicants of the
// agent's buckets, greedily covered) that match exactly the connections of
// agent i's buckets, in a stable order; none when it holds no bucket, one
// with a zero mask when it holds them all.
func (b Buckets) Matches(i int) []Match {
	var mine []uint32
	for k, o := range b.Owner {
		if o == i {
			mine = append(mine, uint32(k))
		}
	}
	shift := uint(1)
	if b.Mode == ModeAddress {
		shift = 0
	}
	var out []Match
	for _, c := range cover(mine, b.Bits) {
		out = append(out, Match{Value: c.value << shift, Mask: c.care << shift})
	}
	return out
}

// Shares returns agent i's matches so that fail-over never rewrites a
// live agent's own patterns: the matches of its home buckets (its share
// with every agent up) and, apart, those of the buckets it holds in b for
// dead agents. A switch then changes only the flows of the moved buckets
// when an agent goes down or comes back. A dead agent has none.
func (b Buckets) Shares(i, n int) []Match {
	home, err := Assign(b.Mode, b.Bits, n, nil)
	if err != nil || len(home.Owner) != len(b.Owner) {
		return nil
	}
	var homeK, taken []uint32
	for k, o := range b.Owner {
		switch {
		case o != i:
		case home.Owner[k] == i:
			homeK = append(homeK, uint32(k))
		default:
			taken = append(taken, uint32(k))
		}
	}
	shift := uint(1)
	if b.Mode == ModeAddress {
		shift = 0
	}
	var out []Match
	for _, ks := range [][]uint32{homeK, taken} {
		for _, c := range cover(ks, b.Bits) {
			out = append(out, Match{Value: c.value << shift, Mask: c.care << shift})
		}
	}
	return out
}

// cube is a ternary pattern over the bucket bits: the bits in care must
// equal value's.
type cube struct{ value, care uint32 }

func (c cube) covers(k uint32) bool { return k&c.care == c.value }

// cover is a small Quine-McCluskey: it merges the minterms into prime
// implicants and picks them greedily, largest first, until every minterm is
// covered. With at most 2^MaxBits minterms this is cheap, and it finds the
// one-pattern answer for the round-robin shares of power-of-two agent
// counts.
func cover(minterms []uint32, nbits int) []cube {
	if len(minterms) == 0 {
		return nil
	}
	full := uint32(1)<<nbits - 1
	level := map[cube]bool{}
	for _, m := range minterms {
		level[cube{m, full}] = true
	}
	var primes []cube
	for len(level) > 0 {
		merged := map[cube]bool{}
		used := map[cube]bool{}
		cs := sortedCubes(level)
		for i, a := range cs {
			for _, c := range cs[i+1:] {
				if a.care != c.care {
					continue
				}
				d := a.value ^ c.value
				if bits.OnesCount32(d) == 1 {
					merged[cube{a.value &^ d, a.care &^ d}] = true
					used[a], used[c] = true, true
				}
			}
		}
		for _, c := range cs {
			if !used[c] {
				primes = append(primes, c)
			}
		}
		level = merged
	}
	// Greedy cover: the prime covering most uncovered minterms first, ties
	// broken by value for a stable result.
	slices.SortFunc(primes, func(a, b cube) int {
		if d := bits.OnesCount32(a.care) - bits.OnesCount32(b.care); d != 0 {
			return d
		}
		return int(a.value) - int(b.value)
	})
	left := map[uint32]bool{}
	for _, m := range minterms {
		left[m] = true
	}
	var out []cube
	for len(left) > 0 {
		best, bestN := -1, 0
		for i, p := range primes {
			n := 0
			for m := range left {
				if p.covers(m) {
					n++
				}
			}
			if n > bestN {
				best, bestN = i, n
			}
		}
		p := primes[best]
		out = append(out, p)
		for m := range left {
			if p.covers(m) {
				delete(left, m)
			}
		}
	}
	slices.SortFunc(out, func(a, b cube) int {
		if a.value != b.value {
			return int(a.value) - int(b.value)
		}
		return int(a.care) - int(b.care)
	})
	return out
}

func sortedCubes(set map[cube]bool) []cube {
	var cs []cube
	for c := range set {
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b cube) int {
		if a.care != b.care {
			return int(a.care) - int(b.care)
		}
		return int(a.value) - int(b.value)
	})
	return cs
}

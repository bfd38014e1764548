// Package portrange is the vocabulary of TCP port ranges shared by the
// configuration, the flow compiler, the steering rules and the relay:
// parsing "5201" and "50000-51000", overlap and containment, and the
// smallest set of value/mask pairs an OpenFlow switch needs to match a
// range. It imports the standard library only.
package portrange

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// Range is the TCP ports Lo..Hi, both included. A valid range has
// 1 <= Lo <= Hi.
type Range struct {
	Lo, Hi uint16
}

// Single is the range of one port.
func Single(p uint16) Range { return Range{p, p} }

// All is every TCP port a connection can use.
var All = Range{1, 65535}

// Parse reads "5201" or "50000-51000". Port 0 is refused (no connection
// uses it), and so are reversed ranges, with the spelling to use instead.
func Parse(s string) (Range, error) {
	t := strings.TrimSpace(s)
	lo, hi, isRange := strings.Cut(t, "-")
	a, errA := parsePort(lo)
	b := a
	var errB error
	if isRange {
		b, errB = parsePort(hi)
	}
	switch {
	case errors.Is(errA, strconv.ErrRange) || errors.Is(errB, strconv.ErrRange):
		return Range{}, fmt.Errorf("%q goes past 65535, the highest TCP port", s)
	case errA != nil || errB != nil:
		// iptables and nftables spell a range 5000:6000, nmap and
		// others 5000..6000.
		if r, ok := otherSpelling(t); ok && !isRange {
			return Range{}, fmt.Errorf("%q is not a port or a range; did you mean %s?", s, r)
		}
		return Range{}, fmt.Errorf("%q is not a port or a range such as 50000-51000", s)
	case a == 0 || b == 0:
		return Range{}, fmt.Errorf("%q includes port 0, which no TCP connection uses", s)
	case a > b:
		return Range{}, fmt.Errorf("%q is reversed (empty); did you mean %d-%d?", s, b, a)
	}
	return Range{a, b}, nil
}

// otherSpelling reads a range as iptables (5000:6000) or others
// (5000..6000) write it, for a suggestion: only one Parse takes, in
// order and without port 0.
func otherSpelling(t string) (Range, bool) {
	for _, sep := range []string{":", ".."} {
		x, y, ok := strings.Cut(t, sep)
		if !ok {
			continue
		}
		p, errP := parsePort(x)
		q, errQ := parsePort(y)
		if errP != nil || errQ != nil || p == 0 || q == 0 {
			continue
		}
		return Range{min(p, q), max(p, q)}, true
	}
	return Range{}, false
}

func parsePort(s string) (uint16, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.HasPrefix(s, "+") {
		return 0, strconv.ErrSyntax
	}
	n, err := strconv.ParseUint(s, 10, 16)
	return uint16(n), err
}

// Valid reports whether the range holds at least one port other than 0.
func (r Range) Valid() bool { return r.Lo >= 1 && r.Lo <= r.Hi }

// Len is the number of ports in the range.
func (r Range) Len() int { return int(r.Hi) - int(r.Lo) + 1 }

// Contains reports whether port p lies in the range.
func (r Range) Contains(p uint16) bool { return r.Lo <= p && p <= r.Hi }

// Overlaps reports whether the two ranges share a port.
func (r Range) Overlaps(o Range) bool { return r.Lo <= o.Hi && o.Lo <= r.Hi }

// String is "5201" for one port and "50000-51000" for more.
func (r Range) String() string {
	if r.Lo == r.Hi {
		return strconv.Itoa(int(r.Lo))
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}

// MarshalText writes the range as String does, so ranges read well in
// JSON item values.
func (r Range) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads what Parse reads.
func (r *Range) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// Masked is one value/mask match of a port field: a port p matches when
// p&Mask == Value.
type Masked struct {
	Value, Mask uint16
}

// Exact reports whether the match selects a single port.
func (m Masked) Exact() bool { return m.Mask == 0xffff }

// Range is the ports the match selects; a value/mask pair made by Masks is
// always one aligned block.
func (m Masked) Range() Range { return Range{m.Value, m.Value | ^m.Mask} }

// Masks splits the range into the fewest prefix value/mask pairs (aligned
// power-of-two blocks) whose union is exactly the range, the way a binary
// trie covers an interval: at most 2x16-2 pairs for any range, one for an
// aligned block such as 50000-50015, 16 for 1-65535.
func (r Range) Masks() []Masked {
	if !r.Valid() {
		return nil
	}
	var out []Masked
	lo, hi := uint32(r.Lo), uint32(r.Hi)
	for lo <= hi {
		// The largest aligned block that starts at lo and ends by hi.
		size := uint32(1) << bits.TrailingZeros32(lo|1<<16)
		for lo+size-1 > hi {
			size >>= 1
		}
		out = append(out, Masked{Value: uint16(lo), Mask: uint16(^(size - 1))})
		lo += size
	}
	return out
}

// Normalize sorts ranges and merges those that overlap or touch, so that
// equal port sets have equal lists. Invalid ranges are dropped.
func Normalize(rs []Range) []Range {
	out := make([]Range, 0, len(rs))
	for _, r := range rs {
		if r.Valid() {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Range) int { return cmp.Or(cmp.Compare(a.Lo, b.Lo), cmp.Compare(a.Hi, b.Hi)) })
	merged := out[:0]
	for _, r := range out {
		if n := len(merged); n > 0 && int(r.Lo) <= int(merged[n-1].Hi)+1 {
			merged[n-1].Hi = max(merged[n-1].Hi, r.Hi)
			continue
		}
		merged = append(merged, r)
	}
	return merged
}

// ContainsPort reports whether any of the ranges holds p.
func ContainsPort(rs []Range, p uint16) bool {
	return slices.ContainsFunc(rs, func(r Range) bool { return r.Contains(p) })
}

// MaskCount is how many value/mask pairs the ranges take together.
func MaskCount(rs []Range) int {
	n := 0
	for _, r := range rs {
		n += len(r.Masks())
	}
	return n
}

// Join writes ranges as "5201,50000-51000".
func Join(rs []Range) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

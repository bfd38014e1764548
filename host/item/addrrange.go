package item

import (
	"cmp"
	"net/netip"
	"slices"
)

// AddrRange is the addresses Lo..Hi of one family, both included: what
// an nftables interval set holds for a run of prefixes.
type AddrRange struct {
	Lo, Hi netip.Addr
}

// lastAddr is the highest address of a prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// PrefixRanges merges prefixes of one family into sorted, disjoint ranges,
// joining those that touch.
func PrefixRanges(ps []netip.Prefix) []AddrRange {
	rs := make([]AddrRange, 0, len(ps))
	for _, p := range ps {
		p = p.Masked()
		rs = append(rs, AddrRange{p.Addr(), lastAddr(p)})
	}
	slices.SortFunc(rs, func(a, b AddrRange) int { return cmp.Or(a.Lo.Compare(b.Lo), a.Hi.Compare(b.Hi)) })
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if next := last.Hi.Next(); r.Lo.Compare(last.Hi) <= 0 || next.IsValid() && next == r.Lo {
				if r.Hi.Compare(last.Hi) > 0 {
					last.Hi = r.Hi
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// Prefixes is the fewest prefixes whose union is the range.
func (r AddrRange) Prefixes() []netip.Prefix {
	var out []netip.Prefix
	lo := r.Lo
	for lo.IsValid() && lo.Compare(r.Hi) <= 0 {
		// The shortest prefix that starts at lo and ends by Hi.
		bits := lo.BitLen()
		for bits > 0 {
			p := netip.PrefixFrom(lo, bits-1)
			if p.Masked().Addr() != lo || lastAddr(p).Compare(r.Hi) > 0 {
				break
			}
			bits--
		}
		p := netip.PrefixFrom(lo, bits)
		out = append(out, p)
		lo = lastAddr(p).Next()
	}
	return out
}

// NormalizePrefixes is the fewest prefixes covering exactly the union of
// ps (of one family), sorted: equal address sets get equal lists, and a
// list reads back unchanged from an interval set.
func NormalizePrefixes(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range PrefixRanges(ps) {
		out = append(out, r.Prefixes()...)
	}
	return out
}

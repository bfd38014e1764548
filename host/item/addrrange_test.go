package item

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func TestNormalizePrefixes(t *testing.T) {
	cases := []struct{ in, want []netip.Prefix }{
		{prefixes("10.0.0.128/25", "10.0.0.0/25"), prefixes("10.0.0.0/24")},
		{prefixes("10.0.0.0/24", "10.0.0.7/32", "10.0.2.0/24"), prefixes("10.0.0.0/24", "10.0.2.0/24")},
		{prefixes("0.0.0.0/0", "192.0.2.1/32"), prefixes("0.0.0.0/0")},
		{prefixes("255.255.255.255/32", "255.255.255.254/32"), prefixes("255.255.255.254/31")},
		{prefixes("10.0.0.1/32", "10.0.0.2/31"), prefixes("10.0.0.1/32", "10.0.0.2/31")},
		{prefixes("fd00::/65", "fd00:0:0:0:8000::/65", "fd00:1::1/128"), prefixes("fd00::/64", "fd00:1::1/128")},
		{prefixes("::/0"), prefixes("::/0")},
	}
	for _, c := range cases {
		if got := NormalizePrefixes(c.in); !slices.Equal(got, c.want) {
			t.Errorf("NormalizePrefixes(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	// Random unions of IPv4 prefixes inside 10.0.0.0/22: the normal form
	// covers exactly the same addresses and is its own normal form.
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		var in []netip.Prefix
		for range 1 + rng.IntN(6) {
			bits := 22 + rng.IntN(11)
			a := netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(4)), byte(rng.IntN(256))})
			in = append(in, netip.PrefixFrom(a, bits).Masked())
		}
		got := NormalizePrefixes(in)
		for i := range 1024 {
			a := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
			inIn := slices.ContainsFunc(in, func(p netip.Prefix) bool { return p.Contains(a) })
			inGot := slices.ContainsFunc(got, func(p netip.Prefix) bool { return p.Contains(a) })
			if inIn != inGot {
				t.Fatalf("%v -> %v differ at %s", in, got, a)
			}
		}
		if again := NormalizePrefixes(got); !slices.Equal(again, got) {
			t.Fatalf("%v is not stable: %v", got, again)
		}
	}
}

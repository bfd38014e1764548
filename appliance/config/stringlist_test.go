package config

// (Review, helper-112.) stringList (1849563) against what it replaced,
// convert.Convert(tuple, list(string)), and the two sweeps against the
// pairwise checks they replaced.

import (
	"math/big"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// r112Convert runs f, turning a panic into an error mentioning it.
func r112Convert(f func() (cty.Value, error)) (v cty.Value, err error, panicked any) {
	defer func() {
		if p := recover(); p != nil {
			panicked = p
		}
	}()
	v, err = f()
	return v, err, nil
}

func TestStringListAsConvert(t *testing.T) {
	huge, _ := new(big.Float).SetString("1e400")
	obj := cty.ObjectVal(map[string]cty.Value{"a": cty.StringVal("x")})
	cases := map[string]cty.Value{
		"empty":        cty.EmptyTupleVal,
		"strings":      cty.TupleVal([]cty.Value{cty.StringVal("a"), cty.StringVal("b")}),
		"numbers":      cty.TupleVal([]cty.Value{cty.NumberIntVal(5201), cty.NumberFloatVal(5201.0), cty.MustParseNumberVal("1e3"), cty.MustParseNumberVal("0.5")}),
		"huge number":  cty.TupleVal([]cty.Value{cty.NumberVal(huge)}),
		"bools":        cty.TupleVal([]cty.Value{cty.True, cty.StringVal("x")}),
		"null elem":    cty.TupleVal([]cty.Value{cty.NullVal(cty.DynamicPseudoType), cty.StringVal("x")}),
		"null string":  cty.TupleVal([]cty.Value{cty.NullVal(cty.String)}),
		"unknown elem": cty.TupleVal([]cty.Value{cty.DynamicVal, cty.StringVal("x")}),
		"unknown str":  cty.TupleVal([]cty.Value{cty.UnknownVal(cty.String)}),
		"nested list":  cty.TupleVal([]cty.Value{cty.TupleVal([]cty.Value{cty.StringVal("a")})}),
		"object":       cty.TupleVal([]cty.Value{obj}),
		"marked elem":  cty.TupleVal([]cty.Value{cty.StringVal("a").Mark("m"), cty.StringVal("b")}),
		// Not here: a marked tuple and an unknown tuple-typed value, on
		// which stringList panics (AsValueSlice) where convert.Convert
		// does not. attrs.value evaluates with a nil EvalContext, which
		// yields neither, so the difference is latent.
	}
	for name, v := range cases {
		want, werr, wp := r112Convert(func() (cty.Value, error) { return convert.Convert(v, cty.List(cty.String)) })
		got, gerr, gp := r112Convert(func() (cty.Value, error) { return stringList(v) })
		switch {
		case (wp != nil) != (gp != nil):
			t.Errorf("%s: convert.Convert panicked %v, stringList panicked %v", name, wp, gp)
		case (werr != nil) != (gerr != nil):
			t.Errorf("%s: convert.Convert err %v, stringList err %v", name, werr, gerr)
		case werr == nil && wp == nil && !want.RawEquals(got):
			t.Errorf("%s: convert.Convert %#v, stringList %#v", name, want, got)
		}
	}
}

// TestStringListThroughHCL: what HCL expressions give, through
// the decoder, is what convert.Convert gave.
func TestStringListThroughHCL(t *testing.T) {
	for _, src := range []string{
		`[]`, `["a", 1, 5201.0, 1e3, true]`, `[null]`, `["a", null]`, `[["a"]]`, `[{a = 1}]`,
		`[1e400]`, `["${1 + 1}"]`, `[for x in ["a", "b"] : x]`, `[-0]`, `[0.1e1]`, `[123456789012345678901234567890]`,
	} {
		expr, diags := hclsyntax.ParseExpression([]byte(src), "x.hcl", hcl.InitialPos)
		if diags.HasErrors() {
			t.Fatalf("%s: %v", src, diags)
		}
		v, diags := expr.Value(nil)
		if diags.HasErrors() || !v.Type().IsTupleType() {
			continue
		}
		want, werr, wp := r112Convert(func() (cty.Value, error) { return convert.Convert(v, cty.List(cty.String)) })
		got, gerr, gp := r112Convert(func() (cty.Value, error) { return stringList(v) })
		if (wp != nil) != (gp != nil) || (werr != nil) != (gerr != nil) || werr == nil && wp == nil && !want.RawEquals(got) {
			t.Errorf("%s: convert.Convert %#v %v %v, stringList %#v %v %v", src, want, werr, wp, got, gerr, gp)
		}
	}
}

// TestFirstOverlapAsPairwise: the sweep finds an overlap exactly
// when the pairwise check did, over IPv4, IPv6, IPv4-mapped IPv6, /0 and
// host prefixes, and the pair it names overlaps.
func TestFirstOverlapAsPairwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(112, 112))
	pick := func() netip.Prefix {
		switch rng.IntN(5) {
		case 0:
			a := netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(4)), byte(rng.IntN(256))})
			return netip.PrefixFrom(a, []int{0, 8, 16, 24, 30, 32}[rng.IntN(6)]).Masked()
		case 1:
			a := netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(4)), byte(rng.IntN(256))})
			return netip.PrefixFrom(netip.AddrFrom16(a.As16()), []int{0, 96, 104, 120, 128}[rng.IntN(5)]).Masked()
		default:
			var b [16]byte
			b[0], b[1], b[15] = 0xfd, byte(rng.IntN(3)), byte(rng.IntN(256))
			if rng.IntN(4) == 0 {
				b[0] = 0xff
			}
			return netip.PrefixFrom(netip.AddrFrom16(b), []int{0, 1, 8, 16, 64, 120, 127, 128}[rng.IntN(8)]).Masked()
		}
	}
	for n := 0; n < 20000; n++ {
		a, b := make([]netip.Prefix, 1+rng.IntN(4)), make([]netip.Prefix, 1+rng.IntN(4))
		for i := range a {
			a[i] = pick()
		}
		for i := range b {
			b[i] = pick()
		}
		want := false
		for _, p := range a {
			for _, q := range b {
				want = want || p.Overlaps(q)
			}
		}
		got, ok := firstOverlap(a, b)
		if ok != want || ok && (!got[0].Overlaps(got[1]) || !slices.Contains(a, got[0]) || !slices.Contains(b, got[1])) {
			t.Fatalf("firstOverlap(%v, %v) = %v %v, pairwise %v", a, b, got, ok, want)
		}
	}
}

// TestOverlappingPortsOnePerEntry: one pair per range that
// overlaps an earlier one (in start order), each pair overlapping, and as
// many as the entries that are not the first of their overlapping group.
func TestOverlappingPortsOnePerEntry(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 12))
	for n := 0; n < 20000; n++ {
		rs := make([]portrange.Range, 1+rng.IntN(6))
		for i := range rs {
			lo := uint16(1 + rng.IntN(40))
			rs[i] = portrange.Range{Lo: lo, Hi: lo + uint16(rng.IntN(6))}
		}
		pairs := overlappingPorts(rs)
		// Groups: union of ranges that overlap transitively.
		sorted := slices.Clone(rs)
		slices.SortFunc(sorted, func(x, y portrange.Range) int { return int(x.Lo) - int(y.Lo) })
		want, hi := 0, uint16(0)
		for i, r := range sorted {
			if i > 0 && r.Lo <= hi {
				want++
			}
			hi = max(hi, r.Hi)
		}
		if len(pairs) != want {
			t.Fatalf("%v: %d pairs %v, want %d", rs, len(pairs), pairs, want)
		}
		for _, p := range pairs {
			if !p[0].Overlaps(p[1]) {
				t.Fatalf("%v: pair %v does not overlap", rs, p)
			}
		}
		// Every range but one per group is named second exactly once.
		seconds := map[portrange.Range]int{}
		for _, p := range pairs {
			seconds[p[1]]++
		}
		count := map[portrange.Range]int{}
		for _, r := range rs {
			count[r]++
		}
		for r, c := range seconds {
			if c > count[r] {
				t.Fatalf("%v: %v named second %d times", rs, r, c)
			}
		}
	}
}

// TestPortOverlapMessage: an overlap listed out of order gives
// one diagnostic naming both ranges (which one is named first follows the
// sorted order now, not the list's).
func TestPortOverlapMessage(t *testing.T) {
	out := review109Parse(t, "whitelist \"w\" {\n clients = [\"10.1.0.0/24\"]\n server = \"10.2.0.9\"\n server_ports = [\"100-200\", \"50-150\", \"7000\"]\n}")
	var hits []string
	for _, s := range out {
		if strings.Contains(s, "overlaps") {
			hits = append(hits, s)
		}
	}
	if len(hits) != 1 || !strings.Contains(hits[0], "100-200") || !strings.Contains(hits[0], "50-150") {
		t.Fatalf("diagnostics %q", out)
	}
	t.Log(hits[0])
}

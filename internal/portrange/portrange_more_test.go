package portrange

import (
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
)

// moreCheckMasks checks that r.Masks() matches exactly the ports of r:
// every pair is one aligned prefix block, the blocks tile Lo..Hi in order
// with no gap and no overlap, and there are at most 30 of them.
func moreCheckMasks(t *testing.T, r Range) {
	t.Helper()
	ms := r.Masks()
	if len(ms) > 30 {
		t.Fatalf("%v: %d masks, want <= 30", r, len(ms))
	}
	next := uint32(r.Lo)
	for _, m := range ms {
		// A prefix mask is ones then zeros.
		inv := uint16(^m.Mask)
		if inv&(inv+1) != 0 {
			t.Fatalf("%v: mask %#04x is not a prefix mask", r, m.Mask)
		}
		if m.Value&^m.Mask != 0 {
			t.Fatalf("%v: value %#04x has bits outside mask %#04x", r, m.Value, m.Mask)
		}
		if uint32(m.Value) != next {
			t.Fatalf("%v: block %#04x/%#04x starts at %d, want %d", r, m.Value, m.Mask, m.Value, next)
		}
		next = uint32(m.Value) + uint32(inv) + 1
	}
	if next != uint32(r.Hi)+1 {
		t.Fatalf("%v: blocks end at %d, want %d", r, next-1, r.Hi)
	}
}

// TestMasksTileEveryRange checks the value/mask split of every range
// that starts at 1 or ends at 65535, every single port, every range of
// width 2..17 and every power-of-two-aligned block, plus random ranges
// checked port by port over all 65536 ports.
// Written by review (helper-70); it passed.
func TestMasksTileEveryRange(t *testing.T) {
	for p := 1; p <= 65535; p++ {
		moreCheckMasks(t, Range{1, uint16(p)})
		moreCheckMasks(t, Range{uint16(p), 65535})
		moreCheckMasks(t, Single(uint16(p)))
		for w := 1; w <= 16 && p+w <= 65535; w++ {
			moreCheckMasks(t, Range{uint16(p), uint16(p + w)})
		}
	}
	if n := len(All.Masks()); n != 16 {
		t.Errorf("All: %d masks, want 16", n)
	}
	rng := rand.New(rand.NewPCG(70, 70))
	for i := 0; i < 400; i++ {
		a, b := uint16(rng.IntN(65535)+1), uint16(rng.IntN(65535)+1)
		r := Range{min(a, b), max(a, b)}
		ms := r.Masks()
		for p := 0; p <= 65535; p++ {
			hits := 0
			for _, m := range ms {
				if uint16(p)&m.Mask == m.Value {
					hits++
				}
			}
			if want := r.Contains(uint16(p)); (hits == 1) != want || hits > 1 {
				t.Fatalf("%v: port %d matched by %d masks, in range %v", r, p, hits, want)
			}
		}
		// Fewest: an aligned block gives one mask.
		if sz := r.Len(); sz&(sz-1) == 0 && int(r.Lo)%sz == 0 && len(ms) != 1 {
			t.Errorf("%v: aligned block split into %d masks", r, len(ms))
		}
	}
	// Aligned blocks of every size.
	for s := 0; s < 16; s++ {
		size := 1 << s
		for lo := size; lo+size-1 <= 65535; lo += size * 97 {
			r := Range{uint16(lo), uint16(lo + size - 1)}
			if ms := r.Masks(); len(ms) != 1 || bits.OnesCount16(^ms[0].Mask) != s {
				t.Fatalf("%v: %v, want one block", r, ms)
			}
		}
	}
	if ms := (Range{0, 10}).Masks(); ms != nil {
		t.Errorf("invalid range gave masks %v", ms)
	}
	if ms := (Range{10, 9}).Masks(); ms != nil {
		t.Errorf("reversed range gave masks %v", ms)
	}
}

// TestParseRefusesWhatTheOperatorDidNotMean feeds spellings that
// must not parse to some other range.
func TestParseRefusesWhatTheOperatorDidNotMean(t *testing.T) {
	bad := []string{"", "-", "5201-", "-5201", "1-2-3", "5201x", "5201 5202", "5201,5202",
		"65536", "1-65536", "99999999999999999999", "0", "0-10", "+5201", "5201-+5300", "0x1451",
		"1_000", "10-9", "\x005201", "5201\x00", "-0", "5201--5300", "5201-5300-", "١٢"}
	for _, s := range bad {
		if r, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", s, r)
		}
	}
	good := map[string]Range{"5201": {5201, 5201}, " 5201 ": {5201, 5201}, "50000-51000": {50000, 51000},
		"1-65535": All, "65535": {65535, 65535}, "50000 - 51000": {50000, 51000}}
	for s, want := range good {
		if r, err := Parse(s); err != nil || r != want {
			t.Errorf("Parse(%q) = %v, %v, want %v", s, r, err, want)
		}
	}
}

// TestNormalizeIsTheUnion checks Normalize against a port bitmap.
func TestNormalizeIsTheUnion(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 70))
	for i := 0; i < 300; i++ {
		var rs []Range
		var set [65536]bool
		for j := rng.IntN(6); j >= 0; j-- {
			a, b := uint16(rng.IntN(65536)), uint16(rng.IntN(65536))
			if rng.IntN(8) == 0 {
				a, b = b, a // an invalid one now and then
			}
			r := Range{a, b}
			rs = append(rs, r)
			if r.Valid() {
				for p := int(r.Lo); p <= int(r.Hi); p++ {
					set[p] = true
				}
			}
		}
		n := Normalize(rs)
		for k := 1; k < len(n); k++ {
			if int(n[k].Lo) <= int(n[k-1].Hi)+1 {
				t.Fatalf("%v: %v and %v touch or overlap", rs, n[k-1], n[k])
			}
		}
		for p := 0; p <= 65535; p++ {
			if ContainsPort(n, uint16(p)) != set[p] {
				t.Fatalf("%v -> %v: port %d", rs, n, p)
			}
		}
	}
}

// FuzzParseRange: Parse never panics; what it accepts is valid, prints
// back to a string Parse reads to the same range, and its masks tile it.
func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"5201", "1-65535", "50000-51000", " 1 - 2 ", "0", "-", "65536"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			return
		}
		if !r.Valid() {
			t.Fatalf("Parse(%q) = invalid %v", s, r)
		}
		if strings.ContainsAny(strings.TrimSpace(s), "+_xXoObB,") {
			t.Fatalf("Parse(%q) accepted a non-decimal spelling as %v", s, r)
		}
		back, err := Parse(r.String())
		if err != nil || back != r {
			t.Fatalf("Parse(%q) = %v; reparse %v, %v", s, r, back, err)
		}
		moreCheckMasks(t, r)
	})
}

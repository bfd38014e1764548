package portrange

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	good := map[string]Range{"5201": {5201, 5201}, " 50000-51000 ": {50000, 51000}, "1-65535": All, "7-7": {7, 7}}
	for in, want := range good {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"51000-50000": "reversed (empty); did you mean 50000-51000?",
		"0":           "port 0",
		"0-10":        "port 0",
		"65536":       "goes past 65535, the highest TCP port",
		"70000":       "goes past 65535",
		"1-70000":     "goes past 65535",
		"5000:6000":   "did you mean 5000-6000?",
		"5000..6000":  "did you mean 5000-6000?",
		"5000:x":      "not a port or a range such as 50000-51000",
		"-5":          "not a port",
		"5-":          "not a port",
		"+5":          "not a port",
		"a-b":         "not a port",
		"":            "not a port",
		"1-2-3":       "not a port",
	}
	for in, want := range bad {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", in, err, want)
		}
	}
}

// covered checks that the masks of r select exactly the ports of r.
func covered(t *testing.T, r Range) {
	t.Helper()
	ms := r.Masks()
	for p := 0; p <= 65535; p++ {
		n := 0
		for _, m := range ms {
			if uint16(p)&m.Mask == m.Value {
				n++
			}
		}
		if want := r.Contains(uint16(p)); (n == 1) != want || n > 1 {
			t.Fatalf("range %v: port %d matched by %d of %v", r, p, n, ms)
		}
	}
	if len(ms) > 30 {
		t.Fatalf("range %v takes %d masks, more than 2x16-2", r, len(ms))
	}
	for _, m := range ms {
		if m.Value&^m.Mask != 0 {
			t.Fatalf("range %v: mask %#x has value bits %#x outside it", r, m.Mask, m.Value)
		}
	}
}

func TestMasksCoverExactlyTheRange(t *testing.T) {
	rs := []Range{All, {1, 1}, {65535, 65535}, {50000, 51000}, {50000, 50015}, {1024, 2047}, {2, 65534}, {5201, 5210}}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 40 {
		a, b := uint16(rng.IntN(65535)+1), uint16(rng.IntN(65535)+1)
		rs = append(rs, Range{min(a, b), max(a, b)})
	}
	for _, r := range rs {
		covered(t, r)
	}
	counts := map[Range]int{All: 16, {50000, 50015}: 1, {5201, 5201}: 1, {1024, 2047}: 1, {50000, 51000}: 9}
	for r, want := range counts {
		if got := len(r.Masks()); got != want {
			t.Errorf("%v takes %d masks %v, want %d", r, got, r.Masks(), want)
		}
	}
}

// TestMasksAreFewest compares with the fewest aligned blocks found by
// dynamic programming over every range of a small port space scaled up.
func TestMasksAreFewest(t *testing.T) {
	// best[lo][hi] over ports 1..255 of aligned blocks.
	const n = 256
	best := make([][]int, n)
	for i := range best {
		best[i] = make([]int, n)
	}
	aligned := func(lo, hi int) bool {
		size := hi - lo + 1
		return size&(size-1) == 0 && lo%size == 0
	}
	for length := 1; length < n; length++ {
		for lo := 1; lo+length-1 < n; lo++ {
			hi := lo + length - 1
			if aligned(lo, hi) {
				best[lo][hi] = 1
				continue
			}
			b := 1 << 30
			for mid := lo; mid < hi; mid++ {
				b = min(b, best[lo][mid]+best[mid+1][hi])
			}
			best[lo][hi] = b
		}
	}
	for lo := 1; lo < n; lo++ {
		for hi := lo; hi < n; hi++ {
			if got := len(Range{uint16(lo), uint16(hi)}.Masks()); got != best[lo][hi] {
				t.Fatalf("%d-%d takes %d masks, the fewest is %d", lo, hi, got, best[lo][hi])
			}
		}
	}
}

func TestNormalize(t *testing.T) {
	got := Normalize([]Range{{10, 20}, {5201, 5201}, {21, 30}, {15, 16}, {0, 0}, {9, 9}, {40, 39}})
	want := []Range{{9, 30}, {5201, 5201}}
	if !slices.Equal(got, want) {
		t.Fatalf("Normalize = %v, want %v", got, want)
	}
	if Join(want) != "9-30,5201" || !ContainsPort(want, 5201) || ContainsPort(want, 31) || MaskCount(want) != len(Range{9, 30}.Masks())+1 {
		t.Fatalf("Join/ContainsPort/MaskCount of %v", want)
	}
}

func TestTextRoundTrip(t *testing.T) {
	for _, r := range []Range{{5201, 5201}, {50000, 51000}, All} {
		b, _ := r.MarshalText()
		var back Range
		if err := back.UnmarshalText(b); err != nil || back != r {
			t.Errorf("%v -> %q -> %v, %v", r, b, back, err)
		}
	}
}

func FuzzParseAndMasks(f *testing.F) {
	for _, s := range []string{"5201", "50000-51000", "1-65535", "0", "9-3", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			return
		}
		if !r.Valid() {
			t.Fatalf("Parse(%q) = %v without error", s, r)
		}
		back, err := Parse(r.String())
		if err != nil || back != r {
			t.Fatalf("%q -> %v -> %q -> %v, %v", s, r, r.String(), back, err)
		}
		total := 0
		for _, m := range r.Masks() {
			mr := m.Range()
			if !r.Contains(mr.Lo) || !r.Contains(mr.Hi) {
				t.Fatalf("mask %+v of %v leaves the range", m, r)
			}
			total += mr.Len()
		}
		if total != r.Len() {
			t.Fatalf("masks of %v cover %d ports, want %d", r, total, r.Len())
		}
	})
}

package portrange

import (
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var didYouMean87 = regexp.MustCompile(`did you mean ([^?]*)\?`)

// TestParseSuggestionParses: a "did you mean X?" must name a
// range Parse takes, or the operator who pastes it gets a second error.
// 9e92390 suggests "6000-5000" for iptables' "6000:5000" (reversed: Parse
// refuses it) and "0-10" for "0:10" (port 0: refused). Found by review
// (helper-87).
func TestParseSuggestionParses(t *testing.T) {
	for _, in := range []string{
		"5000:6000", "5000..6000", " 5000 : 6000 ", // held
		"6000:5000", "6000..5000", "0:10", "0..0", // fail on 9e92390
		"51000-50000", // the older reversed-range hint
	} {
		_, err := Parse(in)
		if err == nil {
			t.Errorf("Parse(%q) accepted", in)
			continue
		}
		m := didYouMean87.FindStringSubmatch(err.Error())
		if m == nil {
			continue
		}
		if _, err2 := Parse(m[1]); err2 != nil {
			t.Errorf("Parse(%q): %v; the suggestion %q is refused too: %v", in, err, m[1], err2)
		}
	}
}

// checkParse87 is what every answer of Parse must be: no panic, a valid
// range or a one-line message that quotes the input.
func checkParse87(t *testing.T, s string) {
	r, err := Parse(s)
	if err != nil {
		if msg := err.Error(); strings.ContainsAny(msg, "\n\r") || !strings.Contains(msg, strconv.Quote(s)) {
			t.Errorf("Parse(%q): message not one line quoting the input: %q", s, msg)
		}
		return
	}
	if !r.Valid() {
		t.Errorf("Parse(%q) = %v, an invalid range, and no error", s, r)
	}
	if back, err := Parse(r.String()); err != nil || back != r {
		t.Errorf("Parse(%q) = %v; its String %q reads back as %v, %v", s, r, r.String(), back, err)
	}
}

// TestParseRandomNeverPanicsOneLine: a bounded random walk over
// port-like text (digits, separators of other tools, signs, spaces,
// newlines, non-ASCII): Parse never panics, its messages stay on one line
// and quote the input, and what it accepts reads back. Written by review (helper-87); it passed.
func TestParseRandomNeverPanicsOneLine(t *testing.T) {
	rng := rand.New(rand.NewPCG(87, 87))
	atoms := []string{"0", "1", "5000", "6000", "65535", "65536", "70000", "99999999999999999999", "-", ":", "..", ".", ",", " ", "+", "\n", "\t", "x", "é", "\xff", "0x10", "--", "::"}
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(6) {
			b.WriteString(atoms[rng.IntN(len(atoms))])
		}
		checkParse87(t, b.String())
	}
}

// FuzzParse: go test -fuzz=FuzzParse ./internal/portrange
func FuzzParse(f *testing.F) {
	for _, s := range []string{"5201", "50000-51000", "5000:6000", "5000..6000", "70000", "1-70000", "-99999", "6000:5000", "0:10", "", " ", "\n5000:6000"} {
		f.Add(s)
	}
	f.Fuzz(checkParse87)
}

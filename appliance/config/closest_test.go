package config

import (
	"fmt"
	"strings"
	"testing"
)

// TestClosestOddNames: Closest (69d64ea) on no names, the empty
// name, names far apart in length, long names (4 KiB, one edit apart) and
// non-ASCII: within two byte edits or "". Written by review (helper-87); it passed. (It is
// O(len(a)*len(b)) with no length cut-off: two names of ~100 KiB each cost
// ~10^10 steps; only the root-owned config and the operator's own --node
// reach it, so this is a note, not a finding.)
func TestClosestOddNames(t *testing.T) {
	long := strings.Repeat("agent-", 700)
	for _, c := range []struct {
		name  string
		known []string
		want  string
	}{
		{"x", nil, ""},
		{"", []string{"agent-a", "agent-b"}, ""},
		{"agent-a", []string{"agent-a"}, "agent-a"},
		{"agnet-b", []string{"agent-a", "agent-b"}, "agent-b"},
		{"a", []string{strings.Repeat("a", 10)}, ""},
		{long, []string{long + "x", long + "xy"}, long + "x"},
		{"nœud", []string{"noeud"}, "noeud"},
	} {
		if got := Closest(c.name, c.known); got != c.want {
			t.Errorf("Closest(%.20q, %d names) = %.20q, want %.20q", c.name, len(c.known), got, c.want)
		}
	}
}

// TestEmptyPoolNameNoGuess: pool "" {} gets 'Did you mean "a1"?'
// on a file whose agents are a1 and b1: Closest (69d64ea) takes any name
// within two edits, so the empty name is "near" every name of one or two
// letters, and the first wins (b1 is as near). An empty name is no typo of
// a name; the guess is arbitrary. A 4 KiB name gets none (held). Fails on
// 79d1aff for "". Found by review (helper-87).
func TestEmptyPoolNameNoGuess(t *testing.T) {
	for _, label := range []string{`""`, fmt.Sprintf("%q", strings.Repeat("z", 4096))} {
		_, _, diags, text := loadFileOf(t, fmt.Sprintf(twoSitesWith, "", "pool "+label+" {}"))
		if !diags.HasErrors() || strings.Contains(text, "Did you mean") {
			t.Errorf("pool %.20s: %s", label, text)
		}
	}
}

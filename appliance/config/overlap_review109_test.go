package config

// Written by review (helper-109) of af75fdc (a whitelist's clients and
// servers may not overlap each other).

import (
	"fmt"
	"strings"
	"testing"
)

func review109Parse(t *testing.T, whitelist string) []string {
	t.Helper()
	src := fmt.Sprintf(twoSitesWith, "", whitelist)
	src = strings.Replace(src, `prefixes = ["10.1.0.0/24"]`, `prefixes = ["10.1.0.0/24", "2001:db8:1::/48"]`, 1)
	src = strings.Replace(src, `prefixes = ["10.2.0.0/24"]`, `prefixes = ["10.2.0.0/24", "2001:db8:2::/48"]`, 1)
	_, diags := Parse(Source{Filename: "sos.hcl", Bytes: []byte(src)})
	var out []string
	for _, d := range diags {
		out = append(out, d.Summary)
	}
	return out
}

// TestMixedFamiliesNotOverlapping: IPv4 and IPv6 networks (and
// the all-addresses prefixes of both) in one list are not an overlap.
func TestMixedFamiliesNotOverlapping(t *testing.T) {
	for name, wl := range map[string]string{
		"v4+v6 clients and servers": "whitelist \"w\" {\n clients = [\"10.1.0.0/25\", \"2001:db8:1::/64\"]\n servers = [\"10.2.0.9\", \"2001:db8:2::9\"]\n}",
		"adjacent":                  "whitelist \"w\" {\n clients = [\"10.1.0.0/25\", \"10.1.0.128/25\"]\n servers = [\"10.2.0.8/29\", \"10.2.0.16/29\"]\n}",
	} {
		for _, s := range review109Parse(t, wl) {
			if strings.Contains(s, "overlaps") {
				t.Errorf("%s: refused: %s", name, s)
			}
		}
	}
}

// TestOverlapsOnePerEntry: n copies of one network give at most one
// diagnostic each (the first check gave one per pair, n(n-1)/2, and a 1 MiB
// file holds about 80,000 entries).
func TestOverlapsOnePerEntry(t *testing.T) {
	const n = 2000
	list := strings.TrimSuffix(strings.Repeat("\"10.1.0.0/24\", ", n), ", ")
	out := review109Parse(t, "whitelist \"w\" {\n clients = ["+list+"]\n server = \"10.2.0.9\"\n}")
	count := 0
	for _, s := range out {
		if strings.Contains(s, "overlaps") {
			count++
		}
	}
	t.Logf("%d copies: %d overlap diagnostics", n, count)
	if count > n {
		t.Errorf("%d copies of one network give %d diagnostics (quadratic); one per entry at most would do", n, count)
	}
}

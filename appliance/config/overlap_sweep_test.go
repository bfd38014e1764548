package config

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/portrange"
)

// TestServerPortsOverlapOnePerEntry: a list of server_ports that repeats
// one port gives one diagnostic per repeat, found in n log n; the pairwise
// check gave one per pair (1,999,000 for 2,000 copies).
func TestServerPortsOverlapOnePerEntry(t *testing.T) {
	const n = 2000
	list := strings.TrimSuffix(strings.Repeat(`"5201", `, n-1)+`"5200-5202", `, ", ")
	out := review109Parse(t, "whitelist \"w\" {\n clients = [\"10.1.0.0/24\"]\n server = \"10.2.0.9\"\n server_ports = ["+list+"]\n}")
	count := 0
	for _, s := range out {
		if strings.Contains(s, "server_ports: ") && strings.Contains(s, "overlaps") {
			count++
		}
	}
	if count != n-1 {
		t.Errorf("%d overlapping entries gave %d diagnostics, want %d (one per entry but the first)", n, count, n-1)
	}
	// Ranges that only touch, and one inside a wide one.
	out = review109Parse(t, "whitelist \"w\" {\n clients = [\"10.1.0.0/24\"]\n server = \"10.2.0.9\"\n server_ports = [\"5000-5099\", \"5100-5199\", \"6000-7000\", \"6500\", \"7001\"]\n}")
	var got []string
	for _, s := range out {
		if strings.Contains(s, "overlaps") {
			got = append(got, s)
		}
	}
	if len(got) != 1 || !strings.Contains(got[0], "6500 overlaps 6000-7000") {
		t.Errorf("diagnostics %q, want one: 6500 overlaps 6000-7000", got)
	}
}

// The sweeps agree with the pairwise checks they replace, on random
// lists: overlappingPorts flags exactly the ranges that overlap one
// before them in the order of their first port, each with a range it
// overlaps; firstOverlap and firstPortOverlap find a pair exactly when
// one exists, and the pair they give overlaps.
func TestOverlapSweepsAgreeWithPairwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	randRange := func() portrange.Range {
		lo := uint16(1 + rng.IntN(300))
		return portrange.Range{Lo: lo, Hi: lo + uint16(rng.IntN(40))}
	}
	randPrefix := func() netip.Prefix {
		if rng.IntN(4) == 0 {
			b := [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(rng.IntN(256))}
			return netip.PrefixFrom(netip.AddrFrom16(b), 120+rng.IntN(9)).Masked()
		}
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(4)), byte(rng.IntN(256))}), 22+rng.IntN(11)).Masked()
	}
	for round := range 3000 {
		var rs, qs []portrange.Range
		var ps, os []netip.Prefix
		for range rng.IntN(8) {
			rs = append(rs, randRange())
			ps = append(ps, randPrefix())
		}
		for range rng.IntN(8) {
			qs = append(qs, randRange())
			os = append(os, randPrefix())
		}

		// overlappingPorts against the pairwise rule, in sorted order.
		flagged := map[portrange.Range]int{}
		for _, o := range overlappingPorts(rs) {
			if !o[0].Overlaps(o[1]) {
				t.Fatalf("round %d: %v: pair %v does not overlap", round, rs, o)
			}
			flagged[o[1]]++
		}
		want := map[portrange.Range]int{}
		for i, r := range rs {
			for j, q := range rs {
				// q comes before r when it starts earlier, or
				// equally early and earlier in the list.
				if (q.Lo < r.Lo || q.Lo == r.Lo && j < i) && q.Overlaps(r) {
					want[r]++
					break
				}
			}
		}
		if len(flagged) != len(want) {
			t.Fatalf("round %d: %v: flagged %v, want %v", round, rs, flagged, want)
		}
		for r, n := range want {
			if flagged[r] != n {
				t.Fatalf("round %d: %v: flagged %v, want %v", round, rs, flagged, want)
			}
		}

		anyPorts, anyPrefixes := false, false
		for _, r := range rs {
			for _, q := range qs {
				anyPorts = anyPorts || r.Overlaps(q)
			}
		}
		for _, p := range ps {
			for _, o := range os {
				anyPrefixes = anyPrefixes || p.Overlaps(o)
			}
		}
		if pair, ok := firstPortOverlap(rs, qs); ok != anyPorts || ok && !pair[0].Overlaps(pair[1]) {
			t.Fatalf("round %d: firstPortOverlap(%v, %v) = %v %v, pairwise %v", round, rs, qs, pair, ok, anyPorts)
		}
		if pair, ok := firstOverlap(ps, os); ok != anyPrefixes || ok && !pair[0].Overlaps(pair[1]) {
			t.Fatalf("round %d: firstOverlap(%v, %v) = %v %v, pairwise %v", round, ps, os, pair, ok, anyPrefixes)
		}
	}
}

// Lists are converted element by element: numbers in a list of strings
// read as strings, as cty's conversion of the whole tuple read them, and a
// list of 20,000 clients decodes whole (cty's conversion took 11 s for it,
// sorting the elements' types).
func TestLongListsOfStrings(t *testing.T) {
	var clients []string
	for i := range 20000 {
		clients = append(clients, fmt.Sprintf(`"10.1.%d.%d/32"`, i/256%256, i%256))
	}
	src := fmt.Sprintf(twoSitesWith, "", "whitelist \"w\" {\n clients = ["+strings.Join(clients, ", ")+"]\n server = \"10.2.0.9\"\n server_ports = [5201, \"50000-51000\"]\n}")
	src = strings.Replace(src, `prefixes = ["10.1.0.0/24"]`, `prefixes = ["10.1.0.0/16"]`, 1)
	_, diags := Parse(Source{Filename: "sos.hcl", Bytes: []byte(src)})
	// 20,000 clients are more flows than a whitelist may take: the
	// refusal counts what was decoded, the clients and the port matches
	// of 5201 (a number) and 50000-51000.
	want := "20000 client prefix(es) x 1 server prefix(es) x 10 port matches"
	if len(diags) == 0 {
		t.Fatalf("no diagnostics, want the flow count's (%q)", want)
	}
	for _, d := range diags {
		if !strings.Contains(d.Summary+" "+d.Detail, want) {
			t.Errorf("diagnostic %q, want only the flow count's (%q, one per switch)", d.Summary, want)
		}
	}
	_, diags = Parse(Source{Filename: "sos.hcl", Bytes: []byte(fmt.Sprintf(twoSitesWith, "", "whitelist \"w\" {\n clients = [\"10.1.0.0/24\", [\"x\"]]\n server = \"10.2.0.9\"\n}"))})
	var all []string
	for _, d := range diags {
		all = append(all, d.Summary)
	}
	if !strings.Contains(strings.Join(all, "\n"), "clients must be a list of strings") {
		t.Errorf("a list inside the list: %v", diags)
	}
}

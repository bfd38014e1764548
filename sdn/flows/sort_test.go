package flows

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// TestSortOrder: Sort orders by table, priority (highest first), cookie,
// then match text and key, whatever order the flows come in.
func TestSortOrder(t *testing.T) {
	inPort := func(p uint32) ofp13.Match { return ofp13.NewMatch(ofp13.InPort(p)) }
	want := []Flow{
		{Table: 0, Priority: 200, Cookie: 1, Match: inPort(1)},
		{Table: 0, Priority: 100, Cookie: 1, Match: inPort(1)},
		{Table: 0, Priority: 100, Cookie: 2, Match: inPort(1)},
		{Table: 0, Priority: 100, Cookie: 2, Match: inPort(2)},
		{Table: 1, Priority: 300, Cookie: 0, Match: inPort(1)},
		{Table: 1, Priority: 0, Cookie: 0, Match: ofp13.Match{}},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		got := slices.Clone(want)
		r.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
		Sort(got)
		for i := range want {
			if got[i].Key() != want[i].Key() || got[i].Cookie != want[i].Cookie {
				t.Fatalf("sorted position %d: %s cookie %d, want %s cookie %d", i, got[i].Key(), got[i].Cookie, want[i].Key(), want[i].Cookie)
			}
		}
	}
}

// longMatchFlows are n flows of one table, priority and cookie whose
// matches have fields empty fields each: what a hostile switch can put in
// a flow dump (found by review, helper-53), for which
// only the matches decide the order.
func longMatchFlows(n, fields int) []Flow {
	out := make([]Flow, n)
	for i := range out {
		m := make([]ofp13.OXM, fields)
		for j := range m {
			m[j] = ofp13.OXM{Class: 1, Field: ofp13.OXMField(j % 3)}
		}
		m[i%fields].Field = 9 // distinct matches
		out[i] = Flow{Table: 0, Priority: 100, Cookie: CookiePrefix, Match: ofp13.Match{Fields: m}}
	}
	return out
}

// BenchmarkSortLongMatches sorts 128 flows whose 2,000-field matches alone
// decide their order. It reports its time against the floor measured in
// the same run, rendering each flow's match and key once ("x-floor"):
// Sort made both texts at every comparison before (some 50x the floor at
// this size; it took 20 s of CPU for a dump of 8 MiB), once per flow now.
func BenchmarkSortLongMatches(b *testing.B) {
	in := longMatchFlows(128, 2000)
	work := make([]Flow, len(in))
	var sorting, floor time.Duration
	for b.Loop() {
		copy(work, in)
		start := time.Now()
		Sort(work)
		mid := time.Now()
		for _, f := range in {
			_, _ = f.Match.String(), f.Key()
		}
		sorting, floor = sorting+mid.Sub(start), floor+time.Since(mid)
	}
	b.ReportMetric(float64(sorting)/float64(floor), "x-floor")
}

package plan

import (
	"slices"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
)

// TestSteeringRankMixed: removals (restore to absent) run table,
// rule, route, before every put-back, which run route, rule, table;
// adds and updates after all restores, route, rule, table. Written by
// review (helper-62); it passed.
func TestSteeringRankMixed(t *testing.T) {
	st := func(a Action, key string, after bool) Change {
		return Change{Action: a, Kind: item.KindSteering, Key: key, AfterPresent: after}
	}
	in := []Change{
		st(Restore, item.SteeringKeyRoute, true),
		st(Add, item.SteeringKeyNftables, true),
		st(Restore, item.SteeringKeyRoute, false),
		st(Restore, item.SteeringKeyNftables, true),
		st(Restore, item.SteeringKeyRule, false),
		st(Add, item.SteeringKeyRoute, true),
		st(Restore, item.SteeringKeyNftables, false),
		st(Restore, item.SteeringKeyRule, true),
		st(Add, item.SteeringKeyRule, true),
	}
	slices.SortFunc(in, compareChanges)
	var got []string
	for _, c := range in {
		s := string(c.Action) + " " + c.Key
		if c.Action == Restore && !c.AfterPresent {
			s += " (remove)"
		}
		got = append(got, s)
	}
	want := []string{
		"- nftables (remove)", "- rule (remove)", "- route (remove)",
		"- route", "- rule", "- nftables",
		"+ route", "+ rule", "+ nftables",
	}
	t.Logf("order: %q", got)
	if !slices.Equal(got, want) {
		t.Errorf("order\n got %q\nwant %q", got, want)
	}
}

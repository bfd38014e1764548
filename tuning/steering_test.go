package tuning

import (
	"net/netip"
	"testing"

	"github.com/google/nftables/expr"

	"github.com/sosappliance/sosappliance/host/item"
)

// The rules written for a spec read back as the same spec: this is what
// makes a second plan empty.
func TestSteeringRuleExprsDecodeToTheSameRules(t *testing.T) {
	for _, spec := range []item.SteeringSpec{
		testSteeringSpec(),
		{Mark: 7, ListenPort: 1, Divert: []item.Divert{{Clients: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("192.0.2.1/32")}, Server: netip.MustParseAddr("198.51.100.9"), Port: 65535}}}, {Mark: 0xffffffff},
	} {
		spec = spec.WithDefaults()
		want, err := item.TproxyRules{Interface: spec.Interface, Mark: spec.Mark, ListenPort: spec.ListenPort, Divert: spec.Divert}.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		var dumped []dumpedRule
		for _, exprs := range steeringRuleExprs(want) {
			dumped = append(dumped, dumpedRule{exprs: exprs, userData: ruleTag})
		}
		got, err := decodeSteeringRules(dumped)
		if err != nil {
			t.Fatal(err)
		}
		gotText, err := got.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		wantText, _ := want.Canonical()
		if gotText != wantText {
			t.Errorf("decoded\n%s\nwant\n%s", gotText, wantText)
		}
	}
}

func TestDecodeSteeringRulesRejectsForeignContent(t *testing.T) {
	spec, _ := item.TproxyRules{Mark: 1, ListenPort: 2, Divert: testSteeringSpec().Divert}.Normalize()
	good := func() []dumpedRule {
		var d []dumpedRule
		for _, e := range steeringRuleExprs(spec) {
			d = append(d, dumpedRule{exprs: e, userData: ruleTag})
		}
		return d
	}
	tests := map[string]func([]dumpedRule) []dumpedRule{
		"no rules":          func([]dumpedRule) []dumpedRule { return nil },
		"foreign user data": func(d []dumpedRule) []dumpedRule { d[1].userData = nil; return d },
		"unknown expression": func(d []dumpedRule) []dumpedRule {
			d[2].unknown = []string{"counter"}
			return d
		},
		"divert first": func(d []dumpedRule) []dumpedRule { d[0], d[1] = d[1], d[0]; return d },
		"verdict not last": func(d []dumpedRule) []dumpedRule {
			d[1].exprs = append(d[1].exprs, &expr.Verdict{Kind: expr.VerdictAccept})
			return d
		},
		"drop verdict": func(d []dumpedRule) []dumpedRule {
			d[0].exprs[len(d[0].exprs)-1] = &expr.Verdict{Kind: expr.VerdictDrop}
			return d
		},
		"non-contiguous mask": func(d []dumpedRule) []dumpedRule {
			for _, e := range d[1].exprs {
				if bw, ok := e.(*expr.Bitwise); ok {
					bw.Mask = []byte{255, 0, 255, 0}
				}
			}
			return d
		},
		"different marks": func(d []dumpedRule) []dumpedRule {
			for _, e := range d[1].exprs {
				if imm, ok := e.(*expr.Immediate); ok && len(imm.Data) == 4 {
					imm.Data = []byte{9, 9, 9, 9}
				}
			}
			return d
		},
		"truncated rule": func(d []dumpedRule) []dumpedRule { d[1].exprs = d[1].exprs[:5]; return d },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			if got, err := decodeSteeringRules(mutate(good())); err == nil {
				t.Fatalf("decoded %+v, want an error", got)
			}
		})
	}
}

package tuning

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/portrange"
)

// The rules written for a spec read back as the same spec: this is what
// makes a second plan empty.
func TestSteeringRuleExprsDecodeToTheSameRules(t *testing.T) {
	for _, spec := range []item.SteeringSpec{
		testSteeringSpec(),
		{Mark: 7, ListenPort: 1, Divert: []item.Divert{{Clients: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("192.0.2.1/32")}, Server: netip.MustParseAddr("198.51.100.9"), Port: 65535}}}, {Mark: 0xffffffff},
		{Mark: 7, ListenPort: 1, Divert: []item.Divert{{
			Clients: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/25"), netip.MustParsePrefix("10.0.0.128/26"), netip.MustParsePrefix("255.255.255.255/32")},
			Servers: []netip.Prefix{netip.MustParsePrefix("10.2.0.16/28"), netip.MustParsePrefix("0.0.0.0/32")},
			Ports:   []portrange.Range{{Lo: 1, Hi: 1}, {Lo: 2811, Hi: 2812}, {Lo: 50000, Hi: 51000}, {Lo: 65535, Hi: 65535}}}}},
		// Dual stack: IPv4 diverts in table ip, IPv6 ones in table ip6.
		{Mark: 7, ListenPort: 1, Interface: "eth1", Divert: []item.Divert{
			{Clients: []netip.Prefix{netip.MustParsePrefix("2001:db8:1::/48"), netip.MustParsePrefix("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128")},
				Servers: []netip.Prefix{netip.MustParsePrefix("2001:db8:2::/124")}, Ports: []portrange.Range{{Lo: 50000, Hi: 51000}}},
			{Clients: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Server: netip.MustParseAddr("10.1.0.1"), Port: 80}},
			Replies: []item.Divert{{Clients: []netip.Prefix{netip.MustParsePrefix("2001:db8:3::/48")},
				Servers: []netip.Prefix{netip.MustParsePrefix("2001:db8:1::/64")}, Ports: []portrange.Range{{Lo: 22, Hi: 22}}}}},
		// An agent that is only ever the server side: replies, no
		// diverts, so no listener in the table.
		{Mark: 7, Interface: "eth1", Replies: []item.Divert{
			{Clients: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}, Servers: []netip.Prefix{netip.MustParsePrefix("10.2.0.16/28")},
				Ports: []portrange.Range{{Lo: 2811, Hi: 2811}, {Lo: 50000, Hi: 51000}}},
			{Clients: []netip.Prefix{netip.MustParsePrefix("10.3.0.0/24")}, Server: netip.MustParseAddr("10.2.0.1"), Port: 5201}}},
	} {
		spec = spec.WithDefaults()
		want, err := item.TproxyRules{Interface: spec.Interface, Mark: spec.Mark, ListenPort: spec.ListenPort, Divert: spec.Divert, Replies: spec.Replies}.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		var got item.TproxyRules
		for i, f := range nftFamilies {
			dumped, sets := dumpOf(want, f)
			one, err := decodeSteeringRules(dumped, sets, f)
			if err != nil {
				t.Fatal(err)
			}
			if why := mergeFamilies(&got, one, i == 0); why != "" {
				t.Fatal(why)
			}
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

// dumpOf is what the kernel would report for the table of family f of t.
func dumpOf(t item.TproxyRules, f nftFamily) ([]dumpedRule, map[string]nftSet) {
	sets, rules := steeringRuleExprs(t, f)
	var dumped []dumpedRule
	for _, exprs := range rules {
		dumped = append(dumped, dumpedRule{exprs: exprs, userData: ruleTag})
	}
	m := map[string]nftSet{}
	for _, s := range sets {
		m[s.name] = nftSet{keyType: s.keyType.Name, interval: true, elements: s.elements}
	}
	return dumped, m
}

func TestDecodeSteeringRulesRejectsForeignContent(t *testing.T) {
	spec, _ := item.TproxyRules{Mark: 1, ListenPort: 2, Divert: testSteeringSpec().Divert, Replies: testSteeringSpec().Replies}.Normalize()
	good := func() []dumpedRule {
		d, _ := dumpOf(spec, ipv4Family)
		return d
	}
	setTests := map[string]func(map[string]nftSet){
		"set missing":     func(m map[string]nftSet) { delete(m, "ports0") },
		"set not used":    func(m map[string]nftSet) { m["extra"] = m["ports1"] },
		"set wrong type":  func(m map[string]nftSet) { s := m["clients0"]; s.keyType = "inet_service"; m["clients0"] = s },
		"set no interval": func(m map[string]nftSet) { s := m["servers1"]; s.interval = false; m["servers1"] = s },
		"lone interval end": func(m map[string]nftSet) {
			s := m["ports0"]
			s.elements = append(s.elements, nftables.SetElement{Key: []byte{0, 9}, IntervalEnd: true})
			m["ports0"] = s
		},
		"wrong key size": func(m map[string]nftSet) {
			s := m["clients1"]
			s.elements = append(s.elements, nftables.SetElement{Key: []byte{1, 2}})
			m["clients1"] = s
		},
	}
	for name, mutate := range setTests {
		t.Run(name, func(t *testing.T) {
			d, sets := dumpOf(spec, ipv4Family)
			mutate(sets)
			if got, err := decodeSteeringRules(d, sets, ipv4Family); err == nil {
				t.Fatalf("decoded %+v, want an error", got)
			}
		})
	}
	_, sets := dumpOf(spec, ipv4Family)
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
		"inverted lookup": func(d []dumpedRule) []dumpedRule {
			for _, e := range d[1].exprs {
				if lk, ok := e.(*expr.Lookup); ok {
					lk.Invert = true
				}
			}
			return d
		},
		"one set looked up twice": func(d []dumpedRule) []dumpedRule {
			for _, e := range d[2].exprs {
				if lk, ok := e.(*expr.Lookup); ok && lk.SetName == "ports1" {
					lk.SetName = "ports0"
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
		// Rules 1-3 are the diverts, 4-6 their pass rules, 7 the reply's.
		"divert without the SYN check": func(d []dumpedRule) []dumpedRule {
			d[1].exprs = slices.DeleteFunc(d[1].exprs, func(e expr.Any) bool {
				_, ok := e.(*expr.Bitwise)
				return ok
			})
			return d
		},
		"divert without its pass rule": func(d []dumpedRule) []dumpedRule { return slices.Delete(d, 6, 7) },
		"pass rules out of order":      func(d []dumpedRule) []dumpedRule { d[4], d[5] = d[5], d[4]; return d },
		"reply before a divert's pass": func(d []dumpedRule) []dumpedRule { d[6], d[7] = d[7], d[6]; return d },
		"divert after the passes":      func(d []dumpedRule) []dumpedRule { d[3], d[4] = d[4], d[3]; return d },
		"pass without the local check": func(d []dumpedRule) []dumpedRule {
			d[7].exprs = slices.DeleteFunc(d[7].exprs, func(e expr.Any) bool {
				_, ok := e.(*expr.Fib)
				return ok
			})
			return d
		},
		"pass that accepts": func(d []dumpedRule) []dumpedRule {
			d[7].exprs[len(d[7].exprs)-1] = &expr.Verdict{Kind: expr.VerdictAccept}
			return d
		},
		"dup out of another register": func(d []dumpedRule) []dumpedRule {
			for _, e := range d[4].exprs {
				if dup, ok := e.(*expr.Dup); ok {
					dup.RegDev = 3
				}
			}
			return d
		},
		"dup to a fixed device": func(d []dumpedRule) []dumpedRule {
			for _, e := range d[5].exprs {
				if m, ok := e.(*expr.Meta); ok && m.Key == expr.MetaKeyIIF {
					m.Key = expr.MetaKeyOIF
				}
			}
			return d
		},
		"pass rule marking": func(d []dumpedRule) []dumpedRule {
			last := len(d[7].exprs) - 1
			d[7].exprs = append(d[7].exprs[:last:last], &expr.Immediate{Register: reg, Data: []byte{1, 0, 0, 0}},
				&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg}, d[7].exprs[last])
			return d
		},
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			if got, err := decodeSteeringRules(mutateFromSocketRule(good(), mutate), sets, ipv4Family); err == nil {
				t.Fatalf("decoded %+v, want an error", got)
			}
		})
	}
	// The rules that let unsteered traffic out, and their set.
	early := map[string]func([]dumpedRule) []dumpedRule{
		"early rule dropped": func(d []dumpedRule) []dumpedRule { return d[1:] },
		"early rule last":    func(d []dumpedRule) []dumpedRule { return append(d[1:], d[0]) },
		"early lookup not inverted": func(d []dumpedRule) []dumpedRule {
			d[0].exprs[1].(*expr.Lookup).Invert = false
			return d
		},
	}
	for name, mutate := range early {
		t.Run(name, func(t *testing.T) {
			if got, err := decodeSteeringRules(mutate(good()), sets, ipv4Family); err == nil {
				t.Fatalf("decoded %+v, want an error", got)
			}
		})
	}
	t.Run("steered set short of a client", func(t *testing.T) {
		_, sets := dumpOf(spec, ipv4Family)
		s := sets[setSteered]
		s.elements = addrElements([]netip.Prefix{netip.MustParsePrefix("10.9.1.0/24")})
		sets[setSteered] = s
		if got, err := decodeSteeringRules(good(), sets, ipv4Family); err == nil {
			t.Fatalf("decoded %+v, want an error", got)
		}
	})
}

// mutateFromSocketRule applies mutate to the rules from the
// transparent-socket rule on, the rules before it (which let unsteered
// traffic out) kept in front: mutations name rules by their place after
// them.
func mutateFromSocketRule(d []dumpedRule, mutate func([]dumpedRule) []dumpedRule) []dumpedRule {
	off := slices.IndexFunc(d, func(r dumpedRule) bool {
		return slices.ContainsFunc(r.exprs, func(e expr.Any) bool { _, ok := e.(*expr.Socket); return ok })
	})
	return append(slices.Clone(d[:off]), mutate(d[off:])...)
}

// FuzzSetIntervals feeds arbitrary set elements, as a hostile or foreign
// table could hold them, to the interval reader: it never panics, and what
// it accepts round-trips through the elements steering writes.
func FuzzSetIntervals(f *testing.F) {
	f.Add([]byte{0, 10, 1, 0, 20, 0, 1, 255, 255, 0}, uint8(2))
	f.Add([]byte{10, 0, 0, 0, 0, 10, 0, 1, 0, 1}, uint8(4))
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		size := []int{2, 4, 16}[int(n)%3]
		var elems []nftables.SetElement
		for len(b) > size {
			elems = append(elems, nftables.SetElement{Key: b[:size], IntervalEnd: b[size]&1 == 1})
			b = b[size+1:]
		}
		ivs, err := setIntervals(elems, size)
		if err != nil || size != 2 {
			return
		}
		var rs []portrange.Range
		for _, iv := range ivs {
			rs = append(rs, portrange.Range{Lo: uint16(iv[0][0])<<8 | uint16(iv[0][1]), Hi: uint16(iv[1][0])<<8 | uint16(iv[1][1])})
		}
		if slices.ContainsFunc(rs, func(r portrange.Range) bool { return !r.Valid() || r.Lo == 0 }) {
			return
		}
		back, err := setPortRanges(portElements(rs))
		if err != nil || !slices.Equal(back, portrange.Normalize(rs)) {
			t.Fatalf("ranges %v written and read back as %v (%v)", rs, back, err)
		}
	})
}

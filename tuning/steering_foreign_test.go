package tuning

import (
	"slices"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// (Review, helper-110.) decodeSteeringRules is the observed value of the nftables
// item; a table that reads back as the desired value is never repaired.
// Each mutation below writes a table the kernel accepts that does
// something other than what steeringRuleExprs writes, and the decoder
// must refuse it.
func TestDecoderRefusesTablesThatDoSomethingElse(t *testing.T) {
	spec, err := item.TproxyRules{Mark: 1, ListenPort: 2, Interface: "sosa0",
		Divert: testSteeringSpec().Divert, Replies: testSteeringSpec().Replies}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	good := func() []dumpedRule {
		d, _ := dumpOf(spec, ipv4Family)
		return d
	}
	if _, err := decodeSteeringRules(good(), func() map[string]nftSet { _, s := dumpOf(spec, ipv4Family); return s }(), ipv4Family); err != nil {
		t.Fatalf("the written table does not decode: %v", err)
	}
	// moveToFront moves the expressions [from, to) of rule exprs to
	// just after its interface match: same expressions, other order.
	isSideEffect := func(e expr.Any) bool {
		switch e := e.(type) {
		case *expr.Dup, *expr.TProxy:
			return true
		case *expr.Meta:
			return e.SourceRegister || e.Key == expr.MetaKeyIIF
		case *expr.Immediate:
			return true
		case *expr.Payload:
			return false
		}
		return false
	}
	// hoist puts a rule's side effects (the dup with the loads that
	// feed it, or the mark and tproxy) before its matches: the kernel
	// runs expressions in order, so they then act on every packet of
	// the chain, matched or not.
	hoist := func(exprs []expr.Any, withDaddrLoad bool) []expr.Any {
		var front, rest []expr.Any
		for i := 0; i < len(exprs); i++ {
			e := exprs[i]
			if withDaddrLoad {
				if p, ok := e.(*expr.Payload); ok && i+1 < len(exprs) {
					if m, ok := exprs[i+1].(*expr.Meta); ok && m.Key == expr.MetaKeyIIF {
						_ = p
						front = append(front, e)
						continue
					}
				}
			}
			if _, ok := e.(*expr.Verdict); !ok && isSideEffect(e) {
				front = append(front, e)
				continue
			}
			rest = append(rest, e)
		}
		return append(front, rest...)
	}
	tests := map[string]func([]dumpedRule) []dumpedRule{
		// meta l4proto tcp socket transparent != 1 meta mark set 1
		// accept: every TCP packet not of a relay socket is marked and
		// delivered locally, including all pass-through traffic.
		"socket transparent != 1": func(d []dumpedRule) []dumpedRule {
			for _, e := range d[0].exprs {
				if c, ok := e.(*expr.Cmp); ok && len(c.Data) == 1 && c.Data[0] == 1 {
					c.Op = expr.CmpOpNeq
				}
			}
			return d
		},
		// dup to ip daddr device iif, then the matches: every packet
		// arriving on the interface, of any protocol, is sent back out.
		"pass rule dups before it matches": func(d []dumpedRule) []dumpedRule {
			last := len(d) - 1 // the reply's pass rule
			d[last].exprs = hoist(d[last].exprs, true)
			return d
		},
		// meta mark set 1 tproxy to :2, then the matches: every
		// packet on the interface is marked and offered to the listener.
		"divert marks and tproxies before it matches": func(d []dumpedRule) []dumpedRule {
			d[1].exprs = hoist(d[1].exprs, false)
			return d
		},
		// iifname "other" iifname "sosa0": the divert never matches.
		"divert with a second interface match": func(d []dumpedRule) []dumpedRule {
			d[1].exprs = append([]expr.Any{
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: ifnameData("other0")},
			}, d[1].exprs...)
			return d
		},
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			_, sets := dumpOf(spec, ipv4Family)
			mutated := mutateFromSocketRule(good(), mutate)
			got, err := decodeSteeringRules(mutated, sets, ipv4Family)
			if err == nil {
				text, _ := got.Canonical()
				want, _ := spec.Canonical()
				t.Errorf("decoded without error (as the desired value: %v); want an error", text == want)
			}
		})
	}
}

// The same on the kernel: the desired table is written, then rewritten
// with rule 1 reading "socket transparent != 1" (every steered TCP packet
// that is NOT a relay socket's is marked and accepted, so routed to the
// local table) or with the reply's pass rule dup'ing before it matches;
// the kernel takes both, and the executor observes the desired value, so
// a plan would find nothing to repair.
func TestObserveRefusesAForeignTable(t *testing.T) {
	if !testsupport.InFreshNetns(t, "nft", "ip") {
		return
	}
	run(t, "ip", "link", "set", "lo", "up")
	run(t, "ip", "link", "add", "sosa0", "type", "veth", "peer", "name", "sosa0p")
	spec := testSteeringSpec()
	applySpec(t, spec)
	want, present, err := observeSteeringTable()
	if err != nil || !present {
		t.Fatalf("observe the written table: %v %v", present, err)
	}
	rules, err := item.ParseTproxyRules(want)
	if err != nil {
		t.Fatal(err)
	}
	mutations := map[string]func([][]expr.Any) [][]expr.Any{
		"socket transparent != 1": func(rs [][]expr.Any) [][]expr.Any {
			at := slices.IndexFunc(rs, func(r []expr.Any) bool {
				return slices.ContainsFunc(r, func(e expr.Any) bool { _, ok := e.(*expr.Socket); return ok })
			})
			for _, e := range rs[at] {
				if c, ok := e.(*expr.Cmp); ok && len(c.Data) == 1 && c.Data[0] == 1 {
					c.Op = expr.CmpOpNeq
				}
			}
			return rs
		},
		"pass rule dups first": func(rs [][]expr.Any) [][]expr.Any {
			last := rs[len(rs)-1]
			var front, rest []expr.Any
			for i := 0; i < len(last); i++ {
				if p, ok := last[i].(*expr.Payload); ok && i+2 < len(last) {
					if _, ok := last[i+1].(*expr.Meta); ok {
						if _, ok := last[i+2].(*expr.Dup); ok {
							front = append(front, p, last[i+1], last[i+2])
							i += 2
							continue
						}
					}
				}
				rest = append(rest, last[i])
			}
			rs[len(rs)-1] = append(front, rest...)
			return rs
		},
	}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			c, err := nftConn()
			if err != nil {
				t.Fatal(err)
			}
			f := ipv4Family
			table := steeringTable(f)
			c.DelTable(table)
			c.AddTable(table)
			chain := c.AddChain(steeringChainSpec(table))
			sets, rs := steeringRuleExprs(rules, f)
			ids := map[string]uint32{}
			for _, s := range sets {
				set := &nftables.Set{Table: table, Name: s.name, KeyType: s.keyType, Interval: true}
				if err := c.AddSet(set, s.elements); err != nil {
					t.Fatal(err)
				}
				ids[s.name] = set.ID
			}
			for _, exprs := range mutate(rs) {
				for _, e := range exprs {
					if lk, ok := e.(*expr.Lookup); ok {
						lk.SetID = ids[lk.SetName]
					}
				}
				c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: exprs, UserData: ruleTag})
			}
			if err := c.Flush(); err != nil {
				t.Fatalf("the kernel refused the rewritten table: %v", err)
			}
			listing := run(t, "nft", "list", "table", "ip", SteeringTable)
			got, _, err := observeSteeringTable()
			if err != nil {
				t.Fatal(err)
			}
			if got == want {
				t.Errorf("the table now reads\n%s\nand is observed as the desired value; want it unrecognised", listing)
			}
		})
	}
}

package appliance

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/appliance/plan"
	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// steeringItems are the steering items (no interface: no rp_filter) of a
// spec with mark and route table (0: steering's own; table 100 is the
// number of the usual TPROXY recipe, `ip route add local 0.0.0.0/0 dev
// lo table 100`).
func steeringItems(t *testing.T, mark, table uint32) []item.Item {
	t.Helper()
	items, err := item.SteeringSpec{
		Mark: mark, RouteTable: table,
		ListenPort: 9876,
		Divert: []item.Divert{{
			Clients: []netip.Prefix{netip.MustParsePrefix("10.20.1.0/24")},
			Server:  netip.MustParseAddr("10.20.2.1"),
			Port:    5201,
		}},
	}.Items()
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// TestForeignRouteInSteeringTableRefusedInNetns: a default route in
// steering's route table that sosappliance did not make (the operator's
// own TPROXY recipe, another tool). Before, the apply replaced it (the
// kernel replaces by table and destination, whoever made the route) and
// recorded it as absent: the rollback deleted it. Now the plan refuses
// the route table, naming the route, and nothing changes. (Here table
// 100 stands for steering's; the configuration does not set it.) Found
// by review (helper-57).
func TestForeignRouteInSteeringTableRefusedInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	ctx := context.Background()
	cmdOut(t, "ip", "link", "set", "lo", "up")
	cmdOut(t, "ip", "route", "add", "local", "0.0.0.0/0", "dev", "lo", "table", "100")
	foreign := cmdOut(t, "ip", "route", "show", "table", "100")
	t.Logf("foreign routes in table 100 before: %q", foreign)

	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	_, err := Plan(ctx, st, exs, steeringItems(t, 0, 100), "node-a", "h1")
	t.Logf("plan: %v", err)
	if err == nil || !strings.Contains(err.Error(), "route table 100") || !strings.Contains(err.Error(), "local default dev lo table 100") {
		t.Errorf("plan: %v, want the route table refused, naming the route", err)
	}
	if got := cmdOut(t, "ip", "route", "show", "table", "100"); got != foreign {
		t.Errorf("table 100 is %q, was %q", got, foreign)
	}
	// Nor does a plan made before the route came get to replace it.
	cmdOut(t, "ip", "route", "del", "local", "0.0.0.0/0", "dev", "lo", "table", "100")
	p := mustPlan(t, st, exs, steeringItems(t, 0, 100))
	cmdOut(t, "ip", "route", "add", "local", "0.0.0.0/0", "dev", "lo", "table", "100")
	_, err = Apply(ctx, st, exs, p)
	t.Logf("apply of a plan made before: %v", err)
	if got := cmdOut(t, "ip", "route", "show", "table", "100"); got != foreign || err == nil {
		t.Errorf("apply: %v; table 100 is %q, was %q", err, got, foreign)
	}
}

// TestRollbackAfterIPv6DisabledLeavesNothingInNetns: rollback must
// remove every steering rule and route it made, IPv6 too, even when IPv6
// on lo was turned off after the apply (someone's sysctl, a profile).
// Before, deletion looked at IPv6 only while it ran, and the IPv6 fwmark
// rule stayed behind with no record left to remove it; now deletions look
// at both families. Found by review (helper-57).
func TestRollbackAfterIPv6DisabledLeavesNothingInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft", "sysctl") {
		return
	}
	ctx := context.Background()
	cmdOut(t, "ip", "link", "set", "lo", "up")
	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	if _, _, err := Converge(ctx, st, exs, steeringItems(t, 0, 0), "node-a", "h1"); err != nil {
		t.Fatal(err)
	}
	t.Logf("ipv6 rules after apply:\n%s", cmdOut(t, "ip", "-6", "rule", "show"))
	cmdOut(t, "sysctl", "-w", "net.ipv6.conf.lo.disable_ipv6=1")
	rp, _, err := Rollback(ctx, st, exs, "node-a")
	t.Logf("rollback:\n%s", rp.Text())
	if err != nil {
		t.Fatal(err)
	}
	if recs, _ := st.Records(); len(recs) != 0 {
		t.Logf("records left: %+v", recs)
	}
	cmdOut(t, "sysctl", "-w", "net.ipv6.conf.lo.disable_ipv6=0")
	rules := cmdOut(t, "ip", "-6", "rule", "show")
	routes := cmdOut(t, "ip", "-6", "route", "show", "table", "all", "proto", "83")
	t.Logf("ipv6 rules after rollback:\n%s\nipv6 routes proto 83: %q", rules, routes)
	if strings.Contains(rules, "proto 83") {
		t.Errorf("an IPv6 steering rule outlived the rollback:\n%s", rules)
	}
}

// TestRollbackOverPreexistingPartialTableInNetns: a table named
// sosappliance already there before the appliance first touched it (a
// state database lost or reset, an older install that wrote only table
// ip). Before, the observation's text ("not as sosappliance writes it")
// was recorded as the previous value, every rollback failed to parse it,
// and all three records stayed. Now such a leftover of the appliance's
// own marks is recorded as absent (tuning.Restorer), and the rollback
// removes it. Found by review (helper-57).
func TestRollbackOverPreexistingPartialTableInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	ctx := context.Background()
	cmdOut(t, "ip", "link", "set", "lo", "up")
	cmdOut(t, "nft", "add table ip sosappliance")
	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	if _, _, err := Converge(ctx, st, exs, steeringItems(t, 0, 0), "node-a", "h1"); err != nil {
		t.Fatal(err)
	}
	if rec, ok := recordOf(t, st, item.KindSteering, item.SteeringKeyNftables); ok {
		t.Logf("recorded previous: %q present %v", rec.Previous, rec.PreviousPresent)
	}
	for i := range 2 {
		rp, _, err := Rollback(ctx, st, exs, "node-a")
		t.Logf("rollback %d:\n%s\nerr: %v", i+1, rp.Text(), err)
		if err != nil {
			t.Errorf("rollback %d: %v", i+1, err)
		}
	}
	if recs, _ := st.Records(); len(recs) != 0 {
		t.Errorf("%d records left after rollback", len(recs))
	}
}

// steppedExecutor is the real steering executor, with a look at the host
// after each step it takes.
type steppedExecutor struct {
	tuning.Executor
	after func(step string)
}

func (p steppedExecutor) Apply(ctx context.Context, it item.Item) error {
	err := p.Executor.Apply(ctx, it)
	p.after("~ " + it.Key)
	return err
}

func (p steppedExecutor) Remove(ctx context.Context, it item.Item) error {
	err := p.Executor.Remove(ctx, it)
	p.after("- " + it.Key)
	return err
}

// TestMarkOrTableChangeKeepsMarkedPacketsLocalInNetns: a change of the
// steering mark or route table (between versions: the configuration does
// not set them). At every step of the apply, a packet the live table
// marks must still be routed to the local (transparent) stack. Before,
// the rule and route steps deleted the old object first: after the rule
// step, a packet of the live mark had no route ("No route to host"),
// until the table step, or for good if it failed. Now each step makes
// before it breaks, and the table step removes what only the old mark
// used. Found by review (helper-57).
func TestMarkOrTableChangeKeepsMarkedPacketsLocalInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	ctx := context.Background()
	markTopology(t)
	exs := tuning.Executors("/")
	var bad []string
	exs[item.KindSteering] = watchMarkedRoute(t, &bad)
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	for i, spec := range [][2]uint32{{0, 0}, {0x5350, 0}, {0x5350, 200}, {0x5351, 300}} {
		desired := steeringItems(t, spec[0], spec[1])
		p, _, err := Converge(ctx, st, exs, desired, "node-a", fmt.Sprint(i))
		t.Logf("converge %d:\n%s", i, p.Text())
		if err != nil {
			t.Fatal(err)
		}
		// Nothing of the old mark or table is left once the table moved.
		if p := mustPlan(t, st, exs, desired); !p.Empty() {
			t.Errorf("after converge %d:\n%s\nrules: %s\nroutes: %s", i, p.Text(), cmdOut(t, "ip", "rule", "show"),
				cmdOut(t, "ip", "route", "show", "table", "all", "proto", "83"))
		}
	}
	if len(bad) > 0 {
		t.Errorf("marked packets not routed locally after these steps:\n%s", strings.Join(bad, "\n"))
	}
}

// An operator's own rule identical to steering's but their own (no
// proto 83) survives apply and rollback. Written by review (helper-57);
// it passed.
func TestForeignIdenticalRuleSurvivesInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	ctx := context.Background()
	cmdOut(t, "ip", "link", "set", "lo", "up")
	cmdOut(t, "ip", "rule", "add", "fwmark", "0x534f", "lookup", "21327", "priority", "21327")
	before := cmdOut(t, "ip", "rule", "show")
	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	p, _, err := Converge(ctx, st, exs, steeringItems(t, 0, 0), "node-a", "h1")
	t.Logf("apply: %v\n%s\nrules: %s", err, p.Text(), cmdOut(t, "ip", "rule", "show"))
	if _, _, err := Rollback(ctx, st, exs, "node-a"); err != nil {
		t.Errorf("rollback: %v", err)
	}
	if got := cmdOut(t, "ip", "rule", "show"); got != before {
		t.Errorf("rules after rollback:\n%s\nwant\n%s", got, before)
	}
}

// Someone edits the appliance's table behind its back (adds a rule,
// deletes an element): the next converge repairs it, and rollback still
// removes exactly the appliance's objects. Written by review (helper-57);
// it passed.
func TestDriftedTableRepairedAndRolledBackInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	ctx := context.Background()
	cmdOut(t, "ip", "link", "set", "lo", "up")
	cmdOut(t, "nft", "add table ip foreign; add chain ip foreign pre { type filter hook prerouting priority mangle; }; add rule ip foreign pre meta mark set 0x7 counter")
	foreign := cmdOut(t, "nft", "list", "table", "ip", "foreign")
	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	desired := steeringItems(t, 0, 0)
	if _, _, err := Converge(ctx, st, exs, desired, "node-a", "h1"); err != nil {
		t.Fatal(err)
	}
	cmdOut(t, "nft", "add rule ip sosappliance prerouting counter; delete element ip sosappliance ports0 { 5201 }")
	p, _, err := Converge(ctx, st, exs, desired, "node-a", "h1")
	t.Logf("repair:\n%s", p.Text())
	if err != nil {
		t.Fatal(err)
	}
	if p := mustPlan(t, st, exs, desired); !p.Empty() {
		t.Errorf("not repaired:\n%s", p.Text())
	}
	if _, _, err := Rollback(ctx, st, exs, "node-a"); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("nft", "list", "tables").CombinedOutput(); strings.Contains(string(out), "sosappliance") {
		t.Errorf("tables after rollback:\n%s", out)
	}
	if got := cmdOut(t, "nft", "list", "table", "ip", "foreign"); got != foreign {
		t.Errorf("foreign table changed:\n%s", got)
	}
}

var nftMarkSet = regexp.MustCompile(`mark set (0x[0-9a-f]+)`)

// liveMarkRoute routes a packet with the mark the live ip table
// sets (read from nft itself, so a table steering cannot parse counts).
func liveMarkRoute(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("nft", "list", "table", "ip", tuning.SteeringTable).CombinedOutput()
	if err != nil {
		return "no table"
	}
	m := nftMarkSet.FindStringSubmatch(string(out))
	if m == nil {
		return "table sets no mark"
	}
	r, err := exec.Command("ip", "route", "get", "10.20.2.1", "from", "10.20.1.10", "iif", "sosr0", "mark", m[1]).CombinedOutput()
	s := strings.Join(strings.Fields(string(r)), " ")
	if err != nil {
		return fmt.Sprintf("mark %s: %s (%v)", m[1], s, err)
	}
	return fmt.Sprintf("mark %s: %s", m[1], s)
}

// markTopology is the agent's side of a steering test: loopback up, and
// sosr0 (10.20.1.1/24), where whitelisted clients' packets come in.
func markTopology(t *testing.T) {
	cmdOut(t, "ip", "link", "set", "lo", "up")
	cmdOut(t, "ip", "link", "add", "sosr0", "type", "veth", "peer", "name", "sosr1")
	cmdOut(t, "ip", "addr", "add", "10.20.1.1/24", "dev", "sosr0")
	cmdOut(t, "ip", "link", "set", "sosr0", "up")
	cmdOut(t, "ip", "link", "set", "sosr1", "up")
}

// watchMarkedRoute is the steering executor, noting in bad each step
// after which a packet of the live table's mark is not routed locally.
func watchMarkedRoute(t *testing.T, bad *[]string) tuning.Executor {
	return steppedExecutor{Executor: tuning.NewSteering(), after: func(step string) {
		got := liveMarkRoute(t)
		t.Logf("after %s: %s", step, got)
		if got != "no table" && !strings.Contains(got, "local 10.20.2.1") {
			*bad = append(*bad, step+": "+got)
		}
	}}
}

// TestRollbackToOtherMarkMakesBeforeItBreaksInNetns: a leftover of
// an older install (other mark and route table, every object as steering
// writes it, so tuning.Restorer takes it as a previous value) under a
// lost state database. The apply moves to the new mark making before it
// breaks; the rollback puts the leftover back in the restore order,
// table, rule, route: the table step (applySteeringTable) now deletes
// the rule of the mark it leaves and prunes its route before any rule
// of the restored mark exists, and the rule step restores a rule whose
// table has no route yet. Marked packets of diverted connections have
// no local route in between (for good if a step fails). Now a restore
// that puts a value back runs in the apply's order (steeringRank). Found
// by review (helper-59) of the make-before-break fix.
func TestRollbackToOtherMarkMakesBeforeItBreaksInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	ctx := context.Background()
	markTopology(t)
	leftover := steeringItems(t, 0x5350, 200)
	s := tuning.NewSteering()
	for _, key := range []string{item.SteeringKeyRoute, item.SteeringKeyRule, item.SteeringKeyNftables} {
		for _, it := range leftover {
			if it.Key == key {
				if err := s.Apply(ctx, it); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	var bad []string
	exs := tuning.Executors("/")
	exs[item.KindSteering] = watchMarkedRoute(t, &bad)
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	p, _, err := Converge(ctx, st, exs, steeringItems(t, 0, 0), "node-a", "h1")
	t.Logf("converge:\n%s", p.Text())
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := st.Records()
	for _, r := range recs {
		t.Logf("record %s/%s previous %q present %v", r.Kind, r.Key, r.Previous, r.PreviousPresent)
	}
	if len(bad) > 0 {
		t.Errorf("apply: marked packets not routed locally after: %s", strings.Join(bad, "; "))
	}
	bad = nil
	rp, _, err := Rollback(ctx, st, exs, "node-a")
	t.Logf("rollback:\n%s\nerr %v\nrules:\n%s\nroutes: %s", rp.Text(), err, cmdOut(t, "ip", "rule", "show"),
		cmdOut(t, "ip", "route", "show", "table", "all", "proto", "83"))
	if len(bad) > 0 {
		t.Errorf("rollback: marked packets not routed locally after:\n%s", strings.Join(bad, "\n"))
	}
}

// TestMarkChangeOverUnreadableTableInNetns: a mark change (between
// versions) while the live table is one steering does not read as its
// own (a rule added to it by hand). Before, liveMark said 0, so the rule
// step deleted the rule of the mark the live table still set, before the
// table step replaced the table. Now every rule of ours stays until the
// table step when the live table cannot be read. Found by review
// (helper-59).
func TestMarkChangeOverUnreadableTableInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	ctx := context.Background()
	markTopology(t)
	var bad []string
	exs := tuning.Executors("/")
	exs[item.KindSteering] = watchMarkedRoute(t, &bad)
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	if _, _, err := Converge(ctx, st, exs, steeringItems(t, 0, 0), "node-a", "h1"); err != nil {
		t.Fatal(err)
	}
	cmdOut(t, "nft", "add rule ip sosappliance prerouting counter")
	bad = nil
	p, _, err := Converge(ctx, st, exs, steeringItems(t, 0x5350, 0), "node-a", "h2")
	t.Logf("converge:\n%s\nerr %v", p.Text(), err)
	if len(bad) > 0 {
		t.Errorf("marked packets not routed locally after:\n%s", strings.Join(bad, "\n"))
	}
}

// TestSteeringGoneAtApplyIsMadeAgainInNetns: a steering object there at
// plan time (a leftover, not recorded) and gone at apply (a saved plan
// applied after a reboot: rules, routes and tables do not survive one).
// Before, it was refused as tuning.ErrGone, "plan again once it is
// back", though steering can always make it and it never comes back by
// itself. Now only set-only kinds (tuning.SetOnly) are refused so. Found
// by review (helper-59).
func TestSteeringGoneAtApplyIsMadeAgainInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	ctx := context.Background()
	cmdOut(t, "ip", "link", "set", "lo", "up")
	cmdOut(t, "ip", "rule", "add", "fwmark", "0x5350", "lookup", "200", "priority", "21327", "proto", "83")
	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	p := mustPlan(t, st, exs, steeringItems(t, 0, 0))
	t.Logf("plan:\n%s", p.Text())
	cmdOut(t, "ip", "rule", "del", "fwmark", "0x5350", "lookup", "200", "priority", "21327")
	_, err := Apply(ctx, st, exs, p)
	t.Logf("apply: %v (ErrGone: %v)", err, errors.Is(err, tuning.ErrGone))
	if errors.Is(err, tuning.ErrGone) {
		t.Errorf("a steering rule gone since the plan refused as gone: %v", err)
	}
}

// TestReservedPortsRangeTakenInNetns: a port range for
// net.ipv4.ip_local_reserved_ports ("" after every boot). Before, the
// first checkDecimal took "30000-32767" for a signed integer and refused
// it; the refusal is no ErrGone, so the whole plan failed, every other
// item of the node with it, at every start and drift check. Found by
// review (helper-59).
func TestReservedPortsRangeTakenInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip") {
		return
	}
	ctx := context.Background()
	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	desired := []item.Item{
		{Kind: item.KindSysctl, Key: "net.ipv4.ip_local_reserved_ports", Value: "30000-32767"},
		{Kind: item.KindSysctl, Key: "net.ipv4.tcp_fin_timeout", Value: "15"},
	}
	p, held, res, err := ConvergeHolding(ctx, st, exs, desired, "node-a", "h1")
	t.Logf("drift-check converge: err %v; held %v; done %d\n%s", err, held, len(res.Done), p.Text())
	if err != nil {
		t.Errorf("a node with ip_local_reserved_ports = 30000-32767 converges nothing: %v", err)
	}
}

// TestRemovalOrderOfSteeringPlan: steering objects the appliance made
// (none before it) and no longer wanted: the table must stop marking
// before the rule and the route go, so the removals run nftables, rule,
// route. The first steeringRank ran them route, rule, table. Found by
// review (helper-61).
func TestRemovalOrderOfSteeringPlan(t *testing.T) {
	var obs []item.Observation
	var owned []plan.Owned
	for _, key := range []string{item.SteeringKeyRoute, item.SteeringKeyRule, item.SteeringKeyNftables} {
		obs = append(obs, item.Observation{Item: item.Item{Kind: item.KindSteering, Key: key, Value: "v"}, Present: true})
		owned = append(owned, plan.Owned{Kind: item.KindSteering, Key: key, Desired: "v", Applied: true, FirstSerial: 1, Serial: 1})
	}
	p := plan.Diff(nil, obs, owned)
	var got []string
	for _, c := range p.Changes {
		got = append(got, string(c.Action)+c.Key)
	}
	want := []string{"-" + item.SteeringKeyNftables, "-" + item.SteeringKeyRule, "-" + item.SteeringKeyRoute}
	t.Logf("order: %v", got)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("removal order %v, want %v", got, want)
	}
}

// TestRollbackKeepsMarkedPacketsLocalInNetns: a rollback of steering the
// appliance made: after each step, a packet the live table marks is
// routed locally (with the first steeringRank it was not, after the
// route's removal and the rule's). Found by review (helper-61).
func TestRollbackKeepsMarkedPacketsLocalInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	ctx := context.Background()
	markTopology(t)
	var bad []string
	exs := tuning.Executors("/")
	exs[item.KindSteering] = watchMarkedRoute(t, &bad)
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	if _, _, err := Converge(ctx, st, exs, steeringItems(t, 0, 0), "node-a", "h1"); err != nil {
		t.Fatal(err)
	}
	bad = nil
	rp, _, err := Rollback(ctx, st, exs, "node-a")
	t.Logf("rollback:\n%s\nerr %v", rp.Text(), err)
	if len(bad) > 0 {
		t.Errorf("rollback: marked packets not routed locally after:\n%s", strings.Join(bad, "\n"))
	}
}

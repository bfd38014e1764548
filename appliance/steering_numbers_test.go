package appliance

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// numbersItems are the steering items of a spec with all three numbers
// (0: the default), whitelisting 10.20.1.0/24 to server.
func numbersItems(t *testing.T, mark, table, priority uint32, server string) []item.Item {
	t.Helper()
	items, err := item.SteeringSpec{
		Mark: mark, RouteTable: table, RulePriority: priority,
		ListenPort: 9876,
		Divert: []item.Divert{{
			Clients: []netip.Prefix{netip.MustParsePrefix("10.20.1.0/24")},
			Server:  netip.MustParseAddr(server),
			Port:    5201,
		}},
	}.Items()
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// routeGet is `ip route get` of a packet arriving on sosr0, on one line.
func routeGet(t *testing.T, args ...string) string {
	t.Helper()
	return strings.Join(strings.Fields(cmdOut(t, "ip", append([]string{"route", "get"}, args...)...)), " ")
}

// TestSteeringTableHoldingOperatorRoutesInNetns: steering_table
// names a table of the operator's own policy routing, one that holds
// specific routes but no default (a rule sends 10.70.0.0/24 to it; what
// it does not match falls through to main). checkForeignRoutes looked at
// default routes only, so the plan took the table, and the apply added
// steering's local default to it: every packet of the operator's rule
// was then delivered to this host (blackholed) instead of falling
// through, and a steered packet to a server inside one of the table's
// routes was forwarded there instead of reaching the transparent
// listener. Now the plan refuses a table that holds any route not
// steering's, naming the table and the route. Found by review
// (helper-80).
func TestSteeringTableHoldingOperatorRoutesInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft", "sysctl") {
		return
	}
	ctx := context.Background()
	markTopology(t)
	cmdOut(t, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	cmdOut(t, "ip", "route", "add", "default", "via", "10.20.1.2")
	cmdOut(t, "ip", "route", "add", "10.60.0.0/16", "via", "10.20.1.3", "table", "100")
	cmdOut(t, "ip", "rule", "add", "from", "10.70.0.0/24", "lookup", "100", "priority", "1000")
	before := routeGet(t, "10.99.0.1", "from", "10.70.0.5", "iif", "sosr0")
	t.Logf("operator's traffic before: %s", before)

	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	desired := numbersItems(t, 0x5350, 100, 100, "10.60.2.1")
	p, err := Plan(ctx, st, exs, desired, "node-a", "h1")
	if err != nil {
		t.Logf("plan refused: %v", err)
		if !strings.Contains(err.Error(), "table 100") || !strings.Contains(err.Error(), "10.60.0.0/16") {
			t.Errorf("plan refused without naming the table and the route: %v", err)
		}
		return
	}
	t.Logf("plan took table 100:\n%s", p.Text())
	if _, err := Apply(ctx, st, exs, p); err != nil {
		t.Fatalf("apply: %v", err)
	}
	after := routeGet(t, "10.99.0.1", "from", "10.70.0.5", "iif", "sosr0")
	steered := routeGet(t, "10.60.2.1", "from", "10.20.1.10", "iif", "sosr0", "mark", "0x5350")
	t.Errorf("plan and apply took route table 100, which holds the operator's 10.60.0.0/16:\n"+
		"operator's traffic before: %s\n           after: %s\nsteered packet to the server: %s", before, after, steered)
	if _, _, err := Rollback(ctx, st, exs, "node-a"); err != nil {
		t.Errorf("rollback: %v", err)
	}
	if got := cmdOut(t, "ip", "route", "show", "table", "100"); !strings.Contains(got, "10.60.0.0/16") || strings.Contains(got, "local") {
		t.Errorf("table 100 after rollback: %q", got)
	}
}

// TestSteeringMarkOfForeignRuleInNetns: steering_mark equal to
// the fwmark of a policy rule the operator already has (their firewall
// marks VPN traffic 0x1, `ip rule add fwmark 0x1 lookup 300`). Nothing
// checked it: steering's rule, earlier, sent every packet of the
// operator's mark to steering's local route (their VPN traffic was
// delivered to this host), or, when theirs was earlier, steered packets
// went to their table and never reached the transparent listener. Now
// the plan refuses a mark a rule not steering's matches, naming the
// rule. Found by review (helper-80).
func TestSteeringMarkOfForeignRuleInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft", "sysctl") {
		return
	}
	ctx := context.Background()
	markTopology(t)
	cmdOut(t, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	cmdOut(t, "ip", "route", "add", "default", "via", "10.20.1.2")
	cmdOut(t, "ip", "route", "add", "default", "via", "10.20.1.3", "table", "300")
	cmdOut(t, "ip", "rule", "add", "fwmark", "0x1", "lookup", "300", "priority", "1000")
	before := routeGet(t, "10.99.0.1", "from", "10.20.1.50", "iif", "sosr0", "mark", "0x1")

	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	p, err := Plan(ctx, st, exs, numbersItems(t, 0x1, 0, 100, "10.20.2.1"), "node-a", "h1")
	if err != nil {
		t.Logf("plan refused: %v", err)
		if !strings.Contains(err.Error(), "0x1") || !strings.Contains(err.Error(), "300") {
			t.Errorf("plan refused without naming the rule: %v", err)
		}
		return
	}
	if _, err := Apply(ctx, st, exs, p); err != nil {
		t.Fatalf("apply: %v", err)
	}
	after := routeGet(t, "10.99.0.1", "from", "10.20.1.50", "iif", "sosr0", "mark", "0x1")
	t.Errorf("plan and apply took mark 0x1, which the operator's rule (priority 1000 lookup 300) matches:\n"+
		"operator's marked traffic before: %s\n                  after: %s\nrules:\n%s",
		before, after, cmdOut(t, "ip", "rule", "show"))
	if _, _, err := Rollback(ctx, st, exs, "node-a"); err != nil {
		t.Errorf("rollback: %v", err)
	}
}

// TestSteeringEdgeNumbersInNetns: the edges validate takes (a
// mark with the top bit, the largest mark, route tables past 2^31 and
// the largest, priorities 1 and 32765) go through the kernel and read
// back as written: after the converge a plan is empty, and a rollback
// leaves no rule, route or table. Written by review (helper-80); it
// checks the kernel path of numbers no test applied.
func TestSteeringEdgeNumbersInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	ctx := context.Background()
	markTopology(t)
	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	for i, n := range [][3]uint32{{0x80000000, 0x80000000, 1}, {0xffffffff, 0xffffffff, 32765}, {0x7fffffff, 0x7fffffff, 2}} {
		desired := numbersItems(t, n[0], n[1], n[2], "10.20.2.1")
		p, _, err := Converge(ctx, st, exs, desired, "node-a", fmt.Sprint("h", i))
		if err != nil {
			t.Fatalf("converge %#x/%d/%d: %v\n%s", n[0], n[1], n[2], err, p.Text())
		}
		if p := mustPlan(t, st, exs, desired); !p.Empty() {
			t.Errorf("after converge %#x/%d/%d the plan is not empty:\n%s\nrules:\n%s", n[0], n[1], n[2], p.Text(), cmdOut(t, "ip", "rule", "show"))
		}
		got := routeGet(t, "10.20.2.1", "from", "10.20.1.10", "iif", "sosr0", "mark", fmt.Sprintf("%#x", n[0]))
		if !strings.HasPrefix(got, "local 10.20.2.1") {
			t.Errorf("%#x/%d/%d: a marked packet is not local: %s", n[0], n[1], n[2], got)
		}
	}
	if _, _, err := Rollback(ctx, st, exs, "node-a"); err != nil {
		t.Fatal(err)
	}
	if r := cmdOut(t, "ip", "rule", "show"); strings.Contains(r, "fwmark") {
		t.Errorf("rules after rollback:\n%s", r)
	}
	if r := cmdOut(t, "ip", "route", "show", "table", "all", "proto", "83"); r != "" {
		t.Errorf("routes after rollback:\n%s", r)
	}
	if r := cmdOut(t, "nft", "list", "tables"); strings.Contains(r, tuning.SteeringTable) {
		t.Errorf("tables after rollback:\n%s", r)
	}
}

// TestSteeringHandEditsAfterMoveInNetns: the numbers were moved
// from the defaults to 0x5350/200/100; then the operator edits by hand:
// an old script loads the table as it was on the defaults (nft -f of a
// saved ruleset: it marks 0x534f, for which no rule is left), and our
// rule is replaced by their own copy of it at another priority (no proto
// 83). The drift check (a converge of the same items) must put the
// table's mark back, keep their rule, and leave a plan with nothing to
// do; marked packets are local again; a rollback leaves their rule
// alone. Written by review (helper-80); it passed.
func TestSteeringHandEditsAfterMoveInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	ctx := context.Background()
	markTopology(t)
	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	if _, _, err := Converge(ctx, st, exs, numbersItems(t, 0, 0, 0, "10.20.2.1"), "node-a", "h1"); err != nil {
		t.Fatal(err)
	}
	saved := cmdOut(t, "nft", "list", "table", "ip", tuning.SteeringTable)
	moved := numbersItems(t, 0x5350, 200, 100, "10.20.2.1")
	if _, _, err := Converge(ctx, st, exs, moved, "node-a", "h2"); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "old.nft")
	writeFile(t, file, "delete table ip "+tuning.SteeringTable+"\n"+saved+"\n")
	cmdOut(t, "nft", "-f", file)
	cmdOut(t, "ip", "rule", "del", "priority", "100")
	cmdOut(t, "ip", "rule", "add", "fwmark", "0x5350", "lookup", "200", "priority", "90")
	theirs := "90:\tfrom all fwmark 0x5350 lookup 200"
	out, _ := exec.Command("ip", "route", "get", "10.20.2.1", "from", "10.20.1.10", "iif", "sosr0", "mark", "0x534f").CombinedOutput()
	t.Logf("after the hand edits, a packet the table marks: %s", out)

	p, _, err := Converge(ctx, st, exs, moved, "node-a", "h2")
	t.Logf("drift converge:\n%s", p.Text())
	if err != nil {
		t.Fatal(err)
	}
	if p := mustPlan(t, st, exs, moved); !p.Empty() {
		t.Errorf("not repaired:\n%s", p.Text())
	}
	if got := cmdOut(t, "nft", "list", "table", "ip", tuning.SteeringTable); strings.Contains(got, "534f") {
		t.Errorf("table still marks 0x534f:\n%s", got)
	}
	if got := routeGet(t, "10.20.2.1", "from", "10.20.1.10", "iif", "sosr0", "mark", "0x5350"); !strings.HasPrefix(got, "local 10.20.2.1") {
		t.Errorf("marked packet: %s", got)
	}
	if r := cmdOut(t, "ip", "rule", "show"); !strings.Contains(r, theirs) || !strings.Contains(r, "100:\tfrom all fwmark 0x5350 lookup 200 proto 83") {
		t.Errorf("rules after the drift converge:\n%s", r)
	}
	if _, _, err := Rollback(ctx, st, exs, "node-a"); err != nil {
		t.Fatal(err)
	}
	if r := cmdOut(t, "ip", "rule", "show"); !strings.Contains(r, theirs) || strings.Contains(r, "proto 83") {
		t.Errorf("rules after rollback:\n%s", r)
	}
	if r := cmdOut(t, "ip", "route", "show", "table", "all", "proto", "83"); r != "" {
		t.Errorf("routes after rollback:\n%s", r)
	}
}

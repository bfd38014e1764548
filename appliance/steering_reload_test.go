package appliance

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// TestSteeringNumbersTwiceThenTakenTableInNetns: the daemon on
// the defaults; the file moves the steering numbers twice (each move
// takes the nftables mark, the policy rule and the local route with it,
// leaving nothing of the old numbers) (the second
// time to a mark with the top bit and a table past 2^31); then a third
// edit names a route table that holds the operator's own TPROXY route.
// The third reload must fail, leave steering on the second numbers
// (marked packets still routed locally, nothing of table 100 made), and
// say which argument of the file to change: the refusal names
// steering_table and the agent, where it named only "route table 100"
// with advice to move the operator's route (the file's line it does not
// give: the host check knows the agent, not the file). Found by review
// (helper-80). A rollback after all of it leaves
// no rule, route or table of any of the numbers, and the operator's route.
func TestSteeringNumbersTwiceThenTakenTableInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	n := newReloadNode(t)
	edit := reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877}
	writeFile(t, n.cfgPath, n.config(edit))
	d := n.daemon()
	stopDaemon := runDaemonUntil(t, d, n.logs, nil)
	rules := func() string { return steeringRules(t) }
	routes := func() string { return steeringRoutes(t) }
	testsupport.Eventually(t, 15*time.Second, "start-up on the default numbers", func() bool {
		return d.Status().Serial == 1 && strings.Contains(rules(), "21327:\tfrom all fwmark 0x534f lookup 21327 proto 83")
	})
	moved := func(what, args, rule string) {
		t.Helper()
		edit.agentExtra = args
		writeFile(t, n.cfgPath, n.config(edit))
		testsupport.Eventually(t, 15*time.Second, what, func() bool {
			st := d.Status()
			return st.LastReload != nil && st.LastReload.Result == "ok" && strings.Contains(rules(), rule)
		})
		if got := strings.Count(rules(), "proto 83"); got != 1 {
			t.Errorf("%s: rules:\n%s", what, rules())
		}
	}
	moved("first move", `steering_mark = "0x5350"
    steering_table = 200
    steering_priority = 100`, "100:\tfrom all fwmark 0x5350 lookup 200 proto 83")
	if r := steeringRules(t); strings.Contains(r, "0x534f") || strings.Contains(r, "21327") {
		t.Errorf("old rule left:\n%s", r)
	}
	if r := routes(); !strings.Contains(r, "local default dev lo table 200 ") || strings.Contains(r, "21327") {
		t.Errorf("routes after the first move:\n%s", r)
	}
	if got := cmdOut(t, "nft", "list", "table", "ip", tuning.SteeringTable); len(regexp.MustCompile(`meta mark set 0x00005350`).FindAllString(got, -1)) != 2 || strings.Contains(got, "534f") {
		t.Errorf("nftables table after the first move:\n%s", got)
	}
	moved("second move", `steering_mark = "0x80000001"
    steering_table = 3000000000
    steering_priority = 50`, "50:\tfrom all fwmark 0x80000001 lookup 3000000000 proto 83")
	if r := routes(); strings.Contains(r, "table 200") || strings.Contains(r, "21327") || !strings.Contains(r, "table 3000000000") {
		t.Errorf("routes after the second move:\n%s", r)
	}

	cmdOut(t, "ip", "route", "add", "local", "0.0.0.0/0", "dev", "lo", "table", "100")
	foreign := cmdOut(t, "ip", "route", "show", "table", "100")
	edit.agentExtra = `steering_mark = "0x5352"
    steering_table = 100
    steering_priority = 60`
	writeFile(t, n.cfgPath, n.config(edit))
	var result string
	testsupport.Eventually(t, 15*time.Second, "the third reload refused", func() bool {
		st := d.Status()
		if st.LastReload != nil && strings.HasPrefix(st.LastReload.Result, "failed") {
			result = st.LastReload.Result + " " + strings.Join(st.LastReload.Problems, "; ")
			return true
		}
		return false
	})
	t.Logf("third reload: %s", result)
	if !strings.Contains(result, "set another steering_table on agent a1 ("+n.cfgPath+":") {
		t.Errorf("the refusal does not name steering_table, the agent and its line: %s", result)
	}
	if r := rules(); strings.Count(r, "proto 83") != 1 || !strings.Contains(r, "fwmark 0x80000001 lookup 3000000000") {
		t.Errorf("rules after the refused reload:\n%s", r)
	}
	out, _ := exec.Command("ip", "route", "get", "10.2.0.10", "from", "10.1.0.5", "iif", "eth1", "mark", "0x80000001").CombinedOutput()
	if !strings.HasPrefix(string(out), "local 10.2.0.10") {
		t.Errorf("a marked packet after the refused reload: %s", out)
	}
	if got := cmdOut(t, "ip", "route", "show", "table", "100"); got != foreign {
		t.Errorf("table 100 is %q, was %q", got, foreign)
	}

	stopDaemon()
	if _, _, err := Rollback(context.Background(), openTestStore(t, n.dir+"/state.db"), n.daemonExecutors(), "host1"); err != nil {
		t.Fatal(err)
	}
	if r := rules(); strings.Contains(r, "fwmark") {
		t.Errorf("rules after rollback:\n%s", r)
	}
	if r := routes(); r != "" {
		t.Errorf("routes after rollback:\n%s", r)
	}
	if r := cmdOut(t, "nft", "list", "tables"); strings.Contains(r, tuning.SteeringTable) {
		t.Errorf("tables after rollback:\n%s", r)
	}
	if got := cmdOut(t, "ip", "route", "show", "table", "100"); got != foreign {
		t.Errorf("rollback changed table 100: %q, was %q", got, foreign)
	}
}

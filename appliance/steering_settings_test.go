package appliance

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// TestSteeringNumbersFromTheFile: a site whose own policy routing uses
// steering's mark or table sets steering_mark, steering_table and
// steering_priority on the agent. The daemon starts on the defaults; an
// edit of the three moves the nftables mark, the policy rule and the
// local route at the reload, leaving nothing of the old numbers; a
// rollback leaves nothing at all.
func TestSteeringNumbersFromTheFile(t *testing.T) {
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
	nft := func() string { return cmdOut(t, "nft", "list", "table", "ip", tuning.SteeringTable) }
	testsupport.Eventually(t, 15*time.Second, "start-up on the default numbers", func() bool {
		return d.Status().Serial == 1 && strings.Contains(rules(), "21327:\tfrom all fwmark 0x534f lookup 21327 proto 83")
	})

	edit.agentExtra = `steering_mark = "0x5350"
    steering_table = 200
    steering_priority = 100`
	writeFile(t, n.cfgPath, n.config(edit))
	testsupport.Eventually(t, 15*time.Second, "the reload moved the steering", func() bool {
		st := d.Status()
		return st.LastReload != nil && st.LastReload.Result == "ok" && strings.Contains(rules(), "100:\tfrom all fwmark 0x5350 lookup 200 proto 83")
	})
	if r := rules(); strings.Contains(r, "0x534f") || strings.Contains(r, "21327") {
		t.Errorf("old rule left:\n%s", r)
	}
	if r := routes(); !strings.Contains(r, "local default dev lo table 200 ") || strings.Contains(r, "21327") {
		t.Errorf("routes:\n%s", r)
	}
	if got := nft(); len(regexp.MustCompile(`meta mark set 0x00005350`).FindAllString(got, -1)) != 2 || strings.Contains(got, "534f") {
		t.Errorf("nftables table:\n%s", got)
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
}

// TestForeignRulesBesideSteeringInNetns: what the foreign-rule check
// takes and refuses. wg-quick's "not fwmark 0xca6c lookup 51820" and a
// rule of another table and mark are no conflict; a masked mark whose bit
// steering's mark has (kube-proxy's fwmark 0x4000/0x4000; 0x534f has bit
// 0x4000) is, and the refusal names the rule and steering_mark.
func TestForeignRulesBesideSteeringInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	ctx := context.Background()
	cmdOut(t, "ip", "link", "set", "lo", "up")
	cmdOut(t, "ip", "rule", "add", "not", "fwmark", "0xca6c", "lookup", "51820", "priority", "32764")
	cmdOut(t, "ip", "rule", "add", "fwmark", "0x7", "lookup", "300", "priority", "1000")
	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	if _, _, err := Converge(ctx, st, exs, steeringItems(t, 0, 0), "node-a", "h1"); err != nil {
		t.Fatalf("steering beside wg-quick's rule and another mark's: %v", err)
	}
	if _, _, err := Rollback(ctx, st, exs, "node-a"); err != nil {
		t.Fatal(err)
	}
	cmdOut(t, "ip", "rule", "add", "fwmark", "0x4000/0x4000", "lookup", "200", "priority", "500")
	_, err := Plan(ctx, st, exs, steeringItems(t, 0, 0), "node-a", "h2")
	if err == nil || !strings.Contains(err.Error(), "fwmark 0x4000/0x4000") || !strings.Contains(err.Error(), "set another steering_mark") {
		t.Fatalf("plan beside a rule that matches steering's mark: %v", err)
	}
	if _, _, err := Converge(ctx, st, exs, steeringItems(t, 0x5350, 0), "node-a", "h3"); err == nil {
		t.Errorf("mark 0x5350 (bit 0x4000 set too) taken")
	}
	if _, _, err := Converge(ctx, st, exs, steeringItems(t, 0x1350, 0), "node-a", "h4"); err != nil {
		t.Errorf("mark 0x1350, without bit 0x4000: %v", err)
	}
}

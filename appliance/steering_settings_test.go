package appliance

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

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

package appliance

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/tuning"
)

// TestSysctlOtherSpellingRefusedAtPlanInNetns: a value the kernel
// accepts in another spelling than its own (hex, a leading zero, a sign).
// Before, planning took "0x1e" for tcp_fin_timeout; the apply wrote it,
// the kernel read 30 and reported "30", and the apply failed as a value
// the kernel changed, with the host changed; every later convergence did
// the same. Now the plan refuses it, naming the value and the parameter,
// and nothing changes. Found by review (helper-57).
func TestSysctlOtherSpellingRefusedAtPlanInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "sysctl") {
		return
	}
	ctx := context.Background()
	before := cmdOut(t, "sysctl", "-n", "net.ipv4.tcp_fin_timeout")
	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	for _, v := range []string{"0x1e", "017", "+30", "4096 087380 6291456"} {
		desired := []item.Item{sysctlItem("net.ipv4.tcp_fin_timeout", v)}
		if v != "0x1e" && v != "017" && v != "+30" {
			desired = []item.Item{sysctlItem("net.ipv4.tcp_rmem", v)}
		}
		_, err := Plan(ctx, st, exs, desired, "node-a", "h")
		t.Logf("plan of %q: %v", v, err)
		if err == nil || !strings.Contains(err.Error(), "plain decimal") {
			t.Errorf("plan of %q: %v, want it refused", v, err)
		}
	}
	// Plain decimal, and a parameter whose value is text, pass.
	for _, it := range []item.Item{sysctlItem("net.ipv4.tcp_fin_timeout", "-1"), sysctlItem("net.ipv4.tcp_fin_timeout", "0"),
		sysctlItem("net.ipv4.tcp_congestion_control", "reno")} {
		if err := exs[item.KindSysctl].(tuning.Validator).Validate(ctx, []item.Item{it}); err != nil && strings.Contains(err.Error(), "plain decimal") {
			t.Errorf("%s = %q refused: %v", it.Key, it.Value, err)
		}
	}
	if after := cmdOut(t, "sysctl", "-n", "net.ipv4.tcp_fin_timeout"); after != before {
		t.Errorf("tcp_fin_timeout changed from %s to %s", before, after)
	}
}

// Two applies with different values (written with tabs and odd blanks),
// then rollback: the value from before the first apply comes back.
// Written by review (helper-57); it passed.
func TestRollbackAfterTwoAppliesRestoresTheFirstOriginalInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "sysctl") {
		return
	}
	ctx := context.Background()
	read := func(k string) string { return strings.Join(strings.Fields(cmdOut(t, "sysctl", "-n", k)), " ") }
	rmem, fin := read("net.ipv4.tcp_rmem"), read("net.ipv4.tcp_fin_timeout")
	exs := tuning.Executors("/")
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	for i, v := range [][2]string{{"4096\t 87380   33554432 ", "17"}, {" 8192 \t131072\t67108864\n", " 23 "}} {
		desired := []item.Item{sysctlItem("net.ipv4.tcp_rmem", v[0]), sysctlItem("net.ipv4.tcp_fin_timeout", v[1])}
		if _, _, err := Converge(ctx, st, exs, desired, "node-a", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
		if p := mustPlan(t, st, exs, desired); !p.Empty() {
			t.Errorf("plan after apply %d not empty:\n%s", i, p.Text())
		}
	}
	if _, _, err := Rollback(ctx, st, exs, "node-a"); err != nil {
		t.Fatal(err)
	}
	if got := read("net.ipv4.tcp_rmem"); got != rmem {
		t.Errorf("tcp_rmem %q, want %q", got, rmem)
	}
	if got := read("net.ipv4.tcp_fin_timeout"); got != fin {
		t.Errorf("tcp_fin_timeout %q, want %q", got, fin)
	}
}

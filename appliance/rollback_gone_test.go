package appliance

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/appliance/store"
	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/tuning"
)

// eth1Values reads what eth1's items hold on the temp host: its IRQs'
// affinity and its rp_filter.
func eth1Values(t *testing.T, root string) string {
	t.Helper()
	s := snapshot(t, root)
	return strings.Join([]string{s["proc/irq/40/smp_affinity_list"], s["proc/irq/41/smp_affinity_list"],
		s["proc/irq/42/smp_affinity_list"], s["proc/irq/43/smp_affinity_list"], s["proc/sys/net/ipv4/conf/eth1/rp_filter"]}, " ")
}

// heldHost is a temp host with holdItems applied: its root, executors
// and store, and eth1's values from before the apply and after it.
type heldHost struct {
	root            string
	exs             map[string]tuning.Executor
	st              *store.Store
	before, applied string
}

func applyHoldItems(t *testing.T) heldHost {
	t.Helper()
	root := tempHost(t)
	h := heldHost{root: root, exs: tempHostExecutors(root), st: openTestStore(t, filepath.Join(t.TempDir(), "state.db"))}
	h.before = eth1Values(t, root)
	mustApply(t, h.st, h.exs, mustPlan(t, h.st, h.exs, holdItems()))
	h.applied = eth1Values(t, root)
	return h
}

// TestRollbackHoldsAGoneInterface: a rollback while eth1 is away (renamed,
// moved to another namespace) puts back what it can and keeps the
// records of eth1's items, with a warning each, where it used to forget
// them; once eth1 is back still holding the appliance's values, the next
// rollback puts back the values from before the first apply. Before, the
// first rollback forgot the records and those values were lost.
func TestRollbackHoldsAGoneInterface(t *testing.T) {
	ctx := context.Background()
	h := applyHoldItems(t)
	root, exs, st, before, applied := h.root, h.exs, h.st, h.before, h.applied

	back := takeEth1Away(t, root)
	p, res, err := Rollback(ctx, st, exs, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rollback while eth1 is away:\n%s", p.Text())
	if len(res.Done) != 1 || res.Done[0].Key != "net.core.rmem_max" {
		t.Errorf("done %+v, want only rmem_max put back", res.Done)
	}
	if got := snapshot(t, root)["proc/sys/net/core/rmem_max"]; got != "212992" {
		t.Errorf("rmem_max %q after the rollback, want 212992", got)
	}
	for _, k := range [][2]string{{item.KindIRQ, "eth1"}, {item.KindSysctl, "net.ipv4.conf.eth1.rp_filter"}} {
		if _, ok := recordOf(t, st, k[0], k[1]); !ok {
			t.Errorf("%s %s: record forgotten while its interface was away", k[0], k[1])
		}
	}
	if n := strings.Count(p.Text(), "held, to be put back"); n != 2 {
		t.Errorf("%d held warnings in the plan, want 2 (irq and rp_filter of eth1)", n)
	}

	back()
	if got := eth1Values(t, root); got != applied {
		t.Fatalf("eth1 came back with %q, want the appliance's %q", got, applied)
	}
	p, _, err = Rollback(ctx, st, exs, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rollback once eth1 is back:\n%s", p.Text())
	if got := eth1Values(t, root); got != before {
		t.Errorf("eth1 after the second rollback: %q, want the values from before the first apply %q", got, before)
	}
	if recs, _ := st.Records(); len(recs) != 0 {
		t.Errorf("records left after a complete rollback: %+v", recs)
	}
}

// TestRollbackForgetGone: for an interface gone for good, rollback
// --forget-gone forgets the records (nothing to put back onto).
func TestRollbackForgetGone(t *testing.T) {
	ctx := context.Background()
	h := applyHoldItems(t)
	root, exs, st := h.root, h.exs, h.st
	takeEth1Away(t, root)
	p, err := PlanRollback(ctx, st, exs, "node-a", ForgetGone{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(p.Text(), "held") {
		t.Errorf("a rollback that forgets gone items holds some:\n%s", p.Text())
	}
	if _, err := Apply(ctx, st, exs, p); err != nil {
		t.Fatal(err)
	}
	if recs, _ := st.Records(); len(recs) != 0 {
		t.Errorf("records left after rollback --forget-gone: %+v", recs)
	}
}

// TestUndesiredItemOfAGoneInterfaceHeld: a configuration that no longer
// names eth1 is taken (start, reload, apply) while eth1 is away: its
// items' records are kept, not forgotten, with a warning, by the apply
// and by every drift check; once eth1 is back with the appliance's
// values, the drift check puts back the values from before.
func TestUndesiredItemOfAGoneInterfaceHeld(t *testing.T) {
	ctx := context.Background()
	h := applyHoldItems(t)
	root, exs, st, before, applied := h.root, h.exs, h.st, h.before, h.applied
	withoutEth1 := holdItems()[:1]

	back := takeEth1Away(t, root)
	p, res, err := Converge(ctx, st, exs, withoutEth1, "node-a", "h2")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("apply without eth1 while it is away:\n%s", p.Text())
	if len(res.Done) != 0 || len(p.Warnings) != 2 {
		t.Errorf("done %+v, warnings %+v; want nothing done and both of eth1's items held", res.Done, p.Warnings)
	}
	for range 2 {
		_, held, res, err := ConvergeHolding(ctx, st, exs, withoutEth1, "node-a", "h2")
		if err != nil || len(held) != 2 || len(res.Done) != 0 {
			t.Errorf("drift check while eth1 is away: held %+v, done %+v, err %v; want both held, nothing done", held, res.Done, err)
		}
	}
	if recs, _ := st.Records(); len(recs) != 3 {
		t.Errorf("%d records while eth1 is away, want 3", len(recs))
	}

	back()
	if got := eth1Values(t, root); got != applied {
		t.Fatalf("eth1 came back with %q, want the appliance's %q", got, applied)
	}
	_, held, res, err := ConvergeHolding(ctx, st, exs, withoutEth1, "node-a", "h2")
	if err != nil || len(held) != 0 || len(res.Done) != 2 {
		t.Errorf("drift check once eth1 is back: held %+v, done %+v, err %v; want both put back", held, res.Done, err)
	}
	if got := eth1Values(t, root); got != before {
		t.Errorf("eth1 once back: %q, want the values from before %q", got, before)
	}
	if _, err := os.Stat(filepath.Join(root, "away-dev")); !os.IsNotExist(err) {
		t.Errorf("the test's moved device is still away: %v", err)
	}
}

package appliance

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
)

// TestSavedRollbackRestoresAnItemThatCameBack: a rollback plan made while
// eth1 was momentarily gone is applied (as a saved plan would be: same
// serial, same lineage) once eth1 is back with the appliance's IRQ
// affinity; the original affinity is not lost. Found by review: whether an
// item was gone was taken from the plan, so its record was forgotten and
// the original lost. Since planning holds the items of a gone interface,
// such a plan leaves eth1's record alone, and the next rollback puts the
// original back.
func TestSavedRollbackRestoresAnItemThatCameBack(t *testing.T) {
	ctx := context.Background()
	root := tempHost(t)
	exs := tempHostExecutors(root)
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	mustApply(t, st, exs, mustPlan(t, st, exs, []item.Item{{Kind: item.KindIRQ, Key: "eth1", Value: "2,3"}}))

	dev := filepath.Join(root, "sys/class/net/eth1")
	hidden := filepath.Join(root, "eth1.away")
	if err := os.Rename(dev, hidden); err != nil {
		t.Fatal(err)
	}
	rp, err := PlanRollback(ctx, st, exs, "node-a", ForgetGone{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rollback plan:\n%s", rp.Text())
	if err := os.Rename(hidden, dev); err != nil {
		t.Fatal(err)
	}
	if _, err := ApplySaved(ctx, st, exs, rp, "node-a"); err != nil {
		t.Fatal(err)
	}
	if recs, _ := st.Records(); len(recs) != 1 {
		t.Fatalf("%d records after the plan made while eth1 was away, want eth1's kept", len(recs))
	}
	if _, _, err := Rollback(ctx, st, exs, "node-a"); err != nil {
		t.Fatal(err)
	}
	snap := snapshot(t, root)
	recs, _ := st.Records()
	if snap["proc/irq/40/smp_affinity_list"] != "0-3" {
		t.Errorf("after rollback irq 40 affinity %q (original 0-3), records left %d: the original is lost",
			snap["proc/irq/40/smp_affinity_list"], len(recs))
	}
}

// TestRollbackUnpinsIRQsGainedLater: eth1 gains IRQs 44-45 after the first
// apply (more channels) and the next converge pins them too; rollback puts
// 40-43 back to their recorded affinity and 44-45 to the kernel's default
// (here no default_smp_affinity: the online CPUs). Found by review: they
// stayed pinned and the record was gone.
func TestRollbackUnpinsIRQsGainedLater(t *testing.T) {
	ctx := context.Background()
	root := tempHost(t)
	exs := tempHostExecutors(root)
	st := openTestStore(t, filepath.Join(t.TempDir(), "state.db"))
	want := []item.Item{{Kind: item.KindIRQ, Key: "eth1", Value: "2,3"}}
	mustApply(t, st, exs, mustPlan(t, st, exs, want))
	for _, irq := range []string{"44", "45"} {
		os.WriteFile(filepath.Join(root, "proc/irq", irq, "smp_affinity_list"), nil, 0o644)
		os.MkdirAll(filepath.Join(root, "proc/irq", irq), 0o755)
		os.WriteFile(filepath.Join(root, "proc/irq", irq, "smp_affinity_list"), []byte("0-3\n"), 0o644)
		os.WriteFile(filepath.Join(root, "sys/class/net/eth1/device/msi_irqs", irq), []byte("msix\n"), 0o644)
	}
	p := mustPlan(t, st, exs, want)
	t.Logf("drift plan:\n%s", p.Text())
	mustApply(t, st, exs, p)
	if _, _, err := Rollback(ctx, st, exs, "node-a"); err != nil {
		t.Fatal(err)
	}
	snap := snapshot(t, root)
	recs, _ := st.Records()
	for _, irq := range []string{"44", "45"} {
		if got := snap["proc/irq/"+irq+"/smp_affinity_list"]; got != "0-3" {
			t.Errorf("after rollback irq %s affinity %q, was 0-3 before the appliance touched it (records left %d)", irq, got, len(recs))
		}
	}
}

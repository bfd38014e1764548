package appliance

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDriftCheckHoldsAGoneInterface: an interface whose IRQs the
// appliance pins goes away while the daemon runs (a driver reload, a NIC
// taken out). The drift check still corrects everything else (a sysctl
// changed behind its back), holds the interface's item (no write under
// its IRQs, its record kept, a warning in status naming it), and pins
// the IRQs again once the interface is back.
func TestDriftCheckHoldsAGoneInterface(t *testing.T) {
	root, dir := tempHost(t), t.TempDir()
	cfgPath := filepath.Join(dir, "sos.hcl")
	writeFile(t, cfgPath, holdConfigWith("100000"))
	irq := func(n string) string { return irqAffinity(root, n) }
	td := startDaemon(t, root, dir, cfgPath, 200*time.Millisecond)
	td.waitFor("initial convergence", func() bool {
		return td.sysctl("net.core.rmem_max") == "100000" && irq("40") == "2" && irq("43") == "2"
	})

	// The interface goes; its IRQ is re-pinned by someone else, and a
	// sysctl drifts.
	dev := filepath.Join(root, "sys/class/net/eth1")
	if err := os.Rename(dev, dev+".gone"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "proc/irq/40/smp_affinity_list"), "0-3\n")
	writeFile(t, filepath.Join(root, "proc/sys/net/core/rmem_max"), "212992\n")
	td.waitFor("the sysctl corrected while the interface is gone", func() bool {
		return td.sysctl("net.core.rmem_max") == "100000"
	})
	var held string
	td.waitFor("a warning naming the held item", func() bool {
		i := slices.IndexFunc(td.status().Warnings, func(w string) bool { return strings.HasPrefix(w, "irq eth1: held") })
		if i >= 0 {
			held = td.status().Warnings[i]
		}
		return i >= 0
	})
	t.Logf("status warning: %s", held)
	if !strings.Contains(held, "no such interface") {
		t.Errorf("the warning does not say why: %s", held)
	}
	if got := irq("40"); got != "0-3" {
		t.Errorf("IRQ 40 of the gone interface was written: %s", got)
	}
	if st := td.status(); !strings.HasPrefix(st.LastApply.Result, "ok") {
		t.Errorf("last apply: %+v", st.LastApply)
	}
	if n := strings.Count(td.logs.String(), `warning="irq eth1: held`); n != 1 {
		t.Errorf("the held item was logged %d times, want once:\n%s", n, td.logs.String())
	}

	// The interface comes back: its IRQs are pinned again, the warning
	// goes.
	if err := os.Rename(dev+".gone", dev); err != nil {
		t.Fatal(err)
	}
	td.waitFor("the IRQs pinned again", func() bool { return irq("40") == "2" })
	td.waitFor("the warning gone", func() bool { return len(td.status().Warnings) == 0 })
	if st := td.status(); st.Drift.ByKind["irq"] != 1 || st.Drift.ByKind["sysctl"] != 1 {
		t.Errorf("corrections by kind: %v, want one irq and one sysctl", st.Drift.ByKind)
	}
}

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// rollbackHost writes a host tree with rmem_max and eth1 (IRQs 40-41)
// and a config tuning both; it returns the CLI runner, the root and
// eth1's sysfs directory.
func rollbackHost(t *testing.T, tuning string) (cli func(args ...string) (int, string, string), root, dev string) {
	t.Helper()
	dir := t.TempDir()
	root = filepath.Join(dir, "root")
	files := map[string]string{
		"proc/sys/net/core/rmem_max":    "212992\n",
		"sys/devices/system/cpu/online": "0-3\n",
	}
	for irq := 40; irq <= 43; irq++ {
		// eth1 has IRQs 40 and 41, eth2 42 and 43.
		files["proc/irq/"+strconv.Itoa(irq)+"/smp_affinity_list"] = "0-3\n"
		files["sys/class/net/eth"+strconv.Itoa(1+(irq-40)/2)+"/device/msi_irqs/"+strconv.Itoa(irq)] = "msix\n"
	}
	testsupport.WriteTree(t, root, files)
	cfgPath := filepath.Join(dir, "sos.hcl")
	if err := os.WriteFile(cfgPath, []byte(`
security { psk_file = "/etc/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" {
`+tuning+`
}
node "host1" { tuning = ["t"] }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"-c", cfgPath, "--node", "host1", "--state", filepath.Join(dir, "state.db"), "--root", root}
	cli = func(args ...string) (int, string, string) { return runCLI(t, append(args, common...)...) }
	if code, out, errOut := cli("apply", "--auto-approve"); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	return cli, root, filepath.Join(root, "sys/class/net/eth1")
}

// Found by review: the appliance recorded only eth1's irq; eth1 is away. The
// rollback plan is empty (its record is held), so the plan text ends
// "No changes. Nothing is recorded to roll back." and then the command
// exits 1 with "1 item(s) not put back": it says both that nothing is
// recorded and that a record is kept.
func TestRollbackAllHeldDoesNotSayNothingRecorded(t *testing.T) {
	cli, _, dev := rollbackHost(t, `  interface "eth1" { irq_cpus = "2" }`)
	if err := os.Rename(dev, dev+".away"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli("rollback", "--auto-approve")
	t.Logf("rollback while eth1 is away: exit %d\nstdout:\n%sstderr:\n%s", code, out, errOut)
	if code != 1 || !strings.Contains(errOut, "1 item(s) not put back") {
		t.Fatalf("exit %d, want 1 and the count", code)
	}
	if strings.Contains(out, "Nothing is recorded to roll back") {
		t.Errorf("the rollback says nothing is recorded while it keeps a record (and exits 1 for it)")
	}
}

// Found by review: a rollback whose apply fails (a write the kernel refuses)
// exits non-zero, but tells the operator to "Run apply again to
// finish": apply re-applies the configuration, the opposite of the
// rollback that failed. (reportResult is shared by apply and rollback.)
func TestRollbackApplyFailureSaysRollbackAgain(t *testing.T) {
	cli, root, _ := rollbackHost(t, `  sysctl = { "net.core.rmem_max" = "67108864" }`)
	rmem := filepath.Join(root, "proc/sys/net/core/rmem_max")
	if err := os.Remove(rmem); err != nil {
		t.Fatal(err)
	}
	// Readable, but every write fails (EIO).
	if err := os.Symlink("/proc/version", rmem); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli("rollback", "--auto-approve")
	t.Logf("rollback whose write fails: exit %d\nstdout:\n%sstderr:\n%s", code, out, errOut)
	if code == 0 {
		t.Fatalf("a failed rollback exited 0")
	}
	if strings.Contains(out, "Run apply again to finish") {
		t.Errorf("a failed rollback tells the operator to run apply again (which re-applies the configuration), not rollback")
	}
}

// Found by review: eth1 is there but has no IRQs now (its driver frees them
// while the link is down; /proc/interrupts names none of it). The irq
// executor refuses it with ErrGone ("the interface has no IRQs"), so
// the rollback holds its record, and neither the warning ("held: to be
// put back ... once it is there again") nor the exit message ("a host
// object they name is gone") says what is missing: holdGoneRecords
// drops the executor's reason, which holdGone's warning keeps.
func TestRollbackHeldWarningSaysWhy(t *testing.T) {
	cli, root, dev := rollbackHost(t, `  interface "eth1" { irq_cpus = "2" }`)
	if err := os.RemoveAll(filepath.Join(dev, "device")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc/interrupts"), []byte("           CPU0\n  0:         10   IO-APIC   2-edge      timer\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli("rollback", "--auto-approve")
	t.Logf("rollback while eth1 has no IRQs: exit %d\nstdout:\n%sstderr:\n%s", code, out, errOut)
	if !strings.Contains(out, "held") {
		t.Fatalf("not held")
	}
	if !strings.Contains(out, "no IRQs") && !strings.Contains(errOut, "no IRQs") {
		t.Errorf("the rollback holds eth1's irq record without saying why (the interface is there; it has no IRQs)")
	}
}

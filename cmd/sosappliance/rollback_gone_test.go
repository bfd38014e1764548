package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRollbackLeavesGoneItemsExit1: rollback while an interface the
// appliance tuned is away puts back the rest, keeps the interface's
// records and exits 1 saying how many it left; once the interface is
// back, rollback puts its values back and exits 0. --forget-gone drops
// the records of an interface gone for good.
func TestRollbackLeavesGoneItemsExit1(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	files := map[string]string{
		"proc/sys/net/core/rmem_max":    "212992\n",
		"sys/devices/system/cpu/online": "0-3\n",
	}
	for irq := 40; irq <= 41; irq++ {
		files["proc/irq/"+strconv.Itoa(irq)+"/smp_affinity_list"] = "0-3\n"
		files["sys/class/net/eth1/device/msi_irqs/"+strconv.Itoa(irq)] = "msix\n"
	}
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfgPath := filepath.Join(dir, "sos.hcl")
	if err := os.WriteFile(cfgPath, []byte(`
security { psk_file = "/etc/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" {
  sysctl = { "net.core.rmem_max" = "67108864" }
  interface "eth1" { irq_cpus = "2" }
}
node "host1" { tuning = ["t"] }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"-c", cfgPath, "--node", "host1", "--state", filepath.Join(dir, "state.db"), "--root", root}
	cli := func(args ...string) (int, string, string) { return runCLI(t, append(args, common...)...) }
	read := func(p string) string {
		b, _ := os.ReadFile(filepath.Join(root, p))
		return strings.TrimSpace(string(b))
	}
	if code, out, errOut := cli("apply", "--auto-approve"); code != 0 || read("proc/irq/40/smp_affinity_list") != "2" {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	dev := filepath.Join(root, "sys/class/net/eth1")
	if err := os.Rename(dev, dev+".away"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli("rollback", "--auto-approve")
	t.Logf("rollback while eth1 is away: exit %d\n%s%s", code, out, errOut)
	if code != 1 || !strings.Contains(errOut, "1 item(s) not put back") || !strings.Contains(out, "held: to be put back") {
		t.Errorf("rollback while eth1 is away: exit %d, want 1, the held warning and the count", code)
	}
	if read("proc/sys/net/core/rmem_max") != "212992" {
		t.Errorf("rmem_max %s: the rest was not put back", read("proc/sys/net/core/rmem_max"))
	}
	if err := os.Rename(dev+".away", dev); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = cli("rollback", "--auto-approve")
	if code != 0 || read("proc/irq/40/smp_affinity_list") != "0-3" || read("proc/irq/41/smp_affinity_list") != "0-3" {
		t.Errorf("rollback once eth1 is back: exit %d, irq 40 %s\n%s%s", code, read("proc/irq/40/smp_affinity_list"), out, errOut)
	}

	// Gone for good: --forget-gone.
	if code, out, errOut := cli("apply", "--auto-approve"); code != 0 {
		t.Fatalf("apply again: exit %d\n%s%s", code, out, errOut)
	}
	if err := os.RemoveAll(dev); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = cli("rollback", "--auto-approve", "--forget-gone")
	if code != 0 || strings.Contains(out, "held") {
		t.Errorf("rollback --forget-gone: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := cli("rollback", "--auto-approve"); code != 0 {
		t.Errorf("a rollback after --forget-gone found records left: exit %d\n%s%s", code, out, errOut)
	}
}

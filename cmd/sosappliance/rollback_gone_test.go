package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRollbackLeavesGoneItemsExit1: rollback while an interface the
// appliance tuned is away puts back the rest, keeps the interface's
// records and exits 1 saying how many it left; once the interface is
// back, rollback puts its values back and exits 0. --forget-gone drops
// the records of an interface gone for good.
func TestRollbackLeavesGoneItemsExit1(t *testing.T) {
	cli, root, dev := rollbackHost(t, `  sysctl = { "net.core.rmem_max" = "67108864" }
  interface "eth1" { irq_cpus = "2" }`)
	read := func(p string) string {
		b, _ := os.ReadFile(filepath.Join(root, p))
		return strings.TrimSpace(string(b))
	}
	if read("proc/irq/40/smp_affinity_list") != "2" {
		t.Fatalf("not applied: irq 40 %s", read("proc/irq/40/smp_affinity_list"))
	}
	if err := os.Rename(dev, dev+".away"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli("rollback", "--auto-approve")
	t.Logf("rollback while eth1 is away: exit %d\n%s%s", code, out, errOut)
	if code != 1 || !strings.Contains(errOut, "1 item(s) not put back") || !strings.Contains(out, "held, to be put back") {
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

// TestApplyForgetGone: a file that no longer tunes an interface gone for
// good holds its records (apply says so, and keeps them) until apply
// --forget-gone forgets them, leaving the rest tuned.
func TestApplyForgetGone(t *testing.T) {
	cli, root, dev := rollbackHost(t, `  sysctl = { "net.core.rmem_max" = "67108864" }
  interface "eth1" { irq_cpus = "2" }`)
	if err := os.RemoveAll(dev); err != nil {
		t.Fatal(err)
	}
	// The file drops eth1 (the -c path is the helper's: rewrite it).
	cfg := filepath.Join(filepath.Dir(root), "sos.hcl")
	if err := os.WriteFile(cfg, []byte(`
security { psk_file = "/etc/psk" }
site "a" { prefixes = ["10.1.0.0/24"] }
tuning "t" {
  sysctl = { "net.core.rmem_max" = "67108864" }
}
node "host1" { tuning = ["t"] }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli("apply", "--auto-approve")
	if code != 0 || !strings.Contains(out, "held, to be put back") {
		t.Errorf("apply of a file without the gone eth1: exit %d, want 0 and the held warning\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli("apply", "--auto-approve", "--forget-gone")
	if code != 0 || strings.Contains(out, "held") {
		t.Errorf("apply --forget-gone: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := cli("plan", "-detailed-exitcode"); code != 0 || strings.Contains(out, "held") {
		t.Errorf("plan after apply --forget-gone: exit %d, want no changes and nothing held\n%s%s", code, out, errOut)
	}
}

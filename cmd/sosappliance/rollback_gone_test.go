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

// TestRollbackForgetGoneOfOneInterface: with eth1 gone for good and eth2
// away for a while, rollback --forget-gone=eth1 forgets eth1's records
// only, holds eth2's (exit 1, with a warning that names
// --forget-gone=eth2) and puts eth2 back once it is there again. A name
// of which no record is held (a typo, or an interface that is there) is
// refused, naming the interfaces held, and forgets nothing; an interface
// given after a space, or with a saved plan, is explained.
func TestRollbackForgetGoneOfOneInterface(t *testing.T) {
	cli, root, dev1 := rollbackHost(t, `  interface "eth1" { irq_cpus = "2" }
  interface "eth2" { irq_cpus = "3" }`)
	dev2 := filepath.Join(filepath.Dir(dev1), "eth2")
	read := func(p string) string {
		b, _ := os.ReadFile(filepath.Join(root, p))
		return strings.TrimSpace(string(b))
	}
	if read("proc/irq/40/smp_affinity_list") != "2" || read("proc/irq/42/smp_affinity_list") != "3" {
		t.Fatalf("not applied: irq 40 %s, irq 42 %s", read("proc/irq/40/smp_affinity_list"), read("proc/irq/42/smp_affinity_list"))
	}
	if err := os.RemoveAll(dev1); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dev2, dev2+".away"); err != nil {
		t.Fatal(err)
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"rollback", "--auto-approve", "--forget-gone=eth9"},
			"no record is held for eth9, as an interface gone from this node (records are held for eth1, eth2)"},
		{[]string{"rollback", "--auto-approve", "--forget-gone", "eth1"},
			`unexpected argument "eth1"; an interface goes after an '=', as --forget-gone=eth1`},
		{[]string{"plan", "--forget-gone=eth1,"}, `"" is not an interface name`},
		{[]string{"apply", "--auto-approve", "--forget-gone=eth1", "saved.plan"},
			"--forget-gone with the saved plan saved.plan: a saved plan is applied as it was made"},
	} {
		code, out, errOut := cli(bad.args...)
		if code == 0 || !strings.Contains(errOut, bad.want) {
			t.Errorf("%v: exit %d, want an error saying %q\n%s%s", bad.args, code, bad.want, out, errOut)
		}
	}
	code, out, errOut := cli("rollback", "--auto-approve", "--forget-gone=eth1")
	t.Logf("rollback --forget-gone=eth1: exit %d\n%s%s", code, out, errOut)
	if code != 1 || !strings.Contains(errOut, "1 item(s) not put back") || !strings.Contains(out, "--forget-gone=eth2 forgets it") ||
		strings.Contains(out, "--forget-gone=eth1 forgets it") {
		t.Errorf("rollback --forget-gone=eth1: exit %d, want 1, eth2's IRQ record held (and not eth1's)", code)
	}
	if err := os.Rename(dev2+".away", dev2); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = cli("rollback", "--auto-approve")
	if code != 0 || read("proc/irq/42/smp_affinity_list") != "0-3" || read("proc/irq/43/smp_affinity_list") != "0-3" {
		t.Errorf("rollback once eth2 is back: exit %d, irq 42 %s, irq 43 %s\n%s%s", code,
			read("proc/irq/42/smp_affinity_list"), read("proc/irq/43/smp_affinity_list"), out, errOut)
	}
	if read("proc/irq/40/smp_affinity_list") != "2" {
		t.Errorf("irq 40 %s: eth1's IRQ changed though eth1's records were only forgotten", read("proc/irq/40/smp_affinity_list"))
	}
}

package tuning

import (
	"context"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
)

// irqTree is shaped like /sys/class/net, /proc/irq and /proc/interrupts of
// a 4-CPU host: eth1 has MSI-X vectors 45-47, eth2 has no msi_irqs and is
// found by name in /proc/interrupts, veth0 has no IRQs at all.
func irqTree(t *testing.T) string {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"sys/devices/system/cpu/online":         "0-3\n",
		"sys/class/net/eth1/device/msi_irqs/45": "msix\n",
		"sys/class/net/eth1/device/msi_irqs/46": "msix\n",
		"sys/class/net/eth1/device/msi_irqs/47": "msix\n",
		"sys/class/net/eth2/mtu":                "1500\n",
		"sys/class/net/veth0/mtu":               "1500\n",
		"proc/irq/45/smp_affinity_list":         "0-3\n",
		"proc/irq/46/smp_affinity_list":         "0-3\n",
		"proc/irq/47/smp_affinity_list":         "2\n",
		"proc/irq/60/smp_affinity_list":         "0-3\n",
		"proc/irq/61/smp_affinity_list":         "0-3\n",
		"proc/irq/62/smp_affinity_list":         "1\n",
		"proc/interrupts": `           CPU0       CPU1       CPU2       CPU3
  0:         45          0          0          0   IO-APIC   2-edge      timer
 60:          1          0          0          0   PCI-MSI 1048576-edge      eth2-TxRx-0
 61:          1          0          0          0   PCI-MSI 1048577-edge      i40e-eth2-TxRx-1
 62:          1          0          0          0   PCI-MSI 1048578-edge      eth22-TxRx-0
NMI:          0          0          0          0   Non-maskable interrupts
`,
	})
	return root
}

func TestIRQSpreadsAndRestoresPerIRQAffinity(t *testing.T) {
	ctx := context.Background()
	root := irqTree(t)
	ex := NewIRQ(root)
	want := item.Item{Kind: item.KindIRQ, Key: "eth1", Value: "1-2"}
	if err := ex.Validate(ctx, []item.Item{want}); err != nil {
		t.Fatal(err)
	}
	before := observeOne(t, ex, want)
	if !before.Present || before.Value != "45:0-3 46:0-3 47:2" {
		t.Fatalf("before = %+v", before)
	}
	if err := ex.Apply(ctx, want); err != nil {
		t.Fatal(err)
	}
	for irq, cpu := range map[string]string{"45": "1\n", "46": "2\n", "47": "1\n"} {
		if got := readTree(t, root, "proc/irq/"+irq+"/smp_affinity_list"); got != cpu {
			t.Errorf("irq %s affinity = %q, want %q", irq, got, cpu)
		}
	}
	if got := observeOne(t, ex, want); got.Value != "1-2" {
		t.Fatalf("after apply observed %q, want the CPU list", got.Value)
	}
	// Someone moves one IRQ: the item is no longer what spreading gives.
	writeTree(t, root, map[string]string{"proc/irq/46/smp_affinity_list": "3\n"})
	if got := observeOne(t, ex, want); got.Value != "45:1 46:3 47:1" {
		t.Fatalf("after drift observed %q", got.Value)
	}
	// Rollback applies the recorded per-IRQ form.
	if err := ex.Apply(ctx, before.Item); err != nil {
		t.Fatal(err)
	}
	if got := observeOne(t, ex, item.Item{Kind: item.KindIRQ, Key: "eth1", Value: "1-2"}); got.Value != "45:0-3 46:0-3 47:2" {
		t.Fatalf("after restore observed %q", got.Value)
	}
	if err := ex.Remove(ctx, want); err == nil {
		t.Error("Remove of IRQ affinity succeeded")
	}
}

func TestIRQFallsBackToInterruptNames(t *testing.T) {
	ctx := context.Background()
	root := irqTree(t)
	ex := NewIRQ(root)
	it := item.Item{Kind: item.KindIRQ, Key: "eth2", Value: "3"}
	if got := observeOne(t, ex, it); got.Value != "60:0-3 61:0-3" {
		t.Fatalf("eth2 observed %q; IRQ 62 belongs to eth22", got.Value)
	}
	if err := ex.Apply(ctx, it); err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, root, "proc/irq/62/smp_affinity_list"); got != "1\n" {
		t.Errorf("eth22's IRQ was touched: %q", got)
	}
	if got := observeOne(t, ex, it); got.Value != "3" {
		t.Fatalf("eth2 after apply observed %q", got.Value)
	}
}

func TestIRQValidateAndIrqbalanceWarning(t *testing.T) {
	ctx := context.Background()
	root := irqTree(t)
	ex := NewIRQ(root)
	err := ex.Validate(ctx, []item.Item{
		{Kind: item.KindIRQ, Key: "eth1", Value: "2-5"},
		{Kind: item.KindIRQ, Key: "veth0", Value: "0"},
		{Kind: item.KindIRQ, Key: "nosuch", Value: "0"},
		{Kind: item.KindIRQ, Key: "eth2", Value: "x"},
		{Kind: item.KindIRQ, Key: "../etc", Value: "0"},
	})
	for _, want := range []string{
		`irq eth1 = "2-5": CPUs 4-5 are not online (online: 0-3)`,
		"irq veth0: the interface has no IRQs",
		"irq nosuch: no such interface",
		`irq eth2: CPU list "x"`,
		`invalid interface name "../etc"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error lacks %q:\n%v", want, err)
		}
	}
	if o := observeOne(t, ex, item.Item{Kind: item.KindIRQ, Key: "veth0", Value: "0"}); o.Present {
		t.Errorf("interface without IRQs observed present: %+v", o)
	}

	if o := observeOne(t, ex, item.Item{Kind: item.KindIRQ, Key: "eth1", Value: "0"}); len(o.Warnings) != 0 {
		t.Errorf("warning without irqbalance: %v", o.Warnings)
	}
	writeTree(t, root, map[string]string{"proc/4242/comm": "irqbalance\n", "proc/17/comm": "sshd\n"})
	o := observeOne(t, ex, item.Item{Kind: item.KindIRQ, Key: "eth1", Value: "0"})
	if len(o.Warnings) != 1 || !strings.Contains(o.Warnings[0], "irqbalance is running (pid 4242) and will undo the IRQ affinity of eth1") {
		t.Errorf("warnings = %q", o.Warnings)
	}
}

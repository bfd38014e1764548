package tuning

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sosappliance/sosappliance/host/cpuset"
	"github.com/sosappliance/sosappliance/host/item"
)

// IRQ converges the interrupt affinity of a network interface under Root:
// it finds the interface's IRQs, spreads them one CPU each, round robin,
// over the declared CPU list, and writes /proc/irq/N/smp_affinity_list.
//
// An irq item's value is either a CPU list ("0-12"), meaning "spread over
// these CPUs", or a per-IRQ affinity ("45:0 46:1-3,5"): IRQ numbers
// ascending, each "irq:cpulist", separated by single spaces. Observe reports
// the CPU list when every IRQ has the affinity the spreading gives and the
// per-IRQ form otherwise; Apply accepts both, so the per-IRQ form recorded
// before the first apply is what rollback puts back.
type IRQ struct {
	Root string
}

// NewIRQ returns the IRQ affinity executor for the host tree at root.
func NewIRQ(root string) *IRQ { return &IRQ{Root: root} }

// Kind implements Executor.
func (q *IRQ) Kind() string { return item.KindIRQ }

// target is the affinity an irq item asks for on the given IRQs. For the
// per-IRQ form only IRQs that still exist are kept: after a driver reload
// the old numbers are gone and there is nothing of them to put back.
func (q *IRQ) target(value string, irqs []int) (item.IRQAffinity, error) {
	if strings.Contains(value, ":") {
		want, err := item.ParseIRQAffinity(value)
		if err != nil {
			return nil, err
		}
		out := item.IRQAffinity{}
		for _, irq := range irqs {
			if cpus, ok := want[irq]; ok {
				out[irq] = cpus
			}
		}
		return out, nil
	}
	cpus, err := cpuset.Parse(value)
	if err != nil {
		return nil, err
	}
	return item.SpreadIRQs(irqs, cpus), nil
}

// interfaceIRQs lists the IRQs of an interface: the MSI vectors of its
// device, or, for devices without MSI, the /proc/interrupts lines that name
// the interface. ok is false when the interface does not exist.
func (q *IRQ) interfaceIRQs(ifname string) (irqs []int, ok bool, err error) {
	if ifname == "" || strings.ContainsAny(ifname, "/\x00") || ifname == "." || ifname == ".." {
		return nil, false, fmt.Errorf("invalid interface name %q", ifname)
	}
	if _, err := os.Stat(filepath.Join(q.Root, "sys", "class", "net", ifname)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("interface %s: %w", ifname, err)
	}
	entries, err := os.ReadDir(filepath.Join(q.Root, "sys", "class", "net", ifname, "device", "msi_irqs"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, true, fmt.Errorf("interface %s msi_irqs: %w", ifname, err)
	}
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			irqs = append(irqs, n)
		}
	}
	if len(irqs) == 0 {
		if irqs, err = q.irqsFromInterrupts(ifname); err != nil {
			return nil, true, err
		}
	}
	slices.Sort(irqs)
	return irqs, true, nil
}

// irqsFromInterrupts finds IRQ lines whose action names contain the
// interface name as a dash-separated word ("eth1-TxRx-0", "i40e-eth1-rx-1").
func (q *IRQ) irqsFromInterrupts(ifname string) ([]int, error) {
	f, err := os.Open(filepath.Join(q.Root, "proc", "interrupts"))
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", ifname, err)
	}
	defer f.Close()
	var irqs []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		irq, err := strconv.Atoi(strings.TrimSuffix(fields[0], ":"))
		if err != nil {
			continue // CPU header, NMI, LOC and other named lines
		}
		for _, name := range fields[1:] {
			if namesInterface(name, ifname) {
				irqs = append(irqs, irq)
				break
			}
		}
	}
	return irqs, sc.Err()
}

func namesInterface(action, ifname string) bool {
	for word := range strings.SplitSeq(strings.TrimSuffix(action, ","), "-") {
		if word == ifname {
			return true
		}
	}
	// "eth1@pci:..." style names carry the interface before '@'.
	before, _, found := strings.Cut(action, "@")
	return found && before == ifname
}

func (q *IRQ) affinityPath(irq int) string {
	return filepath.Join(q.Root, "proc", "irq", strconv.Itoa(irq), "smp_affinity_list")
}

func (q *IRQ) readAffinity(irq int) ([]int, error) {
	b, err := os.ReadFile(q.affinityPath(irq))
	if err != nil {
		return nil, fmt.Errorf("irq %d: %w", irq, err)
	}
	cpus, err := cpuset.Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("irq %d smp_affinity_list: %w", irq, err)
	}
	return cpus, nil
}

// Observe reads the affinity of every IRQ of each interface. An interface
// that does not exist or has no IRQs is reported not present.
func (q *IRQ) Observe(ctx context.Context, items []item.Item) ([]item.Observation, error) {
	var errs []error
	warning := q.irqbalanceWarning()
	obs := make([]item.Observation, 0, len(items))
	for _, it := range items {
		o := item.Observation{Item: item.Item{Kind: it.Kind, Key: it.Key}}
		value, present, err := q.observe(it)
		if err != nil {
			errs = append(errs, err)
		}
		o.Present, o.Value = present, value
		if warning != "" {
			o.Warnings = []string{fmt.Sprintf(warning, it.Key)}
		}
		obs = append(obs, o)
	}
	return obs, errors.Join(errs...)
}

func (q *IRQ) observe(it item.Item) (string, bool, error) {
	irqs, ok, err := q.interfaceIRQs(it.Key)
	if err != nil || !ok || len(irqs) == 0 {
		return "", false, err
	}
	have := item.IRQAffinity{}
	for _, irq := range irqs {
		if have[irq], err = q.readAffinity(irq); err != nil {
			return "", false, err
		}
	}
	// Report the item's own CPU list when the host is exactly what
	// spreading over it gives, so desired and observed compare equal.
	if it.Value != "" && !strings.Contains(it.Value, ":") {
		if cpus, err := cpuset.Parse(it.Value); err == nil && sameAffinity(have, item.SpreadIRQs(irqs, cpus)) {
			return cpuset.Format(cpus), true, nil
		}
	}
	return have.String(), true, nil
}

func sameAffinity(a, b item.IRQAffinity) bool {
	if len(a) != len(b) {
		return false
	}
	for irq, cpus := range a {
		if !slices.Equal(cpus, b[irq]) {
			return false
		}
	}
	return true
}

// irqbalanceWarning returns a format for one interface's warning when an
// irqbalance daemon runs: it rewrites affinities every few seconds.
func (q *IRQ) irqbalanceWarning() string {
	pid := findProcess(q.Root, "irqbalance")
	if pid == 0 {
		return ""
	}
	return "irqbalance is running (pid " + strconv.Itoa(pid) +
		") and will undo the IRQ affinity of %s; stop it or exclude these IRQs (IRQBALANCE_BANNED_CPULIST)"
}

// findProcess returns the pid of a process whose comm is name, or 0.
func findProcess(root, name string) int {
	entries, err := os.ReadDir(filepath.Join(root, "proc"))
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(root, "proc", e.Name(), "comm"))
		if err == nil && strings.TrimSpace(string(comm)) == name {
			return pid
		}
	}
	return 0
}

// Gone reports an interface that does not exist or has no IRQs
// (GoneChecker).
func (q *IRQ) Gone(ctx context.Context, it item.Item) error {
	irqs, ok, err := q.interfaceIRQs(it.Key)
	switch {
	case err != nil:
		return nil
	case !ok:
		return gone(it.Key, fmt.Errorf("irq %s: no such interface", it.Key))
	case len(irqs) == 0:
		return gone(it.Key, fmt.Errorf("irq %s: the interface has no IRQs (no device/msi_irqs, none named in /proc/interrupts)", it.Key))
	}
	return nil
}

// Validate checks that each interface exists and has IRQs, and that every
// CPU named is online.
func (q *IRQ) Validate(ctx context.Context, items []item.Item) error {
	online, onlineErr := onlineCPUs(q.Root)
	var errs []error
	for _, it := range items {
		irqs, ok, err := q.interfaceIRQs(it.Key)
		switch {
		case err != nil:
			errs = append(errs, err)
			continue
		case !ok:
			errs = append(errs, gone(it.Key, fmt.Errorf("irq %s: no such interface", it.Key)))
			continue
		case len(irqs) == 0:
			errs = append(errs, gone(it.Key, fmt.Errorf("irq %s: the interface has no IRQs (no device/msi_irqs, none named in /proc/interrupts)", it.Key)))
			continue
		}
		target, err := q.target(it.Value, irqs)
		if err != nil {
			errs = append(errs, fmt.Errorf("irq %s: %w", it.Key, err))
			continue
		}
		if onlineErr != nil {
			continue
		}
		// Check every CPU declared, not only those the current IRQ count
		// happens to use.
		named := slices.Concat(slices.Collect(maps.Values(target))...)
		if !strings.Contains(it.Value, ":") {
			named, _ = cpuset.Parse(it.Value)
		}
		var offline []int
		for _, c := range named {
			if !slices.Contains(online, c) {
				offline = append(offline, c)
			}
		}
		if len(offline) > 0 {
			errs = append(errs, fmt.Errorf("irq %s = %q: CPUs %s are not online (online: %s)",
				it.Key, it.Value, cpuset.Format(offline), cpuset.Format(online)))
		}
	}
	return errors.Join(errs...)
}

// defaultAffinity is the affinity the kernel gives a new IRQ:
// /proc/irq/default_smp_affinity (a hexadecimal mask in comma-separated
// 32-bit groups), or every online CPU where that file is missing.
func (q *IRQ) defaultAffinity() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(q.Root, "proc", "irq", "default_smp_affinity"))
	if errors.Is(err, fs.ErrNotExist) {
		return onlineCPUs(q.Root)
	}
	if err != nil {
		return nil, err
	}
	mask, ok := new(big.Int).SetString(strings.ReplaceAll(strings.TrimSpace(string(b)), ",", ""), 16)
	if !ok || mask.Sign() == 0 {
		return nil, fmt.Errorf("default_smp_affinity %q is not a CPU mask", strings.TrimSpace(string(b)))
	}
	var cpus []int
	for i := range mask.BitLen() {
		if mask.Bit(i) == 1 {
			cpus = append(cpus, i)
		}
	}
	return cpus, nil
}

// onlineCPUs reads Root/sys/devices/system/cpu/online.
func onlineCPUs(root string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(root, "sys", "devices", "system", "cpu", "online"))
	if err != nil {
		return nil, err
	}
	return cpuset.Parse(string(b))
}

// Apply writes each IRQ's affinity and reads it back.
func (q *IRQ) Apply(ctx context.Context, it item.Item) error {
	irqs, ok, err := q.interfaceIRQs(it.Key)
	if err != nil {
		return err
	}
	if !ok || len(irqs) == 0 {
		return fmt.Errorf("irq %s: interface missing or without IRQs", it.Key)
	}
	target, err := q.target(it.Value, irqs)
	if err != nil {
		return fmt.Errorf("irq %s: %w", it.Key, err)
	}
	if strings.Contains(it.Value, ":") {
		// A recorded per-IRQ value being put back names the IRQs the
		// interface had when the appliance first touched it; those it
		// gained since (more channels, a driver reload) were pinned by
		// the appliance too, and go back to the kernel's default.
		var def []int
		for _, irq := range irqs {
			if _, ok := target[irq]; ok {
				continue
			}
			if def == nil {
				if def, err = q.defaultAffinity(); err != nil {
					return fmt.Errorf("irq %s: %w", it.Key, err)
				}
			}
			target[irq] = def
		}
	}
	for _, irq := range irqs {
		cpus, ok := target[irq]
		if !ok {
			continue
		}
		want := cpuset.Format(cpus)
		if err := writeExisting(q.affinityPath(irq), want); err != nil {
			return fmt.Errorf("irq %d (%s): set affinity %s: %w", irq, it.Key, want, err)
		}
		got, err := q.readAffinity(irq)
		if err != nil {
			return err
		}
		if !slices.Equal(got, cpus) {
			return fmt.Errorf("irq %d (%s): wrote affinity %s but the kernel reports %s", irq, it.Key, want, cpuset.Format(got))
		}
	}
	return nil
}

// Remove is refused: every IRQ always has an affinity; rollback restores the
// recorded per-IRQ value with Apply.
func (q *IRQ) Remove(ctx context.Context, it item.Item) error {
	return fmt.Errorf("irq %s: IRQ affinity cannot be removed, only set", it.Key)
}

// writeExisting writes a kernel file in one write, never creating it.
func writeExisting(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte(value + "\n"))
	return errors.Join(werr, f.Close())
}

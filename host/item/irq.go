package item

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sosappliance/sosappliance/host/cpuset"
)

// IRQAffinity is the affinity of each IRQ of one interface: the CPUs of
// each IRQ number.
type IRQAffinity map[int][]int

// String is the per-IRQ form: IRQ numbers ascending, each "irq:cpulist",
// separated by single spaces ("45:0 46:1-3,5").
func (a IRQAffinity) String() string {
	irqs := make([]int, 0, len(a))
	for irq := range a {
		irqs = append(irqs, irq)
	}
	slices.Sort(irqs)
	parts := make([]string, len(irqs))
	for i, irq := range irqs {
		parts[i] = strconv.Itoa(irq) + ":" + cpuset.Format(a[irq])
	}
	return strings.Join(parts, " ")
}

// ParseIRQAffinity reads the per-IRQ form.
func ParseIRQAffinity(s string) (IRQAffinity, error) {
	a := IRQAffinity{}
	for part := range strings.FieldsSeq(s) {
		irqText, cpuText, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("per-IRQ affinity %q: %q is not irq:cpus", s, part)
		}
		n, err := strconv.ParseUint(irqText, 10, 31) // digits only, no sign
		if err != nil {
			return nil, fmt.Errorf("per-IRQ affinity %q: %q is not an IRQ number", s, irqText)
		}
		irq := int(n)
		if _, dup := a[irq]; dup {
			return nil, fmt.Errorf("per-IRQ affinity %q: IRQ %d twice", s, irq)
		}
		cpus, err := cpuset.Parse(cpuText)
		if err != nil {
			return nil, fmt.Errorf("per-IRQ affinity %q: %w", s, err)
		}
		a[irq] = cpus
	}
	if len(a) == 0 {
		return nil, errors.New("empty IRQ affinity")
	}
	return a, nil
}

// SpreadIRQs assigns IRQs, in ascending order, one CPU each from cpus in
// turn. It is the whole placement policy of an irq item's CPU list:
// deterministic, so that the host can be told to match it or not, and the
// plan can show what a CPU list means for the IRQs there are.
func SpreadIRQs(irqs, cpus []int) IRQAffinity {
	sorted := slices.Clone(irqs)
	slices.Sort(sorted)
	out := make(IRQAffinity, len(sorted))
	for i, irq := range sorted {
		out[irq] = []int{cpus[i%len(cpus)]}
	}
	return out
}

// SpreadText is what the CPU list cpus gives the IRQs of the per-IRQ
// value have, in the per-IRQ form ("" when either does not parse): a plan
// line "40:0-1 41:0-1" -> "0-1" changes each IRQ to one CPU.
func SpreadText(have, cpus string) string {
	a, err := ParseIRQAffinity(have)
	if err != nil || strings.Contains(cpus, ":") {
		return ""
	}
	list, err := cpuset.Parse(cpus)
	if err != nil || len(list) == 0 {
		return ""
	}
	irqs := make([]int, 0, len(a))
	for irq := range a {
		irqs = append(irqs, irq)
	}
	return SpreadIRQs(irqs, list).String()
}

// CanonicalIRQValue rewrites either form of an irq value canonically.
func CanonicalIRQValue(v string) (string, error) {
	if strings.Contains(v, ":") {
		a, err := ParseIRQAffinity(v)
		if err != nil {
			return "", err
		}
		return a.String(), nil
	}
	return cpuset.Canonical(v)
}

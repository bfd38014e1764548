package item

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/cpuset"
)

// checkSpreadText87: SpreadText never panics; it says "" unless have is
// per-IRQ and cpus a CPU list, and then it names exactly have's IRQs, one
// CPU each, taken from cpus in turn, on one line.
func checkSpreadText87(t *testing.T, have, cpus string) {
	got := SpreadText(have, cpus)
	a, errA := ParseIRQAffinity(have)
	list, errC := cpuset.Parse(cpus)
	if errA != nil || errC != nil || strings.Contains(cpus, ":") {
		if got != "" {
			t.Errorf("SpreadText(%q, %q) = %q, want \"\" (have: %v, cpus: %v)", have, cpus, got, errA, errC)
		}
		return
	}
	if strings.ContainsAny(got, "\n\r") {
		t.Errorf("SpreadText(%q, %q) = %q: not one line", have, cpus, got)
	}
	b, err := ParseIRQAffinity(got)
	if err != nil {
		t.Errorf("SpreadText(%q, %q) = %q: does not read back: %v", have, cpus, got, err)
		return
	}
	var irqs []int
	for irq := range a {
		irqs = append(irqs, irq)
	}
	slices.Sort(irqs)
	if len(b) != len(a) {
		t.Errorf("SpreadText(%q, %q) = %q: %d IRQs, have has %d", have, cpus, got, len(b), len(a))
	}
	for i, irq := range irqs {
		if want := list[i%len(list)]; !slices.Equal(b[irq], []int{want}) {
			t.Errorf("SpreadText(%q, %q) = %q: IRQ %d gets %v, want %d", have, cpus, got, irq, b[irq], want)
		}
	}
}

// TestSpreadTextOddValues: odd values for the plan's IRQ line
// annotation of 649829d: empty, blank, the CPU-list form on both sides,
// per-IRQ on both, IRQ numbers out of range, CPUs past 8191, reversed
// CPU ranges, newlines, duplicates; then a bounded random walk. Passes on
// 79d1aff: nothing panics (the empty CPU list is refused before the
// modulo), and what it prints is what tuning applies.
func TestSpreadTextOddValues(t *testing.T) {
	odd := []string{"", " ", "\n", "0-1", "40:0-1 41:0-1", "40:0 40:1", "99999999999:0", "-1:0", "40:8192", "40:1-0",
		"40:0\n41:1", "0-8191", "8191", "0,0,0", "3-1", ":", "40:", "40: 41:1", "40:0 41:1 42:2 43:3", "0-1:2"}
	for _, have := range odd {
		for _, cpus := range odd {
			checkSpreadText87(t, have, cpus)
		}
	}
	rng := rand.New(rand.NewPCG(87, 649829))
	atoms := []string{"0", "1", "7", "40", "41", "8191", "8192", ":", "-", ",", " ", "\t", "\n", "x", "4294967296"}
	for range 20000 {
		var h, c strings.Builder
		for range rng.IntN(8) {
			h.WriteString(atoms[rng.IntN(len(atoms))])
		}
		for range rng.IntN(5) {
			c.WriteString(atoms[rng.IntN(len(atoms))])
		}
		checkSpreadText87(t, h.String(), c.String())
	}
}

// FuzzSpreadText: go test -fuzz=FuzzSpreadText ./host/item
func FuzzSpreadText(f *testing.F) {
	f.Add("40:0-1 41:0-1", "0-1")
	f.Add("40:0", "0-8191")
	f.Add("", "")
	f.Fuzz(checkSpreadText87)
}

package tuning

import (
	"slices"
	"testing"

	"github.com/sosappliance/sosappliance/host/cpuset"
)

// defaultAffinity reads the kernel's mask for new IRQs, in 32-bit groups,
// and falls back to the online CPUs without it.
func TestDefaultAffinity(t *testing.T) {
	for _, c := range []struct{ mask, want string }{
		{"0000000c\n", "2-3"},
		{"00000001,80000000\n", "31-32"},
		{"", "0-3"}, // no file: the online CPUs
	} {
		root := t.TempDir()
		files := map[string]string{"sys/devices/system/cpu/online": "0-3\n"}
		if c.mask != "" {
			files["proc/irq/default_smp_affinity"] = c.mask
		}
		writeTree(t, root, files)
		got, err := (&IRQ{Root: root}).defaultAffinity()
		want, _ := cpuset.Parse(c.want)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("mask %q: %v, %v; want %s", c.mask, cpuset.Format(got), err, c.want)
		}
	}
	root := t.TempDir()
	writeTree(t, root, map[string]string{"proc/irq/default_smp_affinity": "zz\n"})
	if _, err := (&IRQ{Root: root}).defaultAffinity(); err == nil {
		t.Error("a mask that is not hexadecimal was read")
	}
}

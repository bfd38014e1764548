// Package cpuset reads and writes sets of CPUs in the Linux CPU list form
// ("0-3,8,10-11"), the form of smp_affinity_list, /sys/devices/system/cpu/online
// and of CPU lists in the configuration. A set is a sorted slice of distinct
// CPU numbers.
package cpuset

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Parse reads a Linux CPU list such as "0-3,8,10-11" into sorted, distinct
// CPU numbers.
func Parse(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty CPU list")
	}
	// A set, not a list: the memory is the result's bound, whatever the
	// text repeats ("0-8191,0-8191,...").
	var in [MaxCPU + 1]bool
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		first, err := parseCPU(lo)
		if err != nil {
			return nil, fmt.Errorf("CPU list %q: %w", s, err)
		}
		last := first
		if isRange {
			if last, err = parseCPU(hi); err != nil {
				return nil, fmt.Errorf("CPU list %q: %w", s, err)
			}
			if last < first {
				return nil, fmt.Errorf("CPU list %q: range %d-%d runs backwards", s, first, last)
			}
		}
		for c := first; c <= last; c++ {
			in[c] = true
		}
	}
	var cpus []int
	for c, ok := range in {
		if ok {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// MaxCPU bounds CPU numbers so a typo like "0-99999999" cannot allocate
// gigabytes; Linux supports at most 8192 CPUs.
const MaxCPU = 8191

func parseCPU(s string) (int, error) {
	// Digits only, as the kernel's list parser takes them: no sign.
	n, err := strconv.ParseUint(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("CPU %s is beyond the largest Linux supports (%d)", s, MaxCPU)
	}
	if err != nil {
		return 0, fmt.Errorf("%q is not a CPU number", s)
	}
	if n > MaxCPU {
		return 0, fmt.Errorf("CPU %d is beyond the largest Linux supports (%d)", n, MaxCPU)
	}
	return int(n), nil
}

// Format writes CPU numbers in the kernel's own list form: ascending,
// runs of two or more as "a-b", so that the text compares equal to what
// smp_affinity_list prints for the same set.
func Format(cpus []int) string {
	sorted := slices.Clone(cpus)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var b strings.Builder
	for i := 0; i < len(sorted); {
		j := i
		for j+1 < len(sorted) && sorted[j+1] == sorted[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(sorted[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(sorted[j]))
		}
		i = j + 1
	}
	return b.String()
}

// Canonical rewrites a CPU list in Format's form.
func Canonical(s string) (string, error) {
	cpus, err := Parse(s)
	if err != nil {
		return "", err
	}
	return Format(cpus), nil
}

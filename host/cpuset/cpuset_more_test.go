package cpuset

import (
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestParseMemoryIsBoundedByTheResult: a set has at most MaxCPU+1
// members, so parsing any list should take memory of that order. Parse
// appends every CPU of every part before it removes duplicates, so a list
// that names the whole range again and again ("0-8191,0-8191,...", 16 KiB
// of text, as a config value, a stored item value or a rollback value can
// be) allocates 8192 ints per 10 bytes of input.
// Found by review (helper-70): before Parse kept a set, 16 KB of text
// allocated 733 MiB.
func TestParseMemoryIsBoundedByTheResult(t *testing.T) {
	in := strings.Repeat("0-8191,", 16<<10/7) + "0"
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cpus, err := Parse(in)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) != MaxCPU+1 {
		t.Fatalf("%d CPUs", len(cpus))
	}
	const bound = 8 << 20 // generous: the result is 64 KiB
	if got := after.TotalAlloc - before.TotalAlloc; got > bound {
		t.Errorf("Parse of a %d-byte list of %d CPUs allocated %d MiB, want <= %d MiB",
			len(in), len(cpus), got>>20, bound>>20)
	}
}

// TestParseRefusesForeignSpellings: what the kernel's
// bitmap_parselist refuses, and what reads as something else, is refused.
// Found by review (helper-70): "+3" was CPU 3.
func TestParseRefusesForeignSpellings(t *testing.T) {
	bad := []string{"", ",", "0,", ",0", "0,,1", "-", "0-", "-3", "3-1", "0-3-5", "0 - 3", "a",
		"0x1", "1_0", "8192", "0-8192", "0-4294967295", "4294967296", "99999999999999999999999",
		"0-9223372036854775807", "+3", "0-+3", "1.5"}
	for _, s := range bad {
		if c, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", s, c)
		}
	}
	good := map[string]string{"0-3,8": "0-3,8", " 8,0-3 ": "0-3,8", "3,1,2": "1-3", "0-0": "0",
		"1,3": "1,3", "0-3,2-5": "0-5", "8191": "8191", "007": "7"}
	for in, want := range good {
		if got, err := Canonical(in); err != nil || got != want {
			t.Errorf("Canonical(%q) = %q, %v, want %q", in, got, err, want)
		}
	}
}

// FuzzParse: Parse never panics; what it accepts is sorted,
// distinct and within 0..MaxCPU, and Format reads back to the same set.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0-3,8", "0", "8191", "0-8191", "1,1,1", "3-1", "+1", " 0 , 2 ", "", " 2 , 4-5 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4096 {
			return
		}
		cpus, err := Parse(s)
		if err != nil {
			return
		}
		if len(cpus) == 0 || !slices.IsSorted(cpus) || len(slices.Compact(slices.Clone(cpus))) != len(cpus) ||
			cpus[0] < 0 || cpus[len(cpus)-1] > MaxCPU {
			t.Fatalf("Parse(%q) = %v", s, cpus)
		}
		back, err := Parse(Format(cpus))
		if err != nil || !slices.Equal(back, cpus) {
			t.Fatalf("Parse(%q) = %v, Format %q reads %v, %v", s, cpus, Format(cpus), back, err)
		}
	})
}

package tuning

import (
	"slices"
	"testing"
)

func TestParseAndFormatCPUList(t *testing.T) {
	tests := []struct {
		in    string
		cpus  []int
		canon string
	}{
		{"0", []int{0}, "0"},
		{"0-3", []int{0, 1, 2, 3}, "0-3"},
		{"0,1", []int{0, 1}, "0-1"},
		{" 3,1-2 ,8\n", []int{1, 2, 3, 8}, "1-3,8"},
		{"5,5,4-5", []int{4, 5}, "4-5"},
		{"0-1,3,5-7,9", []int{0, 1, 3, 5, 6, 7, 9}, "0-1,3,5-7,9"},
	}
	for _, tt := range tests {
		cpus, err := ParseCPUList(tt.in)
		if err != nil {
			t.Errorf("ParseCPUList(%q): %v", tt.in, err)
			continue
		}
		if !slices.Equal(cpus, tt.cpus) {
			t.Errorf("ParseCPUList(%q) = %v, want %v", tt.in, cpus, tt.cpus)
		}
		if got := FormatCPUList(cpus); got != tt.canon {
			t.Errorf("FormatCPUList(%v) = %q, want %q", cpus, got, tt.canon)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "-1", "1-", "1,,2", "0-99999", "1.5"} {
		if cpus, err := ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q) = %v, want an error", bad, cpus)
		}
	}
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0", "0-3,8", "1,1", "3-1", "", "0-8191", " 2 , 4-5 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := ParseCPUList(s)
		if err != nil {
			return
		}
		canon := FormatCPUList(cpus)
		again, err := ParseCPUList(canon)
		if err != nil || !slices.Equal(again, cpus) || FormatCPUList(again) != canon {
			t.Fatalf("%q -> %v -> %q -> %v, %v", s, cpus, canon, again, err)
		}
	})
}

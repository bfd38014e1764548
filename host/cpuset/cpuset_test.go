package cpuset

import (
	"slices"
	"testing"
)

func TestParseAndFormat(t *testing.T) {
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
		cpus, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if !slices.Equal(cpus, tt.cpus) {
			t.Errorf("Parse(%q) = %v, want %v", tt.in, cpus, tt.cpus)
		}
		if got := Format(cpus); got != tt.canon {
			t.Errorf("Format(%v) = %q, want %q", cpus, got, tt.canon)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "-1", "1-", "1,,2", "0-99999", "1.5"} {
		if cpus, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", bad, cpus)
		}
	}
}

package cpuset

import (
	"strings"
	"testing"
)

// TestTooLargeIsNotMalformed: a CPU number past MaxCPU is said to
// be beyond what Linux supports; past 2^32-1 (parseCPU's ParseUint bit
// size) the same digits are called "not a CPU number", as if the text
// were malformed. Before 59f7bdb (Atoi) both said "beyond".
// Found by review (helper-73) of 59f7bdb.
func TestTooLargeIsNotMalformed(t *testing.T) {
	for _, s := range []string{"0-9999", "0-99999999999", "4294967296"} {
		_, err := Parse(s)
		if err == nil || !strings.Contains(err.Error(), "beyond") {
			t.Errorf("Parse(%q): %v, want it said beyond the largest CPU", s, err)
		}
	}
	// Held: an empty list, or one of commas or blanks, is refused.
	for _, s := range []string{"", " ", ",", ",,", "0,", ",0", "0,,1", "\n"} {
		if cpus, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %v, nil", s, cpus)
		}
	}
}

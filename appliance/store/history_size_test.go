package store

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestHistoryFileLevelsOff: the history keeps MaxHistory entries, and the
// file they are kept in must stop growing too, or a daemon correcting
// drift every 30 s fills its disk over months (bbolt reuses freed pages;
// this checks that it does for the pruned entries). Measured 2026-12-07
// with this test's entries of about 1 KiB: 2 MiB at 500 applies, 4 MiB at
// 1,000, and 4 MiB from there to 8,000.
func TestHistoryFileLevelsOff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	size := func() int64 {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	var changes []HistoryChange
	for j := range 6 {
		changes = append(changes, HistoryChange{Action: "change", Kind: "sysctl", Key: fmt.Sprintf("net.core.rmem_max_%d", j),
			Before: "212992", BeforePresent: true, After: "67108864", AfterPresent: true})
	}
	var atCap int64
	const applies = 3 * MaxHistory
	for i := range uint64(applies) {
		serial, err := s.BeginApply(i, HistoryEntry{Operation: "apply", Node: "host1", ConfigHash: "sha256:0123456789abcdef", Changes: changes})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.FinishApply(serial, ResultOK, "drift corrected on net.core.rmem_max: another process set it back"); err != nil {
			t.Fatal(err)
		}
		if serial == 3*MaxHistory/2 {
			atCap = size()
		}
	}
	end := size()
	t.Logf("state database: %d KiB after %d applies, %d KiB after %d", atCap/1024, 3*MaxHistory/2, end/1024, applies)
	if end > atCap {
		t.Fatalf("state database grew from %d to %d bytes between %d and %d applies although the history holds %d entries in both",
			atCap, end, 3*MaxHistory/2, applies, MaxHistory)
	}
}

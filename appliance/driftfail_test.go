package appliance

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestDriftFailureLoggedOnce: a drift check that fails the same way at
// every check (a full state disk) is one line, again each hour it
// lasts, a new line when the failure changes, and one when checks work
// again.
func TestDriftFailureLoggedOnce(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var f driftFailure
	full := errors.New("record: write /var/lib/sosappliance/state.db: no space left on device")
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	lines := func() []string { return strings.Split(strings.TrimSpace(buf.String()), "\n") }
	f.note(log, nil, t0)
	if buf.Len() != 0 {
		t.Fatalf("a working check logged: %s", buf.String())
	}
	for i := range 120 { // an hour of checks every 30 s
		f.note(log, full, t0.Add(time.Duration(i)*30*time.Second))
	}
	if l := lines(); len(l) != 1 || !strings.Contains(l[0], "no space left on device") || !strings.Contains(l[0], "level=ERROR") {
		t.Fatalf("an hour of the same failure logged:\n%s", buf.String())
	}
	f.note(log, full, t0.Add(time.Hour))
	if l := lines(); len(l) != 2 || !strings.Contains(l[1], "still fails") || !strings.Contains(l[1], "checks=121") {
		t.Fatalf("after an hour:\n%s", buf.String())
	}
	other := errors.New("open state database /var/lib/sosappliance/state.db: read-only file system")
	f.note(log, other, t0.Add(time.Hour+30*time.Second))
	if l := lines(); len(l) != 3 || !strings.Contains(l[2], "read-only file system") {
		t.Fatalf("a changed failure:\n%s", buf.String())
	}
	f.note(log, nil, t0.Add(time.Hour+time.Minute))
	f.note(log, nil, t0.Add(time.Hour+90*time.Second))
	if l := lines(); len(l) != 4 || !strings.Contains(l[3], "works again") || !strings.Contains(l[3], "failed_checks=1") {
		t.Fatalf("checks working again:\n%s", buf.String())
	}
	f.note(log, full, t0.Add(2*time.Hour))
	if l := lines(); len(l) != 5 || !strings.Contains(l[4], "no space left on device") {
		t.Fatalf("the first failure again, after checks worked:\n%s", buf.String())
	}
}

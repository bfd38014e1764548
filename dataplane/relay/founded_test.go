package relay

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

func foundedID(b byte) stripe.SessionID {
	var id stripe.SessionID
	for i := range id {
		id[i] = b + byte(i)
	}
	return id
}

// mustOpenFounded opens path as an agent starting at now would.
func mustOpenFounded(t *testing.T, path string, now time.Time) *foundedFile {
	t.Helper()
	ff, _, _, err := openFounded(path, now)
	if err != nil {
		t.Fatal(err)
	}
	return ff
}

// mustRecord records id founded at at.
func mustRecord(t *testing.T, ff *foundedFile, id stripe.SessionID, at time.Time) {
	t.Helper()
	if err := ff.record(id, at); err != nil {
		t.Fatalf("record: %v", err)
	}
}

// readBack is what an agent starting at now reads back from path (and
// then ends): the ids, and the lines that did not parse.
func readBack(t *testing.T, path string, now time.Time) ([]settledAt, int) {
	t.Helper()
	ff, ids, bad, err := openFounded(path, now)
	if err != nil {
		t.Fatal(err)
	}
	ff.close()
	return ids, bad
}

// TestFoundedFileReadsBackTheRecentIDs: ids recorded are read back by the
// next open, the ones older than settledFor are not, and lines that do
// not parse (one of 100 kB too) are skipped and counted. Empty lines (a
// record cut short after the newline that ends a torn one, whose cut-back
// failed) are skipped and not counted.
func TestFoundedFileReadsBackTheRecentIDs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "founded")
	t0 := time.Unix(1_800_000_000, 0)
	ff, ids, bad, err := openFounded(path, t0)
	if err != nil || len(ids) != 0 || bad != 0 {
		t.Fatalf("first open: %d ids, %d bad, %v", len(ids), bad, err)
	}
	for i, at := range []time.Time{t0, t0.Add(time.Minute), t0.Add(2 * time.Minute)} {
		mustRecord(t, ff, foundedID(byte(i)), at)
	}
	ff.close()
	if err := ff.record(foundedID(9), t0); err == nil {
		t.Error("a closed file took a record")
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("not a line\n\n" + strings.Repeat("z", 32) + " 5\n0123 5\n\n" + strings.Repeat("x", 100<<10) + "\n")
	_ = f.Close()

	// settledFor after the second: the first is too old.
	ids, bad = readBack(t, path, t0.Add(time.Minute+settledFor))
	if bad != 4 {
		t.Errorf("%d bad lines, want 4", bad)
	}
	if len(ids) != 2 || ids[0].id != foundedID(1) || ids[1].id != foundedID(2) || !ids[0].at.Equal(t0.Add(time.Minute)) {
		t.Errorf("read back %v, want ids 1 and 2 at their times", ids)
	}
}

// TestFoundedFileStaysBounded: records over many settledFor periods leave
// two generations of at most two periods' records between them, and the
// last settledFor is always read back.
func TestFoundedFileStaysBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "founded")
	t0 := time.Unix(1_800_000_000, 0)
	ff := mustOpenFounded(t, path, t0)
	const perPeriod = 50
	step := settledFor / perPeriod
	var last time.Time
	for i := range 10 * perPeriod {
		last = t0.Add(time.Duration(i) * step)
		if err := ff.record(foundedID(byte(i)), last); err != nil {
			t.Fatal(err)
		}
	}
	ff.close()
	lines := 0
	for _, p := range []string{path, foundedOld(path)} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		lines += strings.Count(string(b), "\n")
	}
	if lines > 2*perPeriod {
		t.Errorf("%d lines in the two generations, want at most %d", lines, 2*perPeriod)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 2 {
		t.Errorf("%d files, want the two generations", len(entries))
	}
	if ids, _ := readBack(t, path, last); len(ids) < perPeriod {
		t.Errorf("read back %d ids, want the last settledFor's %d at least", len(ids), perPeriod)
	}
}

// TestFoundedFileUnwritable: a file that cannot be opened (here its
// directory is a file) is Start's error, naming it; the agent does not
// run without its record.
func TestFoundedFileUnwritable(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(notDir, "founded")
	a, err := New(Config{
		Name: "agent-b", DataListen: netip.MustParseAddrPort("127.0.0.1:0"), PSK: testPSK, FoundedFile: path,
	}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	a.os = loopbackTransparency(netip.MustParseAddrPort("127.0.0.1:1"))
	err = a.Start(t.Context())
	if err == nil {
		_ = a.Shutdown(t.Context())
		t.Fatal("Start succeeded without its founded sessions file")
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("Start's error %q does not name the file", err)
	}
	if a.Addrs().Data.IsValid() {
		t.Error("the data port listens though Start failed")
	}
}

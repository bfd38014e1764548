package store

// Written by review (helper-101) of 33aa0e0: unfinished() and
// removeUnfinished against an operator's database cut short by a crash
// (2 or 3 pages of this machine's size, both meta pages whole, each
// saying transactions were committed: records were made).

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// rv101Cut returns an applied database's bytes cut to pages pages of
// this machine's size, after checking both meta pages are still whole
// and record committed transactions (txid > 1: bbolt's own first pages
// say 0 and 1).
func rv101Cut(t *testing.T, dir string, pages int) []byte {
	t.Helper()
	made := filepath.Join(dir, "made.db")
	statedbApplied(t, made)
	b, err := os.ReadFile(made)
	testsupport.RequireNoError(t, err)
	testsupport.RequireNoError(t, os.Remove(made))
	ps := os.Getpagesize()
	testsupport.Require(t, len(b) > pages*ps, "the database is %d bytes, not more than %d pages", len(b), pages)
	b = b[:pages*ps]
	cut := filepath.Join(dir, "cut.db")
	testsupport.RequireNoError(t, os.WriteFile(cut, b, 0o600))
	f, err := os.Open(cut)
	testsupport.RequireNoError(t, err)
	defer f.Close()
	for _, off := range []int64{0, int64(ps)} {
		m, ok := readMeta(f, off)
		testsupport.Require(t, ok && m.txid > 1 && int(m.pageSize) == ps, "meta page at %d: %+v %v, want whole with txid > 1", off, m, ok)
	}
	testsupport.RequireNoError(t, os.Remove(cut))
	return b
}

// TestCutDatabaseWithRecordsIsNotRemoved (finding, fails on
// 33aa0e0): removeUnfinished says "a file of all those pages is kept",
// and unfinished takes any file shorter than four pages whose first
// meta page is whole and of this machine's page size for bbolt's own
// half-made one. A database cut by a crash (or a copy cut short) to 2
// or 3 pages, both meta pages whole and saying transactions were
// committed (txid > 1, which bbolt's first write never says), is
// removed. bbolt's half-made file always has txids 0 and 1.
func TestCutDatabaseWithRecordsIsNotRemoved(t *testing.T) {
	for _, pages := range []int{2, 3} {
		dir := t.TempDir()
		b := rv101Cut(t, dir, pages)
		path := filepath.Join(dir, "state.db")
		testsupport.RequireNoError(t, os.WriteFile(path, b, 0o600))
		removeUnfinished(path, 50*time.Millisecond)
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%d pages: removeUnfinished removed a database whose meta pages record committed transactions: %v", pages, err)
			continue
		}
		if !bytes.Equal(got, b) {
			t.Errorf("%d pages: removeUnfinished changed the database", pages)
		}
	}
}

// TestFirstOpenKeepsACutDatabaseWithRecords (finding, fails on
// 33aa0e0): the same through Open. A first open (no file when checkFile
// looked: the daemon's first start) finds, holding the lock, the cut
// database an operator's restore wrote into the path meanwhile. It calls
// it another open's unfinished file (errHalfMade), removes it, starts
// over and succeeds on a new, empty database: the recorded originals'
// remains are gone without a word. It must keep it (refuse it as
// damaged, as an open that finds it at the path does).
func TestFirstOpenKeepsACutDatabaseWithRecords(t *testing.T) {
	for _, pages := range []int{2, 3} {
		dir := t.TempDir()
		b := rv101Cut(t, dir, pages)
		path := filepath.Join(dir, "state.db")
		calls := 0
		testHookOpened = func(name string, locked bool) {
			if locked {
				return
			}
			if calls++; calls == 1 {
				if err := os.WriteFile(name, b, 0o600); err != nil {
					t.Errorf("write %s: %v", name, err)
				}
			}
		}
		s, err := Open(path, Options{})
		testHookOpened = nil
		if err == nil {
			s.Close()
		}
		t.Logf("%d pages: open: %v (bbolt opened a file %d times)", pages, err, calls)
		got, rerr := os.ReadFile(path)
		if rerr != nil || !bytes.Equal(got, b) {
			t.Errorf("%d pages: the cut database with records was removed and replaced by a new one (open: %v; file now %d bytes)",
				pages, err, len(got))
		}
	}
	t.Cleanup(func() { testHookOpened = nil })
}

// TestCutDatabaseAtThePathIsRefusedAndKept (held): the same
// cut database at the path before the open is refused as damaged, by
// the CLI's open and the daemon's (MustExist), and kept as it was.
func TestCutDatabaseAtThePathIsRefusedAndKept(t *testing.T) {
	for _, pages := range []int{2, 3} {
		for _, mustExist := range []bool{false, true} {
			dir := t.TempDir()
			b := rv101Cut(t, dir, pages)
			path := filepath.Join(dir, "state.db")
			testsupport.RequireNoError(t, os.WriteFile(path, b, 0o600))
			s, err := Open(path, Options{MustExist: mustExist})
			if err == nil {
				s.Close()
				t.Fatalf("%d pages (must exist %v): the cut database was opened", pages, mustExist)
			}
			var corrupt *CorruptError
			if !errors.As(err, &corrupt) {
				t.Errorf("%d pages (must exist %v): %v, want a CorruptError", pages, mustExist, err)
			}
			t.Logf("%d pages (must exist %v): %v", pages, mustExist, err)
			got, rerr := os.ReadFile(path)
			if rerr != nil || !bytes.Equal(got, b) {
				t.Errorf("%d pages (must exist %v): the database was removed or changed: %v", pages, mustExist, rerr)
			}
		}
	}
}

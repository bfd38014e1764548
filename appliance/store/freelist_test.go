package store

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// r67ChildEnv makes this test binary, run again on one test, do that
// test's child part against the state database at its value.
const r67ChildEnv = "SOSAPPLIANCE_STORE_TEST_CHILD"

func r67InChild(t *testing.T, path string) (string, error) {
	t.Helper()
	return inChild(t, r67ChildEnv, path)
}

// r67Meta returns the newest valid meta page of the file: root page,
// freelist page, page size.
func r67Meta(t *testing.T, b []byte) (root, freelist uint64, pageSize int) {
	t.Helper()
	var best uint64
	found := false
	for _, off := range []int{0, os.Getpagesize()} {
		m := b[off:]
		ne := binary.NativeEndian
		if ne.Uint32(m[16:]) != boltMagic {
			continue
		}
		txid := ne.Uint64(m[metaTxid:])
		if !found || txid > best {
			best, found = txid, true
			root = ne.Uint64(m[metaStart+16:])
			freelist = ne.Uint64(m[metaStart+32:])
			pageSize = int(ne.Uint32(m[metaPageSize:]))
		}
	}
	if !found {
		t.Fatal("no meta page")
	}
	return
}

// TestFreelistNamingALivePageIsRefused: a state file whose
// freelist page has one damaged id, naming the live root page (the
// freelist is plain page ids, with no checksum). readAll reads every
// bucket and value but not the freelist against them, so Open accepts
// the file; the next write (BeginApply of the next apply, a drift fix,
// rollback's record deletions) frees the root page, which bbolt finds
// already free, and panics ("page 4 already freed") outside guarded:
// the process dies, as the review found for other damage.
// Found by review (helper-67): before verify ran bbolt's Check, the next
// write panicked (page 4 already freed).
func TestFreelistNamingALivePageIsRefused(t *testing.T) {
	if path := os.Getenv(r67ChildEnv); path != "" {
		s, err := Open(path, Options{})
		if err != nil {
			os.Stdout.WriteString("FIRST-OPEN-ERROR: " + err.Error() + "\n")
			os.Exit(0)
		}
		recs, err := s.Records()
		os.Stdout.WriteString("FIRST-OPEN-OK records=" + itoa(len(recs)) + " err=" + errString(err) + "\n")
		// The next apply: one more owned item.
		serial, err := s.BeginApply(1, HistoryEntry{Operation: "apply", Node: "host1"})
		if err == nil {
			_, err = s.Touch("sysctl", "net.core.wmem_max", "212992", true, "67108864", serial)
		}
		if err == nil {
			err = s.MarkApplied("sysctl", "net.core.wmem_max")
		}
		if err == nil {
			err = s.FinishApply(serial, ResultOK, "")
		}
		os.Stdout.WriteString("APPLY err=" + errString(err) + "\n")
		s.Close()
		s, err = Open(path, Options{})
		if err != nil {
			os.Stdout.WriteString("SECOND-OPEN-ERROR: " + err.Error() + "\n")
			os.Exit(0)
		}
		recs, err = s.Records()
		os.Stdout.WriteString("SECOND-OPEN-OK records=" + itoa(len(recs)) + " err=" + errString(err) + "\n")
		s.Close()
		os.Exit(0)
	}
	path := filepath.Join(t.TempDir(), "state.db")
	statedbApplied(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	root, fl, ps := r67Meta(t, b)
	page := b[int(fl)*ps:]
	ne := binary.NativeEndian
	count := int(ne.Uint16(page[10:]))
	var ids []uint64
	for i := 0; i < count; i++ {
		ids = append(ids, ne.Uint64(page[16+8*i:]))
	}
	t.Logf("root page %d, freelist page %d, free ids %v", root, fl, ids)
	// One id damaged: the lowest free id now names the root page.
	ids[0] = root
	slices.Sort(ids)
	ne.PutUint16(page[10:], uint16(len(ids)))
	for i, id := range ids {
		ne.PutUint64(page[16+8*i:], id)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := r67InChild(t, path)
	t.Logf("child:\n%s", statedbHead(out, 20))
	if err != nil {
		t.Fatalf("a state file whose freelist names its live root page %d was opened, and the next apply crashed the process (%v):\n%s",
			root, err, statedbHead(out, 8))
	}
	if strings.Contains(out, "FIRST-OPEN-ERROR: ") {
		return // refused before it wrote: what a damaged file should get
	}
	if !strings.Contains(out, "SECOND-OPEN-OK records=2 ") {
		t.Fatalf("Open accepted a state file whose freelist names its live root page %d, and the records did not survive the next apply:\n%s",
			root, statedbHead(out, 20))
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const r78ChildEnv = "SOSAPPLIANCE_STORE_R78_CHILD"

// TestFreelistNamingALiveOverflowPage: the stored free list
// given one more id, naming the second page of a live leaf page's
// overflow span (the items bucket's leaf, holding a record of 12 KiB).
// bbolt's Check marks that id reachable, but looks for "reachable freed"
// only at each page's first id; the walk does not read the free ids. So
// Open accepts the file, and the applies that follow allocate the page
// and write over the live record: data lost without an error, the
// original value the store promised to restore is garbled.
// Found by review (helper-78) of d798287.
// Found by review (helper-78) of d798287: Open took it, and the next
// apply panicked (page 7 already freed).
func TestFreelistNamingALiveOverflowPage(t *testing.T) {
	big := strings.Repeat("orig-", 12<<10/5)
	if p := os.Getenv(r78ChildEnv); p != "" {
		r78OverflowChild(t, p, big)
		return
	}
	path := filepath.Join(t.TempDir(), "state.db")
	statedbApplied(t, path)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	serial, err := s.BeginApply(1, HistoryEntry{Operation: "apply", Node: "host1"})
	if err == nil {
		_, err = s.Touch("sysctl", "net.big", big, true, "1", serial)
	}
	if err == nil {
		err = s.FinishApply(serial, ResultOK, "")
	}
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	root, fl, ps := r67Meta(t, b)
	items := r75BucketRoot(t, b, ps, root, "items")
	ne := binary.NativeEndian
	ip := b[int(items)*ps:]
	if ne.Uint16(ip[8:]) != leafPage || ne.Uint32(ip[12:]) < 2 {
		t.Fatalf("setup: items root page %d flags %#x overflow %d", items, ne.Uint16(ip[8:]), ne.Uint32(ip[12:]))
	}
	p := b[int(fl)*ps:]
	n := int(ne.Uint16(p[10:]))
	if n == 0xFFFF || 16+8*(n+1) > ps {
		t.Fatalf("setup: freelist count %d", n)
	}
	ne.PutUint64(p[16+8*n:], items+1)
	ne.PutUint16(p[10:], uint16(n+1))
	t.Logf("items leaf page %d with %d overflow pages; free list page %d with %d ids: %d added", items, ne.Uint32(ip[12:]), fl, n, items+1)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), r78ChildEnv+"="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("Open accepted a free list naming page %d, inside the live overflow span of page %d, and the next apply crashed the process (%v):\n%s", items+1, items, err, statedbHead(string(out), 12))
	}
	t.Logf("child:\n%s", statedbHead(string(out), 12))
}

func r78OverflowChild(t *testing.T, path, big string) {
	s, err := Open(path, Options{})
	if err != nil {
		t.Logf("refused: %v", err)
		return // a damaged file refused: fine
	}
	for i := 0; i < 20 && err == nil; i++ {
		var cur, serial uint64
		if cur, err = s.Serial(); err != nil {
			break
		}
		if serial, err = s.BeginApply(cur, HistoryEntry{Operation: "apply", Node: "host1"}); err != nil {
			break
		}
		if _, err = s.Touch("sysctl", fmt.Sprintf("net.k%d", i), strings.Repeat("n", 100), true, "1", serial); err != nil {
			break
		}
		err = s.FinishApply(serial, ResultOK, "")
	}
	s.Close()
	if err != nil {
		t.Logf("an apply after the open failed: %v", err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("Open accepted a free list naming a page inside a live overflow span; the applies after it left a database that is refused: %v", err)
	}
	defer s.Close()
	rec, ok, err := s.Record("sysctl", "net.big")
	if err != nil || !ok || rec.Previous != big {
		got := ""
		if ok {
			got = rec.Previous
			if len(got) > 60 {
				got = got[:60]
			}
		}
		t.Fatalf("Open accepted a free list naming a page inside a live overflow span; after 20 applies the record net.big reads ok=%v err=%v previous=%q... (want %d bytes of orig-)", ok, err, got, len(big))
	}
}

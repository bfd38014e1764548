package main

import (
	"encoding/binary"
	"os"
	"slices"
	"strings"
	"testing"
)

// r67DamageFreelist rewrites the lowest page id in the state file's
// freelist page to the id of its live root page: one damaged id in the
// one page bbolt keeps with no checksum and that store.Open's readAll
// does not check against the pages in use.
func r67DamageFreelist(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ne := binary.NativeEndian
	var txid, root, fl uint64
	var ps int
	for _, off := range []int{0, os.Getpagesize()} {
		m := b[off+16:]
		if ne.Uint32(m) != 0xED0CDAED {
			continue
		}
		if tx := ne.Uint64(m[48:]); tx >= txid {
			txid, root, fl, ps = tx, ne.Uint64(m[16:]), ne.Uint64(m[32:]), int(ne.Uint32(m[8:]))
		}
	}
	page := b[int(fl)*ps:]
	count := int(ne.Uint16(page[10:]))
	if count == 0 {
		t.Fatalf("no free page in %s to damage", path)
	}
	ids := make([]uint64, count)
	for i := range ids {
		ids[i] = ne.Uint64(page[16+8*i:])
	}
	ids[0] = root
	slices.Sort(ids)
	for i, id := range ids {
		ne.PutUint64(page[16+8*i:], id)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestRollbackOnADamagedFreelist: after an apply, one id in the
// state file's freelist is damaged to name the live root page. store.Open
// accepts the file (checkFile sees a file as long as its meta page says,
// readAll reads every bucket and value fine); rollback plans putting
// 212992 back, applies it, and its first write frees the root page,
// which bbolt finds already free: "panic: page N already freed", exit
// 2, a Go stack, the crash the fix meant to end. It should exit 1 with
// an error naming the damaged file (bbolt's Tx.Check finds "page N:
// reachable freed" at Open).
// Found by review (helper-67): rollback showed its plan and died.
func TestRollbackOnADamagedFreelist(t *testing.T) {
	r := statedbApplied(t)
	root := r67DamageFreelist(t, r.state)
	out, exit, ran := statedbChild(t, r.args("rollback", "--auto-approve")...)
	if ran {
		t.Fatalf("rollback kept running:\n%s", headLines(out, 20))
	}
	if strings.Contains(out, "fatal error") || strings.Contains(out, "panic:") || strings.Contains(out, "goroutine ") {
		t.Fatalf("rollback on a state file whose freelist names its root page %d crashed (%v):\n%s", root, exit, headLines(out, 12))
	}
	if exit != nil && !strings.Contains(out, r.state) {
		t.Fatalf("rollback: exit %v without naming %s:\n%s", exit, r.state, headLines(out, 20))
	}
}

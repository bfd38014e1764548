package store

import (
	"encoding/binary"
	"strings"
	"testing"
)

// TestFreelistNamingAMetaPage: one id added to the stored free
// list, naming meta page 1. bbolt's Check marks pages 0 and 1 reachable
// but never compares them with the free list ("reachable freed" is only
// looked for on tree pages), and the walk does not read the ids, so Open
// accepts the file. The next write allocates from the free list, sorted,
// whose first id is 1: bbolt panics ("invalid page allocation") inside
// the store's Update, or writes data over a meta page.
// Written by review (helper-78) of d798287; it passed (Open's own write,
// under guarded, meets the panic and refuses the file).
// Written by review (helper-78); it passed.
func TestFreelistNamingAMetaPage(t *testing.T) {
	if r71ApplyChild() {
		return
	}
	path := r71Damage(t, func(b []byte, ps int, root, fl uint64) {
		ne := binary.NativeEndian
		p := b[int(fl)*ps:]
		n := int(ne.Uint16(p[10:]))
		if n == 0xFFFF {
			t.Fatalf("freelist count %d", n)
		}
		ne.PutUint64(p[16+8*n:], 1)
		ne.PutUint16(p[10:], uint16(n+1))
		t.Logf("freelist page %d with %d ids: 1 added", fl, n)
	})
	out, err := r71OpenInChild(t, path)
	t.Logf("child:\n%s", statedbHead(out, 12))
	if err != nil {
		t.Fatalf("Open accepted a free list naming meta page 1, and the next apply crashed the process (%v):\n%s", err, statedbHead(out, 10))
	}
	if strings.Contains(out, "FIRST-OPEN-ERROR: ") {
		return
	}
	if !strings.Contains(out, "SECOND-OPEN-OK records=2 ") {
		t.Fatalf("Open accepted a free list naming meta page 1, and the next apply left a database that does not open with its records:\n%s", statedbHead(out, 12))
	}
}

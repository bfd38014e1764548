package store

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// r71Grown makes an applied state database whose history bucket has a
// branch page over several leaves, and returns it with its page size, root
// page, history root page and high-water mark.
func r71Grown(t *testing.T) (path string, b []byte, ps int, root, hroot, hwm uint64) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "state.db")
	statedbApplied(t, path)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		for i := uint64(2); i < 200; i++ {
			if err := putHistory(tx, HistoryEntry{Serial: i, Operation: "drift", Node: "host1", Result: ResultOK, Error: strings.Repeat("x", 200)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = s.db.View(func(tx *bolt.Tx) error {
			hroot = uint64(tx.Bucket(bucketHistory).Root())
			hwm = uint64(tx.Size()) / uint64(tx.DB().Info().PageSize)
			return nil
		})
	}
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	if b, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	root, _, ps = r67Meta(t, b)
	if p := b[int(hroot)*ps:]; binary.NativeEndian.Uint16(p[8:]) != 0x01 {
		t.Fatalf("history root page %d is not a branch page", hroot)
	}
	return
}

// TestOtherDamageIsAnError: damage readAll reaches (and faults
// or panics on, in guarded), or that bbolt's Check reports without
// reading past the file: each is an error naming the file, in a child.
// Written by review (helper-71); it passed.
func TestOtherDamageIsAnError(t *testing.T) {
	if r71Child() {
		return
	}
	ne := binary.NativeEndian
	for _, c := range []struct {
		name   string
		damage func(b []byte, ps int, root, hroot, hwm uint64)
	}{
		{"a bucket's root page id 0 (read as inline)", func(b []byte, ps int, root, hroot, hwm uint64) {
			p := b[int(root)*ps:]
			for i := 0; i < int(ne.Uint16(p[10:])); i++ {
				e := p[16+16*i:]
				if ne.Uint32(e) != 0x01 { // a bucket entry
					continue
				}
				v := e[int(ne.Uint32(e[4:]))+int(ne.Uint32(e[8:])):]
				if ne.Uint64(v) != 0 {
					ne.PutUint64(v, 0)
					return
				}
			}
			t.Fatal("no bucket with a root page")
		}},
		{"a branch child past the high-water mark", func(b []byte, ps int, root, hroot, hwm uint64) {
			ne.PutUint64(b[int(hroot)*ps+16+8:], hwm+50)
		}},
		{"a branch child past the mapping", func(b []byte, ps int, root, hroot, hwm uint64) {
			ne.PutUint64(b[int(hroot)*ps+16+16+8:], 1<<30)
		}},
		{"a leaf value's size past the page", func(b []byte, ps int, root, hroot, hwm uint64) {
			leaf := ne.Uint64(b[int(hroot)*ps+16+8:])
			ne.PutUint32(b[int(leaf)*ps+16+12:], 1<<28)
		}},
		{"a leaf key's size past the page", func(b []byte, ps int, root, hroot, hwm uint64) {
			leaf := ne.Uint64(b[int(hroot)*ps+16+8:])
			ne.PutUint32(b[int(leaf)*ps+16+8:], 1<<28)
		}},
		{"a leaf's overflow past the end", func(b []byte, ps int, root, hroot, hwm uint64) {
			leaf := ne.Uint64(b[int(hroot)*ps+16+8:])
			ne.PutUint32(b[int(leaf)*ps+12:], uint32(hwm+20))
		}},
		{"a leaf's element count past the page", func(b []byte, ps int, root, hroot, hwm uint64) {
			leaf := ne.Uint64(b[int(hroot)*ps+16+8:])
			ne.PutUint16(b[int(leaf)*ps+10:], 0xFFF0)
		}},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			path, b, ps, root, hroot, hwm := r71Grown(t)
			c.damage(b, ps, root, hroot, hwm)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := r71OpenInChildAs(t, path, "TestOtherDamageIsAnError")
			t.Logf("%s: %s", c.name, statedbHead(out, 2))
			r71RequireError(t, path, out, err)
		})
	}
}

// TestBranchPageNamingItself: the history bucket's branch page
// has its first child's page id damaged to its own id (a cycle). readAll's
// cursor descends from the branch page to its first child for ever,
// growing its stack: memory without bound (here, in a 3 GiB address space,
// "fatal error: out of memory"; on a host, the OOM killer), in store.Open
// of every command and of the daemon's every drift check. A page already
// on the way down is damage: it should be an error naming the file.
// Found by review (helper-71): before walkPages, readAll's cursor grew
// its stack until the process ran out of memory.
func TestBranchPageNamingItself(t *testing.T) {
	if r71Child() {
		return
	}
	path, b, ps, _, hroot, _ := r71Grown(t)
	binary.NativeEndian.PutUint64(b[int(hroot)*ps+16+8:], hroot)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := r71OpenInChildLimited(t, path)
	r71RequireError(t, path, out, err)
}

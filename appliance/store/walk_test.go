package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

const r75ChildEnv = "SOSAPPLIANCE_STORE_R75_CHILD"

// r75Child is the child's side: open the database, print the outcome,
// exit 0. It returns false in the parent.
func r75Child() bool {
	path := os.Getenv(r75ChildEnv)
	if path == "" {
		return false
	}
	s, err := Open(path, Options{LockTimeout: 2 * time.Second})
	if err == nil {
		s.Close()
		os.Stdout.WriteString("R75-OPEN-OK\n")
	} else {
		os.Stdout.WriteString("R75-OPEN-ERROR: " + err.Error() + "\n")
	}
	os.Exit(0)
	return true
}

func r75OpenInChild(t *testing.T, path string) (string, error) {
	t.Helper()
	return inChild(t, r75ChildEnv, path)
}

// r75MetaAt reads the meta page at off: root, freelist, txid.
func r75MetaAt(b []byte, off int) (root, freelist, txid uint64, ok bool) {
	m := b[off:]
	ne := binary.NativeEndian
	if ne.Uint32(m[metaStart:]) != boltMagic {
		return 0, 0, 0, false
	}
	return ne.Uint64(m[metaRoot:]), ne.Uint64(m[metaFreelist:]), ne.Uint64(m[metaTxid:]), true
}

// r75Reopen opens path with the store (twice, the second sees the
// first's writes) and fails on any error.
func r75Reopen(t *testing.T, path string) {
	t.Helper()
	for i := 0; i < 2; i++ {
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("a legitimate database is refused (open %d): %v", i, err)
		}
		if _, err := s.Records(); err != nil {
			s.Close()
			t.Fatal(err)
		}
		s.Close()
	}
}

// r75Fill applies, rolls back (Forget) and records history many times
// over through the store's own API.
func r75Fill(t *testing.T, path string, n int) {
	t.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < n; i++ {
		cur, err := s.Serial()
		if err != nil {
			t.Fatal(err)
		}
		serial, err := s.BeginApply(cur, HistoryEntry{Operation: "apply", Node: "host1", Error: strings.Repeat("e", i%5000)})
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 4; j++ {
			key := fmt.Sprintf("net.core.k%d", (i*4+j)%3000)
			if _, err := s.Touch("sysctl", key, "1", true, strings.Repeat("v", (i*j)%300), serial); err != nil {
				t.Fatal(err)
			}
			if err := s.MarkApplied("sysctl", key); err != nil {
				t.Fatal(err)
			}
			if i%3 == 0 {
				if err := s.Forget("sysctl", fmt.Sprintf("net.core.k%d", (i*7+j)%3000)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := s.FinishApply(serial, ResultOK, ""); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLegitimateShapesOpen: databases bbolt and the store write
// in normal use must not be refused by the page walk.
// Written by review (helper-75); it passed.
func TestLegitimateShapesOpen(t *testing.T) {
	for _, ps := range []int{1024, 4096, 16384, 65536} {
		t.Run(fmt.Sprintf("pages of %d, many applies and rollbacks, nested buckets, big values", ps), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			db, err := bolt.Open(path, 0o600, &bolt.Options{PageSize: ps})
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bolt.Tx) error {
				x, err := tx.CreateBucket([]byte("x"))
				if err != nil {
					return err
				}
				b := x
				for d := 0; d < 5; d++ {
					if b, err = b.CreateBucket([]byte(fmt.Sprintf("n%d", d))); err != nil {
						return err
					}
					if err := b.Put([]byte("big"), bytes.Repeat([]byte{byte(d)}, 5*ps+17)); err != nil {
						return err
					}
					in, err := b.CreateBucket([]byte("inline"))
					if err != nil {
						return err
					}
					if err := in.Put([]byte("k"), []byte("v")); err != nil {
						return err
					}
				}
				return nil
			})
			db.Close()
			if err != nil {
				t.Fatal(err)
			}
			statedbApplied(t, path)
			r75Fill(t, path, MaxHistory+100)
			r75Reopen(t, path)
			// bbolt's own copy of it
			db, err = bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			cp := path + ".copy"
			err = db.View(func(tx *bolt.Tx) error { return tx.CopyFile(cp, 0o600) })
			db.Close()
			if err != nil {
				t.Fatal(err)
			}
			r75Reopen(t, cp)
		})
	}
	t.Run("free list of more than 0xFFFF ids", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "state.db")
		db, err := bolt.Open(path, 0o600, &bolt.Options{PageSize: 1024, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		big := make([]byte, 64<<10)
		for round := 0; round < 20; round++ {
			err = db.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("x"))
				if err != nil {
					return err
				}
				for i := 0; i < 60; i++ {
					if err := b.Put([]byte(fmt.Sprintf("%d-%d", round, i)), big); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		err = db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("x")) })
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		r0, f0, t0, _ := r75MetaAt(b, 0)
		r1, f1, t1, _ := r75MetaAt(b, 1024)
		fl := f0
		if t1 > t0 {
			fl = f1
		}
		_, _ = r0, r1
		count := binary.NativeEndian.Uint16(b[int(fl)*1024+10:])
		t.Logf("free list page %d count field %#x", fl, count)
		if count != 0xFFFF {
			t.Fatalf("setup: the free list is not in its 0xFFFF form (count %#x)", count)
		}
		statedbApplied(t, path)
		r75Reopen(t, path)
	})
}

// TestLargePagesFirstMetaDamaged: a state database with pages of
// 16 KiB (bolt.Options.PageSize, which legit_test.go holds legitimate)
// whose first meta page is damaged (a torn write: its checksum no longer
// matches) and whose free list page says 0xFFFF, so 4M ids. checkLength
// looks for the second meta page at the first's page size (unknown, it
// is invalid) and at the OS page size (inside page 0): it finds none,
// and leaves the file to bbolt without walking a page. bbolt finds the
// second meta page at 16 KiB (getPageSizeFromSecondMeta tries every
// size from 1 KiB to 16 MiB) and opens the database on it; tx.Check
// loads the free list in its own goroutine and the copy of the ids runs
// off the mapping: the process dies in store.Open.
// Found by review (helper-75) of a0a99e9: the second meta page was looked
// for at the OS page size only, and the walk skipped.
func TestLargePagesFirstMetaDamaged(t *testing.T) {
	if r75Child() {
		return
	}
	const ps = 16384
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{PageSize: ps})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	statedbApplied(t, path)
	r75Reopen(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, f0, t0, ok0 := r75MetaAt(b, 0)
	_, f1, t1, ok1 := r75MetaAt(b, ps)
	if !ok0 || !ok1 {
		t.Fatal("setup: no meta pages at 0 and 16 KiB")
	}
	t.Logf("meta0 txid %d freelist %d, meta1 txid %d freelist %d", t0, f0, t1, f1)
	// Damage meta0 (its checksum fails; bbolt falls back to meta1) and
	// meta1's free list.
	b[metaTxid] ^= 0xff
	fl := int(f1) * ps
	binary.NativeEndian.PutUint16(b[fl+10:], 0xFFFF)
	binary.NativeEndian.PutUint64(b[fl+16:], 4<<20)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := r75OpenInChild(t, path)
	if err != nil || !strings.Contains(out, "R75-OPEN-ERROR: ") {
		t.Fatalf("store.Open on a damaged state database did not return an error (child exit %v):\n%s", err, statedbHead(out, 16))
	}
}

// TestUnsyncedFreelistPageIdAfterClose: a state database whose
// free list is not synced (NoFreelistSync) and whose root page's header
// names another page id (past the high water mark). walkPages does not
// look at a page's own id, but readAll (under guarded) meets bbolt's
// FastCheck assertion first, so verify returns a CorruptError before
// tx.Check and its free-page walker run. It held: kept as a property.
// Written by review (helper-75); it passed.
func TestUnsyncedFreelistPageIdAfterClose(t *testing.T) {
	if r75Child() {
		return
	}
	path := filepath.Join(t.TempDir(), "state.db")
	statedbApplied(t, path)
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 20; r++ {
		err = db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("zzz"))
			if err != nil {
				return err
			}
			for i := 0; i < 20000; i++ {
				if err := b.Put([]byte(fmt.Sprintf("%02d-%08d", r, i)), []byte("v")); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			db.Close()
			t.Fatal(err)
		}
	}
	db.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps := os.Getpagesize()
	r0, f0, t0, _ := r75MetaAt(b, 0)
	r1, f1, t1, _ := r75MetaAt(b, ps)
	root, fl, mo := r0, f0, 0
	if t1 > t0 {
		root, fl, mo = r1, f1, ps
	}
	if fl != noFreelist {
		t.Fatalf("setup: the free list is synced (%d)", fl)
	}
	hwm := binary.NativeEndian.Uint64(b[mo+metaPgid:])
	binary.NativeEndian.PutUint64(b[int(root)*ps:], hwm+5)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		out, err := r75OpenInChild(t, path)
		if err != nil || !strings.Contains(out, "R75-OPEN-ERROR: ") {
			t.Fatalf("store.Open on a damaged state database did not return an error (child exit %v, try %d):\n%s", err, i, statedbHead(out, 30))
		}
		t.Logf("child: %s", statedbHead(out, 2))
	}
}

// r75Visits returns the pages of the tree under id in the order bbolt's
// forEachPage visits them (the page, then its children in order).
func r75Visits(b []byte, ps int, id uint64) []uint64 {
	ne := binary.NativeEndian
	p := b[int(id)*ps:]
	out := []uint64{id}
	if ne.Uint16(p[8:])&branchPage != 0 {
		for i := 0; i < int(ne.Uint16(p[10:])); i++ {
			out = append(out, r75Visits(b, ps, ne.Uint64(p[pageHeader+i*pageElement+8:]))...)
		}
	}
	return out
}

// r75BucketRoot finds the root page of the top-level bucket name under
// the root page root (a leaf).
func r75BucketRoot(t *testing.T, b []byte, ps int, root uint64, name string) uint64 {
	t.Helper()
	ne := binary.NativeEndian
	p := b[int(root)*ps:]
	if ne.Uint16(p[8:]) != leafPage {
		t.Fatalf("setup: root page %d is not a leaf", root)
	}
	for i := 0; i < int(ne.Uint16(p[10:])); i++ {
		at := pageHeader + i*pageElement
		e := p[at:]
		pos, ks := int(ne.Uint32(e[4:])), int(ne.Uint32(e[8:]))
		if string(p[at+pos:at+pos+ks]) == name {
			return ne.Uint64(p[at+pos+ks:])
		}
	}
	t.Fatalf("setup: no bucket %q", name)
	return 0
}

// r75UnsyncedBig is an applied state database with a bucket "aaa" of
// 300,000 keys written without storing the free list; it returns the
// path and the file's bytes.
func r75UnsyncedBig(t *testing.T) (string, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	statedbApplied(t, path)
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("aaa"))
		if err != nil {
			return err
		}
		for i := 0; i < 300000; i++ {
			if err := b.Put([]byte(fmt.Sprintf("%08d", i)), []byte("v")); err != nil {
				return err
			}
		}
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, b
}

// TestUnsyncedFreelistOverlapKillsWalker: a state database whose
// free list is not synced (bbolt's NoFreelistSync, which legit_test.go
// holds legitimate), with one leaf page of a bucket whose overflow count
// says 1 where it is 0, so that the page after it, another leaf of the
// same bucket, is covered twice. walkPages reads the page with one
// overflow page (all in the file: fine) and marks only its own id seen;
// readAll does not look at overflow counts. tx.Check loads the free list
// by bbolt's freepages, which walks every page in a goroutine of its own
// and panics in its caller on the first error ("multiple references"):
// tx.Check's recover takes that panic, and freepages' deferred Rollback
// sets the transaction's db and meta to nil while the walker goroutine,
// which nothing stops, goes on through the rest of the bucket: a nil
// dereference (or a read of the unmapped file once verify closes it) in
// a goroutine no recover reaches. The process dies in store.Open.
// Found by review (helper-75) of a0a99e9: walkPages now checks what
// bbolt's own check does (overflow spans, header ids, key order).
func TestUnsyncedFreelistOverlapKillsWalker(t *testing.T) {
	if r75Child() {
		return
	}
	path, b := r75UnsyncedBig(t)
	ps := os.Getpagesize()
	r0, f0, t0, _ := r75MetaAt(b, 0)
	r1, f1, t1, _ := r75MetaAt(b, ps)
	root, fl := r0, f0
	if t1 > t0 {
		root, fl = r1, f1
	}
	if fl != noFreelist {
		t.Fatalf("setup: the free list is synced (%d)", fl)
	}
	visits := r75Visits(b, ps, r75BucketRoot(t, b, ps, root, "aaa"))
	at := map[uint64]int{}
	for i, id := range visits {
		at[id] = i
	}
	// the earliest visit j whose page is right after one visited before
	best, bi := -1, uint64(0)
	for i, id := range visits {
		if j, ok := at[id+1]; ok && j > i && (best < 0 || j < best) {
			best, bi = j, id
		}
	}
	if best < 0 {
		t.Fatal("setup: no two neighbouring pages")
	}
	t.Logf("bucket aaa: %d pages; page %d gets overflow 1, the error comes at visit %d", len(visits), bi, best)
	ne := binary.NativeEndian
	if ne.Uint32(b[int(bi)*ps+12:]) != 0 {
		t.Fatal("setup: the page has overflow already")
	}
	ne.PutUint32(b[int(bi)*ps+12:], 1)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		out, err := r75OpenInChild(t, path)
		if err != nil || !strings.Contains(out, "R75-OPEN-ERROR: ") {
			t.Fatalf("store.Open on a damaged state database did not return an error (child exit %v, try %d):\n%s", err, i, statedbHead(out, 30))
		}
		t.Logf("child: %s", statedbHead(out, 2))
	}
}

// TestUnsyncedFreelistKeyOrderKillsWalker: as
// TestUnsyncedFreelistOverlapKillsWalker, with the damage being
// two keys of one leaf page of a bucket swapped (same length, every
// offset in bounds, so walkPages and readAll pass it): freepages'
// walker reports "needs to be > (found <) than previous element", its
// caller panics, Rollback nils the transaction, and the walker goes on
// into a nil db: the process dies.
// Found by review (helper-75) of a0a99e9.
func TestUnsyncedFreelistKeyOrderKillsWalker(t *testing.T) {
	if r75Child() {
		return
	}
	path, b := r75UnsyncedBig(t)
	ps := os.Getpagesize()
	r0, _, t0, _ := r75MetaAt(b, 0)
	r1, _, t1, _ := r75MetaAt(b, ps)
	root := r0
	if t1 > t0 {
		root = r1
	}
	visits := r75Visits(b, ps, r75BucketRoot(t, b, ps, root, "aaa"))
	ne := binary.NativeEndian
	var leaf []byte
	for _, id := range visits {
		if p := b[int(id)*ps:]; ne.Uint16(p[8:]) == leafPage {
			leaf = p[:ps]
			break
		}
	}
	key := func(i int) []byte {
		at := pageHeader + i*pageElement
		pos, ks := int(ne.Uint32(leaf[at+4:])), int(ne.Uint32(leaf[at+8:]))
		return leaf[at+pos : at+pos+ks]
	}
	k0, k1 := key(0), key(1)
	t.Logf("swapping keys %q and %q", k0, k1)
	tmp := append([]byte(nil), k0...)
	copy(k0, k1)
	copy(k1, tmp)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		out, err := r75OpenInChild(t, path)
		if err != nil || !strings.Contains(out, "R75-OPEN-ERROR: ") {
			t.Fatalf("store.Open on a damaged state database did not return an error (child exit %v, try %d):\n%s", err, i, statedbHead(out, 8))
		}
		t.Logf("child: %s", statedbHead(out, 2))
	}
}

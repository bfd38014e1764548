package store

// Written by review (helper-78) of d798287: the page walk's key-order
// check against databases the store and bbolt write in normal use.

import (
	"bytes"
	"fmt"
	"math/rand"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func r78Key(r *rand.Rand) string {
	n := 1 + r.Intn(r.Intn(300)+1)
	b := make([]byte, n)
	for i := range b {
		switch r.Intn(4) {
		case 0:
			b[i] = 0x00
		case 1:
			b[i] = 0xFF
		default:
			b[i] = byte(r.Intn(256))
		}
	}
	return string(b)
}

// r78Random runs rounds of applies with random binary keys of random
// length, forgetting random owned ones, reopening every so often.
func r78Random(t *testing.T, path string, seed int64, rounds int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	var owned []Record
	kinds := []string{"sysctl", "nft", "ovs", "\x00", "\xff\xff"}
	var s *Store
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	for i := 0; i < rounds; i++ {
		if s == nil || i%400 == 0 {
			if s != nil {
				s.Close()
			}
			var err error
			if s, err = Open(path, Options{}); err != nil {
				t.Fatalf("round %d: a legitimate database is refused: %v", i, err)
			}
		}
		cur, err := s.Serial()
		if err != nil {
			t.Fatal(err)
		}
		serial, err := s.BeginApply(cur, HistoryEntry{Operation: "apply", Node: r78Key(r)})
		if err != nil {
			t.Fatal(err)
		}
		for j := r.Intn(8); j > 0; j-- {
			kind, key := kinds[r.Intn(len(kinds))], r78Key(r)
			rec, err := s.Touch(kind, key, r78Key(r), r.Intn(2) == 0, string(bytes.Repeat([]byte{'v'}, r.Intn(3000))), serial)
			if err != nil {
				t.Fatal(err)
			}
			owned = append(owned, rec)
		}
		for j := r.Intn(8); j > 0 && len(owned) > 0; j-- {
			k := r.Intn(len(owned))
			if err := s.Forget(owned[k].Kind, owned[k].Key); err != nil {
				t.Fatal(err)
			}
			owned[k] = owned[len(owned)-1]
			owned = owned[:len(owned)-1]
		}
		if err := s.FinishApply(serial, ResultOK, ""); err != nil {
			t.Fatal(err)
		}
	}
}

// r78Extra adds, through bbolt, buckets of the shapes bbolt writes:
// empty ones, inline and not, nested, binary keys of mixed lengths,
// keys deleted from the front of pages so children start past their
// separators, a whole range deleted.
func r78Extra(t *testing.T, path string, seed int64) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	keys := map[string]bool{}
	for round := 0; round < 60; round++ {
		err := db.Update(func(tx *bolt.Tx) error {
			x, err := tx.CreateBucketIfNotExists([]byte("x\x00\xff"))
			if err != nil {
				return err
			}
			if _, err := tx.CreateBucketIfNotExists([]byte("empty")); err != nil {
				return err
			}
			if _, err := x.CreateBucketIfNotExists([]byte{}); err == nil {
				// an empty-named bucket is refused by bbolt; ignore
			}
			for i := 0; i < 200; i++ {
				k := r78Key(r)
				if r.Intn(10) == 0 {
					b, err := x.CreateBucketIfNotExists([]byte(k))
					if err != nil {
						continue // a key already holding a value
					}
					for j := r.Intn(50); j > 0; j-- {
						if err := b.Put([]byte(r78Key(r)), make([]byte, r.Intn(500))); err != nil {
							return err
						}
					}
					continue
				}
				if err := x.Put([]byte(k), make([]byte, r.Intn(200))); err != nil && err != bolt.ErrIncompatibleValue {
					return err
				}
				keys[k] = true
			}
			// delete the smallest keys of a random run and a random range
			c := x.Cursor()
			from := []byte(r78Key(r))
			n := r.Intn(150)
			for k, v := c.Seek(from); k != nil && n > 0; k, v = c.Next() {
				if v != nil {
					if err := c.Delete(); err != nil {
						return err
					}
					delete(keys, string(k))
				}
				n--
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestRandomLegitimateDatabasesOpen: hundreds of applies and
// forgets with random binary keys, extra bbolt buckets of every shape,
// then the same after bbolt's Compact: every one must open.
// Written by review (helper-78); it passed (with 1,500 and 800 rounds;
// cut to keep CI's time).
func TestRandomLegitimateDatabasesOpen(t *testing.T) {
	for _, ps := range []int{1024, 4096} {
		for seed := int64(1); seed <= 1; seed++ {
			t.Run(fmt.Sprintf("pages %d seed %d", ps, seed), func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "state.db")
				db, err := bolt.Open(path, 0o600, &bolt.Options{PageSize: ps})
				if err != nil {
					t.Fatal(err)
				}
				db.Close()
				r78Random(t, path, seed, 500)
				r78Extra(t, path, seed)
				r78Random(t, path, seed+100, 300)
				r75Reopen(t, path)
				for _, max := range []int64{0, 4096} {
					src, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
					if err != nil {
						t.Fatal(err)
					}
					dstPath := filepath.Join(dir, fmt.Sprintf("compact-%d.db", max))
					dst, err := bolt.Open(dstPath, 0o600, &bolt.Options{PageSize: ps})
					if err != nil {
						src.Close()
						t.Fatal(err)
					}
					err = bolt.Compact(dst, src, max)
					src.Close()
					dst.Close()
					if err != nil {
						t.Fatal(err)
					}
					r75Reopen(t, dstPath)
					r78Random(t, dstPath, seed+200, 300)
					r75Reopen(t, dstPath)
				}
			})
		}
	}
}

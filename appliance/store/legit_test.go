package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// r67Reopen opens the state database at path as rollback does and
// reads its records.
func r67Reopen(t *testing.T, path string) {
	t.Helper()
	s, err := Open(path, Options{MustExist: true})
	if err != nil {
		t.Fatalf("a legitimate state database is refused: %v", err)
	}
	defer s.Close()
	recs, err := s.Records()
	if err != nil || len(recs) == 0 {
		t.Fatalf("records %v, %v", recs, err)
	}
}

// TestLegitimateDatabasesOpen (held): state files that are not
// damaged pass checkFile, readAll and the bucket check: one with 64 KiB
// pages (made on an arm64 or ppc64le host), one whose freelist was not
// synced (bbolt's NoFreelistSync), a backup written by bbolt's
// Tx.CopyFile (exactly its high-water mark long), one whose bbolt-made
// pages were never initialised by the store (a first open that crashed),
// and one with values spanning overflow pages and the full history.
// Written by review (helper-67); it passed.
func TestLegitimateDatabasesOpen(t *testing.T) {
	t.Run("64KiB pages", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "state.db")
		db, err := bolt.Open(path, 0o600, &bolt.Options{PageSize: 65536})
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		statedbApplied(t, path)
		r67Reopen(t, path)
	})
	t.Run("freelist not synced", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "state.db")
		statedbApplied(t, path)
		db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketHistory).Put([]byte("zzzzzzzz"), []byte(`{}`))
		}); err != nil {
			t.Fatal(err)
		}
		db.Close()
		r67Reopen(t, path)
	})
	t.Run("bbolt backup", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "state.db")
		statedbApplied(t, path)
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		backup := filepath.Join(dir, "backup.db")
		if err := db.View(func(tx *bolt.Tx) error { return tx.CopyFile(backup, 0o600) }); err != nil {
			t.Fatal(err)
		}
		db.Close()
		r67Reopen(t, backup)
	})
	t.Run("first open crashed after bbolt's init", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "state.db")
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("a database bbolt initialised and the store never did is refused: %v", err)
		}
		s.Close()
	})
	t.Run("large", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "state.db")
		statedbApplied(t, path)
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		big := strings.Repeat("x", 3*os.Getpagesize())
		for i := 0; i < MaxHistory+50; i++ {
			cur, err := s.Serial()
			if err != nil {
				s.Close()
				t.Fatal(err)
			}
			serial, err := s.BeginApply(cur, HistoryEntry{Operation: "apply", Node: "host1", Error: big})
			if err != nil {
				s.Close()
				t.Fatal(err)
			}
			if err := s.FinishApply(serial, ResultOK, ""); err != nil {
				s.Close()
				t.Fatal(err)
			}
		}
		s.Close()
		r67Reopen(t, path)
	})
}

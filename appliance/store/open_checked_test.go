package store

// Written by review (helper-98) of the open after 6785037 and b745f4c
// (the FileInfo checkFile checked threaded through verify and
// openNamed, the empty-file retry, "unfinished" in the file's own page
// size). The findings fail on b745f4c; what held passes. Each comment
// says which.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
	bolt "go.etcd.io/bbolt"
)

// rv98ChildEnv makes this test binary, run again on one test, do
// that test's child part against the state database at its value.
const rv98ChildEnv = "SOSAPPLIANCE_REVIEW98_CHILD"

// rv98DamagedUnsynced returns the bytes of an applied database whose
// free list is not stored (bbolt rebuilds it at a writable open, walking
// every page in a goroutine of its own) and whose root page is damaged:
// the damage verify exists to refuse before a writable open
// (TestUnsyncedFreelistDamagedIsAnError).
func rv98DamagedUnsynced(t *testing.T, dir string) []byte {
	t.Helper()
	path := filepath.Join(dir, "made.db")
	statedbApplied(t, path)
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true})
	testsupport.RequireNoError(t, err)
	testsupport.RequireNoError(t, db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketHistory).Put([]byte("zzzzzzzz"), []byte(`{}`))
	}))
	testsupport.RequireNoError(t, db.Close())
	b, err := os.ReadFile(path)
	testsupport.RequireNoError(t, err)
	testsupport.RequireNoError(t, os.Remove(path))
	root, _, ps := r67Meta(t, b)
	for i := int(root) * ps; i < int(root+1)*ps; i++ {
		b[i] = 0xab
	}
	return b
}

// TestFileFilledBeforeTheFirstOpenLocksItIsChecked (finding,
// fails on b745f4c: the child process dies): a first open (no file when
// checkFile looked: the daemon's first start, the first plan) creates
// the file and, before it takes bbolt's lock, another writer fills it
// with a damaged database (a restore, `cp backup state.db`, racing the
// start; the hook writes it here, as TestFreshOpenKeepsADatabaseOfSmallerPages
// does). openNamed, with nothing checked (checked nil), refuses only a
// file shorter than four pages; a longer one goes to bbolt's writable
// open with neither checkFile nor verify, and bbolt's free-list rebuild
// panics in its own goroutine: the process dies inside store.Open
// ("panic: assertion failed ..."), which checkFile and verify exist to
// prevent. It must end with an error (or start over and check the file).
func TestFileFilledBeforeTheFirstOpenLocksItIsChecked(t *testing.T) {
	if path := os.Getenv(rv98ChildEnv); path != "" {
		damaged, err := os.ReadFile(path + ".damaged")
		if err != nil {
			os.Stdout.WriteString("CHILD-SETUP: " + err.Error() + "\n")
			os.Exit(0)
		}
		calls := 0
		testHookOpened = func(name string, locked bool) {
			if locked {
				return
			}
			if calls++; calls == 1 {
				if err := os.WriteFile(name, damaged, 0o600); err != nil {
					os.Stdout.WriteString("CHILD-SETUP: " + err.Error() + "\n")
				}
			}
		}
		s, err := Open(path, Options{LockTimeout: 2 * time.Second})
		if err == nil {
			_, err = s.Records()
			s.Close()
		}
		if err != nil {
			os.Stdout.WriteString("OPEN-ERROR: " + err.Error() + "\n")
		} else {
			os.Stdout.WriteString("OPEN-OK\n")
		}
		os.Exit(0)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	testsupport.RequireNoError(t, os.WriteFile(path+".damaged", rv98DamagedUnsynced(t, dir), 0o600))

	// The same bytes at the path before the open are refused with an
	// error, in a child too: the damage is one the checks see.
	before := filepath.Join(dir, "before.db")
	testsupport.RequireNoError(t, os.Rename(path+".damaged", before+".damaged"))
	b, err := os.ReadFile(before + ".damaged")
	testsupport.RequireNoError(t, err)
	testsupport.RequireNoError(t, os.WriteFile(before, b, 0o600))
	s, err := Open(before, Options{})
	if err == nil {
		s.Close()
		t.Fatalf("the damaged database at the path before the open was opened")
	}
	var corrupt *CorruptError
	testsupport.Require(t, errors.As(err, &corrupt), "the damaged database before the open: %v, want a CorruptError", err)
	testsupport.RequireNoError(t, os.WriteFile(path+".damaged", b, 0o600))

	out, err := inChild(t, rv98ChildEnv, path)
	t.Logf("child (%v):\n%s", err, statedbHead(out, 12))
	if strings.Contains(out, "CHILD-SETUP") {
		t.Fatalf("the child could not set up:\n%s", out)
	}
	if err != nil || !strings.Contains(out, "OPEN-ERROR: ") && !strings.Contains(out, "OPEN-OK") {
		t.Fatalf("a first open whose new file another writer filled with a damaged database before the lock "+
			"crashed the process (%v) instead of checking it:\n%s", err, statedbHead(out, 12))
	}
}

// rv98SmallPagesMeta0Torn makes at path a whole database of 1 KiB
// pages whose first meta page is torn (its checksum no longer holds),
// the damage bbolt's second meta page is there to survive: bbolt opens
// it, on the second meta page.
func rv98SmallPagesMeta0Torn(t *testing.T, path string) {
	t.Helper()
	openRaceSmallPageDB(t, path)
	b, err := os.ReadFile(path)
	testsupport.RequireNoError(t, err)
	b[metaTxid] ^= 0xff
	testsupport.RequireNoError(t, os.WriteFile(path, b, 0o600))
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	testsupport.RequireNoError(t, err)
	testsupport.RequireNoError(t, db.Close())
}

// rv98HugePageMeta0 makes at path an applied database (4 KiB pages,
// records in it) whose first meta page says, with a checksum that holds,
// pages of 1 GiB: damaged, and refused by checkFile ("truncated") when
// it is at the path before an open, but it holds the recorded originals.
func rv98HugePageMeta0(t *testing.T, path string) {
	t.Helper()
	statedbApplied(t, path)
	b, err := os.ReadFile(path)
	testsupport.RequireNoError(t, err)
	binary.NativeEndian.PutUint32(b[metaPageSize:], 1<<30)
	h := fnv.New64a()
	h.Write(b[metaStart:metaChecksum])
	binary.NativeEndian.PutUint64(b[metaChecksum:], h.Sum64())
	testsupport.RequireNoError(t, os.WriteFile(path, b, 0o600))
}

// TestUnfinishedLooksAtBothMetaPages (finding, fails on b745f4c
// for both files): removeUnfinished says "a file of all those pages is
// kept: it is a database", and unfinished measures the pages in the size
// the first meta page gives, else this machine's. A whole database of
// 1 KiB pages whose first meta page is torn (bbolt opens it on the
// second) is 4 KiB, shorter than four 4 KiB pages: it is removed. So is
// an applied database of 4 KiB pages whose first meta page (checksum
// valid) says pages of 1 GiB, which the open refuses as damaged when it
// finds it first: unfinished takes the page size from one meta page,
// unchecked against the file, where checkLength looks at both.
func TestUnfinishedLooksAtBothMetaPages(t *testing.T) {
	for _, c := range []struct {
		name string
		make func(*testing.T, string)
	}{
		{"1 KiB pages, first meta page torn", rv98SmallPagesMeta0Torn},
		{"4 KiB pages of records, first meta page says 1 GiB pages", rv98HugePageMeta0},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			c.make(t, path)
			want, err := os.ReadFile(path)
			testsupport.RequireNoError(t, err)
			removeUnfinished(path, 50*time.Millisecond)
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("removeUnfinished removed a database of %d bytes (%s): %v", len(want), c.name, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("removeUnfinished changed the database")
			}
		})
	}
}

// TestFirstOpenKeepsADatabaseItFindsWhole (finding, fails on
// b745f4c for both files): the path of
// TestUnfinishedLooksAtBothMetaPages through Open. A first open
// finds, holding the lock, a database written into its new file before
// the lock (as TestFreshOpenKeepsADatabaseOfSmallerPages does): one of
// 1 KiB pages with a torn first meta page, or an applied one whose first
// meta page says 1 GiB pages. It calls each another open's unfinished
// file, removes it (the applied one with its recorded originals), starts
// over and succeeds on a new, empty database. Found at the path before
// the open, the second is refused as damaged and kept.
func TestFirstOpenKeepsADatabaseItFindsWhole(t *testing.T) {
	for _, c := range []struct {
		name string
		make func(*testing.T, string)
	}{
		{"1 KiB pages, first meta page torn", rv98SmallPagesMeta0Torn},
		{"4 KiB pages of records, first meta page says 1 GiB pages", rv98HugePageMeta0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state.db")
			restore := filepath.Join(dir, "restore")
			c.make(t, restore)
			whole, err := os.ReadFile(restore)
			testsupport.RequireNoError(t, err)
			calls := 0
			testHookOpened = func(name string, locked bool) {
				if locked {
					return
				}
				if calls++; calls == 1 {
					if err := os.WriteFile(name, whole, 0o600); err != nil {
						t.Errorf("write %s: %v", name, err)
					}
				}
			}
			t.Cleanup(func() { testHookOpened = nil })
			before := openRaceCountFDs(t)
			s, err := Open(path, Options{})
			testHookOpened = nil
			if err == nil {
				s.Close()
			}
			if after := openRaceCountFDs(t); after > before {
				t.Errorf("%d descriptors before, %d after", before, after)
			}
			t.Logf("open: %v (bbolt opened a file %d times)", err, calls)
			got, rerr := os.ReadFile(path)
			// Kept: unchanged (refused as damaged), or opened as the
			// database it is (its pages still of its own size; the
			// open may write to it).
			kept := rerr == nil && bytes.Equal(got, whole)
			if f, ferr := os.Open(path); !kept && ferr == nil && err == nil {
				m, ok := readMeta(f, 1024)
				kept = ok && m.pageSize == 1024
				f.Close()
			}
			if !kept {
				n := -1
				if rerr == nil {
					n = len(got)
				}
				t.Fatalf("the database of %d bytes (%s) was removed as another open's unfinished file (the open: %v; %s is now %d bytes, a new database)",
					len(whole), c.name, err, path, n)
			}
		})
	}
}

// TestEmptyFileForGoodLetsGoOfEverything (held): an empty file
// left at the path for good (a first open killed before it wrote) is
// refused at every open, each named as empty, by the CLI's open and the
// daemon's (MustExist, 5 s lock timeout) alike, after the short retry;
// nothing of it is held, mapped or locked after, and the file is left
// as it was.
func TestEmptyFileForGoodLetsGoOfEverything(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	testsupport.RequireNoError(t, os.WriteFile(path, nil, 0o600))
	before := openRaceCountFDs(t)
	for i := range 6 {
		opts := Options{}
		if i%2 == 1 {
			opts = Options{LockTimeout: 5 * time.Second, MustExist: true}
		}
		start := time.Now()
		s, err := Open(path, opts)
		if err == nil {
			s.Close()
			t.Fatalf("open %d (%+v) of the empty file succeeded", i, opts)
		}
		var corrupt *CorruptError
		if !errors.As(err, &corrupt) || !strings.Contains(err.Error(), "empty") || !strings.Contains(err.Error(), path) {
			t.Fatalf("open %d (%+v): %v, want a CorruptError naming %s empty", i, opts, err, path)
		}
		t.Logf("open %d (%+v) took %v", i, opts, time.Since(start).Round(time.Millisecond))
		openRaceLetGo(t, path, "an open of the empty file")
	}
	if after := openRaceCountFDs(t); after > before {
		t.Errorf("%d descriptors before, %d after", before, after)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != 0 {
		t.Fatalf("the empty file is no longer as it was: %v", err)
	}
}

// TestDirectorySymlinkSwappedWhileCheckFileWaits (held): the
// path goes through a symlinked directory (state/ -> one/); while the
// open waits in checkFile for a holder's lock, the directory symlink is
// turned to another directory whose state.db is empty. The open starts
// over on what the path names now and refuses it as empty; it never
// runs on a file it did not check.
func TestDirectorySymlinkSwappedWhileCheckFileWaits(t *testing.T) {
	dir := t.TempDir()
	one, two := filepath.Join(dir, "one"), filepath.Join(dir, "two")
	testsupport.RequireNoError(t, os.Mkdir(one, 0o700))
	testsupport.RequireNoError(t, os.Mkdir(two, 0o700))
	statedbApplied(t, filepath.Join(one, "state.db"))
	testsupport.RequireNoError(t, os.WriteFile(filepath.Join(two, "state.db"), nil, 0o600))
	link := filepath.Join(dir, "state")
	testsupport.RequireNoError(t, os.Symlink(one, link))
	path := filepath.Join(link, "state.db")

	held, heldFI := openRaceLockEx(t, filepath.Join(one, "state.db"))
	done := make(chan openRaceOpened, 1)
	go func() {
		s, err := Open(path, Options{LockTimeout: 20 * time.Second})
		done <- openRaceOpened{s, err}
	}()
	testsupport.Eventually(t, 15*time.Second, "checkFile opens the database", func() bool { return openRaceFDsOn(t, heldFI) > 1 })
	tmp := filepath.Join(dir, "tmp-link")
	testsupport.RequireNoError(t, os.Symlink(two, tmp))
	testsupport.RequireNoError(t, os.Rename(tmp, link))
	held.Close()
	var got openRaceOpened
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the open did not end")
	}
	if got.err == nil {
		lineage := got.s.Lineage()
		got.s.Close()
		t.Fatalf("the open succeeded (lineage %s) on the empty file the swapped directory symlink leads to", lineage)
	}
	t.Log(got.err)
	var corrupt *CorruptError
	if !errors.As(got.err, &corrupt) || !strings.Contains(got.err.Error(), "empty") {
		t.Fatalf("error %q does not say the file is empty", got.err)
	}
	fi, err := os.Stat(filepath.Join(two, "state.db"))
	if err != nil || fi.Size() != 0 {
		t.Fatalf("the empty file was written to: %v", err)
	}
}

// TestHardLinkedDatabaseOpens (held): a database with a second
// name (a hard link kept as a backup) is the same file: moving the link
// in place while verify waits is no change, and the open goes on with
// the file it checked, its lineage and records.
func TestHardLinkedDatabaseOpens(t *testing.T) {
	var lineage string
	got, want := openRaceReplaceWhileVerifyWaits(t, Options{}, func(path string) {
		link := path + ".hardlink"
		testsupport.RequireNoError(t, os.Link(path, link))
		testsupport.RequireNoError(t, os.Rename(link, path))
	})
	if got.err != nil {
		t.Fatalf("the open of a database whose hard link was moved onto it: %v", got.err)
	}
	lineage = got.s.Lineage()
	if lineage != want {
		t.Fatalf("lineage %s, want %s", lineage, want)
	}
	records, err := got.s.Records()
	if err != nil || len(records) != 1 {
		t.Fatalf("records %v, %v: want the one recorded", records, err)
	}
}

// TestCraftedPageSizeAtThePathIsRefusedAndKept (held): an
// applied database at the path whose first meta page (checksum valid)
// gives another page size, tiny or huge, is refused by the open as
// damaged and kept as it was, with nothing of it held, mapped or locked
// after, at the CLI's open and the daemon's (MustExist).
func TestCraftedPageSizeAtThePathIsRefusedAndKept(t *testing.T) {
	before := openRaceCountFDs(t)
	for _, size := range []uint32{0, 1, 511, 512, 1024, 2048, 8192, 65536, 1 << 20, 1 << 30, 1<<32 - 1} {
		for _, mustExist := range []bool{false, true} {
			path := filepath.Join(t.TempDir(), "state.db")
			statedbApplied(t, path)
			b, err := os.ReadFile(path)
			testsupport.RequireNoError(t, err)
			binary.NativeEndian.PutUint32(b[metaPageSize:], size)
			h := fnv.New64a()
			h.Write(b[metaStart:metaChecksum])
			binary.NativeEndian.PutUint64(b[metaChecksum:], h.Sum64())
			testsupport.RequireNoError(t, os.WriteFile(path, b, 0o600))
			s, err := Open(path, Options{MustExist: mustExist})
			if err == nil {
				records, rerr := s.Records()
				s.Close()
				// bbolt reads the second meta page when the first's size
				// is not one it can use: opening then is right, on the
				// recorded originals.
				if rerr != nil || len(records) != 1 {
					t.Errorf("page size %d: opened, records %v, %v", size, records, rerr)
				}
				t.Logf("page size %d (must exist %v): opened on the second meta page", size, mustExist)
			} else {
				t.Logf("page size %d (must exist %v): %v", size, mustExist, err)
				if !strings.Contains(err.Error(), path) {
					t.Errorf("page size %d: error %q does not name %s", size, err, path)
				}
			}
			got, err := os.ReadFile(path)
			if err != nil || (s == nil && !bytes.Equal(got, b)) {
				t.Errorf("page size %d: the file was removed or changed: %v", size, err)
			}
			openRaceLetGo(t, path, "the open")
		}
	}
	if after := openRaceCountFDs(t); after > before {
		t.Errorf("%d descriptors before, %d after", before, after)
	}
}

package store

// What Open does with a state file that is damaged. The state database
// holds the only copy of what each host setting was before the appliance
// changed it; a damaged file must give a clear error naming the file,
// never a crash, and never a silent fresh start that loses the originals
// a rollback needs.
//
// Written by review (helper-65). Each test's comment tells the defect as
// found, before the fix (checkFile, guarded and readAll in Open, the
// bucket check in initSchema); the undecodable record and the directory
// at the path held, and were kept.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// statedbChildEnv makes the test binary, started again on one test, open
// the state database at its value and report, so that a crash inside Open
// (a fatal fault cannot be recovered) is seen by the parent test.
const statedbChildEnv = "SOSAPPLIANCE_STATEDB_TEST_OPEN"

// statedbApplied makes a state database as an apply leaves it: one owned
// sysctl whose original value is 212992.
func statedbApplied(t *testing.T, path string) {
	t.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	serial, err := s.BeginApply(0, HistoryEntry{Operation: "apply", Node: "host1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Touch("sysctl", "net.core.rmem_max", "212992", true, "67108864", serial); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkApplied("sysctl", "net.core.rmem_max"); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishApply(serial, ResultOK, ""); err != nil {
		t.Fatal(err)
	}
}

// statedbOpenInChild opens path in a child process (this test binary,
// this test) and returns what the child printed and its exit error.
func statedbOpenInChild(t *testing.T, path string) (string, error) {
	t.Helper()
	return inChild(t, statedbChildEnv, path)
}

// inChild runs this test again in a child process (this test binary,
// this test alone) with env set to value, and returns what the child
// printed and its exit error: a fault the child dies of, which no recover
// catches, fails the test instead of the test binary.
func inChild(t *testing.T, env, value string) (string, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+value)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// statedbChild is the child's side: open, read the records, print the
// outcome, exit 0. It returns false in the parent.
func statedbChild() bool {
	path := os.Getenv(statedbChildEnv)
	if path == "" {
		return false
	}
	s, err := Open(path, Options{})
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
	return true
}

func statedbRequireCleanError(t *testing.T, path, out string, err error) {
	t.Helper()
	if err != nil || !strings.Contains(out, "OPEN-ERROR: ") {
		t.Fatalf("opening a damaged state database crashed the process (%v) instead of returning an error:\n%s",
			err, statedbHead(out, 12))
	}
	if !strings.Contains(out, path) {
		t.Fatalf("the error does not name the state file %s:\n%s", path, out)
	}
}

func statedbHead(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// TestTruncatedStateFileIsAnError: a state file cut short (a
// copy or restore that ran out of disk, a truncation) keeping its two
// meta pages. bbolt maps past the end of the file and the first read of
// a page beyond it is SIGBUS: the Go runtime dies with "fatal error:
// fault", which no recover catches. apply, plan, rollback and the
// daemon's start all die this way.
func TestTruncatedStateFileIsAnError(t *testing.T) {
	if statedbChild() {
		return
	}
	path := filepath.Join(t.TempDir(), "state.db")
	statedbApplied(t, path)
	if err := os.Truncate(path, 2*int64(os.Getpagesize())); err != nil {
		t.Fatal(err)
	}
	out, err := statedbOpenInChild(t, path)
	statedbRequireCleanError(t, path, out, err)
}

// TestCorruptPagesAreAnError: a state file whose meta pages are
// intact but whose other pages are garbage. bbolt panics ("invalid
// freelist page ... page type is unknown") inside Open; store.Open does
// not turn that into an error.
func TestCorruptPagesAreAnError(t *testing.T) {
	if statedbChild() {
		return
	}
	path := filepath.Join(t.TempDir(), "state.db")
	statedbApplied(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 2 * os.Getpagesize(); i < len(b); i++ {
		b[i] = 0xab
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := statedbOpenInChild(t, path)
	statedbRequireCleanError(t, path, out, err)
}

// TestZeroByteStateFileIsRefused: a state file truncated to zero
// bytes. bbolt initialises a zero-byte file as a new database, so Open
// succeeds with no records and a fresh lineage: the originals are gone
// without a word, rollback says there is nothing to do, and the next
// apply records the appliance's own values as the host's originals.
func TestZeroByteStateFileIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	statedbApplied(t, path)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{})
	if err == nil {
		records, _ := s.Records()
		serial, _ := s.Serial()
		s.Close()
		t.Fatalf("Open of a zero-byte state file succeeded as a new database (%d records, serial %d): "+
			"the recorded originals are lost silently", len(records), serial)
	}
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("error does not name the file: %v", err)
	}
}

// TestMissingItemsBucketIsRefused: a valid bbolt file at schema
// version 2 and serial 1, whose items bucket is gone (damage, a hand
// edit). initSchema creates every missing bucket as for a new database,
// so Open succeeds and the records of every original value are silently
// an empty set.
func TestMissingItemsBucketIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	statedbApplied(t, path)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketItems) })
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{})
	if err == nil {
		records, _ := s.Records()
		serial, _ := s.Serial()
		s.Close()
		t.Fatalf("Open of a database at serial %d with no items bucket succeeded (%d records): "+
			"the recorded originals are lost silently", serial, len(records))
	}
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("error does not name the file: %v", err)
	}
}

// TestUndecodableRecordIsAnErrorNamingIt (held): a record that
// is not JSON inside a valid file fails Records and Record with the
// item's key, and Touch refuses to overwrite it.
func TestUndecodableRecordIsAnErrorNamingIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	statedbApplied(t, path)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketItems).Put(itemKey("sysctl", "net.core.rmem_max"), []byte("\x00garbage"))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Records(); err == nil || !strings.Contains(err.Error(), "sysctl/net.core.rmem_max") {
		t.Errorf("Records: %v", err)
	}
	if _, _, err := s.Record("sysctl", "net.core.rmem_max"); err == nil {
		t.Error("Record of garbage: no error")
	}
	if _, err := s.Touch("sysctl", "net.core.rmem_max", "1", true, "2", 2); err == nil {
		t.Error("Touch overwrote an undecodable record")
	}
}

// TestDirectoryAtStatePathIsAClearError (held).
func TestDirectoryAtStatePathIsAClearError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{})
	if err == nil {
		s.Close()
		t.Fatal("Open of a directory succeeded")
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("error: %v", err)
	}
}

// TestHistoryKeepsTheNewest: every drift correction is an apply with a
// history entry, so a process fighting the appliance over a setting grew
// the file without bound (noticed by review, helper-65). The history
// keeps the newest MaxHistory entries; the serial goes on.
func TestHistoryKeepsTheNewest(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const applies = MaxHistory + 25
	for i := range uint64(applies) {
		serial, err := s.BeginApply(i, HistoryEntry{Operation: "apply", Node: "host1"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.FinishApply(serial, ResultOK, ""); err != nil {
			t.Fatal(err)
		}
	}
	h, err := s.History()
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != MaxHistory || h[0].Serial != applies-MaxHistory+1 || h[len(h)-1].Serial != applies {
		t.Fatalf("history holds %d entries, serials %d..%d; want %d, %d..%d",
			len(h), h[0].Serial, h[len(h)-1].Serial, MaxHistory, applies-MaxHistory+1, applies)
	}
	if serial, err := s.Serial(); err != nil || serial != applies {
		t.Fatalf("serial %d (%v), want %d", serial, err, applies)
	}
}

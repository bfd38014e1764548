package store

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// holdChild is the child that holds a database open until its stdin
// closes, standing in for a second sosappliance process.
const holdChild = "hold-database"

func TestMain(m *testing.M) {
	testsupport.Main(m, testsupport.Children{holdChild: holdDatabase})
}

// holdDatabase holds the database at args[0].
func holdDatabase(args []string) int {
	s, err := Open(args[0], Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "sub", "state.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestOpenCreatesSchemaAndStartsAtSerialZero(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deep", "dir", "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Path() != path {
		t.Errorf("Path() = %q, want %q", s.Path(), path)
	}
	serial, err := s.Serial()
	if err != nil || serial != 0 {
		t.Fatalf("Serial() = %d, %v; want 0", serial, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if tx.Bucket(b) == nil {
				return fmt.Errorf("bucket %s missing", b)
			}
		}
		if v := tx.Bucket(bucketMeta).Get(keySchemaVersion); string(v) != string(u64(SchemaVersion)) {
			return fmt.Errorf("schema version = %x", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestNewerSchemaIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		return b.Put(keySchemaVersion, u64(SchemaVersion+1))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(path, Options{})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("schema version %d", SchemaVersion+1)) {
		t.Fatalf("Open of a newer schema: err = %v", err)
	}
}

func TestLineageIsMadeOnceAndKept(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	s, err := Open(path, Options{})
	testsupport.RequireNoError(t, err)
	lineage := s.Lineage()
	if !validLineage(lineage) || lineage[14] != '4' {
		t.Fatalf("lineage %q is not a version 4 UUID", lineage)
	}
	testsupport.RequireNoError(t, s.Close())

	s, err = Open(path, Options{})
	testsupport.RequireNoError(t, err)
	if s.Lineage() != lineage {
		t.Errorf("reopened database has lineage %q, was %q", s.Lineage(), lineage)
	}
	s.Close()

	other, err := Open(filepath.Join(dir, "other.db"), Options{})
	testsupport.RequireNoError(t, err)
	defer other.Close()
	if other.Lineage() == lineage {
		t.Errorf("two databases share lineage %q", lineage)
	}
}

// writeRaw makes a database the way an older or damaged sosappliance left
// it, with the given meta keys.
func writeRaw(t *testing.T, path string, meta map[string][]byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	testsupport.RequireNoError(t, err)
	defer db.Close()
	testsupport.RequireNoError(t, db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		for k, v := range meta {
			if err := tx.Bucket(bucketMeta).Put([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	}))
}

func TestVersion1DatabaseGetsALineage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	writeRaw(t, path, map[string][]byte{"schema_version": u64(1), "serial": u64(7)})
	s, err := Open(path, Options{})
	testsupport.RequireNoError(t, err)
	lineage := s.Lineage()
	serial, err := s.Serial()
	s.Close()
	if !validLineage(lineage) || err != nil || serial != 7 {
		t.Fatalf("after upgrade: lineage %q, serial %d, %v", lineage, serial, err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	testsupport.RequireNoError(t, err)
	testsupport.RequireNoError(t, db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(keySchemaVersion); string(v) != string(u64(SchemaVersion)) {
			return fmt.Errorf("schema version after upgrade = %x", v)
		}
		return nil
	}))
	db.Close()
	s, err = Open(path, Options{})
	testsupport.RequireNoError(t, err)
	defer s.Close()
	if s.Lineage() != lineage {
		t.Errorf("the upgrade made a new lineage on the second open: %q, then %q", lineage, s.Lineage())
	}
}

func TestMissingOrCorruptLineageIsRefused(t *testing.T) {
	for name, meta := range map[string]map[string][]byte{
		"missing": {"schema_version": u64(2)},
		"corrupt": {"schema_version": u64(2), "lineage": []byte("not-a-lineage")},
	} {
		path := filepath.Join(t.TempDir(), "state.db")
		writeRaw(t, path, meta)
		if s, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "corrupt lineage") {
			if s != nil {
				s.Close()
			}
			t.Errorf("%s lineage: Open err = %v", name, err)
		}
	}
}

func TestTouchRecordsPreviousOnlyOnFirstTouch(t *testing.T) {
	s := openTemp(t)
	r, err := s.Touch("sysctl", "net.core.rmem_max", "212992", true, "134217728", 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Applied || r.Previous != "212992" || !r.PreviousPresent || r.FirstSerial != 1 {
		t.Fatalf("first touch record = %+v", r)
	}
	if err := s.MarkApplied("sysctl", "net.core.rmem_max"); err != nil {
		t.Fatal(err)
	}
	// A later apply observes the value the appliance set; it must not
	// replace what the host had originally.
	if _, err := s.Touch("sysctl", "net.core.rmem_max", "134217728", true, "268435456", 2); err != nil {
		t.Fatal(err)
	}
	r, found, err := s.Record("sysctl", "net.core.rmem_max")
	if err != nil || !found {
		t.Fatalf("Record: %v found=%v", err, found)
	}
	want := Record{Kind: "sysctl", Key: "net.core.rmem_max", Previous: "212992", PreviousPresent: true,
		Desired: "268435456", Applied: false, FirstSerial: 1, Serial: 2, Updated: r.Updated}
	if r != want {
		t.Fatalf("record after second touch = %+v\nwant %+v", r, want)
	}

	if _, err := s.Touch("steering", "nftables", "", false, "{}", 2); err != nil {
		t.Fatal(err)
	}
	recs, err := s.Records()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].ID() != "steering/nftables" || recs[1].ID() != "sysctl/net.core.rmem_max" {
		t.Fatalf("Records() = %+v", recs)
	}
	if recs[0].PreviousPresent {
		t.Errorf("absent previous recorded as present: %+v", recs[0])
	}

	if err := s.Forget("sysctl", "net.core.rmem_max"); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := s.Record("sysctl", "net.core.rmem_max"); found {
		t.Fatal("record survived Forget")
	}
	if err := s.MarkApplied("sysctl", "net.core.rmem_max"); err == nil {
		t.Fatal("MarkApplied of a forgotten item succeeded")
	}
}

func TestBeginApplyBumpsSerialAndRefusesStalePlans(t *testing.T) {
	s := openTemp(t)
	serial, err := s.BeginApply(0, HistoryEntry{Operation: "apply", Node: "agent-a", ConfigHash: "abc",
		Changes: []HistoryChange{{Action: "+", Kind: "sysctl", Key: "k", After: "1", AfterPresent: true}}})
	if err != nil || serial != 1 {
		t.Fatalf("BeginApply = %d, %v", serial, err)
	}
	e, found, err := s.LastHistory()
	if err != nil || !found {
		t.Fatalf("LastHistory: %v %v", found, err)
	}
	if e.Result != ResultIncomplete || e.Serial != 1 || e.PID != os.Getpid() || e.Node != "agent-a" || e.Started.IsZero() {
		t.Fatalf("history entry at begin = %+v", e)
	}
	if err := s.FinishApply(1, ResultOK, ""); err != nil {
		t.Fatal(err)
	}

	_, err = s.BeginApply(0, HistoryEntry{Operation: "apply"})
	var stale *StaleError
	if !errors.As(err, &stale) || stale.PlanSerial != 0 || stale.StateSerial != 1 {
		t.Fatalf("BeginApply with an old serial: %v", err)
	}
	if serial, _ := s.Serial(); serial != 1 {
		t.Fatalf("a refused apply moved the serial to %d", serial)
	}

	if _, err := s.BeginApply(1, HistoryEntry{Operation: "rollback", Node: "agent-a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishApply(2, ResultFailed, "boom"); err != nil {
		t.Fatal(err)
	}
	h, err := s.History()
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 {
		t.Fatalf("history has %d entries, want 2", len(h))
	}
	if h[0].Serial != 1 || h[0].Result != ResultOK || h[0].Finished.IsZero() || len(h[0].Changes) != 1 {
		t.Errorf("history[0] = %+v", h[0])
	}
	if h[1].Serial != 2 || h[1].Operation != "rollback" || h[1].Result != ResultFailed || h[1].Error != "boom" {
		t.Errorf("history[1] = %+v", h[1])
	}
	if err := s.FinishApply(9, ResultOK, ""); err == nil {
		t.Error("FinishApply of an unknown serial succeeded")
	}
}

func TestStateSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.BeginApply(0, HistoryEntry{Operation: "apply"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Touch("irq", "eth1", "45:0 46:1", true, "0-1", 1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	serial, _ := s.Serial()
	r, found, _ := s.Record("irq", "eth1")
	if serial != 1 || !found || r.Previous != "45:0 46:1" || r.Desired != "0-1" {
		t.Fatalf("after reopen: serial %d, record %+v found=%v", serial, r, found)
	}
}

// A second process must get a clear "in use by pid N" error after the lock
// timeout instead of hanging.
func TestSecondProcessGetsInUseError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	child := testsupport.Command(t, holdChild, path)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		child.Process.Kill()
		child.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child did not open the database: %q %v", line, err)
	}

	_, err = Open(path, Options{})
	var inUse *InUseError
	if !errors.As(err, &inUse) {
		t.Fatalf("Open while held: err = %v, want *InUseError", err)
	}
	want := fmt.Sprintf("state database is in use by pid %d", child.Process.Pid)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not contain %q", err, want)
	}

	stdin.Close()
	if err := child.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open after the holder exited: %v", err)
	}
	s.Close()
}

func TestParseLockHolder(t *testing.T) {
	const locks = `1: POSIX  ADVISORY  WRITE 100 fe:00:42 0 EOF
2: FLOCK  ADVISORY  WRITE 200 00:2e:42 0 EOF
2: -> FLOCK  ADVISORY  WRITE 300 fe:00:42 0 EOF
3: FLOCK  ADVISORY  WRITE 400 fe:00:42 0 EOF
4: FLOCK  ADVISORY  WRITE 500 fe:00:4242 0 EOF
`
	tests := []struct {
		name         string
		ino          uint64
		major, minor uint32
		want         int
	}{
		{"device and inode", 42, 0xfe, 0, 400},
		{"inode only on another device", 42, 8, 1, 200},
		{"no lock on inode", 7, 0xfe, 0, 0},
		{"inode is not a prefix match", 4242, 0xfe, 0, 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseLockHolder(strings.NewReader(locks), tt.ino, tt.major, tt.minor); got != tt.want {
				t.Errorf("parseLockHolder = %d, want %d", got, tt.want)
			}
		})
	}
}

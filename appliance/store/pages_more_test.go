package store

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// r71ChildEnv makes this test binary, run again on one test, open the
// state database at its value in a child (a fault in a goroutine of
// bbolt's own kills the process, which the parent must see).
const r71ChildEnv = "SOSAPPLIANCE_STORE_R71_CHILD"

// r71LimitEnv, set, gives the child an address space of 3 GiB, so that
// unbounded growth ends as "out of memory", not on the host.
const r71LimitEnv = "SOSAPPLIANCE_STORE_R71_LIMIT"

// r71Child is the child's side: open the database, print the outcome,
// exit 0. It returns false in the parent.
func r71Child() bool {
	path := os.Getenv(r71ChildEnv)
	if path == "" {
		return false
	}
	if os.Getenv(r71LimitEnv) != "" {
		lim := unix.Rlimit{Cur: 3 << 30, Max: 3 << 30}
		unix.Setrlimit(unix.RLIMIT_AS, &lim)
	}
	s, err := Open(path, Options{LockTimeout: 2 * time.Second})
	if err == nil {
		s.Close()
		os.Stdout.WriteString("R71-OPEN-OK\n")
	} else {
		os.Stdout.WriteString("R71-OPEN-ERROR: " + err.Error() + "\n")
	}
	os.Exit(0)
	return true
}

func r71OpenInChild(t *testing.T, path string) (string, error) {
	t.Helper()
	return r71OpenInChildAs(t, path, t.Name())
}

// r71OpenInChildLimited is r71OpenInChild in an address space of 3 GiB.
func r71OpenInChildLimited(t *testing.T, path string) (string, error) {
	t.Helper()
	t.Setenv(r71LimitEnv, "1")
	return r71OpenInChildAs(t, path, t.Name())
}

// r71OpenInChildAs runs the test named test (top level) in a child.
func r71OpenInChildAs(t *testing.T, path, test string) (string, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), r71ChildEnv+"="+path)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// r71Damage makes an applied state database and lets damage change the
// bytes of its file (page size and newest meta's root and freelist pages
// given).
func r71Damage(t *testing.T, damage func(b []byte, pageSize int, root, freelist uint64)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	statedbApplied(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	root, freelist, pageSize := r67Meta(t, b)
	damage(b, pageSize, root, freelist)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func r71RequireError(t *testing.T, path, out string, err error) {
	t.Helper()
	if err != nil || !strings.Contains(out, "R71-OPEN-ERROR: ") {
		t.Fatalf("store.Open on a damaged state database did not return an error (child exit %v):\n%s", err, statedbHead(out, 24))
	}
	if !strings.Contains(out, path) {
		t.Fatalf("the error does not name %s:\n%s", path, out)
	}
}

// TestFreelistCountPastTheEnd: the freelist page's count says
// 0xFFFF, so its first id is the count, and that is 4M ids (32 MiB) in a
// file of a few pages. readAll does not read the freelist and the
// read-only open does not load it: bbolt's Check does, in the goroutine
// tx.Check starts, where guarded's SetPanicOnFault does not reach. The
// copy of the ids runs off the mapping: SIGSEGV, "fatal error", the
// process (every command, the daemon at its drift check) dies in
// store.Open. Before verify (c078c03), the read-write open loaded the
// freelist in guarded's goroutine and it was an error.
// Found by review (helper-71) of c078c03: the fault came in bbolt's Check
// goroutine, which no recover reaches; walkPages refuses it first.
func TestFreelistCountPastTheEnd(t *testing.T) {
	if r71Child() {
		return
	}
	path := r71Damage(t, func(b []byte, ps int, root, fl uint64) {
		p := b[int(fl)*ps:]
		binary.NativeEndian.PutUint16(p[10:], 0xFFFF)
		binary.NativeEndian.PutUint64(p[16:], 1<<22)
	})
	out, err := r71OpenInChild(t, path)
	r71RequireError(t, path, out, err)
}

// TestRootPageOverflowHuge: the root page's overflow count (how
// many pages follow it) says 0xFFFFFFFF. Nothing reads a page's bytes by
// it (readAll passes), but bbolt's Check marks every one of those 4G
// page ids reachable in a map: memory grows without bound (here, in a
// 3 GiB address space, until the runtime dies "out of memory"; on a host,
// the OOM killer). It should be an error: a page's overflow past the
// high-water mark is damage.
// Found by review (helper-71): Check ran out of memory.
func TestRootPageOverflowHuge(t *testing.T) {
	if r71Child() {
		return
	}
	// The same limit opens an undamaged database.
	good := filepath.Join(t.TempDir(), "good.db")
	statedbApplied(t, good)
	if out, err := r71OpenInChildLimited(t, good); err != nil || !strings.Contains(out, "R71-OPEN-OK") {
		t.Fatalf("an undamaged database in the limited child: %v\n%s", err, statedbHead(out, 8))
	}
	path := r71Damage(t, func(b []byte, ps int, root, fl uint64) {
		binary.NativeEndian.PutUint32(b[int(root)*ps+12:], 0xFFFFFFFF)
	})
	out, err := r71OpenInChildLimited(t, path)
	r71RequireError(t, path, out, err)
}

// TestFreelistPageOverflowHuge: the freelist page's overflow
// says 0xFFFFFFFF. Check's loop over it counts a uint32 up to and
// including 0xFFFFFFFF: it never ends, and it fills a map as it goes.
// Found by review (helper-71): Check ran out of memory.
func TestFreelistPageOverflowHuge(t *testing.T) {
	if r71Child() {
		return
	}
	path := r71Damage(t, func(b []byte, ps int, root, fl uint64) {
		binary.NativeEndian.PutUint32(b[int(fl)*ps+12:], 0xFFFFFFFF)
	})
	out, err := r71OpenInChildLimited(t, path)
	r71RequireError(t, path, out, err)
}

// r71ApplyChild is the child's side of a test that opens the database,
// makes the next apply's writes and opens it again.
func r71ApplyChild() bool {
	path := os.Getenv(r71ChildEnv)
	if path == "" {
		return false
	}
	s, err := Open(path, Options{LockTimeout: 2 * time.Second})
	if err != nil {
		os.Stdout.WriteString("FIRST-OPEN-ERROR: " + err.Error() + "\n")
		os.Exit(0)
	}
	os.Stdout.WriteString("FIRST-OPEN-OK\n")
	serial, err := s.BeginApply(1, HistoryEntry{Operation: "apply", Node: "host1"})
	if err == nil {
		_, err = s.Touch("sysctl", "net.core.wmem_max", "212992", true, "67108864", serial)
	}
	if err == nil {
		err = s.MarkApplied("sysctl", "net.core.wmem_max")
	}
	if err == nil {
		err = s.FinishApply(serial, ResultOK, "")
	}
	os.Stdout.WriteString("APPLY err=" + errString(err) + "\n")
	s.Close()
	s, err = Open(path, Options{LockTimeout: 2 * time.Second})
	if err != nil {
		os.Stdout.WriteString("SECOND-OPEN-ERROR: " + err.Error() + "\n")
		os.Exit(0)
	}
	recs, err := s.Records()
	os.Stdout.WriteString("SECOND-OPEN-OK records=" + itoa(len(recs)) + " err=" + errString(err) + "\n")
	s.Close()
	os.Exit(0)
	return true
}

// TestFreelistIdPastTheHighWaterMark (held): one id added to
// the freelist (a damaged count and a stray id), naming a page past the
// high-water mark. bbolt's Check does not look at free ids above the
// mark, so verify accepts the file; the next apply's writes must then not
// crash the process nor lose a record, and the file must open again.
// Written by review (helper-71); it passed.
func TestFreelistIdPastTheHighWaterMark(t *testing.T) {
	if r71ApplyChild() {
		return
	}
	path := r71Damage(t, func(b []byte, ps int, root, fl uint64) {
		ne := binary.NativeEndian
		var hwm, best uint64
		for _, off := range []int{0, os.Getpagesize()} {
			if txid := ne.Uint64(b[off+metaTxid:]); ne.Uint32(b[off+16:]) == boltMagic && txid >= best {
				best, hwm = txid, ne.Uint64(b[off+metaPgid:])
			}
		}
		p := b[int(fl)*ps:]
		n := int(ne.Uint16(p[10:]))
		if n == 0 || n == 0xFFFF {
			t.Fatalf("freelist count %d", n)
		}
		// One more id, the highest, so the list stays sorted.
		ne.PutUint64(p[16+8*n:], hwm+2)
		ne.PutUint16(p[10:], uint16(n+1))
		t.Logf("high-water mark %d, freelist page %d with %d ids: %d added", hwm, fl, n, hwm+2)
	})
	out, err := r71OpenInChild(t, path)
	t.Logf("child:\n%s", statedbHead(out, 12))
	if err != nil {
		t.Fatalf("Open accepted a freelist naming page past the high-water mark, and the next apply crashed the process (%v):\n%s", err, statedbHead(out, 10))
	}
	if strings.Contains(out, "FIRST-OPEN-ERROR: ") {
		return
	}
	if !strings.Contains(out, "SECOND-OPEN-OK records=2 ") {
		t.Fatalf("Open accepted a freelist naming a page past the high-water mark, and the next apply left a database that does not open with its records:\n%s", statedbHead(out, 12))
	}
}

// TestBranchKeyPastTheMapping: the history bucket grown to
// several leaf pages under a branch page, and one element of that
// branch page damaged so its key's offset points 1 GiB away. readAll's
// cursors walk a branch page by its children's page ids and never read
// its keys; bbolt's Check compares them (key order), in the goroutine
// tx.Check starts, where guarded does not reach: SIGSEGV, "fatal error",
// the process dies in store.Open.
// Found by review (helper-71) of c078c03 (a fault in Check's goroutine).
func TestBranchKeyPastTheMapping(t *testing.T) {
	if r71Child() {
		return
	}
	path := filepath.Join(t.TempDir(), "state.db")
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
	var hroot uint64
	if err == nil {
		err = s.db.View(func(tx *bolt.Tx) error { hroot = uint64(tx.Bucket(bucketHistory).Root()); return nil })
	}
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, _, ps := r67Meta(t, b)
	p := b[int(hroot)*ps:]
	ne := binary.NativeEndian
	if flags, count := ne.Uint16(p[8:]), ne.Uint16(p[10:]); flags != 0x01 || count < 2 {
		t.Fatalf("history root page %d: flags %#x count %d, not a branch page", hroot, flags, count)
	}
	// Element 1: pos (uint32), ksize (uint32), pgid (uint64).
	ne.PutUint32(p[16+16:], ne.Uint32(p[16+16:])+1<<30)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := r71OpenInChild(t, path)
	r71RequireError(t, path, out, err)
}

// TestMetaFreelistPastTheEnd: both meta pages (valid checksums)
// name a freelist page 1 GiB past the file. Nothing before bbolt's Check
// reads the freelist (checkLength checks the high-water mark, not the
// freelist page; the read-only open does not load it); Check does, in its
// own goroutine: SIGSEGV, the process dies in store.Open.
// Found by review (helper-71) of c078c03 (a fault in Check's goroutine).
func TestMetaFreelistPastTheEnd(t *testing.T) {
	if r71Child() {
		return
	}
	path := r71Damage(t, func(b []byte, ps int, root, fl uint64) {
		ne := binary.NativeEndian
		for _, off := range []int{0, ps} {
			m := b[off:]
			ne.PutUint64(m[metaStart+32:], 1<<30/uint64(ps))
			h := fnv.New64a()
			h.Write(m[metaStart:metaChecksum])
			ne.PutUint64(m[metaChecksum:], h.Sum64())
		}
	})
	out, err := r71OpenInChild(t, path)
	r71RequireError(t, path, out, err)
}

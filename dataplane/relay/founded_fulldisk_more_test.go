package relay

// The founded sessions file's full- and read-only-disk paths (torn,
// cutBack, degraded starts), made for real: a small tmpfs in a private
// mount namespace of a child test process.
//
// Found and written by review (helper-93).

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestFoundedTornFileStaysTornWhenAWriteIsCutBack: an agent ended while
// its founded sessions file ended in part of a line (a short write whose
// part it could not cut back, then a crash), and the next one starts on
// a full disk: degraded, it appends to that file and knows it is torn,
// so its first record starts with a newline. That record is cut short
// too (5 bytes fit the file's last page), and cutBack removes those 5
// bytes, newline included: the file ends in the old part again. Record
// set torn from cutBack alone (torn = !cutBack), so torn was false: once
// the room was back, the next record (record returned nil) was glued to
// the old part, skipped as a line that does not parse by a restarted
// agent, and its session could be founded a second time. Now a record
// cut back leaves torn as it was.
func TestFoundedTornFileStaysTornWhenAWriteIsCutBack(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	dir := testsupport.Tmpfs(t, "64k")
	path := filepath.Join(dir, "founded-agent-b")
	t0 := time.Now().Add(-time.Minute)
	var b strings.Builder
	const perPage = 4096 / 53 // 77 lines, 4081 bytes
	for i := range perPage {
		b.WriteString(foundedLine(foundedID(byte(i)), t0.Add(time.Duration(i)*time.Millisecond)))
	}
	b.WriteString("0123456789") // the part of a line a crash left: 4091 bytes, 5 free in the page
	testsupport.RequireNoError(t, os.WriteFile(path, []byte(b.String()), 0o600))

	free := testsupport.FillFS(t, dir, 0)
	now := time.Now()
	ff, _, _, err := openFounded(path, now)
	if err != nil {
		t.Fatalf("open on a full disk: %v", err)
	}
	defer ff.close()
	if ff.degraded == nil || !ff.torn {
		t.Fatalf("the test did not make a degraded start on a torn file (degraded %v, torn %v)", ff.degraded, ff.torn)
	}
	if err := ff.record(foundedID(200), now); err == nil {
		t.Fatal("record on a full filesystem succeeded; the test did not make ENOSPC")
	}
	free()
	kept := foundedID(210)
	mustRecord(t, ff, kept, now.Add(time.Second))
	ff.close()

	raw, _ := os.ReadFile(path)
	ids, bad := readBack(t, path, time.Now())
	if !idsHold(ids, kept) {
		t.Errorf("the session recorded (record returned nil) after space came back is not read back by a restarted agent "+
			"(%d ids, %d lines that do not parse); the file ends:\n%s", len(ids), bad, tail(raw, 2*53))
	}
	if !idsHold(ids, foundedID(perPage-1)) {
		t.Errorf("a session recorded before the crash is not read back")
	}
}

// TestFoundedRecordsOnceTheFilesystemIsWritableAgain: an agent starts
// while the filesystem of its founded sessions file is read-only and
// the file's directory does not exist yet. openFounded starts degraded
// and cannot open the file (ff.f nil), leaving record to open it again
// once it can. The filesystem is made writable again: every record
// still failed (ENOENT), since record's reopen made no directory; the
// agent recorded nothing for the rest of its life. Now reopen and
// rotate make it.
func TestFoundedRecordsOnceTheFilesystemIsWritableAgain(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	dir := testsupport.Tmpfs(t, "64k")
	path := filepath.Join(dir, "state", "founded-agent-b")
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	now := time.Now()
	ff, _, _, err := openFounded(path, now)
	if err != nil {
		t.Fatalf("open on a read-only filesystem: %v", err)
	}
	defer ff.close()
	t.Logf("degraded: %v", ff.degraded)
	if err := ff.record(foundedID(1), now); err == nil {
		t.Fatal("record on a read-only filesystem succeeded")
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, ""); err != nil {
		t.Fatalf("remount read-write: %v", err)
	}
	kept := foundedID(2)
	if err := ff.record(kept, now.Add(time.Second)); err != nil {
		t.Fatalf("record once the filesystem is writable again: %v", err)
	}
	ff.close()
	if ids, _ := readBack(t, path, time.Now()); !idsHold(ids, kept) {
		t.Errorf("the session recorded once the filesystem was writable again is not read back")
	}
}

// TestFoundedDegradedStartThenRotation (held): both generations are
// there (.old from four minutes ago, the current one from one), the
// agent starts on a full disk (degraded), the room comes back, it
// records, and rotates a settledFor later. A restart right after reads
// back every session founded within settledFor: the one recorded while
// degraded (now in .old) and the one after the rotation.
func TestFoundedDegradedStartThenRotation(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	dir := testsupport.Tmpfs(t, "64k")
	path := filepath.Join(dir, "founded-agent-b")
	t0 := time.Now()
	testsupport.RequireNoError(t, os.WriteFile(foundedOld(path), []byte(foundedLine(foundedID(1), t0.Add(-4*time.Minute))), 0o600))
	testsupport.RequireNoError(t, os.WriteFile(path, []byte(foundedLine(foundedID(2), t0.Add(-time.Minute))), 0o600))
	free := testsupport.FillFS(t, dir, 0)
	ff, ids, _, err := openFounded(path, t0)
	if err != nil {
		t.Fatal(err)
	}
	defer ff.close()
	if ff.degraded == nil || !idsHold(ids, foundedID(1)) || !idsHold(ids, foundedID(2)) {
		t.Fatalf("degraded start: degraded %v, %d ids", ff.degraded, len(ids))
	}
	free()
	mustRecord(t, ff, foundedID(3), t0.Add(30*time.Second))
	mustRecord(t, ff, foundedID(4), t0.Add(settledFor+time.Second))
	ff.close()
	got, _ := readBack(t, path, t0.Add(settledFor+2*time.Second))
	for _, b := range []byte{3, 4} {
		if !idsHold(got, foundedID(b)) {
			t.Errorf("session %d, founded within settledFor, is not read back after the rotation", b)
		}
	}
}

// TestFoundedReadOnlyStartRecordsOnceWritable (held): both generations
// are there and the filesystem is read-only when the agent starts: it
// starts degraded with no file open (EROFS), records fail while it
// stays so, and once it is writable again the next record goes to the
// current file, read back with the ids from before.
func TestFoundedReadOnlyStartRecordsOnceWritable(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	dir := testsupport.Tmpfs(t, "64k")
	path := filepath.Join(dir, "founded-agent-b")
	t0 := time.Now()
	testsupport.RequireNoError(t, os.WriteFile(foundedOld(path), []byte(foundedLine(foundedID(1), t0.Add(-4*time.Minute))), 0o600))
	testsupport.RequireNoError(t, os.WriteFile(path, []byte(foundedLine(foundedID(2), t0.Add(-time.Minute))+"0123"), 0o600))
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	ff, ids, _, err := openFounded(path, t0)
	if err != nil {
		t.Fatalf("open on a read-only filesystem: %v", err)
	}
	defer ff.close()
	if ff.degraded == nil || ff.f != nil || !idsHold(ids, foundedID(1)) || !idsHold(ids, foundedID(2)) {
		t.Fatalf("read-only start: degraded %v, file open %v, %d ids", ff.degraded, ff.f != nil, len(ids))
	}
	if err := ff.record(foundedID(3), t0); err == nil {
		t.Fatal("record on a read-only filesystem succeeded")
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, ""); err != nil {
		t.Fatalf("remount read-write: %v", err)
	}
	mustRecord(t, ff, foundedID(4), t0.Add(time.Second))
	ff.close()
	got, _ := readBack(t, path, t0.Add(2*time.Second))
	for _, b := range []byte{1, 2, 4} {
		if !idsHold(got, foundedID(b)) {
			t.Errorf("session %d is not read back", b)
		}
	}
}

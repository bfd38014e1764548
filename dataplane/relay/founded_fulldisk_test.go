package relay

// The founded sessions file on a filesystem that fills up, made for real:
// a small tmpfs in a private mount namespace of a child test process.
//
// Found and written by review (helper-92).

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestFoundedRecordAfterAFullDiskIsReadBack: the founded sessions file
// fills its first page (77 lines of 53 bytes leave 15 free), then the
// filesystem is full. The next record fails (ENOSPC), as it may: its
// error is logged and the session goes on unrecorded. But the write was
// short: 15 bytes of that line stay in the file, with no newline. Space
// comes back; the record after succeeds, and is appended to the torn
// line. A restarted agent then skips the glued line as one that does
// not parse: the session it reported as recorded is not read back, so
// the new process would found it again and deliver its bytes twice.
// It did so (record appended after a short write without ending or
// cutting the torn part); now the part is cut back off, or the next
// record starts a line of its own.
func TestFoundedRecordAfterAFullDiskIsReadBack(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	dir := testsupport.Tmpfs(t, "64k")
	path := filepath.Join(dir, "founded-agent-b")
	t0 := time.Now().Add(-time.Minute)
	ff := mustOpenFounded(t, path, t0)
	defer ff.close()
	const perPage = 4096 / 53
	for i := range perPage {
		mustRecord(t, ff, foundedID(byte(i)), t0.Add(time.Duration(i)*time.Millisecond))
	}
	free := testsupport.FillFS(t, dir, 0)
	torn := foundedID(200)
	err := ff.record(torn, t0.Add(time.Second))
	if err == nil {
		t.Fatal("record on a full filesystem succeeded; the test did not make ENOSPC")
	}
	t.Logf("record on the full filesystem: %v", err)
	free()
	kept := foundedID(210)
	mustRecord(t, ff, kept, t0.Add(2*time.Second))
	ff.close()

	raw, _ := os.ReadFile(path)
	ids, bad := readBack(t, path, time.Now())
	if !idsHold(ids, kept) {
		t.Errorf("the session recorded (record returned nil) after space came back is not read back by a restarted agent "+
			"(%d ids, %d lines that do not parse); the file ends:\n%s", len(ids), bad, tail(raw, 3*53))
	}
	if !idsHold(ids, foundedID(perPage-1)) {
		t.Errorf("a session recorded before the disk filled is not read back")
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return fmt.Sprintf("%q", b)
}

// TestFoundedAgentStartsOnAFullDisk: a server-side agent restarts (the
// daemon restarted, or systemd restarted it) while the filesystem of its
// founded sessions file is full, a minute after it founded a session.
// openFounded must write a new generation holding the ids it read back
// before the listeners open, and on a full disk it cannot: Start fails
// and the agent, so the daemon, serves no traffic at all until an
// operator frees space, although the file it would rewrite is intact
// and a running agent carries on when a record cannot be written
// (recordFounded only logs). The failed write also leaves a torn
// <file>.new behind. Start returned "founded sessions file: write
// .../founded-agent-b.new: no space left on device"; now the agent
// starts, recording to the file as it found it, and says so.
func TestFoundedAgentStartsOnAFullDisk(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	dir := testsupport.Tmpfs(t, "64k")
	path := filepath.Join(dir, "founded-agent-b")
	t0 := time.Now().Add(-time.Minute)
	ff := mustOpenFounded(t, path, t0)
	for i := range 20 {
		mustRecord(t, ff, foundedID(byte(i)), t0)
	}
	ff.close()
	free := testsupport.FillFS(t, dir, 0)
	defer free()
	a, err := startFoundedAgent(t, path, netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Errorf("agent start on a full disk: %v", err)
	} else {
		defer a.Shutdown(context.Background())
		if !settledFounded(a, 3) {
			t.Errorf("the agent started on a full disk does not hold the session founded a minute ago as founded")
		}
	}
	if fi, err := os.Stat(path + ".new"); err == nil {
		t.Errorf("left behind: %s (%d bytes)", path+".new", fi.Size())
	}
	if ids, _, err := readFounded(path, time.Now()); err != nil || !idsHold(ids, foundedID(3)) {
		t.Errorf("the founded sessions file lost the session founded a minute ago (%d ids, %v)", len(ids), err)
	}
}

// TestFoundedSessionsCarryOnWhileTheDiskIsFull (held): the server-side
// agent's founded sessions file is on a filesystem that fills while it
// runs. Sessions founded meanwhile are carried whole; that they could
// not be recorded is logged, naming the file and the full disk, a
// bounded number of times rather than once per session; and once the
// room is back the sessions founded after are recorded again.
func TestFoundedSessionsCarryOnWhileTheDiskIsFull(t *testing.T) {
	if !testsupport.InPrivateMounts(t) {
		return
	}
	dir := testsupport.Tmpfs(t, "64k")
	path := filepath.Join(dir, "founded-agent-b")
	log, logs := infoLogger(t)
	p := startPair(t, pairOptions{streams: 2, chunk: 1000, queue: 2, logger: log,
		configB: func(cfg *Config) { cfg.FoundedFile = path }}, echo)
	want := []byte(strings.Repeat("full disk ", 2000))
	echoOnce(t, p, want)
	free := testsupport.FillFS(t, dir, 0)
	const sessions = 100 // more than a page of lines: tmpfs fills a page it has
	for range sessions {
		echoOnce(t, p, want)
	}
	failures := strings.Count(logs.String(), "cannot record a founded session")
	if failures == 0 || failures > 3 {
		t.Errorf("%d sessions founded on a full disk logged %d record failures; want some, and not one per session", sessions, failures)
	}
	if !strings.Contains(logs.String(), path) || !strings.Contains(logs.String(), "no space left on device") {
		t.Errorf("the record failures do not name %s and the full disk", path)
	}
	free()
	before, _ := os.ReadFile(path)
	echoOnce(t, p, want)
	after, _ := os.ReadFile(path)
	if len(after) <= len(before) {
		t.Errorf("a session founded once the room is back is not recorded (%d bytes before, %d after)", len(before), len(after))
	}
}

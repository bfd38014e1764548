package relay

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/stripe"
)

// The settled ids (settled.go) keep a session the server side founded from
// being founded again by a fresh hello, but they live in the process. A
// far agent that founds a pooled session, delivers its first bytes to the
// server and ends before anything of it reached the client side leaves
// that client side unsure whether the session was founded; it founds it
// again (refound), and the process that replaced the far agent, knowing
// nothing of it, would deliver those bytes a second time. So the server
// side also writes each session id it founds to a file
// (Config.FoundedFile) before the session reaches the server, and a
// restarted agent reads the ids of the last settledFor back as founded.
//
// The file holds one line per session, "<32 hex digits> <unix ns>", in
// the order they were founded. A plain write suffices: it must outlive
// the process, which the page cache does; a machine that crashes takes
// the server's connection with it. Every settledFor the file moves to
// <file>.old (replacing the one before) and a new one starts, so the two
// hold at least the last settledFor and at most twice that.

// foundedFile is the open file of founded session ids.
type foundedFile struct {
	mu     sync.Mutex
	path   string
	f      *os.File
	opened time.Time
	closed bool
	// torn: the file may end in part of a line (a write cut short by
	// a full disk, and not cut back): the next record starts a line of
	// its own, or it would be glued to that part and not read back.
	torn bool
	// degraded is why the generation openFounded should have started
	// was not (a full or read-only disk): it appends to the file as it
	// found it. Nil when it started one.
	degraded error
}

// foundedOld is the name the previous generation of path moves to.
func foundedOld(path string) string { return path + ".old" }

// openFounded reads the ids founded within settledFor before now from
// path and its previous generation, then starts a new generation that
// holds them (making its directory if need be): however often the agent
// restarts, the ids of the last settledFor are in the current file. A
// line that does not parse is skipped and counted in bad; a file that
// cannot be read is an error.
//
// A new generation that cannot be written (a full disk, a read-only
// one) leaves the files as they are, both read at the next start, and
// the agent appends to the current one (ff.degraded says why): an agent
// that runs on when a record cannot be written must start too, or a
// restart would turn a full disk into an outage.
func openFounded(path string, now time.Time) (ff *foundedFile, ids []settledAt, bad int, err error) {
	for _, p := range []string{foundedOld(path), path} {
		got, b, err := readFounded(p, now)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("founded sessions file %s: %w", p, err)
		}
		ids = keepLast(append(ids, got...))
		bad += b
	}
	ff = &foundedFile{path: path, opened: now}
	if ff.degraded = newGeneration(path, ids); ff.degraded != nil {
		// ff.f stays nil if even this fails: record opens it again.
		_ = ff.reopen()
		return ff, ids, bad, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK|os.O_APPEND, 0)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("founded sessions file: %w", err)
	}
	ff.f = f
	return ff, ids, bad, nil
}

// newGeneration writes ids to path as its new generation and removes
// the previous one. The new generation is written whole and then put
// in place: a crash, or a write that fails, leaves the files as they
// were.
func newGeneration(path string, ids []settledAt) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("founded sessions file: %w", err)
	}
	var b strings.Builder
	for _, e := range ids {
		b.WriteString(foundedLine(e.id, e.at))
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("founded sessions file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("founded sessions file: %w", err)
	}
	if err := os.Remove(foundedOld(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("founded sessions file: %w", err)
	}
	return nil
}

// readFounded reads one generation; a missing file holds nothing.
// Anything but a regular file there is an error: a read-only open
// of a FIFO would wait for a writer (it opens without blocking).
func readFounded(path string, now time.Time) (ids []settledAt, bad int, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, 0, err
	} else if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s is not a regular file (%s): remove it", path, fi.Mode().Type())
	}
	r := bufio.NewReader(f)
	for {
		line, long, err := r.ReadLine()
		if err == io.EOF {
			return ids, bad, nil
		}
		if err != nil {
			return nil, 0, err
		}
		if long {
			// Not a line this file holds: skip the rest of it.
			for long && err == nil {
				_, long, err = r.ReadLine()
			}
			bad++
			continue
		}
		if len(line) == 0 {
			// The newline a record cut short wrote before itself,
			// to end a torn one, when cutting it back failed.
			continue
		}
		id, at, ok := parseFounded(string(line))
		if !ok {
			bad++
			continue
		}
		if at.After(now) {
			// The wall clock stepped back since (the settled ids
			// keep time by the monotonic clock): as if just now.
			at = now
		}
		if now.Sub(at) <= settledFor {
			ids = keepLast(append(ids, settledAt{id: id, at: at}))
		}
	}
}

// keepLast keeps the newest settledMax of ids once they grow past twice
// that: the settled ids hold no more (settledIDs.add).
func keepLast(ids []settledAt) []settledAt {
	if len(ids) < 2*settledMax {
		return ids
	}
	return append(ids[:0], ids[len(ids)-settledMax:]...)
}

// foundedLine is the line that records id founded at at.
func foundedLine(id stripe.SessionID, at time.Time) string {
	return hex.EncodeToString(id[:]) + " " + strconv.FormatInt(at.UnixNano(), 10) + "\n"
}

func parseFounded(line string) (id stripe.SessionID, at time.Time, ok bool) {
	h, ns, found := strings.Cut(line, " ")
	if !found || len(h) != 2*len(id) {
		return id, at, false
	}
	if _, err := hex.Decode(id[:], []byte(h)); err != nil {
		return id, at, false
	}
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil || n <= 0 {
		return id, at, false
	}
	return id, time.Unix(0, n), true
}

// rotate moves the current generation to .old and starts a new one.
func (ff *foundedFile) rotate(now time.Time) error {
	if ff.f != nil {
		_ = ff.f.Close()
		ff.f = nil
	}
	if err := os.Rename(ff.path, foundedOld(ff.path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("founded sessions file: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(ff.path), 0o750); err != nil {
		return fmt.Errorf("founded sessions file: %w", err)
	}
	f, err := os.OpenFile(ff.path, os.O_WRONLY|syscall.O_NONBLOCK|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("founded sessions file: %w", err)
	}
	ff.f, ff.opened, ff.torn = f, now, false
	return nil
}

// record writes that id was founded at now; the error, if any, is the
// caller's to log: the session goes on without the record.
func (ff *foundedFile) record(id stripe.SessionID, now time.Time) error {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if ff.closed {
		return errors.New("founded sessions file closed")
	}
	switch {
	case now.Sub(ff.opened) >= settledFor:
		if err := ff.rotate(now); err != nil {
			return err
		}
	case ff.f == nil || !ff.inPlace():
		// Removed or replaced under the agent (or a reopen failed):
		// records written to the file it holds would be read by
		// nobody. Open the path again; the generation is not due, so
		// .old keeps what it holds.
		if err := ff.reopen(); err != nil {
			return err
		}
	}
	line, wasTorn := foundedLine(id, now), ff.torn
	if wasTorn {
		line = "\n" + line
	}
	n, err := ff.f.WriteString(line)
	switch {
	case err == nil:
		ff.torn = false
	case n > 0:
		// Cut short (a full disk): cut the part back off, which
		// leaves the file as it was (torn or not), or mark it for the
		// next record to end.
		ff.torn = wasTorn || !ff.cutBack(int64(n))
	}
	return err
}

// cutBack removes the last n bytes of the file, a write's part.
func (ff *foundedFile) cutBack(n int64) bool {
	fi, err := ff.f.Stat()
	return err == nil && fi.Size() >= n && ff.f.Truncate(fi.Size()-n) == nil
}

// endsInPart reports whether the file at path ends in part of a line.
func endsInPart(path string) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return false
	}
	last := make([]byte, 1)
	_, err = f.ReadAt(last, fi.Size()-1)
	return err != nil || last[0] != '\n'
}

// inPlace reports whether the path still names the file ff writes (a
// stat of each per session founded, a few microseconds).
func (ff *foundedFile) inPlace() bool {
	held, err := ff.f.Stat()
	if err != nil {
		return false
	}
	named, err := os.Stat(ff.path)
	return err == nil && os.SameFile(held, named)
}

// reopen opens the path again for appending, keeping the generation's
// age: what the file held is gone with it.
func (ff *foundedFile) reopen() error {
	if ff.f != nil {
		_ = ff.f.Close()
		ff.f = nil
	}
	// Its directory too: a start on a read-only disk could not make it.
	if err := os.MkdirAll(filepath.Dir(ff.path), 0o750); err != nil {
		return fmt.Errorf("founded sessions file: %w", err)
	}
	f, err := os.OpenFile(ff.path, os.O_WRONLY|syscall.O_NONBLOCK|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("founded sessions file: %w", err)
	}
	ff.f, ff.torn = f, endsInPart(ff.path)
	return nil
}

// openFoundedLocked opens path and settles the ids it read as founded
// at their time.
func (a *Agent) openFoundedLocked(path string) error {
	ff, ids, bad, err := openFounded(path, time.Now())
	if err != nil {
		return err
	}
	for _, e := range ids {
		a.settled.add(e.id, true, e.at)
	}
	a.founded = ff
	if ff.degraded != nil {
		a.log.Warn("relay: cannot start a new generation of the founded sessions file; recording to the one there is (free space on its disk)",
			"file", path, "err", ff.degraded)
	}
	if bad > 0 {
		a.log.Warn("relay: lines of the founded sessions file that do not parse were skipped", "file", path, "lines", bad)
	}
	a.log.Info("relay: founded sessions read back", "file", path, "sessions", len(ids))
	return nil
}

// recordFounded writes that s is founded here before it reaches its
// server; a failed write is logged and the session goes on.
func (a *Agent) recordFounded(s *session) {
	if a.founded == nil {
		return
	}
	if err := a.founded.record(s.id, time.Now()); err != nil {
		a.limited.log(a.log, "founded-file", "relay: cannot record a founded session; a restart within minutes could found it again",
			"file", a.founded.path, "err", err)
	}
}

func (ff *foundedFile) close() {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	ff.closed = true
	if ff.f != nil {
		_ = ff.f.Close()
		ff.f = nil
	}
}

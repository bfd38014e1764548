package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"
)

// The state database holds the only record of the values the host had
// before the appliance changed them, so a damaged file must be an error
// that names it, never a crash (every command, rollback included, would
// die on it) and never an empty database (the next apply would record the
// appliance's own values as the host's). bbolt maps the file and trusts
// it: a file shorter than its meta page says faults the process with
// SIGBUS when a page past the end is read, and garbage in a page panics.
// So Open looks at the file before bbolt does, and reads every page once,
// under a recover, before anything else reads it.

// CorruptError reports a state database that cannot be read as one.
type CorruptError struct {
	Path   string
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("state database %s is damaged: %s; the values it recorded before the appliance changed the host "+
		"cannot be read from it: restore it from a backup, or move it away to start a new one (rollback then has nothing to restore)",
		e.Path, e.Reason)
}

// ErrNoDatabase is wrapped by Open's error when Options.MustExist is set
// and there is no file at the path.
var ErrNoDatabase = errors.New("no state database")

// bbolt's meta page: a 16-byte page header, then magic, version, page size,
// flags (4 bytes each), the root bucket (16), the freelist's page, the high
// water mark (the page count) and the transaction id (8 each), and an FNV-1a
// checksum of all of it before the checksum, in the machine's byte order.
const (
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	metaStart       = 16
	metaPageSize    = metaStart + 8
	metaRoot        = metaStart + 16
	metaFreelist    = metaStart + 32
	metaPgid        = metaStart + 40
	metaTxid        = metaStart + 48
	metaChecksum    = metaStart + 56
	metaBytesNeeded = metaChecksum + 8
)

// boltMeta is what checkFile reads of one meta page.
type boltMeta struct {
	pageSize uint32
	pages    uint64 // the high water mark
	txid     uint64
	root     uint64 // the root bucket's page
	freelist uint64 // the free list's page, or noFreelist
}

// readMeta reads the meta page at off; ok is false if it is not a valid one.
func readMeta(f *os.File, off int64) (boltMeta, bool) {
	b := make([]byte, metaBytesNeeded)
	if _, err := f.ReadAt(b, off); err != nil {
		return boltMeta{}, false
	}
	ne := binary.NativeEndian
	if ne.Uint32(b[metaStart:]) != boltMagic || ne.Uint32(b[metaStart+4:]) != boltVersion {
		return boltMeta{}, false
	}
	h := fnv.New64a()
	h.Write(b[metaStart:metaChecksum])
	if h.Sum64() != ne.Uint64(b[metaChecksum:]) {
		return boltMeta{}, false
	}
	return boltMeta{pageSize: ne.Uint32(b[metaPageSize:]), pages: ne.Uint64(b[metaPgid:]), txid: ne.Uint64(b[metaTxid:]),
		root: ne.Uint64(b[metaRoot:]), freelist: ne.Uint64(b[metaFreelist:])}, true
}

// openStateFile opens the state database at path with flag and perm,
// refusing anything but a regular file with an error that names what it
// is. It opens without blocking: a read-only open of a FIFO waits for a
// writer, and held every command, and the daemon's start, for good.
func openStateFile(path string, flag int, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|unix.O_NONBLOCK, perm)
	if err != nil {
		// A socket cannot be opened, and a directory not for writing.
		if fi, serr := os.Stat(path); serr == nil && !fi.Mode().IsRegular() {
			return nil, &NotAFileError{Path: path, Mode: fi.Mode()}
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &NotAFileError{Path: path, Mode: fi.Mode()}
	}
	return f, nil
}

// NotAFileError reports something other than a regular file at the state
// database's path.
type NotAFileError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotAFileError) Error() string {
	return fmt.Sprintf("state database %s is %s, not a file (daemon.state_path names the file sosappliance keeps its records in: remove what is there, or name another path)", e.Path, fileKind(e.Mode))
}

// fileKind names what a file that is not a regular one is.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "something other than a regular file (" + m.Type().String() + ")"
}

// checkFile looks at an existing file before bbolt maps it: it must not
// be empty, and it must be as long as the meta page bbolt will use says.
// It waits, up to timeout, for a process that holds the database to let
// go first (bbolt's flock): one creating it has it empty or short for a
// moment. A file whose meta pages are both invalid is left to bbolt, which
// refuses it with an error; anything but a regular file is a
// *NotAFileError.
//
// checked is the file it looked at (nil when there is none): the opens
// after it must find that file at the path, or start over (errMoved).
func checkFile(path string, mustExist bool, timeout time.Duration) (checked fs.FileInfo, freelistStored bool, err error) {
	f, err := openStateFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		if mustExist {
			return nil, false, fmt.Errorf("%w at %s", ErrNoDatabase, path)
		}
		return nil, false, nil
	}
	if _, ok := err.(*NotAFileError); ok {
		return nil, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("open state database %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("open state database %s: %w", path, err)
	}
	if err := sharedFlock(f, timeout); err != nil {
		return nil, false, &InUseError{Path: path, PID: lockHolder(path)}
	}
	if fi, err = f.Stat(); err != nil {
		return nil, false, fmt.Errorf("open state database %s: %w", path, err)
	}
	// An empty or half-made file nobody holds may be one a first open
	// has just made, a moment before it takes the lock, or one whose
	// first write failed, a moment before its maker removes it: it is
	// looked at again after a while (the lock is then the maker's until
	// the file is whole, or the file is gone) before it is called
	// damaged.
	for wait := 10 * time.Millisecond; (fi.Size() == 0 || unfinished(f, fi.Size())) && wait <= 160*time.Millisecond; wait *= 2 {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		time.Sleep(wait)
		if err := sharedFlock(f, timeout); err != nil {
			return nil, false, &InUseError{Path: path, PID: lockHolder(path)}
		}
		if fi, err = f.Stat(); err != nil {
			return nil, false, fmt.Errorf("open state database %s: %w", path, err)
		}
		if named, err := os.Stat(path); err != nil || !os.SameFile(fi, named) {
			return nil, false, errMoved // its maker removed it
		}
	}
	if named, err := os.Stat(path); err != nil || !os.SameFile(fi, named) {
		return nil, false, errMoved // replaced or removed while this waited
	}
	stored, err := checkLength(f, fi, path)
	return fi, stored, err
}

// sharedFlock takes bbolt's lock shared, waiting up to timeout.
func sharedFlock(f *os.File, timeout time.Duration) error {
	return flockWait(f, unix.LOCK_SH, timeout)
}

// flockWait takes bbolt's lock on f (how: unix.LOCK_SH or LOCK_EX),
// waiting up to timeout: bolterrors.ErrTimeout after it.
func flockWait(f *os.File, how int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return err
		}
		if time.Now().After(deadline) {
			return bolterrors.ErrTimeout
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkLength is checkFile's look at a regular file it holds.
func checkLength(f *os.File, fi os.FileInfo, path string) (freelistStored bool, err error) {
	if fi.Size() == 0 {
		return false, &CorruptError{Path: path, Reason: "the file is empty (0 bytes)"}
	}
	m0, ok0 := readMeta(f, 0)
	var m1 boltMeta
	ok1 := false
	if ok0 {
		m1, ok1 = readMeta(f, int64(m0.pageSize))
	} else {
		// The second meta page is where bbolt looks for it when the
		// first is damaged: at each size from 1 KiB to 16 MiB.
		for i := range 15 {
			pos := int64(1024) << i
			if pos >= fi.Size()-1024 {
				break
			}
			if m1, ok1 = readMeta(f, pos); ok1 {
				break
			}
		}
	}
	m := m0
	switch {
	case ok0 && ok1 && m1.txid > m0.txid, !ok0 && ok1:
		m = m1
	case !ok0 && !ok1:
		if fi.Size() < int64(os.Getpagesize())*2 {
			return false, &CorruptError{Path: path, Reason: fmt.Sprintf("it is %d bytes, shorter than a database's first two pages", fi.Size())}
		}
		return true, nil
	}
	if m.pageSize < 512 || m.pages > uint64(fi.Size()) {
		return false, &CorruptError{Path: path, Reason: fmt.Sprintf("its header says %d pages of %d bytes", m.pages, m.pageSize)}
	}
	if need := int64(m.pages) * int64(m.pageSize); fi.Size() < need {
		return false, &CorruptError{Path: path, Reason: fmt.Sprintf("it is truncated: %d bytes, where its header says %d pages of %d (%d bytes)",
			fi.Size(), m.pages, m.pageSize, need)}
	}
	return m.freelist != noFreelist, walkPages(f, m, path)
}

// guarded runs fn and turns a panic or a memory fault in it (bbolt
// reading a damaged page) into a *CorruptError.
func guarded(path string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = &CorruptError{Path: path, Reason: fmt.Sprint(r)}
		}
	}()
	return fn()
}

// verify opens the database read-only (bbolt then rebuilds no free list
// of its own, in a goroutine no recover reaches), reads every page once in
// this goroutine and has bbolt check the pages' bookkeeping (a free list
// naming a live page makes the next write panic), all under guarded.
func verify(path string, timeout time.Duration, freelistStored bool, checked fs.FileInfo) error {
	var db *bolt.DB
	err := guarded(path, func() error {
		var err error
		db, err = openBolt(path, bolt.Options{Timeout: timeout, ReadOnly: true}, func(f *os.File) error {
			return lockChecked(f, path, timeout, unix.LOCK_SH, checked)
		})
		if err != nil {
			return err
		}
		if err := readAll(db); err != nil {
			return err
		}
		if !freelistStored {
			// Check rebuilds such a free list with a goroutine that, on
			// damage, dereferences nil or faults; walkPages checked what
			// it would.
			return nil
		}
		return db.View(func(tx *bolt.Tx) error {
			var first error
			for err := range tx.Check() {
				if first == nil {
					first = &CorruptError{Path: path, Reason: err.Error()}
				}
			}
			return first
		})
	})
	if db != nil {
		db.Close()
	}
	return err
}

// readAll reads every page of the database once: every bucket, nested or
// not, and both ends of every value (a value's bytes past its first page
// are on overflow pages).
func readAll(db *bolt.DB) error {
	var sink byte
	err := db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error { return readBucket(b, &sink) })
	})
	runtime.KeepAlive(sink)
	return err
}

func readBucket(b *bolt.Bucket, sink *byte) error {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v == nil {
			if nb := b.Bucket(k); nb != nil {
				if err := readBucket(nb, sink); err != nil {
					return err
				}
			}
			continue
		}
		if len(v) > 0 {
			*sink ^= v[0] ^ v[len(v)-1]
		}
	}
	return nil
}

// Package store keeps the appliance's own state in a bbolt database: the
// state serial, every item the appliance owns with its desired value and the
// value it had before the appliance first touched it, and the history of
// applies. It is the only package that uses bbolt.
package store

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/sosappliance/sosappliance/internal/filetrust"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"
)

// DefaultLockTimeout bounds how long Open waits for another process that has
// the database open. It stays well under two seconds so that a second
// sosappliance invocation fails fast with a clear message instead of hanging.
const DefaultLockTimeout = time.Second

// Results of a history entry.
const (
	// ResultIncomplete is written when an apply starts. An entry still
	// saying so after its process is gone records an apply that was killed
	// or crashed; the items bucket then says exactly which items it applied.
	ResultIncomplete = "incomplete"
	ResultOK         = "ok"
	ResultFailed     = "failed"
)

// Options tune Open.
type Options struct {
	// LockTimeout is how long to wait for a database held by another
	// process; zero means DefaultLockTimeout.
	LockTimeout time.Duration
	// MustExist refuses to create the database: Open fails with an error
	// wrapping ErrNoDatabase when there is no file (rollback, which has
	// nothing to restore from a new one, and a daemon whose database went).
	MustExist bool
}

// Store is an open state database. Its methods are safe for concurrent use;
// each one is its own bbolt transaction, so every recorded step is durable
// once the method returns.
type Store struct {
	db      *bolt.DB
	path    string
	lineage string
}

// Record is one item the appliance owns.
type Record struct {
	Kind string `json:"kind"`
	Key  string `json:"key"`
	// Previous is the value the item had before the appliance first touched
	// it; PreviousPresent is false when the object did not exist then.
	// Neither is ever overwritten while the record lives.
	Previous        string `json:"previous"`
	PreviousPresent bool   `json:"previous_present"`
	// Desired is the value the latest apply set or was setting.
	Desired string `json:"desired"`
	// Applied is true once Desired is known to be on the host; false while
	// an apply is between recording the item and finishing it.
	Applied bool `json:"applied"`
	// FirstSerial is the apply that recorded Previous; Serial the apply that
	// last wrote Desired.
	FirstSerial uint64    `json:"first_serial"`
	Serial      uint64    `json:"serial"`
	Updated     time.Time `json:"updated"`
}

// ID matches item.Item.ID.
func (r Record) ID() string { return r.Kind + "/" + r.Key }

// HistoryChange is one change as recorded in history.
type HistoryChange struct {
	Action        string `json:"action"`
	Kind          string `json:"kind"`
	Key           string `json:"key"`
	Before        string `json:"before,omitempty"`
	BeforePresent bool   `json:"before_present"`
	After         string `json:"after,omitempty"`
	AfterPresent  bool   `json:"after_present"`
}

// HistoryEntry is one apply or rollback.
type HistoryEntry struct {
	Serial     uint64          `json:"serial"`
	Operation  string          `json:"operation"`
	Node       string          `json:"node"`
	ConfigHash string          `json:"config_hash,omitempty"`
	PID        int             `json:"pid"`
	Started    time.Time       `json:"started"`
	Finished   time.Time       `json:"finished,omitzero"`
	Changes    []HistoryChange `json:"changes"`
	Result     string          `json:"result"`
	Error      string          `json:"error,omitempty"`
}

// InUseError reports that another process holds the database open.
type InUseError struct {
	Path string
	// PID of the holder, 0 when it could not be found.
	PID int
}

func (e *InUseError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("state database is in use by pid %d (%s)", e.PID, e.Path)
	}
	return fmt.Sprintf("state database is in use by another process (%s)", e.Path)
}

// StaleError reports that the state moved on since a plan was made.
type StaleError struct {
	PlanSerial, StateSerial uint64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("plan is stale: it was made at state serial %d but the state is now at serial %d; run plan again",
		e.PlanSerial, e.StateSerial)
}

// Open opens or creates the database at path (the configuration's
// daemon.state_path, which has the default), creating its directory.
// When another process has it open, Open gives up after the lock timeout
// with an *InUseError naming that process. A database, or a directory
// above it, that a user other than root (or the one running) can write is
// refused (package filetrust).
func Open(path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("state database: no path")
	}
	// What it records, apply and rollback write back to the host.
	if err := filetrust.Check("state database", path); err != nil {
		return nil, err
	}
	// Files are kept beside it (founded-<agent>, written as root): in a
	// directory others can add names to, theirs to plant (a symlink, a
	// FIFO that blocks the start).
	if dir, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		if st, err := os.Stat(dir); err == nil && st.Mode()&fs.ModeSticky != 0 && st.Mode().Perm()&0o022 != 0 {
			return nil, fmt.Errorf("state database %s: its directory %s is one every user can add files to (mode %04o, sticky), and sosappliance keeps its files beside it as root (keep it in a directory only root can write, such as /var/lib/sosappliance)", path, dir, st.Mode().Perm())
		}
	}
	timeout := opts.LockTimeout
	if timeout <= 0 {
		timeout = DefaultLockTimeout
	}
	// A file removed or replaced while bbolt waited for its lock is
	// checked and opened again.
	const attempts = 3
	for range attempts {
		db, err := openChecked(path, opts, timeout)
		if errors.Is(err, errMoved) {
			continue
		}
		if err != nil {
			return nil, err
		}
		s := &Store{db: db, path: path}
		if err := guarded(path, s.initSchema); err != nil {
			db.Close()
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("open state database %s: %w, %d times in a row", path, errMoved, attempts)
}

// openChecked checks the file at path (when there is one) and opens it
// with bbolt. It returns errMoved when the file bbolt locked is no longer
// the one path names.
func openChecked(path string, opts Options, timeout time.Duration) (*bolt.DB, error) {
	checked, freelistStored, err := checkFile(path, opts.MustExist, timeout)
	if err != nil {
		return nil, err
	}
	exists := checked != nil
	if exists {
		err := verify(path, timeout, freelistStored, checked)
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, &InUseError{Path: path, PID: lockHolder(path)}
		}
		var corrupt *CorruptError
		if err != nil && !errors.As(err, &corrupt) && !errors.Is(err, errMoved) {
			err = fmt.Errorf("open state database %s: %w", path, err)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("state database directory: %w", err)
	}
	var db *bolt.DB
	err = guarded(path, func() error {
		var err error
		db, err = openNamed(path, timeout, checked)
		return err
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, &InUseError{Path: path, PID: lockHolder(path)}
	}
	if errors.Is(err, errHalfMade) {
		// Another first open's file, which it failed to make whole: it
		// is removed (once that open lets go of it), and this open
		// starts over.
		removeUnfinished(path, unfinishedWait)
		return nil, errMoved
	}
	var corrupt *CorruptError
	if errors.As(err, &corrupt) || errors.Is(err, errMoved) {
		return nil, err
	}
	if err != nil {
		if !exists {
			removeUnfinished(path, unfinishedWait)
		}
		return nil, fmt.Errorf("open state database %s: %w", path, err)
	}
	return db, nil
}

// testHookOpened, when set, runs after bbolt opened the file, before its
// lock is taken (locked false) and after (true).
var testHookOpened func(path string, locked bool)

// errMoved: the file bbolt opened is no longer the one the path names,
// or was another first open's, which failed.
var errMoved = errors.New("the file changed while this open waited for its lock (another open made, removed or replaced it)")

// errHalfMade: a new database's file, shorter than the pages bbolt
// writes first, that another first open made and let go of (it failed).
var errHalfMade = errors.New("the file is another open's unfinished one")

// openNamed opens the database at path with bbolt. bbolt opens (or
// creates) the file and then waits for its lock, so the file it locks may
// not be the one checked (checkFile; nil: there was none): a first open
// that failed on a full disk removes the file it began
// (removeUnfinished), and this process would run on a database no later
// command sees; a file moved in place meanwhile would be opened
// unchecked. openNamed takes the lock itself as the file is opened
// (bbolt's own flock of the same open file then holds at once) and,
// holding it, refuses a file path no longer names or that is not the one
// checked (errMoved) and, for a new database, one another open left half
// made (errHalfMade), which bbolt would read past its end.
func openNamed(path string, timeout time.Duration, checked fs.FileInfo) (*bolt.DB, error) {
	return openBoltFile(path, bolt.Options{Timeout: timeout}, func(f *os.File) error {
		if testHookOpened != nil {
			testHookOpened(path, false)
		}
		if err := lockChecked(f, path, timeout, unix.LOCK_EX, checked); err != nil {
			return err
		}
		if checked == nil {
			// A new database: the file must be the empty one bbolt
			// makes. One another open left half made is removed; any
			// other was put there since this open looked, and is
			// checked first, as at any open.
			held, err := f.Stat()
			switch {
			case err != nil:
				return err
			case held.Size() > 0 && unfinished(f, held.Size()):
				return errHalfMade
			case held.Size() > 0:
				return errMoved
			}
		}
		if testHookOpened != nil {
			testHookOpened(path, true)
		}
		return nil
	}, checked == nil)
}

// openBolt opens path with bbolt, running check (when not nil) on the
// file as it is opened, before bbolt locks and reads it. A panic in bbolt
// (guarded reports it) left the file open and locked, and bbolt's mapping
// of it holds the lock past a close: the lock is let go of and the file
// closed before the panic goes on.
func openBolt(path string, o bolt.Options, check func(*os.File) error) (*bolt.DB, error) {
	return openBoltFile(path, o, check, true)
}

// openBoltFile is openBolt; with create false it never makes the file
// (bbolt's writable open would: a database removed since it was checked
// would leave an empty file that every later open refuses), and a file
// gone is errMoved.
func openBoltFile(path string, o bolt.Options, check func(*os.File) error, create bool) (*bolt.DB, error) {
	var opened *os.File
	defer func() {
		if r := recover(); r != nil {
			if opened != nil {
				_ = unix.Flock(int(opened.Fd()), unix.LOCK_UN)
				_ = opened.Close()
			}
			panic(r)
		}
	}()
	o.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		if !create {
			flag &^= os.O_CREATE
		}
		f, err := openStateFile(name, flag, perm)
		if !create && errors.Is(err, fs.ErrNotExist) {
			return nil, errMoved
		}
		if err != nil {
			return nil, err
		}
		opened = f
		if check != nil {
			if err := check(f); err != nil {
				opened = nil
				_ = f.Close()
				return nil, err
			}
		}
		return f, nil
	}
	return bolt.Open(path, 0o600, &o)
}

// lockChecked takes bbolt's lock on f (how: unix.LOCK_EX or LOCK_SH),
// waiting up to timeout, and then returns errMoved when f is not the file
// path names, or not the one checked (when there was one).
func lockChecked(f *os.File, path string, timeout time.Duration, how int, checked fs.FileInfo) error {
	if err := flockWait(f, how, timeout); err != nil {
		return err
	}
	held, err := f.Stat()
	if err != nil {
		return err
	}
	if named, err := os.Stat(path); err != nil || !os.SameFile(held, named) || (checked != nil && !os.SameFile(held, checked)) {
		return errMoved
	}
	return nil
}

// unfinished says whether a file of size bytes is one bbolt began and
// did not finish: shorter than the four pages it writes first.
//
// Only what bbolt on this machine leaves half made counts: a prefix of its
// first four pages (of this machine's page size, recording transactions 0
// and 1), so a whole meta page of another page size or of a later
// transaction, or a whole second meta page after a damaged first, is some
// other database (made elsewhere, cut short, or with its first meta page
// damaged), and is kept for the checks to judge.
func unfinished(f *os.File, size int64) bool {
	page := int64(os.Getpagesize())
	if size >= 4*page {
		return false
	}
	if m, ok := readMeta(f, 0); ok {
		// bbolt's first pages record transactions 0 and 1; a meta
		// page of a later one is a database's, however cut.
		if int64(m.pageSize) != page || m.txid > 1 {
			return false
		}
		m1, ok := readMeta(f, page)
		return !ok || m1.txid <= 1
	}
	// No first meta page: unfinished unless a second one is whole,
	// where bbolt looks for it (at each size from 1 KiB).
	for pos := int64(1024); pos+metaBytesNeeded <= size; pos <<= 1 {
		if _, ok := readMeta(f, pos); ok {
			return false
		}
	}
	return true
}

// unfinishedWait bounds how long removeUnfinished waits for the lock.
const unfinishedWait = 2 * time.Second

// removeUnfinished removes the file a failed first open left at path
// (or where its symlink points): bbolt creates it before it writes its
// first pages, and a full disk or a write error ends it shorter than
// those pages (empty, or cut). Left, every later command would refuse
// it as a damaged database whose records are lost, when it never
// recorded anything. It is removed holding bbolt's lock, so never while
// another process makes or uses it; a file of all those pages is kept:
// it is a database. The lock is waited for up to wait: a racing open may
// hold it a moment (checking the file, or failing to make it too), and
// a file left because of that moment is refused by every later open.
func removeUnfinished(path string, wait time.Duration) {
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return
	}
	f, err := openStateFile(target, os.O_RDONLY, 0)
	if err != nil {
		return
	}
	defer f.Close()
	isUnfinished := func() (fs.FileInfo, bool) {
		held, err := f.Stat()
		return held, err == nil && held.Mode().IsRegular() && unfinished(f, held.Size())
	}
	if _, ok := isUnfinished(); !ok {
		return
	}
	deadline := time.Now().Add(wait)
	for unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	held, ok := isUnfinished()
	if !ok {
		return
	}
	if named, err := os.Lstat(target); err != nil || !os.SameFile(held, named) {
		return
	}
	_ = os.Remove(target)
}

// initSchema creates the buckets and the lineage of a new database, brings
// an older schema up to SchemaVersion, and reads the lineage.
func (s *Store) initSchema() error {
	return s.update(func(tx *bolt.Tx) error {
		// A database with no bucket at all is new; one that has some must
		// have them all and say its version, or what it recorded is gone.
		fresh := true
		for _, b := range allBuckets {
			fresh = fresh && tx.Bucket(b) == nil
		}
		version := uint64(0) // a database initialised just now
		if meta := tx.Bucket(bucketMeta); meta != nil {
			if v := meta.Get(keySchemaVersion); v != nil {
				if len(v) != 8 {
					return &CorruptError{Path: s.path, Reason: "its schema version is not 8 bytes"}
				}
				version = binary.BigEndian.Uint64(v)
			}
		}
		if version > SchemaVersion {
			return fmt.Errorf("state database %s has schema version %d; this sosappliance understands up to %d",
				s.path, version, SchemaVersion)
		}
		if !fresh && version == 0 {
			return &CorruptError{Path: s.path, Reason: "it records no schema version"}
		}
		for _, b := range allBuckets {
			if !fresh && tx.Bucket(b) == nil {
				return &CorruptError{Path: s.path, Reason: fmt.Sprintf("its %q bucket is missing", b)}
			}
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return fmt.Errorf("create bucket %s: %w", b, err)
			}
		}
		meta := tx.Bucket(bucketMeta)
		if version < 2 {
			// New, or version 1 from before lineages: this open starts
			// the lineage.
			lineage, err := newLineage()
			if err != nil {
				return err
			}
			if err := meta.Put(keyLineage, []byte(lineage)); err != nil {
				return err
			}
		}
		if version < SchemaVersion {
			if err := meta.Put(keySchemaVersion, u64(SchemaVersion)); err != nil {
				return err
			}
		}
		lineage := string(meta.Get(keyLineage))
		if !validLineage(lineage) {
			return fmt.Errorf("state database %s: corrupt lineage %q", s.path, lineage)
		}
		s.lineage = lineage
		return nil
	})
}

// newLineage returns a random version 4 UUID.
func newLineage() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("state lineage: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

func validLineage(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range []byte(s) {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// update and view are the database's transactions, under guarded: a
// page damaged after Open checked the file (or in a way no check sees)
// makes bbolt panic, which is an error naming the file, not the end of
// the process.
func (s *Store) update(fn func(*bolt.Tx) error) error {
	return guarded(s.path, func() error { return s.db.Update(fn) })
}

func (s *Store) view(fn func(*bolt.Tx) error) error {
	return guarded(s.path, func() error { return s.db.View(fn) })
}

// Lineage names this state database for its whole life: a random UUID made
// when it was first initialised. A saved plan records it, and a plan made
// against another database's lineage is refused.
func (s *Store) Lineage() string { return s.lineage }

// Close releases the database and its lock.
func (s *Store) Close() error { return s.db.Close() }

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Serial is the current state serial; 0 for a database never applied to.
func (s *Store) Serial() (uint64, error) {
	var serial uint64
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		serial, err = readSerial(tx)
		return err
	})
	return serial, err
}

func readSerial(tx *bolt.Tx) (uint64, error) {
	v := tx.Bucket(bucketMeta).Get(keySerial)
	if v == nil {
		return 0, nil
	}
	if len(v) != 8 {
		return 0, errors.New("state database: corrupt serial")
	}
	return binary.BigEndian.Uint64(v), nil
}

// Records lists every owned item, sorted by kind and key.
func (s *Store) Records() ([]Record, error) {
	var out []Record
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketItems).ForEach(func(k, v []byte) error {
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("state database item %s: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Key < out[j].Key
	})
	return out, err
}

// Record returns one owned item.
func (s *Store) Record(kind, key string) (Record, bool, error) {
	var r Record
	var found bool
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		r, found, err = getRecord(tx, kind, key)
		return err
	})
	return r, found, err
}

func getRecord(tx *bolt.Tx, kind, key string) (Record, bool, error) {
	var r Record
	v := tx.Bucket(bucketItems).Get(itemKey(kind, key))
	if v == nil {
		return r, false, nil
	}
	if err := json.Unmarshal(v, &r); err != nil {
		return r, false, fmt.Errorf("state database item %s/%s: %w", kind, key, err)
	}
	return r, true, nil
}

func putRecord(tx *bolt.Tx, r Record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketItems).Put(itemKey(r.Kind, r.Key), v)
}

// BeginApply starts an apply or rollback: it checks that the state is still
// at planSerial, increases the serial and writes entry as the new history
// entry with ResultIncomplete. It returns the new serial. A *StaleError means
// the state moved on since the plan was made.
func (s *Store) BeginApply(planSerial uint64, entry HistoryEntry) (uint64, error) {
	var serial uint64
	err := s.update(func(tx *bolt.Tx) error {
		cur, err := readSerial(tx)
		if err != nil {
			return err
		}
		if cur != planSerial {
			return &StaleError{PlanSerial: planSerial, StateSerial: cur}
		}
		serial = cur + 1
		if err := tx.Bucket(bucketMeta).Put(keySerial, u64(serial)); err != nil {
			return err
		}
		entry.Serial = serial
		entry.Result = ResultIncomplete
		if entry.Started.IsZero() {
			entry.Started = time.Now().UTC()
		}
		if entry.PID == 0 {
			entry.PID = os.Getpid()
		}
		if err := putHistory(tx, entry); err != nil {
			return err
		}
		return pruneHistory(tx, serial)
	})
	return serial, err
}

// MaxHistory is how many history entries the database keeps: every drift
// the daemon corrects is an apply, so a process fighting the appliance
// over a setting would otherwise grow the file without bound.
const MaxHistory = 1000

// pruneHistory deletes the entries older than the newest MaxHistory.
func pruneHistory(tx *bolt.Tx, newest uint64) error {
	if newest <= MaxHistory {
		return nil
	}
	b := tx.Bucket(bucketHistory)
	var old [][]byte
	c := b.Cursor()
	for k, _ := c.First(); k != nil && len(k) == 8 && binary.BigEndian.Uint64(k) <= newest-MaxHistory; k, _ = c.Next() {
		old = append(old, slices.Clone(k))
	}
	for _, k := range old {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// FinishApply records the outcome of the apply at serial.
func (s *Store) FinishApply(serial uint64, result, errText string) error {
	return s.update(func(tx *bolt.Tx) error {
		e, err := getHistory(tx, serial)
		if err != nil {
			return err
		}
		e.Result = result
		e.Error = errText
		e.Finished = time.Now().UTC()
		return putHistory(tx, e)
	})
}

// Touch records that the apply at serial is about to set kind/key to
// desired. The first touch of an item records previous; later touches keep
// the recorded value, so what the host had before the appliance ever changed
// the item survives any number of applies and crashes.
func (s *Store) Touch(kind, key, previous string, previousPresent bool, desired string, serial uint64) (Record, error) {
	var r Record
	err := s.update(func(tx *bolt.Tx) error {
		var found bool
		var err error
		r, found, err = getRecord(tx, kind, key)
		if err != nil {
			return err
		}
		if !found {
			r = Record{Kind: kind, Key: key, Previous: previous, PreviousPresent: previousPresent, FirstSerial: serial}
		}
		r.Desired = desired
		r.Applied = false
		r.Serial = serial
		r.Updated = time.Now().UTC()
		return putRecord(tx, r)
	})
	return r, err
}

// MarkApplied records that kind/key now holds its desired value.
func (s *Store) MarkApplied(kind, key string) error {
	return s.update(func(tx *bolt.Tx) error {
		r, found, err := getRecord(tx, kind, key)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("state database: mark %s/%s applied: not recorded", kind, key)
		}
		r.Applied = true
		r.Updated = time.Now().UTC()
		return putRecord(tx, r)
	})
}

// Forget drops the record of kind/key once its previous value is back on the
// host (or there is nothing left to put back).
func (s *Store) Forget(kind, key string) error {
	return s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketItems).Delete(itemKey(kind, key))
	})
}

// History lists all applies and rollbacks, oldest first.
func (s *Store) History() ([]HistoryEntry, error) {
	var out []HistoryEntry
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketHistory).ForEach(func(k, v []byte) error {
			var e HistoryEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("state database history %x: %w", k, err)
			}
			out = append(out, e)
			return nil
		})
	})
	return out, err
}

// LastHistory returns the newest history entry.
func (s *Store) LastHistory() (HistoryEntry, bool, error) {
	var e HistoryEntry
	var found bool
	err := s.view(func(tx *bolt.Tx) error {
		k, v := tx.Bucket(bucketHistory).Cursor().Last()
		if k == nil {
			return nil
		}
		found = true
		return json.Unmarshal(v, &e)
	})
	return e, found, err
}

func getHistory(tx *bolt.Tx, serial uint64) (HistoryEntry, error) {
	var e HistoryEntry
	v := tx.Bucket(bucketHistory).Get(u64(serial))
	if v == nil {
		return e, fmt.Errorf("state database: no history entry for serial %d", serial)
	}
	if err := json.Unmarshal(v, &e); err != nil {
		return e, fmt.Errorf("state database history %d: %w", serial, err)
	}
	return e, nil
}

func putHistory(tx *bolt.Tx, e HistoryEntry) error {
	v, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketHistory).Put(u64(e.Serial), v)
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

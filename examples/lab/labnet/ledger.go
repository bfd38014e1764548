package labnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// DefaultStateDir holds one directory per lab: its ledger, config copy,
// key, logs and the private Open vSwitch. Like the namespaces, it does not
// survive a reboot in spirit: a ledger whose namespaces are gone is removed
// by the next Down.
const DefaultStateDir = "/run/sosappliance-lab"

const ledgerFile = "lab.json"

// Record is what a lab created, written to disk before each creation so
// that whoever tears the lab down (Down, a signal handler, `lab down` from
// another shell, or the next Up after a crash) can remove all of it.
type Record struct {
	ID  string `json:"id"`
	Dir string `json:"dir"`
	// Owner is the process that brought the lab up and will tear it down;
	// nil for a persistent lab (`lab up`), which only `lab down` removes.
	Owner      *ProcessRef `json:"owner,omitempty"`
	Created    time.Time   `json:"created"`
	WAN        WAN         `json:"wan"`
	Namespaces []string    `json:"namespaces"`
	// Processes are in start order; teardown stops them in reverse.
	Processes []ProcessRef `json:"processes"`
}

// Persistent reports whether the lab outlives the process that started it.
func (r *Record) Persistent() bool { return r.Owner == nil }

// Orphaned reports whether the lab's owner died without tearing it down.
func (r *Record) Orphaned() bool { return r.Owner != nil && !r.Owner.Alive() }

// ledger is the on-disk Record of one lab, saved after every change.
type ledger struct {
	mu   sync.Mutex
	path string
	rec  Record
}

func createLedger(dir string, rec Record) (*ledger, error) {
	l := &ledger{path: filepath.Join(dir, ledgerFile), rec: rec}
	return l, l.save()
}

func (l *ledger) save() error {
	data, err := json.MarshalIndent(&l.rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode ledger: %w", err)
	}
	tmp := l.path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("write ledger: %w", err)
	}
	if err := os.Rename(tmp, l.path); err != nil {
		return fmt.Errorf("write ledger: %w", err)
	}
	return nil
}

func (l *ledger) addNamespace(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rec.Namespaces = append(l.rec.Namespaces, name)
	return l.save()
}

func (l *ledger) addProcess(p ProcessRef) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rec.Processes = append(l.rec.Processes, p)
	return l.save()
}

func (l *ledger) removeProcess(p ProcessRef) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	kept := l.rec.Processes[:0]
	for _, q := range l.rec.Processes {
		if q != p {
			kept = append(kept, q)
		}
	}
	l.rec.Processes = kept
	return l.save()
}

func (l *ledger) snapshot() Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.rec
	r.Namespaces = append([]string(nil), l.rec.Namespaces...)
	r.Processes = append([]ProcessRef(nil), l.rec.Processes...)
	return r
}

// List returns the records of every lab under stateDir, oldest first.
func List(stateDir string) ([]Record, error) {
	entries, err := os.ReadDir(stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list labs: %w", err)
	}
	var recs []Record
	for _, e := range entries {
		// Names starting with a dot are labs still being created.
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		rec, err := readRecord(filepath.Join(stateDir, e.Name()))
		if err != nil {
			// A directory without a readable ledger is the remains of a lab
			// that crashed while creating it: still worth tearing down.
			rec = Record{ID: e.Name(), Dir: filepath.Join(stateDir, e.Name())}
		}
		recs = append(recs, rec)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Created.Before(recs[j].Created) })
	return recs, nil
}

func readRecord(dir string) (Record, error) {
	data, err := os.ReadFile(filepath.Join(dir, ledgerFile))
	if err != nil {
		return Record{}, err
	}
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return Record{}, fmt.Errorf("ledger %s: %w", dir, err)
	}
	rec.Dir = dir
	return rec, nil
}

package tuning

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/sosappliance/sosappliance/host/cpuset"
	"github.com/sosappliance/sosappliance/host/item"
)

// RelayCPUsFile is where, under the root, the relay CPU list is handed from
// apply to the relay. It is runtime state (/run), like the affinity of the
// relay process itself.
const RelayCPUsFile = "run/sosappliance/relay-cpus"

// Relay stores the CPU list the relay pins itself to. The relay runs inside
// the daemon, so apply cannot set its affinity from outside; it writes the
// list to Root/RelayCPUsFile, and the relay (dataplane/relay) pins its whole
// process to the same CPUs, from its Config.RelayCPUs, at start and on
// reload.
type Relay struct {
	Root string
}

// NewRelay returns the relay pinning executor for the host tree at root.
func NewRelay(root string) *Relay { return &Relay{Root: root} }

// Kind implements Executor.
func (r *Relay) Kind() string { return item.KindRelay }

func (r *Relay) path() string { return filepath.Join(r.Root, RelayCPUsFile) }

func checkRelayKey(key string) error {
	if key != item.RelayKeyCPUs {
		return fmt.Errorf("relay key %q: the only key is %q", key, item.RelayKeyCPUs)
	}
	return nil
}

// Observe reads the stored list; none stored is reported not present.
func (r *Relay) Observe(ctx context.Context, items []item.Item) ([]item.Observation, error) {
	var errs []error
	obs := make([]item.Observation, 0, len(items))
	for _, it := range items {
		o := item.Observation{Item: item.Item{Kind: it.Kind, Key: it.Key}}
		if err := checkRelayKey(it.Key); err != nil {
			errs = append(errs, err)
		} else if cpus, ok, err := LoadRelayCPUs(r.Root); err != nil {
			errs = append(errs, err)
		} else if ok {
			o.Present, o.Value = true, cpuset.Format(cpus)
		}
		obs = append(obs, o)
	}
	return obs, errors.Join(errs...)
}

// Validate checks the key and that every CPU is online.
func (r *Relay) Validate(ctx context.Context, items []item.Item) error {
	online, onlineErr := onlineCPUs(r.Root)
	var errs []error
	for _, it := range items {
		if err := checkRelayKey(it.Key); err != nil {
			errs = append(errs, err)
			continue
		}
		cpus, err := cpuset.Parse(it.Value)
		if err != nil {
			errs = append(errs, fmt.Errorf("relay cpus: %w", err))
			continue
		}
		if onlineErr != nil {
			continue
		}
		var offline []int
		for _, c := range cpus {
			if !slices.Contains(online, c) {
				offline = append(offline, c)
			}
		}
		if len(offline) > 0 {
			errs = append(errs, fmt.Errorf("relay cpus %q: CPUs %s are not online (online: %s)",
				it.Value, cpuset.Format(offline), cpuset.Format(online)))
		}
	}
	return errors.Join(errs...)
}

// Apply stores the list atomically, so the relay never reads half of it.
func (r *Relay) Apply(ctx context.Context, it item.Item) error {
	if err := checkRelayKey(it.Key); err != nil {
		return err
	}
	cpus, err := cpuset.Parse(it.Value)
	if err != nil {
		return fmt.Errorf("relay cpus: %w", err)
	}
	p := r.path()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("relay cpus: %w", err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(cpuset.Format(cpus)+"\n"), 0o644); err != nil {
		return fmt.Errorf("relay cpus: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("relay cpus: %w", err)
	}
	return nil
}

// Remove deletes the stored list: the relay then runs unpinned.
func (r *Relay) Remove(ctx context.Context, it item.Item) error {
	if err := checkRelayKey(it.Key); err != nil {
		return err
	}
	if err := os.Remove(r.path()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("relay cpus: %w", err)
	}
	return nil
}

// LoadRelayCPUs reads the CPU list stored by apply under root; ok is false
// when none is stored.
func LoadRelayCPUs(root string) (cpus []int, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(root, RelayCPUsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("relay cpus: %w", err)
	}
	cpus, err = cpuset.Parse(string(b))
	if err != nil {
		return nil, false, fmt.Errorf("relay cpus %s: %w", filepath.Join(root, RelayCPUsFile), err)
	}
	return cpus, true, nil
}

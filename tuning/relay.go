package tuning

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// RelayKeyCPUs is the only key of the relay kind.
const RelayKeyCPUs = "cpus"

// Relay is the executor of an obsolete kind. The relay CPU list travels
// in the relay's own spec and the relay pins itself (PinProcess); it is no
// host item. The executor stays so that a state database from before that
// change can drop its relay/cpus record: it owns nothing on the host,
// observes nothing, refuses to apply and removes nothing.
type Relay struct {
	Root string
}

// NewRelay returns the relay executor for the host tree at root.
func NewRelay(root string) *Relay { return &Relay{Root: root} }

// Kind implements Executor.
func (r *Relay) Kind() string { return KindRelay }

var errRelayItem = errors.New("relay CPUs are pinned by the relay from its spec, not applied as a host item")

// Observe reports every item absent: nothing on the host holds it.
func (r *Relay) Observe(ctx context.Context, items []Item) ([]Observation, error) {
	obs := make([]Observation, 0, len(items))
	for _, it := range items {
		obs = append(obs, Observation{Item: Item{Kind: it.Kind, Key: it.Key}})
	}
	return obs, nil
}

// Validate refuses every item.
func (r *Relay) Validate(ctx context.Context, items []Item) error {
	if len(items) == 0 {
		return nil
	}
	return fmt.Errorf("relay/%s: %w", items[0].Key, errRelayItem)
}

// Apply refuses the item.
func (r *Relay) Apply(ctx context.Context, it Item) error {
	return fmt.Errorf("relay/%s: %w", it.Key, errRelayItem)
}

// Remove does nothing: there is nothing to remove.
func (r *Relay) Remove(ctx context.Context, it Item) error { return nil }

// PinProcess sets the CPU affinity of every thread of the calling process.
// Threads the Go runtime starts later inherit the affinity of the thread
// that creates them, so the whole process stays on cpus.
func PinProcess(cpus []int) error {
	if len(cpus) == 0 {
		return errors.New("pin process: empty CPU list")
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("pin process: %w", err)
	}
	var errs []error
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		// A thread may exit between listing and pinning.
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pin process to CPUs %s: %w", FormatCPUList(cpus), err)
	}
	return nil
}

// ProcessAffinity reads the CPU affinity of one thread (0: the caller).
func ProcessAffinity(tid int) ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(tid, &set); err != nil {
		return nil, fmt.Errorf("affinity of %d: %w", tid, err)
	}
	var cpus []int
	for c := 0; c <= maxCPU && len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

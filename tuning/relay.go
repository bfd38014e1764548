package tuning

import (
	"context"
	"errors"
	"fmt"

	"github.com/sosappliance/sosappliance/host/item"
)

// Relay is the executor of an obsolete kind. The relay CPU list travels
// in the relay's own spec and the relay pins itself (dataplane/relay); it
// is no host item. The executor stays so that a state database from before
// that change can drop its relay/cpus record: it owns nothing on the host,
// observes nothing, refuses to apply and removes nothing.
type Relay struct {
	Root string
}

// NewRelay returns the relay executor for the host tree at root.
func NewRelay(root string) *Relay { return &Relay{Root: root} }

// Kind implements Executor.
func (r *Relay) Kind() string { return item.KindRelay }

var errRelayItem = errors.New("relay CPUs are pinned by the relay from its spec, not applied as a host item")

// Observe reports every item absent: nothing on the host holds it.
func (r *Relay) Observe(ctx context.Context, items []item.Item) ([]item.Observation, error) {
	obs := make([]item.Observation, 0, len(items))
	for _, it := range items {
		obs = append(obs, item.Observation{Item: item.Item{Kind: it.Kind, Key: it.Key}})
	}
	return obs, nil
}

// Validate refuses every item.
func (r *Relay) Validate(ctx context.Context, items []item.Item) error {
	if len(items) == 0 {
		return nil
	}
	return fmt.Errorf("relay/%s: %w", items[0].Key, errRelayItem)
}

// Apply refuses the item.
func (r *Relay) Apply(ctx context.Context, it item.Item) error {
	return fmt.Errorf("relay/%s: %w", it.Key, errRelayItem)
}

// Remove does nothing: there is nothing to remove.
func (r *Relay) Remove(ctx context.Context, it item.Item) error { return nil }

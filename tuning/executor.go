// Package tuning holds the host executors of sosappliance: sysctl, IRQ
// affinity, interface settings, relay CPU pinning and the agent steering host
// state (nftables TPROXY, policy routing). Each executor owns a kind of Item,
// observes it and applies it; all of them are level-based and idempotent.
package tuning

import "context"

// Item is one owned piece of host state. Kind names the executor, Key the
// object within it, and Value its canonical text, so that desired and
// observed values compare with ==.
type Item struct {
	Kind  string `json:"kind"`
	Key   string `json:"key"`
	Value string `json:"value"`
}

// ID is the identity of an item across desired state, observation and store.
func (it Item) ID() string { return it.Kind + "/" + it.Key }

// Observation is what an executor found on the host for one item.
type Observation struct {
	Item
	// Present is false when the object does not exist at all (no nftables
	// table, no policy rule); Value is then empty.
	Present bool `json:"present"`
	// Warnings are things the operator should know but that do not stop a
	// plan, such as irqbalance running and likely to undo IRQ affinity.
	Warnings []string `json:"warnings,omitempty"`
}

// Executor observes and converges one kind of item. Observe never changes the
// host; it returns an error naming every item that cannot be planned (an
// unknown sysctl key, a congestion control that is not available). Apply sets
// an item to its value and may be called again with the same value. Remove
// deletes an object the appliance created, for items whose previous state was
// "absent".
type Executor interface {
	Kind() string
	Observe(ctx context.Context, items []Item) ([]Observation, error)
	Apply(ctx context.Context, it Item) error
	Remove(ctx context.Context, it Item) error
}

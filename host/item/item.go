package item

import (
	"fmt"
	"strings"

	"github.com/sosappliance/sosappliance/host/cpuset"
)

// Item is one owned piece of host state. Kind names the executor, Key the
// object within it, and Value its canonical text, so that desired and
// observed values compare with ==.
type Item struct {
	Kind  string `json:"kind"`
	Key   string `json:"key"`
	Value string `json:"value"`
	// Origin says where a desired value came from, for plans to show: a
	// line of the configuration ("sos.hcl:31") or a built-in profile
	// ("profile fasterdata-10g (sos.hcl:28)"). Executors ignore it.
	Origin string `json:"origin,omitempty"`
	// Optional marks a desired item the node may be unable to take (a
	// profile's fq qdisc on a kernel without it): planning leaves it out
	// with a warning instead of failing when its executor refuses it.
	Optional bool `json:"optional,omitempty"`
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

// Kinds of the host items, one per executor of package tuning.
const (
	KindSysctl    = "sysctl"
	KindIRQ       = "irq"
	KindInterface = "interface"
	KindRelay     = "relay"
	KindSteering  = "steering"
)

// RelayKeyCPUs is the only key of the relay kind.
const RelayKeyCPUs = "cpus"

// Canonical rewrites an item's value in the canonical form of its kind (see
// the package documentation), so that values written differently but meaning
// the same compare equal. Items of kinds this package does not know are
// returned unchanged: their executors own their forms.
func Canonical(it Item) (Item, error) {
	var err error
	switch it.Kind {
	case KindSysctl:
		it.Value = CanonicalSysctlValue(it.Value)
	case KindIRQ:
		it.Value, err = CanonicalIRQValue(it.Value)
	case KindInterface:
		it.Value, err = CanonicalInterfaceValue(it.Value)
	case KindRelay:
		it.Value, err = cpuset.Canonical(it.Value)
	case KindSteering:
		it.Value, err = CanonicalSteeringValue(it.Key, it.Value)
	}
	if err != nil {
		return it, fmt.Errorf("%s: %w", it.ID(), err)
	}
	return it, nil
}

// CanonicalSysctlValue collapses runs of spaces and tabs: the kernel prints
// vectors like tcp_rmem with tabs, operators write spaces.
func CanonicalSysctlValue(v string) string { return strings.Join(strings.Fields(v), " ") }

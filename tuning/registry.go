package tuning

import (
	"fmt"

	"github.com/sosappliance/sosappliance/host/cpuset"
)

// Executors returns every executor of this package by kind, for the host
// tree at root ("/" in production). Netlink executors act in the network
// namespace of the calling thread.
func Executors(root string) map[string]Executor {
	return map[string]Executor{
		KindSysctl:    NewSysctl(root),
		KindIRQ:       NewIRQ(root),
		KindInterface: NewInterface(),
		KindRelay:     NewRelay(root),
		KindSteering:  NewSteering(),
	}
}

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

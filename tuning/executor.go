// Package tuning holds the host executors of sosappliance: sysctl, IRQ
// affinity, interface settings and the agent steering host state (nftables
// TPROXY, policy routing); the relay kind is obsolete (the relay pins its own
// CPUs from its spec) and its executor only forgets old records. Each executor owns a kind of
// item.Item, observes it and applies it; all of them are level-based and
// idempotent. The kinds, keys and canonical values are those of package
// host/item.
//
// Executors that touch files take a root path ("/" in production, a temp
// tree in tests). Executors that use netlink (interface, steering) act in the
// network namespace of the calling thread, as does sysctl under /proc/sys/net;
// RunInNetns runs them in another namespace.
package tuning

import (
	"context"
	"errors"

	"github.com/sosappliance/sosappliance/host/item"
)

// Executor observes and converges one kind of item. Observe never changes the
// host; it reports an object that does not exist as not Present (so a
// recorded item whose object vanished can still be planned) and returns an
// error only when the host cannot be read. It may use each item's Value to
// choose the form it reports in (irq does). Apply sets an item to its value
// and may be called again with the same value. Remove deletes an object the
// appliance created, for items whose previous state was "absent".
type Executor interface {
	Kind() string
	Observe(ctx context.Context, items []item.Item) ([]item.Observation, error)
	Apply(ctx context.Context, it item.Item) error
	Remove(ctx context.Context, it item.Item) error
}

// Validator is implemented by executors that can tell before any change that
// a desired item cannot be applied on this node: an unknown sysctl key, a
// congestion control that is not available, an interface without IRQs, a CPU
// that is not online. Validate returns one error naming every such item. The
// reconciler calls it on desired items only, at plan time.
type Validator interface {
	Validate(ctx context.Context, items []item.Item) error
}

// Restorer is implemented by executors that may observe a value Apply
// cannot take back: steering reads an object of its own marks (its table
// name, its rule and route protocol) that is not as it writes it, a
// leftover of an earlier install or of a lost state database, as a text
// saying so. Restorable says whether Apply takes the observed value it.
// The reconciler records a value it does not take, at first touch, as
// absent: a rollback removes the object rather than failing on it.
type Restorer interface {
	Restorable(it item.Item) bool
}

// SetOnly says whether ex's objects can only be set, never made or
// removed (a sysctl, an interface setting, an IRQ's affinity: they exist
// with their host object): one gone is not the appliance's to bring back.
// Steering makes its objects.
func SetOnly(ex Executor) bool {
	switch ex.Kind() {
	case item.KindSysctl, item.KindInterface, item.KindIRQ:
		return true
	}
	return false
}

// ErrGone marks a refusal whose cause is a host object the item names
// that is not there now (an interface: a driver reload, a NIC taken
// out), not the item itself. errors.Is(err, ErrGone) finds it in a
// Validate error; the daemon's drift check holds such items instead of
// failing on them.
var ErrGone = errors.New("not on this node now")

// goneError is a refusal for a missing host object: its message is its
// own, errors.Is finds ErrGone in it, and GoneObject its object.
type goneError struct {
	error
	object string
}

func (e goneError) Is(target error) bool { return target == ErrGone }
func (e goneError) Unwrap() error        { return e.error }

// gone marks err as the refusal of an item whose interface ifname is not
// there.
func gone(ifname string, err error) error { return goneError{err, ifname} }

// GoneObject is the name of the interface a refusal wrapping ErrGone
// found missing, or "" when err is no such refusal.
func GoneObject(err error) string {
	var g goneError
	if errors.As(err, &g) {
		return g.object
	}
	return ""
}

// GoneChecker is implemented by the executors whose items name a host
// object that can go away (an interface): Gone returns the error Validate
// would give for that (wrapping ErrGone) when the object is not there,
// else nil. It only looks: unlike Validate it loads no module and checks
// nothing of the value, so the owned items no longer desired can be
// asked without side effects.
type GoneChecker interface {
	Gone(ctx context.Context, it item.Item) error
}

// Package tuning holds the host executors of sosappliance: sysctl, IRQ
// affinity, interface settings, relay CPU pinning and the agent steering host
// state (nftables TPROXY, policy routing). Each executor owns a kind of Item,
// observes it and applies it; all of them are level-based and idempotent.
//
// Every value is canonical text, so desired and observed values compare with
// ==. Canonical rewrites any accepted spelling into the canonical one. The
// kinds, keys and values:
//
//	kind       key                      value
//	sysctl     dotted name, sysctl(8)   the value with runs of blanks made one
//	           spelling: "/" for a dot  space: "4096 87380 67108864"
//	           inside a level
//	           ("net.ipv4.conf.eth1/100.rp_filter")
//	irq        interface name ("eth1")  a CPU list in the kernel's form
//	                                    ("0-3,8"): spread the interface's IRQs
//	                                    one CPU each over it; or a per-IRQ
//	                                    affinity "45:0 46:1-3,5" (what Observe
//	                                    reports when the IRQs are not spread
//	                                    like that, and what rollback restores)
//	interface  "IF/mtu", "IF/txqueuelen" decimal: "9000"
//	relay      "cpus"                   obsolete: relay pinning is in the relay spec
//	steering   "nftables"               TproxyRules.Canonical(): compact JSON
//	                                    {"interface":"eth1","mark":21327,
//	                                    "listen_port":9876,"divert":[{"clients":
//	                                    ["10.10.1.0/24"],"server":"10.10.2.1",
//	                                    "port":5201}]}, diverts merged per
//	                                    server and port, all lists sorted;
//	                                    without diverts only {"mark":N,
//	                                    "divert":[]}
//	steering   "rule"                   "fwmark 0x534f lookup 21327 priority 21327"
//	steering   "route"                  "local 0.0.0.0/0 dev lo table 21327"
//
// SteeringSpec.Items builds the steering items, and the loose rp_filter
// sysctl of the agent interface, from one struct.
//
// Executors that touch files take a root path ("/" in production, a temp
// tree in tests). Executors that use netlink (interface, steering) act in the
// network namespace of the calling thread, as does sysctl under /proc/sys/net;
// RunInNetns runs them in another namespace.
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
// host; it reports an object that does not exist as not Present (so a
// recorded item whose object vanished can still be planned) and returns an
// error only when the host cannot be read. It may use each item's Value to
// choose the form it reports in (irq does). Apply sets an item to its value
// and may be called again with the same value. Remove deletes an object the
// appliance created, for items whose previous state was "absent".
type Executor interface {
	Kind() string
	Observe(ctx context.Context, items []Item) ([]Observation, error)
	Apply(ctx context.Context, it Item) error
	Remove(ctx context.Context, it Item) error
}

// Validator is implemented by executors that can tell before any change that
// a desired item cannot be applied on this node: an unknown sysctl key, a
// congestion control that is not available, an interface without IRQs, a CPU
// that is not online. Validate returns one error naming every such item. The
// reconciler calls it on desired items only, at plan time.
type Validator interface {
	Validate(ctx context.Context, items []Item) error
}

// Kinds of the executors in this package.
const (
	KindSysctl    = "sysctl"
	KindIRQ       = "irq"
	KindInterface = "interface"
	KindRelay     = "relay"
	KindSteering  = "steering"
)

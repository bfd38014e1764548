// Package plan compares the desired state of a node with what its executors
// observe and what the appliance applied before, and renders the difference
// as text or JSON. It is pure: same input, same output, no I/O.
package plan

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/sosappliance/sosappliance/host/item"
)

// FormatVersion is the version of the JSON plan, in plan -json and in plan
// files. Version 2 added lineage and switches; version 1 files are refused.
const FormatVersion = 2

// Action is what a change does to an item.
type Action string

const (
	// Add creates an object that is not there.
	Add Action = "+"
	// Update sets an existing object to a new value.
	Update Action = "~"
	// Restore gives back an item the appliance owns but no longer wants:
	// its recorded previous value is put back, or the object is removed
	// when it did not exist before the appliance made it.
	Restore Action = "-"
)

// Operations a plan is made for.
const (
	OperationApply    = "apply"
	OperationRollback = "rollback"
)

// Change is one item to change. Before is what is on the host now, After
// what it will be; an absent object has Present false and empty text. For
// Restore: After present means "apply After", After absent and Before
// present means "remove the object", both absent means "only forget the
// record".
type Change struct {
	Action        Action `json:"action"`
	Kind          string `json:"kind"`
	Key           string `json:"key"`
	Before        string `json:"before,omitempty"`
	BeforePresent bool   `json:"before_present"`
	After         string `json:"after,omitempty"`
	AfterPresent  bool   `json:"after_present"`
	Why           string `json:"why"`
	// Origin is where the desired value came from (item.Item.Origin);
	// empty for restores, which no configuration asks for.
	Origin string `json:"origin,omitempty"`
}

// ID matches item.Item.ID.
func (c Change) ID() string { return c.Kind + "/" + c.Key }

// Owned is an item the appliance owns from earlier applies, as the state
// database records it; the caller converts its records, so that planning
// knows nothing of how they are stored.
type Owned struct {
	Kind string
	Key  string
	// Previous is the value before the appliance first touched the item at
	// FirstSerial; PreviousPresent is false when the object did not exist.
	Previous        string
	PreviousPresent bool
	// Desired is what the apply at Serial set or was setting; Applied is
	// false while that apply had not finished the item.
	Desired     string
	Applied     bool
	FirstSerial uint64
	Serial      uint64
}

// ID matches item.Item.ID.
func (o Owned) ID() string { return o.Kind + "/" + o.Key }

// Warning is something an executor wants the operator to know.
type Warning struct {
	Kind    string `json:"kind"`
	Key     string `json:"key"`
	Message string `json:"message"`
	// Held: the item is held, neither set nor put back, because a host
	// object it names is gone (its interface).
	Held bool `json:"held,omitempty"`
}

// Plan is the list of changes that brings one node to its desired state,
// and where it was made: the node, the state database's lineage and serial
// (a saved plan is refused on another node, against another lineage, or
// once the serial moved on) and the hash of the configuration. Changes are
// the host's, in the order they apply; Switches are the flow changes of
// each switch the node's controller drives, sorted by switch name.
type Plan struct {
	FormatVersion int          `json:"format_version"`
	Operation     string       `json:"operation"`
	Node          string       `json:"node"`
	Lineage       string       `json:"lineage"`
	Serial        uint64       `json:"serial"`
	ConfigHash    string       `json:"config_hash,omitempty"`
	Changes       []Change     `json:"changes"`
	Switches      []SwitchPlan `json:"switches,omitempty"`
	Warnings      []Warning    `json:"warnings,omitempty"`
	// Notes are advice of the built-in tuning profiles in use that no
	// item carries out (IRQ placement, ring buffers); the caller fills
	// them in from the desired state.
	Notes []string `json:"notes,omitempty"`
}

// Empty reports whether the plan changes nothing, on the host or on a
// switch.
func (p Plan) Empty() bool { return len(p.Changes) == 0 && p.flowChanges() == 0 }

// Counts returns how many changes, host and flow, add, update and restore.
func (p Plan) Counts() (add, update, restore int) {
	count := func(a Action) {
		switch a {
		case Add:
			add++
		case Update:
			update++
		case Restore:
			restore++
		}
	}
	for _, c := range p.Changes {
		count(c.Action)
	}
	for _, s := range p.Switches {
		for _, c := range s.Changes {
			count(c.Action)
		}
	}
	return add, update, restore
}

// CheckOrigin refuses a saved plan made for another node or against another
// state database, as Terraform refuses a plan from another state's lineage:
// serials alone cannot tell two databases apart. The serial is checked
// where the apply begins, in the same transaction.
func (p Plan) CheckOrigin(node, lineage string) error {
	if p.Node != node {
		return &NodeError{Plan: p.Node, This: node}
	}
	if p.Lineage != lineage {
		return &LineageError{Plan: p.Lineage, This: lineage}
	}
	return nil
}

// NodeError refuses a plan made for another node.
type NodeError struct{ Plan, This string }

func (e *NodeError) Error() string {
	return fmt.Sprintf("plan was made for node %s, this is node %s", orNone(e.Plan), orNone(e.This))
}

// LineageError refuses a plan made against another state database.
type LineageError struct{ Plan, This string }

func (e *LineageError) Error() string {
	lineage := func(s string) string {
		if s == "" {
			return "(none recorded)"
		}
		return s
	}
	return fmt.Sprintf("plan belongs to another state (lineage %s), this state is lineage %s", lineage(e.Plan), lineage(e.This))
}

// Diff computes the changes that take the host from observed to desired.
// applied lists the items the appliance owns from earlier applies: one no
// longer desired is restored, and a desired one left unfinished by an
// interrupted apply is redone even when the host already shows its value.
// desired must not hold two items with one ID. Node, Lineage, Serial,
// ConfigHash and Switches are left for the caller to fill in.
func Diff(desired []item.Item, observed []item.Observation, applied []Owned) Plan {
	obs := make(map[string]item.Observation, len(observed))
	for _, o := range observed {
		obs[o.ID()] = o
	}
	owned := make(map[string]Owned, len(applied))
	for _, r := range applied {
		owned[r.ID()] = r
	}
	p := Plan{FormatVersion: FormatVersion, Operation: OperationApply, Changes: []Change{}}
	wanted := make(map[string]bool, len(desired))
	for _, d := range desired {
		wanted[d.ID()] = true
		o := obs[d.ID()]
		rec, isOwned := owned[d.ID()]
		c := Change{Kind: d.Kind, Key: d.Key, Before: o.Value, BeforePresent: o.Present, After: d.Value, AfterPresent: true, Origin: d.Origin}
		if !o.Present {
			c.Before = ""
		}
		switch {
		case isOwned && !rec.Applied:
			c.Why = fmt.Sprintf("finish the apply interrupted at serial %d", rec.Serial)
		case o.Present && o.Value == d.Value:
			continue
		case !o.Present && isOwned:
			c.Why = fmt.Sprintf("applied at serial %d, missing now", rec.Serial)
		case !o.Present:
			c.Why = "declared, not present"
		case isOwned && rec.Desired == d.Value:
			c.Why = fmt.Sprintf("drifted from the value applied at serial %d", rec.Serial)
		case isOwned:
			c.Why = fmt.Sprintf("configuration changed since serial %d", rec.Serial)
		default:
			c.Why = "differs from the configuration"
		}
		c.Action = Update
		if !o.Present {
			c.Action = Add
		}
		p.Changes = append(p.Changes, c)
	}
	for _, r := range applied {
		if wanted[r.ID()] {
			continue
		}
		o := obs[r.ID()]
		c := Change{Action: Restore, Kind: r.Kind, Key: r.Key, Before: o.Value, BeforePresent: o.Present}
		switch {
		case !o.Present:
			c.Before = ""
			c.Why = "gone from the host; forget its record"
		case r.PreviousPresent && o.Value == r.Previous:
			c.After, c.AfterPresent = r.Previous, true
			c.Why = fmt.Sprintf("already at its value from before serial %d; forget its record", r.FirstSerial)
		case r.PreviousPresent:
			c.After, c.AfterPresent = r.Previous, true
			c.Why = fmt.Sprintf("put back the value from before serial %d", r.FirstSerial)
		default:
			c.Why = fmt.Sprintf("remove; it did not exist before serial %d", r.FirstSerial)
		}
		p.Changes = append(p.Changes, c)
	}
	slices.SortFunc(p.Changes, compareChanges)

	for _, o := range observed {
		for _, w := range o.Warnings {
			p.Warnings = append(p.Warnings, Warning{Kind: o.Kind, Key: o.Key, Message: w})
		}
	}
	p.AddWarnings()
	return p
}

// AddWarnings adds warnings of the caller's own (such as optional items
// left out) and keeps the list sorted, each warning once.
func (p *Plan) AddWarnings(ws ...Warning) {
	p.Warnings = append(p.Warnings, ws...)
	slices.SortFunc(p.Warnings, func(a, b Warning) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Message, b.Message))
	})
	p.Warnings = slices.Compact(p.Warnings)
}

// kindOrder is the order executors run in: host parameters first, steering
// last, so that traffic is only diverted onto a host already tuned for it.
// Kinds not listed (such as switch flows) follow, by name.
var kindOrder = []string{item.KindSysctl, item.KindInterface, item.KindIRQ, item.KindRelay, item.KindSteering}

// steeringOrder makes the local route and the policy rule exist before the
// table starts marking packets for them; removals run the other way
// (steeringRank).
var steeringOrder = []string{item.SteeringKeyRoute, item.SteeringKeyRule, item.SteeringKeyNftables}

// steeringRank orders steering changes: removals the other way from
// steeringOrder (the table stops marking before the rule and route go),
// and a restore that puts a value back (another mark or table) as an
// apply does, so that the route and rule it needs are there before the
// table marks for them.
func steeringRank(c Change) int {
	r := rank(steeringOrder, c.Key)
	if c.Action == Restore && !c.AfterPresent {
		return -1 - r // table, rule, route; before the put-backs
	}
	return r
}

func rank(list []string, s string) int {
	if i := slices.Index(list, s); i >= 0 {
		return i
	}
	return len(list)
}

func phase(c Change) int {
	if c.Action == Restore {
		return 0
	}
	return 1
}

func compareChanges(a, b Change) int {
	if c := cmp.Compare(rank(kindOrder, a.Kind), rank(kindOrder, b.Kind)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	// Within a kind, restores come before adds and updates, so an object
	// being replaced under a new key never coexists with the old one.
	if c := cmp.Compare(phase(a), phase(b)); c != 0 {
		return c
	}
	if a.Kind == item.KindSteering {
		if c := cmp.Compare(steeringRank(a), steeringRank(b)); c != 0 {
			return c
		}
	}
	return cmp.Compare(a.Key, b.Key)
}

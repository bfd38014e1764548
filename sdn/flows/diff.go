package flows

import (
	"fmt"
	"strings"

	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// Modification is an owned entry whose content must change.
type Modification struct {
	Before Flow // as found on the switch
	After  Flow // as desired
}

// CookieChanges reports whether the cookie differs, which an OpenFlow 1.3
// modify cannot fix: the entry is then replaced by an add.
func (m Modification) CookieChanges() bool { return m.Before.Cookie != m.After.Cookie }

// Changes are what turns the actual flow set of a switch into the desired
// one: only what differs, never a wipe.
type Changes struct {
	Add    []Flow
	Modify []Modification
	Delete []Flow
}

// Diff compares the desired flows with those found on a switch. Flows
// whose cookie lacks the appliance's prefix are ignored, so they are never
// modified or deleted.
func Diff(desired, actual []Flow) Changes {
	have := make(map[Key]Flow, len(actual))
	for _, f := range actual {
		if Owned(f.Cookie) {
			f.Match = f.Match.Canonical()
			have[f.Key()] = f
		}
	}
	var c Changes
	wanted := make(map[Key]bool, len(desired))
	for _, f := range desired {
		f.Match = f.Match.Canonical()
		k := f.Key()
		wanted[k] = true
		old, ok := have[k]
		switch {
		case !ok:
			c.Add = append(c.Add, f)
		case !old.SameContent(f):
			c.Modify = append(c.Modify, Modification{Before: old, After: f})
		}
	}
	for _, f := range actual {
		f.Match = f.Match.Canonical()
		if Owned(f.Cookie) && !wanted[f.Key()] {
			c.Delete = append(c.Delete, f)
		}
	}
	Sort(c.Add)
	Sort(c.Delete)
	return c
}

// Empty reports whether the switch already carries the desired flows.
func (c Changes) Empty() bool { return len(c.Add)+len(c.Modify)+len(c.Delete) == 0 }

// Len is the number of flow mods the changes take.
func (c Changes) Len() int { return len(c.Add) + len(c.Modify) + len(c.Delete) }

// FlowMods are the messages that carry the changes out, adds first and
// deletes last, so that a flow that moves (a changed client prefix) is
// never absent in between. Entry i of the result carries out List()[i].
func (c Changes) FlowMods() []*ofp13.FlowMod {
	mods := make([]*ofp13.FlowMod, 0, c.Len())
	for _, f := range c.Add {
		mods = append(mods, f.AddMod())
	}
	for _, m := range c.Modify {
		if m.CookieChanges() {
			mods = append(mods, m.After.AddMod())
		} else {
			mods = append(mods, m.After.ModifyMod(m.Before.Cookie))
		}
	}
	for _, f := range c.Delete {
		mods = append(mods, f.DeleteMod())
	}
	return mods
}

// Op is the kind of one change.
type Op string

// Change kinds with their plan symbols.
const (
	OpAdd    Op = "+"
	OpModify Op = "~"
	OpDelete Op = "-"
)

// Change is one line of a plan: the op and the flow it installs or
// removes (for a modify, the flow as desired).
type Change struct {
	Op   Op
	Flow Flow
	// Before is the entry on the switch for OpModify.
	Before *Flow
}

// List returns the changes in the order FlowMods sends them.
func (c Changes) List() []Change {
	out := make([]Change, 0, c.Len())
	for _, f := range c.Add {
		out = append(out, Change{Op: OpAdd, Flow: f})
	}
	for _, m := range c.Modify {
		before := m.Before
		out = append(out, Change{Op: OpModify, Flow: m.After, Before: &before})
	}
	for _, f := range c.Delete {
		out = append(out, Change{Op: OpDelete, Flow: f})
	}
	return out
}

// String renders one change in ovs-ofctl-like text, e.g.
// "+ cookie=0x5053020000000001, table=0, priority=2000,tcp,... actions=...";
// a modify shows what it was.
func (ch Change) String() string {
	s := string(ch.Op) + " " + ch.Flow.String()
	if ch.Op == OpModify && ch.Before != nil {
		var was []string
		if ch.Before.Cookie != ch.Flow.Cookie {
			was = append(was, fmt.Sprintf("cookie=%#x", ch.Before.Cookie))
		}
		if ch.Before.IdleTimeout != ch.Flow.IdleTimeout || ch.Before.HardTimeout != ch.Flow.HardTimeout {
			was = append(was, fmt.Sprintf("idle_timeout=%d, hard_timeout=%d", ch.Before.IdleTimeout, ch.Before.HardTimeout))
		}
		if ch.Before.Flags != ch.Flow.Flags {
			was = append(was, fmt.Sprintf("flags=%#x", ch.Before.Flags))
		}
		if a := ch.Before.ActionsString(); a != ch.Flow.ActionsString() {
			was = append(was, "actions="+a)
		}
		if len(was) > 0 {
			s += " (was " + strings.Join(was, ", ") + ")"
		}
	}
	return s
}

// String renders every change, one per line, in FlowMods order.
func (c Changes) String() string {
	var b strings.Builder
	for _, ch := range c.List() {
		b.WriteString(ch.String())
		b.WriteByte('\n')
	}
	return b.String()
}

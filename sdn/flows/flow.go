package flows

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/sosappliance/sosappliance/sdn/ofp13"
)

// Flow is one flow table entry, desired or found on a switch.
type Flow struct {
	Table    uint8
	Priority uint16
	Cookie   uint64
	// Match is in canonical form (see ofp13.Match.Canonical).
	Match        ofp13.Match
	Instructions []ofp13.Instruction
	IdleTimeout  uint16
	HardTimeout  uint16
	Flags        uint16
	// Reason says which intent produced a compiled flow; empty for a flow
	// read from a switch.
	Reason string
}

// Key identifies a flow entry the way OpenFlow does: two entries with the
// same table, priority and match cannot coexist.
type Key string

// Key returns the flow's identity.
func (f Flow) Key() Key {
	m, err := f.Match.MarshalBinary()
	if err != nil {
		// An unencodable match cannot be on a switch; keep it distinct.
		m = []byte(f.Match.String())
	}
	return Key(fmt.Sprintf("table=%d,priority=%d,%x", f.Table, f.Priority, m))
}

// FromStats turns an entry of a flow stats reply into a Flow.
func FromStats(s ofp13.FlowStats) Flow {
	return Flow{Table: s.TableID, Priority: s.Priority, Cookie: s.Cookie, Match: s.Match.Canonical(),
		Instructions: s.Instructions, IdleTimeout: s.IdleTimeout, HardTimeout: s.HardTimeout, Flags: s.Flags}
}

// SameContent reports whether two flows with the same Key also carry the
// same cookie, instructions, timeouts and flags, so the switch needs no
// change.
func (f Flow) SameContent(o Flow) bool {
	return f.Cookie == o.Cookie && f.IdleTimeout == o.IdleTimeout && f.HardTimeout == o.HardTimeout &&
		f.Flags == o.Flags && sameInstructions(f.Instructions, o.Instructions)
}

func sameInstructions(a, b []ofp13.Instruction) bool {
	ea, errA := ofp13.AppendInstructions(nil, a)
	eb, errB := ofp13.AppendInstructions(nil, b)
	return errA == nil && errB == nil && bytes.Equal(ea, eb)
}

// MatchString is the priority and match as ovs-ofctl prints them, e.g.
// "priority=2000,tcp,nw_src=10.0.0.0/24".
func (f Flow) MatchString() string {
	s := fmt.Sprintf("priority=%d", f.Priority)
	if m := f.Match.String(); m != "" {
		s += "," + m
	}
	return s
}

// ActionsString is the value of ovs-ofctl's "actions=".
func (f Flow) ActionsString() string { return ofp13.InstructionsString(f.Instructions) }

// String prints the flow the way ovs-ofctl dump-flows does, without the
// statistics, e.g. "cookie=0x5053020000000001, table=0,
// priority=2000,tcp,nw_src=10.10.1.0/24,nw_dst=10.10.2.1,tp_dst=5201
// actions=set_field:02:00:00:00:01:02->eth_dst,output:3".
func (f Flow) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cookie=%#x, table=%d, ", f.Cookie, f.Table)
	if f.IdleTimeout != 0 {
		fmt.Fprintf(&b, "idle_timeout=%d, ", f.IdleTimeout)
	}
	if f.HardTimeout != 0 {
		fmt.Fprintf(&b, "hard_timeout=%d, ", f.HardTimeout)
	}
	if f.Flags&ofp13.FlowFlagSendFlowRem != 0 {
		b.WriteString("send_flow_rem ")
	}
	b.WriteString(f.MatchString())
	b.WriteString(" actions=")
	b.WriteString(f.ActionsString())
	return b.String()
}

// AddMod is the FLOW_MOD that installs the flow (replacing an entry with
// the same key, cookie included).
func (f Flow) AddMod() *ofp13.FlowMod {
	fm := f.mod(ofp13.FlowAdd)
	fm.Instructions = f.Instructions
	return fm
}

// ModifyMod is the FLOW_MOD that changes the instructions of the owned
// entry with the flow's key and the cookie `current`, and of no other: an
// OpenFlow 1.3 modify keeps counters and duration but cannot change a
// cookie.
func (f Flow) ModifyMod(current uint64) *ofp13.FlowMod {
	fm := f.mod(ofp13.FlowModifyStrict)
	fm.Cookie, fm.CookieMask = current, ^uint64(0)
	fm.Instructions = f.Instructions
	return fm
}

// DeleteMod is the FLOW_MOD that removes exactly this entry, and only while
// it still carries this cookie.
func (f Flow) DeleteMod() *ofp13.FlowMod {
	fm := f.mod(ofp13.FlowDeleteStrict)
	fm.CookieMask = ^uint64(0)
	return fm
}

func (f Flow) mod(cmd ofp13.FlowModCommand) *ofp13.FlowMod {
	fm := ofp13.NewFlowMod(cmd)
	fm.Cookie = f.Cookie
	fm.TableID = f.Table
	fm.Priority = f.Priority
	fm.IdleTimeout, fm.HardTimeout, fm.Flags = f.IdleTimeout, f.HardTimeout, f.Flags
	fm.Match = f.Match
	return fm
}

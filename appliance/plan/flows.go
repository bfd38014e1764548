package plan

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sosappliance/sosappliance/sdn/flows"
)

// SwitchPlan is the flow changes one switch needs: the flows the appliance
// owns on it (cookie prefix) against those the configuration compiles to.
// Flows the appliance does not own are never changed and never listed.
type SwitchPlan struct {
	Switch string `json:"switch"`
	// DatapathID is written as in the configuration,
	// "00:00:00:00:00:00:00:01".
	DatapathID string `json:"datapath_id"`
	// Connected is true when the switch's flow table was read. Error says
	// why it could not be, or what failed after; Changes are then unknown.
	Connected bool         `json:"connected"`
	Error     string       `json:"error,omitempty"`
	Changes   []FlowChange `json:"changes"`
	// Whitelists says how many steering flows each whitelist compiles to
	// on this switch, and why that many.
	Whitelists []WhitelistFlows `json:"whitelists,omitempty"`
}

// WhitelistFlows is the steering flow count of one whitelist on a switch:
// a port range takes one flow per aligned value/mask block, or one per
// port on a switch without masked port matches.
type WhitelistFlows struct {
	Whitelist string `json:"whitelist"`
	Flows     int    `json:"flows"`
	// Detail is the product, one line per direction and side:
	// "client side: 1 client prefix x 2 server prefixes x 11 port matches (value/mask)".
	Detail []string `json:"detail"`
}

// SteeringFlowCounts counts the steering flows of each whitelist on sw,
// sorted by whitelist; the exceptions for agents' own addresses are not
// counted.
func SteeringFlowCounts(sw flows.Switch) []WhitelistFlows {
	var out []WhitelistFlows
	for _, st := range sw.Steers {
		if n := len(out); n == 0 || out[n-1].Whitelist != st.Whitelist {
			out = append(out, WhitelistFlows{Whitelist: st.Whitelist})
		}
		w := &out[len(out)-1]
		w.Flows += flows.SteerFlowCount(st, sw.NoPortMasks)
		side := string(st.Side) + " side"
		if st.Reverse {
			side += ", connections opened by servers"
		}
		w.Detail = append(w.Detail, side+": "+flows.SteerFlowDetail(st, sw.NoPortMasks))
	}
	slices.SortStableFunc(out, func(a, b WhitelistFlows) int { return strings.Compare(a.Whitelist, b.Whitelist) })
	return out
}

// Known reports whether the plan knows what the switch needs.
func (s SwitchPlan) Known() bool { return s.Connected && s.Error == "" }

// FlowKey identifies a flow entry the way OpenFlow does: two entries with
// the same table, priority and match cannot coexist on a switch.
type FlowKey struct {
	Table    uint8  `json:"table"`
	Priority uint16 `json:"priority"`
	// Match is in ovs-ofctl's form without the priority,
	// "tcp,nw_src=10.10.1.0/24,nw_dst=10.10.2.1,tp_dst=5201"; empty
	// matches everything.
	Match string `json:"match"`
}

// String is the key as ovs-ofctl writes it: "table=0,priority=2000,tcp,...".
func (k FlowKey) String() string {
	s := fmt.Sprintf("table=%d,priority=%d", k.Table, k.Priority)
	if k.Match != "" {
		s += "," + k.Match
	}
	return s
}

// FlowEntry is what a flow entry carries besides its key.
type FlowEntry struct {
	// Cookie is hexadecimal, "0x5053020000000001": JSON numbers lose
	// precision above 2^53.
	Cookie string `json:"cookie"`
	// Instructions are in the form of ovs-ofctl's "actions=".
	Instructions string `json:"instructions"`
	IdleTimeout  uint16 `json:"idle_timeout,omitempty"`
	HardTimeout  uint16 `json:"hard_timeout,omitempty"`
	Flags        uint16 `json:"flags,omitempty"`
}

// String is the entry as ovs-ofctl prints it, without statistics.
func (e FlowEntry) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cookie=%s", e.Cookie)
	if e.IdleTimeout != 0 {
		fmt.Fprintf(&b, ", idle_timeout=%d", e.IdleTimeout)
	}
	if e.HardTimeout != 0 {
		fmt.Fprintf(&b, ", hard_timeout=%d", e.HardTimeout)
	}
	if e.Flags != 0 {
		fmt.Fprintf(&b, ", flags=%#x", e.Flags)
	}
	b.WriteString(", actions=" + e.Instructions)
	return b.String()
}

// FlowChange is one flow mod a switch needs. Add has no Before, Restore
// (a "-": delete an owned flow no longer desired; the appliance's flows did
// not exist before it made them, so there is nothing else to put back) has
// no After, Update has both.
type FlowChange struct {
	Action Action     `json:"action"`
	Flow   FlowKey    `json:"flow"`
	Before *FlowEntry `json:"before"`
	After  *FlowEntry `json:"after"`
	Why    string     `json:"why"`
}

func (c FlowChange) check() error {
	switch c.Action {
	case Add:
		if c.Before != nil || c.After == nil {
			return fmt.Errorf("%s: + must go from absent to present", c.Flow)
		}
	case Update:
		if c.Before == nil || c.After == nil {
			return fmt.Errorf("%s: ~ must go from present to present", c.Flow)
		}
	case Restore:
		if c.Before == nil || c.After != nil {
			return fmt.Errorf("%s: - must go from present to absent", c.Flow)
		}
	default:
		return fmt.Errorf("%s: unknown action %q", c.Flow, c.Action)
	}
	return nil
}

func (s SwitchPlan) check() error {
	if s.Switch == "" {
		return errors.New("a switch without a name")
	}
	seen := map[FlowKey]bool{}
	for i, c := range s.Changes {
		if err := c.check(); err != nil {
			return fmt.Errorf("switch %s: flow change %d: %w", s.Switch, i+1, err)
		}
		if seen[c.Flow] {
			return fmt.Errorf("switch %s: flow change %d: %s twice", s.Switch, i+1, c.Flow)
		}
		seen[c.Flow] = true
	}
	return nil
}

func entryText(e *FlowEntry) string {
	if e == nil {
		return "(absent)"
	}
	return e.String()
}

// flowChanges counts the flow changes of every switch.
func (p Plan) flowChanges() int {
	n := 0
	for _, s := range p.Switches {
		n += len(s.Changes)
	}
	return n
}

// CheckSavable refuses to save a plan whose flow changes a plan file could
// not carry safely. Flow tables live on the switches, not in the state
// database, so neither serial nor lineage says when a saved flow change has
// gone stale, and on a controller node with a running daemon the daemon
// converges the switches itself; a saved plan would also not be the whole
// plan if the switches it could not read were dropped from it. A plan file
// therefore holds host changes only, and switches with nothing to do.
func (p Plan) CheckSavable() error {
	var pending, unknown []string
	for _, s := range p.Switches {
		switch {
		case !s.Known():
			unknown = append(unknown, s.Switch)
		case len(s.Changes) > 0:
			pending = append(pending, fmt.Sprintf("%s (%d)", s.Switch, len(s.Changes)))
		}
	}
	var errs []error
	if len(pending) > 0 {
		errs = append(errs, fmt.Errorf("the plan changes the flows of switch %s", strings.Join(pending, ", ")))
	}
	if len(unknown) > 0 {
		errs = append(errs, fmt.Errorf("the flows of switch %s could not be read", strings.Join(unknown, ", ")))
	}
	if len(errs) == 0 {
		return nil
	}
	return &UnsavableError{Reasons: errs}
}

// UnsavableError says why a plan cannot go into a plan file.
type UnsavableError struct{ Reasons []error }

func (e *UnsavableError) Error() string {
	var why []string
	for _, r := range e.Reasons {
		why = append(why, r.Error())
	}
	return "a plan file holds host changes only, and " + strings.Join(why, "; ") +
		". Switch flows live on the switches, where no state serial or lineage can tell that a saved flow change went stale:" +
		" apply with `sosappliance apply -c FILE`, or let `sosappliance run` converge the switches, then save a plan again"
}

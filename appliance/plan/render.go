package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/sosappliance/sosappliance/host/item"
)

// Text renders the plan for a terminal, Terraform style: one group per
// executor kind, then one per switch, each change as "+", "~" or "-" with
// before -> after and why, then warnings and a summary line.
func (p Plan) Text() string {
	var b strings.Builder
	p.WriteText(&b)
	return b.String()
}

// WriteText writes Text to w.
func (p Plan) WriteText(w io.Writer) error {
	var b bytes.Buffer
	title := "Plan"
	if p.Operation == OperationRollback {
		title = "Rollback plan"
	}
	fmt.Fprintf(&b, "%s for node %s at state serial %d", title, orNone(p.Node), p.Serial)
	if p.ConfigHash != "" {
		fmt.Fprintf(&b, " (config %s)", shortHash(p.ConfigHash))
	}
	b.WriteString("\n")
	kind := ""
	for _, c := range p.Changes {
		if c.Kind != kind {
			kind = c.Kind
			fmt.Fprintf(&b, "\n  %s\n", kind)
		}
		after := value(c.After, c.AfterPresent)
		if c.Kind == item.KindIRQ && c.BeforePresent && c.AfterPresent {
			// "0-1" spreads the IRQs one CPU each: say so, or the
			// line "40:0-1 41:0-1" -> "0-1" reads as no change.
			if spread := item.SpreadText(c.Before, c.After); spread != "" {
				after += " (one CPU each: " + spread + ")"
			}
		}
		fmt.Fprintf(&b, "    %s %s: %s -> %s\n", c.Action, c.Key, value(c.Before, c.BeforePresent), after)
		if c.Origin != "" {
			fmt.Fprintf(&b, "        # %s; from %s\n", c.Why, c.Origin)
		} else {
			fmt.Fprintf(&b, "        # %s\n", c.Why)
		}
	}
	for _, s := range p.Switches {
		fmt.Fprintf(&b, "\n  flows on switch %s", s.Switch)
		if s.DatapathID != "" {
			fmt.Fprintf(&b, " (datapath %s)", s.DatapathID)
		}
		b.WriteString("\n")
		if s.Error != "" {
			fmt.Fprintf(&b, "    ! %s\n", s.Error)
		}
		for _, w := range s.Whitelists {
			fmt.Fprintf(&b, "    whitelist %s: %d steering flow(s)\n", w.Whitelist, w.Flows)
			for _, d := range w.Detail {
				fmt.Fprintf(&b, "        # %s\n", d)
			}
		}
		for _, c := range s.Changes {
			fmt.Fprintf(&b, "    %s %s: %s -> %s\n", c.Action, c.Flow, entryText(c.Before), entryText(c.After))
			fmt.Fprintf(&b, "        # %s\n", c.Why)
		}
		if s.Known() && len(s.Changes) == 0 {
			b.WriteString("    (no changes)\n")
		}
	}
	if len(p.Notes) > 0 {
		b.WriteString("\nNotes from the tuning profiles (not applied by sosappliance):\n")
		for _, n := range p.Notes {
			fmt.Fprintf(&b, "  * %s\n", n)
		}
	}
	if len(p.Warnings) > 0 {
		b.WriteString("\nWarnings:\n")
		for _, w := range p.Warnings {
			fmt.Fprintf(&b, "  ! %s %s: %s\n", w.Kind, w.Key, w.Message)
		}
	}
	switch {
	case p.Empty() && p.Operation == OperationRollback && p.holds():
		b.WriteString("\nNo changes now: every item recorded is held (see the warnings).\n")
	case p.Empty() && p.Operation == OperationRollback:
		b.WriteString("\nNo changes. Nothing is recorded to roll back.\n")
	case p.Empty():
		b.WriteString("\nNo changes. The host matches the configuration.\n")
	default:
		// A "-" on a flow deletes it; say so apart from host restores.
		add, update, restore := p.Counts()
		deletes := 0
		for _, s := range p.Switches {
			for _, c := range s.Changes {
				if c.Action == Restore {
					deletes++
				}
			}
		}
		fmt.Fprintf(&b, "\nPlan: %d to add, %d to change, %d to restore", add, update, restore-deletes)
		if deletes > 0 {
			fmt.Fprintf(&b, ", %d to delete", deletes)
		}
		b.WriteString(".\n")
	}
	_, err := w.Write(b.Bytes())
	return err
}

// value quotes text so blanks show, but prints JSON values (the steering
// table) as they are: escaped JSON is unreadable.
func value(v string, present bool) string {
	if !present {
		return "(absent)"
	}
	if strings.HasPrefix(v, "{") && json.Valid([]byte(v)) {
		return v
	}
	return strconv.Quote(v)
}

func orNone(s string) string {
	if s == "" {
		return "(unnamed)"
	}
	return s
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// Encode writes the plan as indented JSON: the output of plan -json and the
// plan file of plan -out. The format, version FormatVersion:
//
//	format_version  2
//	operation       "apply" or "rollback"
//	node            the node the plan was made for
//	lineage         the state database's lineage (a UUID)
//	serial          the state serial the plan was made at
//	config_hash     SHA-256 of the configuration file, hex; absent for a rollback
//	changes         host changes in the order they apply, each:
//	  action          "+" add, "~" change, "-" restore (or remove)
//	  kind, key       the item: "sysctl", "net.core.rmem_max"
//	  before, after   values (JSON text for steering "nftables"); absent when empty
//	  before_present, after_present  whether the object exists before and after
//	  why             the reason
//	  origin          where the desired value came from: "FILE:LINE" of the
//	                  configuration, "profile NAME (FILE:LINE)" for a built-in
//	                  tuning profile (the line of its base), "agent NAME" for
//	                  steering; absent for restores (added in version 2)
//	switches        on the controller node, one per switch, by name:
//	  switch, datapath_id  the switch's name and id ("00:00:00:00:00:00:00:01")
//	  connected       its flow table was read
//	  error           why it could not be, or what failed after (changes unknown)
//	  changes         flow changes in the order they are sent, each:
//	    action          "+" add, "~" change, "-" delete
//	    flow            the key: {table, priority, match} (match as ovs-ofctl writes it)
//	    before, after   null when absent, else {cookie ("0x..."), instructions
//	                    (ovs-ofctl actions=), idle_timeout, hard_timeout, flags}
//	    why             the reason
//	warnings        [{kind, key, message}]; a profile item the node cannot
//	                take (the fq qdisc on a kernel without it) is left out of
//	                changes and named here
//	notes           advice of the tuning profiles in use that no item carries
//	                out, as text (added in version 2)
//
// A reader must refuse a format_version it does not know. Within a version,
// fields are only ever added.
func Encode(p Plan) ([]byte, error) {
	if p.Changes == nil {
		p.Changes = []Change{}
	}
	p.Switches = nonNilFlowChanges(p.Switches)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	// Flow instructions read "set_field:...->eth_dst"; HTML escaping
	// would turn the arrow into \u003e.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		return nil, fmt.Errorf("encode plan: %w", err)
	}
	return b.Bytes(), nil
}

func nonNilFlowChanges(switches []SwitchPlan) []SwitchPlan {
	if len(switches) == 0 {
		return nil
	}
	out := slices.Clone(switches)
	for i := range out {
		if out[i].Changes == nil {
			out[i].Changes = []FlowChange{}
		}
	}
	return out
}

// Decode reads a plan file and checks that it is one this binary can
// apply; its errors are for the caller to prefix with the file's name.
func Decode(data []byte) (Plan, error) {
	var p Plan
	if i := bytes.IndexByte(data, 0); i >= 0 {
		// What a crash leaves of a file whose data never reached the
		// disk (a plan saved before plan -out synced it).
		return Plan{}, fmt.Errorf("it is not whole (NUL bytes from byte %d of %d): make the plan again", i, len(data))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// Empty or cut: a plan saved on a full disk, or a crash
			// before the data reached it.
			return Plan{}, fmt.Errorf("it is empty or cut short (%d bytes): make the plan again", len(data))
		}
		return Plan{}, err
	}
	if dec.More() {
		return Plan{}, errors.New("trailing data after the plan")
	}
	if p.FormatVersion != FormatVersion {
		return Plan{}, fmt.Errorf("format version %d, this sosappliance reads %d", p.FormatVersion, FormatVersion)
	}
	if p.Operation != OperationApply && p.Operation != OperationRollback {
		return Plan{}, fmt.Errorf("unknown operation %q", p.Operation)
	}
	seen := map[string]bool{}
	for i, c := range p.Changes {
		if err := c.check(); err != nil {
			return Plan{}, fmt.Errorf("change %d: %w", i+1, err)
		}
		if seen[c.ID()] {
			return Plan{}, fmt.Errorf("change %d: %s twice", i+1, c.ID())
		}
		seen[c.ID()] = true
	}
	switches := map[string]bool{}
	for _, s := range p.Switches {
		if err := s.check(); err != nil {
			return Plan{}, err
		}
		if switches[s.Switch] {
			return Plan{}, fmt.Errorf("switch %s twice", s.Switch)
		}
		switches[s.Switch] = true
	}
	if p.Changes == nil {
		p.Changes = []Change{}
	}
	p.Switches = nonNilFlowChanges(p.Switches)
	return p, nil
}

func (c Change) check() error {
	if c.Kind == "" || c.Key == "" || strings.Contains(c.Kind, "/") {
		return fmt.Errorf("bad item %q/%q", c.Kind, c.Key)
	}
	if !c.BeforePresent && c.Before != "" || !c.AfterPresent && c.After != "" {
		return fmt.Errorf("%s: a value for an absent object", c.ID())
	}
	switch c.Action {
	case Add:
		if c.BeforePresent || !c.AfterPresent {
			return fmt.Errorf("%s: + must go from absent to present", c.ID())
		}
	case Update:
		if !c.BeforePresent || !c.AfterPresent {
			return fmt.Errorf("%s: ~ must go from present to present", c.ID())
		}
	case Restore:
	default:
		return fmt.Errorf("%s: unknown action %q", c.ID(), c.Action)
	}
	return nil
}

// holds says whether the plan holds items (Warning.Held).
func (p Plan) holds() bool {
	for _, w := range p.Warnings {
		if w.Held {
			return true
		}
	}
	return false
}

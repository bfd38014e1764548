package ovstest

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DumpedFlow is one line of ovs-ofctl dump-flows.
type DumpedFlow struct {
	Cookie   uint64
	Duration time.Duration
	Table    uint8
	Packets  uint64
	Bytes    uint64
	Priority uint16
	// Match is the match part without priority, e.g. "tcp,nw_src=10.0.0.0/24";
	// empty for a flow that matches everything.
	Match   string
	Actions string
	// Line is the line as printed.
	Line string
}

// Key identifies a flow in a table the way OpenFlow does: table, priority
// and match.
func (f DumpedFlow) Key() string {
	return fmt.Sprintf("table=%d,priority=%d,%s", f.Table, f.Priority, f.Match)
}

// Spec is the flow without its statistics, in the form ovs-ofctl add-flow
// accepts.
func (f DumpedFlow) Spec() string {
	s := fmt.Sprintf("cookie=%#x,table=%d,priority=%d", f.Cookie, f.Table, f.Priority)
	if f.Match != "" {
		s += "," + f.Match
	}
	return s + " actions=" + f.Actions
}

// defaultPriority is what OVS omits from its output.
const defaultPriority = 32768

// ParseDumpFlows parses the output of ovs-ofctl dump-flows.
func ParseDumpFlows(out string) ([]DumpedFlow, error) {
	var flows []DumpedFlow
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "OFPST_FLOW") || strings.HasPrefix(line, "NXST_FLOW") {
			continue
		}
		f, err := parseFlowLine(line)
		if err != nil {
			return nil, err
		}
		flows = append(flows, f)
	}
	return flows, nil
}

func parseFlowLine(line string) (DumpedFlow, error) {
	f := DumpedFlow{Line: line, Priority: defaultPriority}
	head, actions, ok := strings.Cut(line, " actions=")
	if !ok {
		return f, fmt.Errorf("flow line without actions: %q", line)
	}
	f.Actions = actions
	var rest string
	for _, kv := range strings.Split(strings.TrimSuffix(head, ","), ", ") {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "cookie":
			f.Cookie, err = strconv.ParseUint(v, 0, 64)
		case "duration":
			f.Duration, err = time.ParseDuration(v)
		case "table":
			var n uint64
			n, err = strconv.ParseUint(v, 10, 8)
			f.Table = uint8(n)
		case "n_packets":
			f.Packets, err = strconv.ParseUint(v, 10, 64)
		case "n_bytes":
			f.Bytes, err = strconv.ParseUint(v, 10, 64)
		case "idle_timeout", "hard_timeout", "idle_age", "hard_age", "importance":
		default:
			// Flag words and the match, separated by spaces.
			rest = kv
		}
		if err != nil {
			return f, fmt.Errorf("flow line %q: %s: %w", line, k, err)
		}
	}
	var match string
	if words := strings.Fields(rest); len(words) > 0 {
		match = words[len(words)-1]
	}
	if p, after, _ := strings.Cut(match, ","); strings.HasPrefix(p, "priority=") {
		n, err := strconv.ParseUint(strings.TrimPrefix(p, "priority="), 10, 16)
		if err != nil {
			return f, fmt.Errorf("flow line %q: priority: %w", line, err)
		}
		f.Priority = uint16(n)
		match = after
	}
	f.Match = match
	return f, nil
}

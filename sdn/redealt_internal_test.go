package sdn

import (
	"net"
	"testing"

	"github.com/sosappliance/sosappliance/sdn/flows"
	"github.com/sosappliance/sosappliance/sdn/spread"
)

// TestReDealt (review, helper-112): which reloads count as a
// re-deal of a spread's buckets.
func TestReDealt(t *testing.T) {
	mac := func(b byte) net.HardwareAddr { return net.HardwareAddr{2, 0, 0, 0, 1, b} }
	a1 := flows.Agent{Name: "a1", MAC: mac(2), Port: 3}
	a2 := flows.Agent{Name: "a2", MAC: mac(3), Port: 4}
	a3 := flows.Agent{Name: "a3", MAC: mac(4), Port: 5}
	sw := func(steers ...flows.Steer) map[string]flows.Switch {
		return map[string]flows.Switch{"s": {Name: "s", Steers: steers}}
	}
	one := flows.Steer{Whitelist: "w", Side: flows.ServerSide, Agent: a1}
	spreadOf := func(bits int, ags ...flows.Agent) flows.Steer {
		st := one
		st.Agents, st.Spread, st.SpreadBits = ags, spread.ModePort, bits
		return st
	}
	other := flows.Steer{Whitelist: "x", Side: flows.ClientSide, Agent: a1}
	moved := a1
	moved.MAC, moved.Port = mac(9), 7
	for _, tc := range []struct {
		name     string
		old, new map[string]flows.Switch
		want     bool
	}{
		{"same", sw(spreadOf(4, a1, a2)), sw(spreadOf(4, a1, a2)), false},
		{"agent added", sw(one), sw(spreadOf(4, a1, a2)), true},
		{"agent removed", sw(spreadOf(4, a1, a2)), sw(one), true},
		{"agents reordered", sw(spreadOf(4, a1, a2)), sw(spreadOf(4, a2, a1)), true},
		{"agent replaced", sw(spreadOf(4, a1, a2)), sw(spreadOf(4, a1, a3)), true},
		{"bits changed", sw(spreadOf(4, a1, a2)), sw(spreadOf(5, a1, a2)), true},
		{"whitelist added", sw(spreadOf(4, a1, a2)), sw(spreadOf(4, a1, a2), other), false},
		{"whitelist removed", sw(spreadOf(4, a1, a2), other), sw(spreadOf(4, a1, a2)), false},
		{"agent's MAC and port only", sw(one), sw(flows.Steer{Whitelist: "w", Side: flows.ServerSide, Agent: moved}), false},
		{"single agent swapped", sw(one), sw(flows.Steer{Whitelist: "w", Side: flows.ServerSide, Agent: a2}), true},
	} {
		if got := reDealt(tc.old, tc.new); got != tc.want {
			t.Errorf("%s: reDealt = %v, want %v", tc.name, got, tc.want)
		}
	}
}

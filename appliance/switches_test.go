package appliance

import (
	"testing"

	"github.com/sosappliance/sosappliance/appliance/plan"
	"github.com/sosappliance/sosappliance/internal/testsupport"
	"github.com/sosappliance/sosappliance/sdn/flows"
)

// TestSwitchPlanTypesEveryChange: one add, modify and delete as they reach
// a plan, with keys, entries and reasons.
func TestSwitchPlanTypesEveryChange(t *testing.T) {
	sw := flows.Switch{Name: "sw", DatapathID: 0x5a01, Forwarding: "normal"}
	desired, err := flows.Compile(sw)
	testsupport.RequireNoError(t, err)
	testsupport.Require(t, len(desired) == 1, "one normal flow, got %d", len(desired))
	normal := desired[0]
	onSwitch := normal
	onSwitch.Cookie, onSwitch.Instructions, onSwitch.Reason = normal.Cookie+1, nil, ""
	stale := normal
	stale.Priority, stale.IdleTimeout, stale.Reason = 7, 30, ""
	changes := flows.Changes{
		Add:    []flows.Flow{normal},
		Modify: []flows.Modification{{Before: onSwitch, After: normal}},
		Delete: []flows.Flow{stale},
	}
	sp := switchPlan(sw, changes)
	if sp.Switch != "sw" || sp.DatapathID != "00:00:00:00:00:00:5a:01" || len(sp.Changes) != 3 {
		t.Fatalf("switch plan %+v", sp)
	}
	add, mod, del := sp.Changes[0], sp.Changes[1], sp.Changes[2]
	key := plan.FlowKey{Table: normal.Table, Priority: normal.Priority, Match: normal.Match.String()}
	if add.Action != plan.Add || add.Flow != key || add.Before != nil || add.After == nil ||
		add.After.Instructions != normal.ActionsString() || add.Why != "normal forwarding: not on the switch" {
		t.Errorf("add: %+v %+v", add, add.After)
	}
	if mod.Action != plan.Update || mod.Before == nil || mod.After == nil || mod.Before.Cookie == mod.After.Cookie ||
		mod.Why != "normal forwarding: the switch has another cookie (the entry is replaced), other instructions" {
		t.Errorf("modify: %+v", mod)
	}
	if del.Action != plan.Restore || del.After != nil || del.Before == nil || del.Before.IdleTimeout != 30 || del.Flow.Priority != 7 {
		t.Errorf("delete: %+v", del)
	}
	p := plan.Plan{Switches: []plan.SwitchPlan{sp}}
	if err := p.CheckSavable(); err == nil {
		t.Error("a plan with flow changes is savable")
	}
}

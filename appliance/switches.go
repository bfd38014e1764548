package appliance

// The switches of a controller node, for plan and apply: their flow changes
// as typed plan changes, read through the running daemon when it holds the
// connections and through a one-shot connection otherwise, and one-shot
// convergence when no daemon does it.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sosappliance/sosappliance/appliance/desired"
	"github.com/sosappliance/sosappliance/appliance/plan"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
)

// SwitchAccess says how plan and apply reach a controller node's switches.
type SwitchAccess struct {
	// Socket is the control socket of a daemon that may be running here.
	Socket string
	// Wait bounds, in apply, the wait for each switch that dials the
	// controller; zero means such a switch is left to the daemon.
	Wait time.Duration
	// OneShot is used as it is for switches the daemon does not hold; its
	// Listen and Wait are filled in from the controller and Wait above.
	OneShot sdn.OneShot
}

// PlanSwitches diffs every switch of the controller node, sending nothing.
// Switches connected to a running daemon are read through it; a switch
// that listens is dialed; one that dials the controller while no daemon
// runs is reported as not reachable now. The result is sorted by name.
func PlanSwitches(ctx context.Context, access SwitchAccess, ctl *desired.Controller) []plan.SwitchPlan {
	switches := ctl.Switches
	live := map[string]plan.SwitchPlan{}
	if plans, err := FetchFlowPlan(ctx, access.Socket, switches); err == nil {
		for _, sp := range plans {
			live[sp.Switch] = sp
		}
	}
	one := access.OneShot
	one.Listen, one.Wait = ctl.Listen, 0
	defer one.Close()
	out := make([]plan.SwitchPlan, 0, len(switches))
	for _, sw := range switches {
		if sp, ok := live[sw.Name]; ok && sp.Connected {
			// The daemon's answer, with the id as this node's config has it.
			sp.DatapathID = sdn.DatapathIDString(sw.DatapathID)
			sp.Whitelists = plan.SteeringFlowCounts(sw)
			out = append(out, sp)
			continue
		}
		changes, err := one.Plan(ctx, sw)
		sp := switchPlan(sw, changes)
		switch {
		case errors.Is(err, sdn.ErrDialsIn):
			sp.Error = fmt.Sprintf("not connected: it dials the controller at %s; its flows converge once `sosappliance run` runs here", ctl.Listen)
		case err != nil:
			sp.Error = err.Error()
		default:
			sp.Connected = true
		}
		out = append(out, sp)
	}
	sortSwitchPlans(out)
	return out
}

func sortSwitchPlans(s []plan.SwitchPlan) {
	slices.SortFunc(s, func(a, b plan.SwitchPlan) int { return cmp.Compare(a.Switch, b.Switch) })
}

// SwitchOutcome is what converging one switch did. Skipped says why a
// switch was left alone; Err is set when converging it failed.
type SwitchOutcome struct {
	Switch  string
	Sent    int
	Skipped string
	Err     error
}

// ErrDaemonConverges is returned by ConvergeSwitches when a daemon runs
// here: it converges the switches itself and reloads the file on edit.
var ErrDaemonConverges = errors.New("the running daemon converges the switch flows itself (it reloads the configuration on edit)")

// ConvergeSwitches converges every switch of the controller node once,
// when no daemon runs here: switches that listen are dialed, switches that
// dial in are awaited for up to access.Wait (or skipped when it is zero).
// The error joins the failures of every switch.
func ConvergeSwitches(ctx context.Context, access SwitchAccess, ctl *desired.Controller) ([]SwitchOutcome, error) {
	if _, err := FetchStatus(ctx, access.Socket); err == nil {
		return nil, ErrDaemonConverges
	}
	one := access.OneShot
	one.Listen, one.Wait = ctl.Listen, access.Wait
	if f := ctl.TLS; f != nil && access.Wait > 0 && one.TLS == nil {
		cfg, err := sdn.LoadTLS(f.CertFile, f.KeyFile, f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("controller tls: %w", err)
		}
		one.TLS = cfg
	}
	defer one.Close()
	var out []SwitchOutcome
	var errs []error
	for _, sw := range ctl.Switches {
		res, err := one.Converge(ctx, sw)
		o := SwitchOutcome{Switch: sw.Name, Sent: res.Sent}
		switch {
		case errors.Is(err, sdn.ErrDialsIn):
			o.Skipped = "it dials the controller; pass --switch-wait to wait for it here, or run `sosappliance run`"
		case err != nil:
			o.Err = fmt.Errorf("switch %s: %w", sw.Name, err)
			errs = append(errs, o.Err)
		}
		out = append(out, o)
	}
	return out, errors.Join(errs...)
}

// switchPlan turns the changes one switch needs into plan changes, in the
// order they are sent.
func switchPlan(sw flows.Switch, changes flows.Changes) plan.SwitchPlan {
	sp := plan.SwitchPlan{Switch: sw.Name, DatapathID: sdn.DatapathIDString(sw.DatapathID), Changes: []plan.FlowChange{},
		Whitelists: plan.SteeringFlowCounts(sw)}
	for _, ch := range changes.List() {
		c := plan.FlowChange{Action: flowAction(ch.Op), Flow: flowKey(ch.Flow)}
		switch ch.Op {
		case flows.OpAdd:
			c.After = flowEntry(ch.Flow)
			c.Why = because(ch.Flow.Reason, "not on the switch")
		case flows.OpModify:
			c.Before, c.After = flowEntry(*ch.Before), flowEntry(ch.Flow)
			c.Why = because(ch.Flow.Reason, "the switch has "+differences(*ch.Before, ch.Flow))
		case flows.OpDelete:
			c.Before = flowEntry(ch.Flow)
			c.Why = "owned by the appliance (cookie prefix), no longer in the configuration"
		}
		sp.Changes = append(sp.Changes, c)
	}
	return sp
}

func flowAction(op flows.Op) plan.Action {
	switch op {
	case flows.OpAdd:
		return plan.Add
	case flows.OpModify:
		return plan.Update
	}
	return plan.Restore
}

func flowKey(f flows.Flow) plan.FlowKey {
	return plan.FlowKey{Table: f.Table, Priority: f.Priority, Match: f.Match.String()}
}

func flowEntry(f flows.Flow) *plan.FlowEntry {
	return &plan.FlowEntry{Cookie: fmt.Sprintf("%#x", f.Cookie), Instructions: f.ActionsString(),
		IdleTimeout: f.IdleTimeout, HardTimeout: f.HardTimeout, Flags: f.Flags}
}

func because(reason, what string) string {
	if reason == "" {
		return what
	}
	return reason + ": " + what
}

// differences names what differs between the entry on the switch and the
// desired one; a cookie cannot be modified, so that entry is replaced.
func differences(before, after flows.Flow) string {
	var d []string
	if before.Cookie != after.Cookie {
		d = append(d, "another cookie (the entry is replaced)")
	}
	if before.ActionsString() != after.ActionsString() {
		d = append(d, "other instructions")
	}
	if before.IdleTimeout != after.IdleTimeout || before.HardTimeout != after.HardTimeout {
		d = append(d, "other timeouts")
	}
	if before.Flags != after.Flags {
		d = append(d, "other flags")
	}
	if len(d) == 0 {
		return "other content"
	}
	return strings.Join(d, ", ")
}

package appliance

// The apply/rollback engine: plan a node's desired items against what the
// executors observe and what the store says the appliance owns, then apply a
// plan item by item, recording each step so that a crash at any point leaves
// the store saying exactly which items were applied and a re-run finishes
// the job.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sosappliance/sosappliance/appliance/plan"
	"github.com/sosappliance/sosappliance/appliance/store"
	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/tuning"
)

// Result is what an apply or rollback did.
type Result struct {
	// Serial is the state serial the apply ran as; 0 when the plan was
	// empty and nothing was recorded.
	Serial uint64
	// Done lists the changes completed, in order. When Apply fails it ends
	// just before the change that failed.
	Done []plan.Change
}

// Plan computes the changes that bring this node to desired. Desired items
// are made canonical and validated by their executors (unknown sysctl keys,
// unavailable congestion controls, offline CPUs all fail here, together);
// items the appliance owns from earlier applies but no longer desires are
// planned for restore. Plan changes nothing on the host or in the store.
func Plan(ctx context.Context, st *store.Store, exs map[string]tuning.Executor, desired []item.Item, node, configHash string) (plan.Plan, error) {
	p, _, err := planDesired(ctx, st, exs, desired, node, configHash, false, ForgetGone{})
	return p, err
}

// ForgetGone says which records of items whose interface is gone a plan
// forgets instead of holding them (holdGoneRecords): none (the zero
// value), every one (All: `--forget-gone`), or those of the interfaces
// named (`--forget-gone=eth1,eth2`).
type ForgetGone struct {
	All        bool
	Interfaces []string
}

func (f ForgetGone) forgets(ifname string) bool {
	return f.All || ifname != "" && slices.Contains(f.Interfaces, ifname)
}

// PlanForgettingGone is Plan for `plan --forget-gone` and `apply
// --forget-gone`: the records of items no longer desired whose interface
// is gone (for good: a NIC taken out), those forget names, are planned
// for restore, which, finding nothing to put the value on, forgets them,
// instead of being held (holdGoneRecords). An interface forget names
// that no held record names is an error.
func PlanForgettingGone(ctx context.Context, st *store.Store, exs map[string]tuning.Executor, desired []item.Item, node, configHash string, forget ForgetGone) (plan.Plan, error) {
	p, _, err := planDesired(ctx, st, exs, desired, node, configHash, false, forget)
	return p, err
}

// planHolding is Plan for the daemon's drift check, whose configuration
// was accepted when it was loaded: an item its executor now refuses
// because a host object it names is gone (tuning.ErrGone: an interface
// went away in a driver reload, a NIC taken out) is held, neither set nor
// put back, its record kept, and the other items converge. It returns
// the held items' warnings (also in the plan's). Any other refusal fails
// the whole plan, as Plan does.
func planHolding(ctx context.Context, st *store.Store, exs map[string]tuning.Executor, desired []item.Item, node, configHash string) (plan.Plan, []plan.Warning, error) {
	return planDesired(ctx, st, exs, desired, node, configHash, true, ForgetGone{})
}

// planDesired is Plan, with hold planHolding, with forget
// PlanForgettingGone.
func planDesired(ctx context.Context, st *store.Store, exs map[string]tuning.Executor, desired []item.Item, node, configHash string, hold bool, forget ForgetGone) (plan.Plan, []plan.Warning, error) {
	// Report every bad item at once: those that are not even well formed
	// and those their executor rejects. Optional items the node cannot
	// take are left out instead, each with a warning.
	canon, err := canonicalItems(desired)
	canon, skipped := dropRefusedOptional(ctx, exs, canon)
	verr := validateItems(ctx, exs, canon)
	var held []plan.Warning
	heldIDs := map[string]bool{}
	if verr != nil && hold && err == nil {
		canon, held, heldIDs, verr = holdGone(ctx, exs, canon, verr)
	}
	if err := errors.Join(err, verr); err != nil {
		return plan.Plan{}, nil, err
	}
	p, heldRecords, err := planAgainstStore(ctx, st, exs, canon, node, configHash, plan.OperationApply, heldIDs, forget)
	if err != nil {
		return p, nil, err
	}
	held = append(held, heldRecords...)
	p.AddWarnings(skipped...)
	p.AddWarnings(held...)
	if !hold {
		held = nil
	}
	return p, held, nil
}

// holdGone splits items that failed validation (verr) into those to
// plan and those held because a host object they name is gone
// (tuning.ErrGone), with a warning each. When any item fails for another
// reason, or none is held, it returns verr and plans nothing more.
func holdGone(ctx context.Context, exs map[string]tuning.Executor, items []item.Item, verr error) ([]item.Item, []plan.Warning, map[string]bool, error) {
	var kept []item.Item
	var held []plan.Warning
	heldIDs := map[string]bool{}
	for _, it := range items {
		err := validateItems(ctx, exs, []item.Item{it})
		switch {
		case err == nil:
			kept = append(kept, it)
		case errors.Is(err, tuning.ErrGone):
			held = append(held, plan.Warning{Kind: it.Kind, Key: it.Key, Held: true,
				Message: fmt.Sprintf("held, neither set nor put back, until it is there again: %v", err)})
			heldIDs[it.ID()] = true
		default:
			return items, nil, nil, verr
		}
	}
	if len(held) == 0 {
		return items, nil, nil, verr
	}
	return kept, held, heldIDs, nil
}

// dropRefusedOptional takes out the optional items (a built-in profile's
// fq qdisc) that their executor refuses on this node, so that a kernel
// built without them plans the rest of the profile instead of failing.
func dropRefusedOptional(ctx context.Context, exs map[string]tuning.Executor, items []item.Item) ([]item.Item, []plan.Warning) {
	var kept []item.Item
	var skipped []plan.Warning
	for _, it := range items {
		v, ok := exs[it.Kind].(tuning.Validator)
		if !it.Optional || !ok {
			kept = append(kept, it)
			continue
		}
		if err := v.Validate(ctx, []item.Item{it}); err != nil {
			skipped = append(skipped, plan.Warning{Kind: it.Kind, Key: it.Key,
				Message: fmt.Sprintf("left out %q from %s: this node cannot take it: %v", it.Value, it.Origin, err)})
			continue
		}
		kept = append(kept, it)
	}
	return kept, skipped
}

// PlanRollback computes the changes that put back every recorded previous
// value: a plan that desires nothing. A record whose host object is gone
// (tuning.ErrGone: its interface) is held, as every plan holds it (see
// holdGoneRecords), unless forget names it: then its restore is planned
// and, finding nothing to put the value on, forgets the record, for an
// interface that is gone for good.
func PlanRollback(ctx context.Context, st *store.Store, exs map[string]tuning.Executor, node string, forget ForgetGone) (plan.Plan, error) {
	p, held, err := planAgainstStore(ctx, st, exs, nil, node, "", plan.OperationRollback, nil, forget)
	p.AddWarnings(held...)
	return p, err
}

// planAgainstStore plans desired against the host and the store's
// records. The records of held items (by ID) are left out: their items
// are neither observed, set nor put back. So are the records not desired
// whose host object is gone, unless forget names it (holdGoneRecords),
// with the warnings it returns.
func planAgainstStore(ctx context.Context, st *store.Store, exs map[string]tuning.Executor, desired []item.Item, node, configHash, operation string, held map[string]bool, forget ForgetGone) (plan.Plan, []plan.Warning, error) {
	serial, err := st.Serial()
	if err != nil {
		return plan.Plan{}, nil, err
	}
	records, err := st.Records()
	if err != nil {
		return plan.Plan{}, nil, err
	}
	records = slices.DeleteFunc(records, func(r store.Record) bool { return held[r.ID()] })
	// Owned items are observed too: a restore shows what it replaces. The
	// value they are observed with is the one last applied, which is the
	// form an executor such as irq should report in.
	toObserve := slices.Clone(desired)
	wanted := make(map[string]bool, len(desired))
	for _, it := range desired {
		wanted[it.ID()] = true
	}
	records, heldRecords, err := holdGoneRecords(ctx, exs, records, wanted, forget)
	if err != nil {
		return plan.Plan{}, nil, err
	}
	for _, r := range records {
		if !wanted[r.ID()] {
			toObserve = append(toObserve, item.Item{Kind: r.Kind, Key: r.Key, Value: r.Desired})
		}
	}
	observed, err := observeItems(ctx, exs, toObserve)
	if err != nil {
		return plan.Plan{}, nil, err
	}
	p := plan.Diff(desired, observed, ownedItems(records))
	p.Operation, p.Node, p.Lineage, p.Serial, p.ConfigHash = operation, node, st.Lineage(), serial, configHash
	return p, heldRecords, nil
}

// holdGoneRecords leaves out the records of items no longer desired
// whose executor refuses them now because a host object they name is
// gone (tuning.ErrGone: an interface taken away, renamed, or moved to
// another namespace). Their restore would find nothing to put the old
// value on and forget the record, and an interface that comes back still
// holding the appliance's values (renamed or moved back) could never be
// put back. Held, the record stays, with a warning each, and the restore
// is planned once the interface is there again. The records of the gone
// interfaces forget names are kept for planning instead, and their
// restore forgets them. An interface forget names of which no record is
// held is an error, naming those that are: a typo must not pass for a
// forgotten record.
func holdGoneRecords(ctx context.Context, exs map[string]tuning.Executor, records []store.Record, wanted map[string]bool, forget ForgetGone) ([]store.Record, []plan.Warning, error) {
	var held []plan.Warning
	goneIfs := map[string]bool{}
	kept := records[:0:0]
	for _, r := range records {
		if wanted[r.ID()] {
			kept = append(kept, r)
			continue
		}
		if err := gone(ctx, exs, item.Item{Kind: r.Kind, Key: r.Key, Value: r.Desired}); err != nil {
			ifname := tuning.GoneObject(err)
			goneIfs[ifname] = true
			if !forget.forgets(ifname) {
				how := "--forget-gone"
				if ifname != "" {
					how += "=" + ifname
				}
				held = append(held, plan.Warning{Kind: r.Kind, Key: r.Key, Held: true,
					Message: fmt.Sprintf("held, to be put back to %s once it is there again, its record kept (%s forgets it): %v",
						previousText(r), how, err)})
				continue
			}
		}
		kept = append(kept, r)
	}
	var unknown []string
	for _, name := range forget.Interfaces {
		if !goneIfs[name] {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		names := slices.Sorted(maps.Keys(goneIfs))
		names = slices.DeleteFunc(names, func(n string) bool { return n == "" })
		heldText := "no record is held for a gone interface"
		if len(names) > 0 {
			heldText = "records are held for " + strings.Join(names, ", ")
		}
		return nil, nil, fmt.Errorf("--forget-gone=%s: no record is held for %s, as an interface gone from this node (%s); nothing forgotten",
			strings.Join(forget.Interfaces, ","), strings.Join(unknown, ", "), heldText)
	}
	return kept, held, nil
}

// gone returns why it cannot be put back now, when a host object it names
// is gone (tuning.GoneChecker: no module loaded, no value checked), else
// nil.
func gone(ctx context.Context, exs map[string]tuning.Executor, it item.Item) error {
	if g, ok := exs[it.Kind].(tuning.GoneChecker); ok {
		return g.Gone(ctx, it)
	}
	return nil
}

// previousText is a record's value from before the appliance, as a plan
// shows it.
func previousText(r store.Record) string {
	if !r.PreviousPresent {
		return "absent"
	}
	return fmt.Sprintf("%q", r.Previous)
}

// ownedItems is what planning needs of the store's records.
func ownedItems(records []store.Record) []plan.Owned {
	out := make([]plan.Owned, len(records))
	for i, r := range records {
		out[i] = plan.Owned{Kind: r.Kind, Key: r.Key, Previous: r.Previous, PreviousPresent: r.PreviousPresent,
			Desired: r.Desired, Applied: r.Applied, FirstSerial: r.FirstSerial, Serial: r.Serial}
	}
	return out
}

// Apply carries out a plan. It refuses a plan made against another state
// database (*plan.LineageError) or at another state serial
// (*store.StaleError). For each change it first records the item (with the
// value the host has before the appliance first touches it), then changes
// the host, then records the item as applied; restores put back the
// recorded value and then drop the record. The serial goes up by one and the
// apply is written to history with its outcome. On failure the changes
// before the failing one stay applied and recorded; planning and applying
// again finishes the job.
func Apply(ctx context.Context, st *store.Store, exs map[string]tuning.Executor, p plan.Plan) (Result, error) {
	if p.Lineage != "" && p.Lineage != st.Lineage() {
		return Result{}, &plan.LineageError{Plan: p.Lineage, This: st.Lineage()}
	}
	current, err := st.Serial()
	if err != nil {
		return Result{}, err
	}
	if current != p.Serial {
		return Result{}, &store.StaleError{PlanSerial: p.Serial, StateSerial: current}
	}
	// Flow changes are the switches'; the state records host changes only.
	if len(p.Changes) == 0 {
		return Result{}, nil
	}
	for _, c := range p.Changes {
		if exs[c.Kind] == nil {
			return Result{}, fmt.Errorf("plan changes %s but there is no %s executor", c.ID(), c.Kind)
		}
	}
	operation := p.Operation
	if operation == "" {
		operation = plan.OperationApply
	}
	serial, err := st.BeginApply(p.Serial, store.HistoryEntry{
		Operation: operation, Node: p.Node, ConfigHash: p.ConfigHash, Changes: historyChanges(p.Changes),
	})
	if err != nil {
		return Result{}, err
	}
	res := Result{Serial: serial}
	if err := applyChanges(ctx, st, exs, p.Changes, serial, &res); err != nil {
		if ferr := st.FinishApply(serial, store.ResultFailed, err.Error()); ferr != nil {
			err = errors.Join(err, fmt.Errorf("record failure: %w", ferr))
		}
		return res, fmt.Errorf("%s at serial %d: %w", operation, serial, err)
	}
	if err := st.FinishApply(serial, store.ResultOK, ""); err != nil {
		return res, err
	}
	return res, nil
}

// ApplySaved carries out a plan read from a plan file on node. Before
// anything changes it refuses a plan made for another node
// (*plan.NodeError) or against another state database
// (*plan.LineageError), one that a plan file cannot carry (flow changes,
// *plan.UnsavableError), and, as Apply does, one made at another serial.
func ApplySaved(ctx context.Context, st *store.Store, exs map[string]tuning.Executor, p plan.Plan, node string) (Result, error) {
	if err := p.CheckOrigin(node, st.Lineage()); err != nil {
		return Result{}, err
	}
	if err := p.CheckSavable(); err != nil {
		return Result{}, err
	}
	return Apply(ctx, st, exs, p)
}

func applyChanges(ctx context.Context, st *store.Store, exs map[string]tuning.Executor, changes []plan.Change, serial uint64, res *Result) error {
	previous, err := firstTouchValues(ctx, st, exs, changes)
	if err != nil {
		return err
	}
	for _, c := range changes {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stopped before %s: %w", c.ID(), err)
		}
		ex := exs[c.Kind]
		if c.Action == plan.Restore {
			if err := restoreItem(ctx, st, ex, c); err != nil {
				return err
			}
			res.Done = append(res.Done, c)
			continue
		}
		prev, first := previous[c.ID()]
		if first && c.BeforePresent && !prev.Present && tuning.SetOnly(ex) {
			// Gone since the plan (an interface renamed or taken out):
			// "absent" is no value a rollback can put back, and a
			// record of it would stay the item's only one once the
			// object is back (sysctl, interface and IRQ items can only
			// be set, not removed). Nothing is recorded or changed.
			return fmt.Errorf("%s %s: there when the plan was made, gone now: %w; plan again once it is back",
				c.Action, c.ID(), tuning.ErrGone)
		}
		if r, ok := ex.(tuning.Restorer); ok && first && prev.Present && !r.Restorable(prev.Item) {
			// An object of the appliance's own marks not as it writes
			// it (an earlier install's, a lost state database's): a
			// rollback removes it, the appliance's as it is.
			prev = item.Observation{Item: item.Item{Kind: c.Kind, Key: c.Key}}
		}
		if _, err := st.Touch(c.Kind, c.Key, prev.Value, prev.Present, c.After, serial); err != nil {
			return err
		}
		if err := ex.Apply(ctx, item.Item{Kind: c.Kind, Key: c.Key, Value: c.After}); err != nil {
			return fmt.Errorf("%s %s: %w", c.Action, c.ID(), err)
		}
		if err := st.MarkApplied(c.Kind, c.Key); err != nil {
			return err
		}
		res.Done = append(res.Done, c)
	}
	return nil
}

// firstTouchValues observes, right before applying, the items the appliance
// is about to touch for the first time: what the host has now is what a
// rollback must put back, whatever it had when the plan was made.
func firstTouchValues(ctx context.Context, st *store.Store, exs map[string]tuning.Executor, changes []plan.Change) (map[string]item.Observation, error) {
	var items []item.Item
	for _, c := range changes {
		if c.Action == plan.Restore {
			continue
		}
		_, owned, err := st.Record(c.Kind, c.Key)
		if err != nil {
			return nil, err
		}
		if !owned {
			items = append(items, item.Item{Kind: c.Kind, Key: c.Key, Value: c.After})
		}
	}
	obs, err := observeItems(ctx, exs, items)
	if err != nil {
		return nil, err
	}
	out := make(map[string]item.Observation, len(obs))
	for _, o := range obs {
		if !o.Present {
			o.Value = ""
		}
		out[o.ID()] = o
	}
	return out, nil
}

// restoreItem gives back one owned item: its recorded previous value, or
// removal when it did not exist before. An object already gone from the
// host is not recreated just to hold an old value; its record is dropped
// (planning holds, rather than plans, the records of items whose
// interface is gone: holdGoneRecords). Whether it is gone is looked at again now, not taken from the plan: an
// interface missing when the plan was made may be back, still holding
// the appliance's value, and its record is then the only way back. An
// object already at its previous value is not written.
func restoreItem(ctx context.Context, st *store.Store, ex tuning.Executor, c plan.Change) error {
	rec, owned, err := st.Record(c.Kind, c.Key)
	if err != nil {
		return err
	}
	present := c.BeforePresent
	if owned && !present {
		obs, err := ex.Observe(ctx, []item.Item{{Kind: c.Kind, Key: c.Key, Value: rec.Desired}})
		if err != nil {
			return fmt.Errorf("- %s: %w", c.ID(), err)
		}
		present = len(obs) == 1 && obs[0].Present
	}
	if owned && present {
		if rec.PreviousPresent {
			// Already at it (the apply that recorded it failed at its
			// write: a parameter read-only here): no write, which
			// would fail again at every apply and rollback, keeping
			// the record for good.
			obs, oerr := ex.Observe(ctx, []item.Item{{Kind: c.Kind, Key: c.Key, Value: rec.Previous}})
			if oerr != nil {
				return fmt.Errorf("- %s: %w", c.ID(), oerr)
			}
			if len(obs) == 1 && obs[0].Present && obs[0].Value == rec.Previous {
				return st.Forget(c.Kind, c.Key)
			}
			err = ex.Apply(ctx, item.Item{Kind: c.Kind, Key: c.Key, Value: rec.Previous})
		} else {
			err = ex.Remove(ctx, item.Item{Kind: c.Kind, Key: c.Key, Value: rec.Desired})
		}
		if err != nil {
			return fmt.Errorf("- %s: %w", c.ID(), err)
		}
	}
	return st.Forget(c.Kind, c.Key)
}

// Rollback puts back every recorded previous value (removing objects that
// did not exist before the appliance made them) and records that in history
// as a rollback. With nothing recorded it does nothing.
func Rollback(ctx context.Context, st *store.Store, exs map[string]tuning.Executor, node string) (plan.Plan, Result, error) {
	p, err := PlanRollback(ctx, st, exs, node, ForgetGone{})
	if err != nil {
		return p, Result{}, err
	}
	res, err := Apply(ctx, st, exs, p)
	return p, res, err
}

// Converge plans and applies in one step, as the daemon does on start
// and reload.
func Converge(ctx context.Context, st *store.Store, exs map[string]tuning.Executor, desired []item.Item, node, configHash string) (plan.Plan, Result, error) {
	p, err := Plan(ctx, st, exs, desired, node, configHash)
	if err != nil {
		return p, Result{}, err
	}
	res, err := Apply(ctx, st, exs, p)
	return p, res, err
}

// ConvergeHolding is Converge for the drift check: items whose host
// object is gone are held (see planHolding) while the rest converge. held
// is nil when planning failed.
func ConvergeHolding(ctx context.Context, st *store.Store, exs map[string]tuning.Executor, desired []item.Item, node, configHash string) (p plan.Plan, held []plan.Warning, res Result, err error) {
	p, held, err = planHolding(ctx, st, exs, desired, node, configHash)
	if err != nil {
		return p, nil, Result{}, err
	}
	if held == nil {
		held = []plan.Warning{}
	}
	res, err = Apply(ctx, st, exs, p)
	return p, held, res, err
}

// canonicalItems rewrites values canonically and rejects an ID desired with
// two values. It returns the good items even when some are bad.
func canonicalItems(items []item.Item) ([]item.Item, error) {
	out := make([]item.Item, 0, len(items))
	seen := make(map[string]string, len(items))
	var errs []error
	for _, it := range items {
		c, err := item.Canonical(it)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, dup := seen[c.ID()]; dup {
			if prev != c.Value {
				errs = append(errs, fmt.Errorf("%s is desired twice: %q and %q", c.ID(), prev, c.Value))
			}
			continue
		}
		seen[c.ID()] = c.Value
		out = append(out, c)
	}
	return out, errors.Join(errs...)
}

// groupByKind groups items per kind, kinds in sorted order for a stable call
// sequence.
func groupByKind(items []item.Item) ([]string, map[string][]item.Item) {
	groups := map[string][]item.Item{}
	for _, it := range items {
		groups[it.Kind] = append(groups[it.Kind], it)
	}
	kinds := make([]string, 0, len(groups))
	for k := range groups {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return kinds, groups
}

func validateItems(ctx context.Context, exs map[string]tuning.Executor, items []item.Item) error {
	kinds, groups := groupByKind(items)
	var errs []error
	for _, kind := range kinds {
		ex := exs[kind]
		if ex == nil {
			errs = append(errs, fmt.Errorf("no executor for %s items (%s)", kind, groups[kind][0].ID()))
			continue
		}
		if v, ok := ex.(tuning.Validator); ok {
			if err := v.Validate(ctx, groups[kind]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func observeItems(ctx context.Context, exs map[string]tuning.Executor, items []item.Item) ([]item.Observation, error) {
	kinds, groups := groupByKind(items)
	var out []item.Observation
	var errs []error
	for _, kind := range kinds {
		ex := exs[kind]
		if ex == nil {
			errs = append(errs, fmt.Errorf("no executor for %s items (%s)", kind, groups[kind][0].ID()))
			continue
		}
		obs, err := ex.Observe(ctx, groups[kind])
		if err != nil {
			errs = append(errs, fmt.Errorf("observe %s: %w", kind, err))
			continue
		}
		out = append(out, obs...)
	}
	return out, errors.Join(errs...)
}

func historyChanges(changes []plan.Change) []store.HistoryChange {
	out := make([]store.HistoryChange, len(changes))
	for i, c := range changes {
		out[i] = store.HistoryChange{
			Action: string(c.Action), Kind: c.Kind, Key: c.Key,
			Before: c.Before, BeforePresent: c.BeforePresent,
			After: c.After, AfterPresent: c.AfterPresent,
		}
	}
	return out
}

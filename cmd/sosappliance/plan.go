package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sosappliance/sosappliance/appliance"
	"github.com/sosappliance/sosappliance/appliance/plan"
	"github.com/sosappliance/sosappliance/appliance/store"
	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/filetrust"
	"github.com/sosappliance/sosappliance/tuning"
)

func newPlanCommand() *cobra.Command {
	var (
		nf               nodeFlags
		asJSON, detailed bool
		out              string
		forgetGone       appliance.ForgetGone
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show what would change on this node",
		Long: `plan compares this node's desired state with what is on it and lists the
changes: + add, ~ change (before -> after), - restore a value the appliance no
longer wants. It changes nothing. With -detailed-exitcode it exits 0 when
there is nothing to do, 2 when there are changes, and 1 on error or when a
switch could not be read.`,
		Args: forgetGoneArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, src, d, err := nf.compile(cmd)
			if err != nil {
				return err
			}
			warnUntrusted(cmd, nf.config)
			st, err := openStore(nf.statePath(cfg))
			if err != nil {
				return err
			}
			defer st.Close()
			p, err := planFor(forgetGone)(cmd.Context(), st, tuning.Executors(nf.root), d.Items, d.Node, src.Hash())
			if err != nil {
				return planError(err)
			}
			p.Notes = d.Notes
			if d.Controller != nil {
				p.Switches = appliance.PlanSwitches(cmd.Context(), appliance.SwitchAccess{Socket: nf.controlSocket(cfg)}, d.Controller)
			}
			if asJSON {
				b, err := plan.Encode(p)
				if err != nil {
					return err
				}
				cmd.OutOrStdout().Write(b)
			} else {
				p.WriteText(cmd.OutOrStdout())
			}
			if out != "" {
				// Shown, but not saved: a plan file must be the whole plan.
				if err := p.CheckSavable(); err != nil {
					return exitError{code: 1, msg: "plan -out: " + err.Error()}
				}
				b, err := plan.Encode(p)
				if err != nil {
					return err
				}
				if err := savePlan(out, b); err != nil {
					return fmt.Errorf("save plan: %w", err)
				}
				if !asJSON {
					fmt.Fprintf(cmd.OutOrStdout(), "Saved the plan to %s; apply it with: %s\n", out, applyCommand(cmd, &nf, d.Node, out))
				}
			}
			if detailed && !p.Empty() {
				return exitError{code: 2}
			}
			if detailed && !allKnown(p) {
				// Not "nothing to do": what the switches need is unknown.
				return exitError{code: 1, msg: "plan: not every switch could be read, so what they need is unknown"}
			}
			return nil
		},
	}
	nf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the plan as JSON")
	cmd.Flags().StringVar(&out, "out", "", "save the plan to this file for apply")
	cmd.Flags().BoolVar(&detailed, "detailed-exitcode", false, "exit 2 when there are changes")
	addForgetGoneFlag(cmd, &forgetGone)
	return cmd
}

// addForgetGoneFlag adds --forget-gone[=IFACE,...] to cmd: alone it
// forgets the records of every gone interface, with names only those of
// the interfaces named (repeatable).
func addForgetGoneFlag(cmd *cobra.Command, f *appliance.ForgetGone) {
	cmd.Flags().Var((*forgetGoneFlag)(f), "forget-gone",
		"forget the records of items no longer wanted whose interface is gone (for good), instead of keeping them until it is back; "+
			"--forget-gone=eth1,eth2 forgets only those interfaces' records")
	cmd.Flags().Lookup("forget-gone").NoOptDefVal = forgetAllGone
}

// forgetAllGone is --forget-gone given without interfaces.
const forgetAllGone = "*"

// forgetGoneFlag is the value of --forget-gone.
type forgetGoneFlag appliance.ForgetGone

func (f *forgetGoneFlag) Set(v string) error {
	if v == forgetAllGone {
		f.All = true
		return nil
	}
	for name := range strings.SplitSeq(v, ",") {
		name = strings.TrimSpace(name)
		if name == "" || strings.ContainsAny(name, "/ \t\x00") || name == "." || name == ".." {
			return fmt.Errorf("%q is not an interface name (--forget-gone=IFACE,... or --forget-gone alone for every gone interface)", name)
		}
		if !slices.Contains(f.Interfaces, name) {
			f.Interfaces = append(f.Interfaces, name)
		}
	}
	return nil
}

func (f *forgetGoneFlag) String() string {
	if f.All {
		return forgetAllGone
	}
	return strings.Join(f.Interfaces, ",")
}

func (f *forgetGoneFlag) Type() string { return "interfaces" }

// forgetGoneArgs is the positional arguments check of plan and rollback
// (max 0) and apply (max 1, the plan file): it explains an interface
// given to --forget-gone after a space, which the flag, optional in its
// value, cannot take, and refuses --forget-gone with a saved plan, which
// is applied as it was made.
func forgetGoneArgs(max int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		f := cmd.Flags().Lookup("forget-gone")
		if f == nil || !f.Changed || len(args) == 0 {
			if max == 0 {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.MaximumNArgs(max)(cmd, args)
		}
		hint := ""
		if f.Value.String() == forgetAllGone {
			hint = fmt.Sprintf("; an interface goes after an '=', as --forget-gone=%s", args[0])
		}
		if max == 0 {
			return fmt.Errorf("unexpected argument %q%s", args[0], hint)
		}
		return fmt.Errorf("--forget-gone with the saved plan %s: a saved plan is applied as it was made (give --forget-gone to plan -out)%s",
			args[0], hint)
	}
}

// planFor is the planner of plan and apply: with forget the records of
// gone interfaces' items no longer wanted are forgotten, not held.
func planFor(forget appliance.ForgetGone) func(context.Context, *store.Store, map[string]tuning.Executor, []item.Item, string, string) (plan.Plan, error) {
	if forget.All || len(forget.Interfaces) > 0 {
		return func(ctx context.Context, st *store.Store, exs map[string]tuning.Executor, desired []item.Item, node, hash string) (plan.Plan, error) {
			return appliance.PlanForgettingGone(ctx, st, exs, desired, node, hash, forget)
		}
	}
	return appliance.Plan
}

func newApplyCommand() *cobra.Command {
	var (
		nf          nodeFlags
		autoApprove bool
		switchWait  time.Duration
		forgetGone  appliance.ForgetGone
	)
	cmd := &cobra.Command{
		Use:   "apply [PLANFILE]",
		Short: "Make the changes of a plan",
		Long: `apply plans against the config (-c) and makes the changes after you confirm,
or makes the changes of a plan saved with plan -out. A saved plan is refused
when it was made for another node, against another state database (its
lineage), or at an older state serial: plan again. A plan file holds host
changes only; on the controller node, apply -c converges the switches.`,
		Args: forgetGoneArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			execs := tuning.Executors(nf.root)
			if len(args) == 1 {
				return applySaved(cmd, &nf, execs, args[0])
			}
			if err := filetrust.Check("config file", nf.config); err != nil {
				return exitError{code: 1, msg: err.Error()}
			}
			cfg, src, want, err := nf.compile(cmd)
			if err != nil {
				return err
			}
			st, err := openStore(nf.statePath(cfg))
			if err != nil {
				return err
			}
			defer st.Close()
			p, err := planFor(forgetGone)(cmd.Context(), st, execs, want.Items, want.Node, src.Hash())
			if err != nil {
				return planError(err)
			}
			p.Notes = want.Notes
			controller := want.Controller != nil
			if controller {
				p.Switches = appliance.PlanSwitches(cmd.Context(), appliance.SwitchAccess{Socket: nf.controlSocket(cfg)}, want.Controller)
			}
			p.WriteText(cmd.OutOrStdout())
			if p.Empty() && allKnown(p) {
				return nil
			}
			if writesHost(p) {
				held, err := besideDaemon(cmd, nf.statePath(cfg), nf.controlSocket(cfg), want.Node)
				if err != nil {
					return err
				}
				defer held.Release()
			}
			if err := confirm(cmd, autoApprove, "Apply these changes?"); err != nil {
				return err
			}
			if len(p.Changes) > 0 {
				res, err := appliance.Apply(cmd.Context(), st, execs, p)
				if err := reportResult(cmd, "Apply", p, res, err); err != nil {
					return err
				}
			}
			if controller && want.Cluster != nil {
				// Another controller may be master: converging here
				// would write past the election.
				fmt.Fprintln(cmd.OutOrStdout(), "Switches not converged here: with a cluster block the elected master (`sosappliance run`) programs them.")
				return nil
			}
			if controller {
				// Converged afresh: level-based, whatever moved since
				// the plan above was shown.
				outcomes, err := appliance.ConvergeSwitches(cmd.Context(),
					appliance.SwitchAccess{Socket: nf.controlSocket(cfg), Wait: switchWait}, want.Controller)
				return reportSwitches(cmd.OutOrStdout(), outcomes, err)
			}
			return nil
		},
	}
	nf.register(cmd)
	cmd.Flags().BoolVar(&autoApprove, "auto-approve", false, "do not ask for confirmation")
	cmd.Flags().DurationVar(&switchWait, "switch-wait", 0, "on the controller node without a running daemon, wait this long for each switch that dials in")
	addForgetGoneFlag(cmd, &forgetGone)
	return cmd
}

func newRollbackCommand() *cobra.Command {
	var (
		nf          nodeFlags
		autoApprove bool
		forgetGone  appliance.ForgetGone
	)
	cmd := &cobra.Command{
		Use:   "rollback",
		Short: "Restore the values recorded before the appliance first touched them",
		Long: `rollback puts back, on this node, every value the state database recorded
before the appliance first changed it (sysctls, interface settings, IRQ
affinity, steering), shows the plan and asks before it writes. The state
database is the one the config (-c) names in daemon.state_path, or --state;
when the config does not load, the default one, if it is there. It refuses
while the daemon runs on that database, which would apply its file again:
stop it first (systemctl stop sosappliance). A record whose interface is
away is kept and rollback exits 1 naming how many; run it again once the
interface is back, or forget them with --forget-gone (all) or
--forget-gone=eth1,eth2. It leaves the switches' flows alone: they are
the controller's to converge.`,
		Args: forgetGoneArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			node, err := nf.nodeName()
			if err != nil {
				return err
			}
			statePath, guessed := nf.state, false
			if statePath == "" {
				// The config names the store; an unreadable config must
				// not stop a rollback, so fall back to the default path,
				// but only to a database that is there.
				if cfg, _, diags := loadConfigQuiet(nf.config); cfg != nil && !diags {
					statePath = cfg.Daemon.StatePath
					// It names the state database rolled back.
					warnUntrusted(cmd, nf.config)
				} else {
					statePath, guessed = nf.statePath(nil), true
				}
			}
			held, err := store.LockAgainstDaemon(statePath)
			if err != nil {
				return err
			}
			defer held.Release()
			st, err := store.Open(statePath, store.Options{MustExist: true})
			switch {
			case errors.Is(err, store.ErrNoDatabase) && guessed:
				return fmt.Errorf("%s cannot be read, so the state database it names is unknown, and there is none at the default %s: "+
					"fix the file, or pass --state PATH", nf.config, statePath)
			case errors.Is(err, store.ErrNoDatabase):
				fmt.Fprintf(cmd.OutOrStdout(), "No state database at %s: nothing is recorded there to roll back.\n", statePath)
				return nil
			case err != nil:
				return fmt.Errorf("open state: %w", err)
			}
			defer st.Close()
			if guessed {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s cannot be read; rolling back the state database at the default path, %s\n", nf.config, statePath)
			}
			execs := tuning.Executors(nf.root)
			p, err := appliance.PlanRollback(cmd.Context(), st, execs, node, forgetGone)
			if err != nil {
				return fmt.Errorf("plan rollback: %w", err)
			}
			p.WriteText(cmd.OutOrStdout())
			if !p.Empty() {
				if err := confirm(cmd, autoApprove, "Roll back these items?"); err != nil {
					return err
				}
				res, err := appliance.Apply(cmd.Context(), st, execs, p)
				if err := reportResult(cmd, "Rollback", p, res, err); err != nil {
					return err
				}
			}
			return rollbackLeft(st)
		},
	}
	nf.register(cmd)
	cmd.Flags().BoolVar(&autoApprove, "auto-approve", false, "do not ask for confirmation")
	addForgetGoneFlag(cmd, &forgetGone)
	return cmd
}

// rollbackLeft fails a rollback that left records behind: items held
// because their interface is gone.
func rollbackLeft(st *store.Store) error {
	left, err := st.Records()
	if err != nil || len(left) == 0 {
		return err
	}
	return exitError{code: 1, msg: fmt.Sprintf("%d item(s) not put back, their records kept: they are held (see the warnings above); "+
		"run rollback again once what they name is back, or rollback --forget-gone (every one) or --forget-gone=IFACE,... to forget them", len(left))}
}

// applySaved makes the changes of a plan file, which was reviewed when it
// was made: applying it is the approval.
func applySaved(cmd *cobra.Command, nf *nodeFlags, execs map[string]tuning.Executor, path string) error {
	// Its changes are written as root.
	if err := filetrust.Check("plan file", path); err != nil {
		return exitError{code: 1, msg: err.Error()}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			err = pe.Err // the name comes first, as in the other errors
		}
		return fmt.Errorf("plan file %s: %w", path, err)
	}
	p, err := plan.Decode(data)
	if err != nil {
		return fmt.Errorf("plan file %s: %w", path, err)
	}
	node, err := nf.nodeName()
	if err != nil {
		return err
	}
	// Refused before any state is opened (a wrong node opened none).
	if p.Node != node {
		return exitError{code: 1, msg: fmt.Sprintf("plan file %s: %v (pass --node %s)", path, &plan.NodeError{Plan: p.Node, This: node}, p.Node)}
	}
	// The state the plan was made against: --state, or the config's
	// state_path as plan read it; never a database made here.
	statePath := nf.state
	if statePath == "" {
		cfg, _, bad := loadConfigQuiet(nf.config)
		switch {
		case cfg != nil && !bad:
			statePath = cfg.Daemon.StatePath
		case cmd.Flags().Changed("config"):
			return exitError{code: 1, msg: fmt.Sprintf("%s does not load, so its state_path is unknown: pass --state (run validate -c %s for why)", nf.config, nf.config)}
		default:
			statePath = nf.statePath(nil)
		}
	}
	if writesHost(p) {
		socket := nf.socket
		if cfg, _, bad := loadConfigQuiet(nf.config); socket == "" && cfg != nil && !bad {
			socket = cfg.Daemon.ControlSocket
		}
		held, err := besideDaemon(cmd, statePath, socket, node)
		if err != nil {
			return err
		}
		defer held.Release()
	}
	st, err := store.Open(statePath, store.Options{MustExist: true})
	if errors.Is(err, store.ErrNoDatabase) {
		return exitError{code: 1, msg: fmt.Sprintf("plan file %s: no state database at %s: apply a saved plan against the state it was made with (--state, or -c with the file it was planned from)", path, statePath)}
	}
	if err != nil {
		return fmt.Errorf("open state: %w", err)
	}
	defer st.Close()
	res, err := appliance.ApplySaved(cmd.Context(), st, execs, p, node)
	if refused(err) {
		return exitError{code: 1, msg: fmt.Sprintf("plan file %s: %v", path, err)}
	}
	if err == nil && len(p.Changes) == 0 {
		fmt.Fprintln(cmd.OutOrStdout(), "The saved plan has no changes.")
		return nil
	}
	return reportResult(cmd, "Apply", p, res, err)
}

// planError is a failed plan; one that a non-root user could not make
// says why.
func planError(err error) error {
	if os.Geteuid() != 0 && (errors.Is(err, fs.ErrPermission) || strings.Contains(err.Error(), "operation not permitted")) {
		return fmt.Errorf("plan: %w (plan reads this node's sysctls, nftables and routes as they are: run it as root)", err)
	}
	return fmt.Errorf("plan: %w", err)
}

// savePlan writes a plan file as a new file moved into place: never
// through a symlink or into a file of another user's that is already at
// the name (in /tmp: their file, read by them; their symlink, to a file
// of root's truncated). In a sticky directory the move over another
// user's file is refused.
func savePlan(out string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		// On disk before its name is: a crash after the rename leaves
		// the whole plan, not an empty file.
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		os.Remove(tmp)
		if errors.Is(err, fs.ErrPermission) {
			err = fmt.Errorf("%w (another user's file is at %s: save the plan elsewhere)", err, out)
		}
	}
	return err
}

// warnUntrusted says, without failing, that apply and run would refuse
// the config file because another user can change it.
func warnUntrusted(cmd *cobra.Command, path string) {
	if err := filetrust.Check("config file", path); err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %v; apply and run refuse it\n", err)
	}
}

// refused reports whether a saved plan was refused before anything
// changed: made elsewhere, stale, or carrying what a plan file cannot.
func refused(err error) bool {
	var (
		stale     *store.StaleError
		node      *plan.NodeError
		lineage   *plan.LineageError
		unsavable *plan.UnsavableError
	)
	return errors.As(err, &stale) || errors.As(err, &node) || errors.As(err, &lineage) || errors.As(err, &unsavable)
}

// allKnown reports whether every switch of the plan was read.
func allKnown(p plan.Plan) bool {
	for _, s := range p.Switches {
		if !s.Known() {
			return false
		}
	}
	return true
}

func reportResult(cmd *cobra.Command, what string, p plan.Plan, res appliance.Result, err error) error {
	if err != nil {
		if refused(err) {
			return exitError{code: 1, msg: err.Error()}
		}
		again := "apply"
		if p.Operation == plan.OperationRollback {
			again = "rollback"
		}
		fmt.Fprintf(cmd.OutOrStdout(), "\n%s failed after %d of %d change(s); the state records exactly which. Run %s again to finish.\n",
			what, len(res.Done), len(p.Changes), again)
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "\n%s complete: %d change(s), state serial %d.\n", what, len(res.Done), res.Serial)
	return nil
}

// applyCommand is the command that applies the plan saved to out: with
// the node, and the state or config the plan was made against.
func applyCommand(cmd *cobra.Command, nf *nodeFlags, node, out string) string {
	if strings.HasPrefix(out, "-") {
		out = "./" + out // not a flag
	}
	args := []string{"sosappliance", "apply", out, "--node", node}
	switch {
	case nf.state != "":
		args = append(args, "--state", nf.state)
	case cmd.Flags().Changed("config"):
		args = append(args, "-c", nf.config)
	}
	if nf.root != "/" {
		args = append(args, "--root", nf.root)
	}
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`;&|<>(){}*?[]#~!^=%,") {
			args[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(args, " ")
}

// besideDaemon refuses host changes while a daemon runs with the state
// database at statePath, or answers for node on socket (running with
// another state database: a state_path edited since it started, a
// --state of its unit's): its next convergence would undo them, as it
// would a rollback's. The shared lock it returns keeps a daemon from
// starting on statePath until the apply is done.
func besideDaemon(cmd *cobra.Command, statePath, socket, node string) (*store.HeldLock, error) {
	held, err := store.LockAgainstDaemon(statePath)
	var running *store.DaemonRunningError
	if errors.As(err, &running) {
		return nil, exitError{code: 1, msg: running.Beside()}
	}
	if err != nil {
		return nil, err
	}
	if socket != "" {
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
		st, ferr := appliance.FetchStatus(ctx, socket)
		cancel()
		if ferr == nil && st.Node == node {
			held.Release()
			return nil, exitError{code: 1, msg: fmt.Sprintf("a sosappliance daemon answers on %s for node %s, running %s: it converges this node at a reload "+
				"(systemctl reload sosappliance) or its next drift check, undoing changes made beside it; to apply another file or state, stop it first "+
				"(systemctl stop sosappliance)", socket, node, st.ConfigPath)}
		}
	}
	return held, nil
}

// writesHost says whether applying p writes the host: not when its only
// changes forget records (an object gone for good, or already at its
// value from before), which a running daemon's convergence does not undo.
func writesHost(p plan.Plan) bool {
	for _, c := range p.Changes {
		onlyForgets := c.Action == plan.Restore && (!c.BeforePresent || c.AfterPresent && c.Before == c.After)
		if !onlyForgets {
			return true
		}
	}
	return false
}

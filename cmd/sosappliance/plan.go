package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/sosappliance/sosappliance/appliance"
	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/appliance/desired"
	"github.com/sosappliance/sosappliance/appliance/plan"
	"github.com/sosappliance/sosappliance/appliance/store"
	"github.com/sosappliance/sosappliance/tuning"
)

func newPlanCommand() *cobra.Command {
	var (
		nf               nodeFlags
		asJSON, detailed bool
		out              string
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show what would change on this node",
		Long: `plan compares this node's desired state with what is on it and lists the
changes: + add, ~ change (before -> after), - restore a value the appliance no
longer wants. It changes nothing. With -detailed-exitcode it exits 0 when
there is nothing to do, 2 when there are changes, and 1 on error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, src, d, err := nf.compile(cmd)
			if err != nil {
				return err
			}
			st, err := openStore(nf.statePath(cfg))
			if err != nil {
				return err
			}
			defer st.Close()
			p, err := appliance.Plan(cmd.Context(), st, tuning.Executors(nf.root), d.Items, d.Node, src.Hash())
			if err != nil {
				return fmt.Errorf("plan: %w", err)
			}
			var flowPlans []appliance.FlowPlan
			flowChanges := 0
			if d.Controller != nil {
				flowPlans = planFlows(cmd.Context(), cfg, nf.controlSocket(cfg), d.Controller)
				for _, fp := range flowPlans {
					flowChanges += len(fp.Changes)
				}
			}
			if asJSON {
				b, err := json.MarshalIndent(struct {
					Host  plan.Plan            `json:"host"`
					Flows []appliance.FlowPlan `json:"flows,omitempty"`
				}{p, flowPlans}, "", "  ")
				if err != nil {
					return err
				}
				cmd.OutOrStdout().Write(append(b, '\n'))
			} else {
				p.WriteText(cmd.OutOrStdout())
				if len(flowPlans) > 0 {
					writeFlowPlans(cmd.OutOrStdout(), flowPlans)
					fmt.Fprintf(cmd.OutOrStdout(), "\nFlows: %d change(s).\n", flowChanges)
				}
			}
			if out != "" {
				b, err := plan.Encode(p)
				if err != nil {
					return err
				}
				if err := os.WriteFile(out, b, 0o600); err != nil {
					return fmt.Errorf("save plan: %w", err)
				}
				if !asJSON {
					fmt.Fprintf(cmd.OutOrStdout(), "Saved the plan to %s; apply it with: sosappliance apply %s\n", out, out)
				}
			}
			if detailed && (!p.Empty() || flowChanges > 0) {
				return exitError{code: 2}
			}
			return nil
		},
	}
	nf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the plan as JSON")
	cmd.Flags().StringVar(&out, "out", "", "save the plan to this file for apply")
	cmd.Flags().BoolVar(&detailed, "detailed-exitcode", false, "exit 2 when there are changes")
	return cmd
}

func newApplyCommand() *cobra.Command {
	var (
		nf          nodeFlags
		autoApprove bool
		switchWait  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "apply [PLANFILE]",
		Short: "Make the changes of a plan",
		Long: `apply plans against the config (-c) and makes the changes after you confirm,
or makes the changes of a plan saved with plan -out. A saved plan made at an
older state serial is refused: plan again.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var (
				p       plan.Plan
				st      *store.Store
				execs   = tuning.Executors(nf.root)
				planned bool
				cfg     *config.Config
				want    *desired.Desired
			)
			if len(args) == 1 {
				data, err := os.ReadFile(args[0])
				if err != nil {
					return fmt.Errorf("read plan: %w", err)
				}
				if p, err = plan.Decode(data); err != nil {
					return fmt.Errorf("plan file %s: %w", args[0], err)
				}
				// A saved plan was reviewed already; applying it is the
				// approval.
				planned, autoApprove = true, true
				if st, err = openStore(nf.statePath(nil)); err != nil {
					return err
				}
			} else {
				var src config.Source
				var err error
				if cfg, src, want, err = nf.compile(cmd); err != nil {
					return err
				}
				if st, err = openStore(nf.statePath(cfg)); err != nil {
					return err
				}
				if p, err = appliance.Plan(cmd.Context(), st, execs, want.Items, want.Node, src.Hash()); err != nil {
					st.Close()
					return fmt.Errorf("plan: %w", err)
				}
			}
			defer st.Close()
			if !planned {
				p.WriteText(cmd.OutOrStdout())
			}
			controller := want != nil && want.Controller != nil
			if p.Empty() && !controller {
				if planned {
					fmt.Fprintln(cmd.OutOrStdout(), "The saved plan has no changes.")
				}
				return nil
			}
			if err := confirm(cmd, autoApprove, "Apply these changes?"); err != nil {
				return err
			}
			if !p.Empty() {
				res, err := appliance.Apply(cmd.Context(), st, execs, p)
				if err := reportResult(cmd, "Apply", p, res, err); err != nil {
					return err
				}
			}
			if controller {
				return applyFlows(cmd.Context(), cmd.OutOrStdout(), cfg, nf.controlSocket(cfg), want.Controller, switchWait)
			}
			return nil
		},
	}
	nf.register(cmd)
	cmd.Flags().BoolVar(&autoApprove, "auto-approve", false, "do not ask for confirmation")
	cmd.Flags().DurationVar(&switchWait, "switch-wait", 0, "on the controller node without a running daemon, wait this long for each switch that dials in")
	return cmd
}

func newRollbackCommand() *cobra.Command {
	var (
		nf          nodeFlags
		autoApprove bool
	)
	cmd := &cobra.Command{
		Use:   "rollback",
		Short: "Restore the values recorded before the appliance first touched them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			node, err := nf.nodeName()
			if err != nil {
				return err
			}
			statePath := nf.state
			if statePath == "" {
				// The config names the store; an unreadable config must
				// not stop a rollback, so fall back to the default path.
				if cfg, _, diags := loadConfigQuiet(nf.config); cfg != nil && !diags {
					statePath = cfg.Daemon.StatePath
				} else {
					statePath = nf.statePath(nil)
				}
			}
			st, err := openStore(statePath)
			if err != nil {
				return err
			}
			defer st.Close()
			execs := tuning.Executors(nf.root)
			p, err := appliance.PlanRollback(cmd.Context(), st, execs, node)
			if err != nil {
				return fmt.Errorf("plan rollback: %w", err)
			}
			p.WriteText(cmd.OutOrStdout())
			if p.Empty() {
				return nil
			}
			if err := confirm(cmd, autoApprove, "Roll back these items?"); err != nil {
				return err
			}
			res, err := appliance.Apply(cmd.Context(), st, execs, p)
			return reportResult(cmd, "Rollback", p, res, err)
		},
	}
	nf.register(cmd)
	cmd.Flags().BoolVar(&autoApprove, "auto-approve", false, "do not ask for confirmation")
	return cmd
}

func reportResult(cmd *cobra.Command, what string, p plan.Plan, res appliance.Result, err error) error {
	if err != nil {
		var stale *store.StaleError
		if errors.As(err, &stale) {
			return exitError{code: 1, msg: err.Error()}
		}
		fmt.Fprintf(cmd.OutOrStdout(), "\n%s failed after %d of %d change(s); the state records exactly which. Run apply again to finish.\n",
			what, len(res.Done), len(p.Changes))
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "\n%s complete: %d change(s), state serial %d.\n", what, len(res.Done), res.Serial)
	return nil
}

package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/appliance/desired"
)

func newValidateCommand() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check sos.hcl and print every problem with file:line:col",
		Long: `validate decodes and checks the configuration without touching the node.
It also compiles what each node the file names would run, so that a
problem of one node's (two of its tunings setting one value differently)
shows here rather than at its plan. It exits 0 when the file is valid and
1 when it is not, listing every problem.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, src, diags := config.LoadFile(path)
			config.WriteDiagnostics(cmd.ErrOrStderr(), diags, src.Bytes)
			if diags.HasErrors() {
				return exitError{code: 1, msg: fmt.Sprintf("%s: %d problem(s)", path, len(diags.Errs()))}
			}
			// What each node would run: a problem of one node's (two of
			// its tunings disagreeing) is found here, not at its plan.
			var problems int
			for _, node := range desired.Nodes(cfg) {
				if _, err := desired.Compile(cfg, node); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: node %s: error: %v\n", path, node, err)
					problems++
				}
			}
			if problems > 0 {
				return exitError{code: 1, msg: fmt.Sprintf("%s: %d problem(s)", path, problems)}
			}
			var agents int
			for _, s := range cfg.Sites {
				agents += len(s.Agents)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s is valid: %d site(s), %d agent(s), %d whitelist(s)\n",
				path, len(cfg.Sites), agents, len(cfg.Whitelists))
			for _, w := range cfg.Whitelists {
				fmt.Fprintf(cmd.OutOrStdout(), "  whitelist %s: %s\n", w.Name, w.Describe())
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", defaultConfigPath, "configuration file")
	return cmd
}

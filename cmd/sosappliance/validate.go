package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sosappliance/sosappliance/appliance/config"
)

func newValidateCommand() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check sos.hcl and print every problem with file:line:col",
		Long: `validate decodes and checks the configuration without touching the node.
It exits 0 when the file is valid and 1 when it is not, listing every problem.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, src, diags := config.LoadFile(path)
			config.WriteDiagnostics(cmd.ErrOrStderr(), diags, src.Bytes)
			if diags.HasErrors() {
				return exitError{code: 1, msg: fmt.Sprintf("%s: %d problem(s)", path, len(diags.Errs()))}
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

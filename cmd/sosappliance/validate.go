package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/sosappliance/sosappliance/appliance"
	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/appliance/desired"
)

func newValidateCommand() *cobra.Command {
	var (
		path     string
		node     string
		thisNode bool
	)
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check sos.hcl and print every problem with file:line:col",
		Long: `validate decodes and checks the configuration without touching the node.
It also compiles what each node the file names would run, so that a
problem of one node's (two of its tunings setting one value differently)
shows here rather than at its plan. It exits 0 when the file is valid and
1 when it is not, listing every problem. With --node NAME (or --this-node,
this host's name, which run takes) it also checks that the file gives
that node a role, as run on it needs: the package checks so before it
restarts the daemon onto an edited file. --this-node also reads, on this
host, the files run reads at start (the psk_file, the agents' key_file
against their public_key, TLS files), as run would; with --node NAME too,
it checks NAME as run on this host.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, src, diags := config.LoadFile(path)
			config.WriteDiagnostics(cmd.ErrOrStderr(), diags, src.Bytes)
			if diags.HasErrors() {
				return exitError{code: 1, msg: fmt.Sprintf("%s: %d problem(s)", path, len(diags.Errs()))}
			}
			if !thisNode { // with --this-node, CheckNodeFiles refuses it
				warnUntrusted(cmd, path)
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
			if thisNode && node == "" {
				h, err := os.Hostname()
				if err != nil {
					return fmt.Errorf("node name: %w (pass --node)", err)
				}
				node = h
			}
			// A node the loop above compiled said its problem there.
			if node != "" && !slices.Contains(desired.Nodes(cfg), node) {
				if _, err := desired.Compile(cfg, node); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: node %s: error: %v\n", path, node, err)
					problems++
				}
			}
			if thisNode && problems == 0 {
				// This host is the node: what run reads at start.
				if err := appliance.CheckNodeFiles(path, node); err != nil {
					hint := ""
					if errors.Is(err, fs.ErrPermission) && os.Geteuid() != 0 {
						hint = " (--this-node reads the files as run does: run it as root)"
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: node %s: error: %v%s\n", path, node, err, hint)
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
	cmd.Flags().StringVar(&node, "node", "", "also check that this node has a role in the file")
	cmd.Flags().BoolVar(&thisNode, "this-node", false, "also check that this host's node (its hostname, as run takes it) has a role in the file, and read the key and TLS files run reads there")
	return cmd
}

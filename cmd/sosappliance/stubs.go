package main

import "github.com/spf13/cobra"

func stub(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		RunE: func(*cobra.Command, []string) error {
			return exitError{code: 1, msg: use + ": not yet implemented"}
		},
	}
}

func newRunCommand() *cobra.Command    { return stub("run", "Run the daemon: converge, watch and reload") }
func newStatusCommand() *cobra.Command { return stub("status", "Show the daemon's state") }

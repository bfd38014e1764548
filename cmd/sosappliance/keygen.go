package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/sosappliance/sosappliance/appliance"
	"github.com/sosappliance/sosappliance/appliance/config"
)

func newKeygenCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Make this node's agent key (per-agent keys)",
		Long: `keygen makes a new X25519 key for the agent on this node, writes its private
key to --out (created readable by root only; an existing file is refused) and
prints the public_key line to add to the agent's block in sos.hcl. With a
public_key on every agent, the streams of each pair of agents are
authenticated by a key only those two can derive (with the PSK), so a holder
of the PSK cannot pass for another agent.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The configuration takes key_file as an absolute path.
			out, err := filepath.Abs(out)
			if err != nil {
				return fmt.Errorf("keygen: %w", err)
			}
			if strings.ContainsAny(out, "\"\\") || strings.Contains(out, "${") || strings.Contains(out, "%{") ||
				strings.ContainsFunc(out, unicode.IsControl) {
				return fmt.Errorf("keygen: %q: choose a path without quotes, backslashes, \"${\", \"%%{\" or control characters, which sos.hcl would read otherwise", out)
			}
			pub, err := appliance.WriteAgentKey(out)
			if err != nil {
				return fmt.Errorf("keygen: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Wrote the private key to %s. Add to this agent's block in sos.hcl:\n  public_key = %q\n", out, pub)
			if out != config.DefaultAgentKeyFile {
				fmt.Fprintf(cmd.OutOrStdout(), "  key_file   = %q\n", out)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", config.DefaultAgentKeyFile, "where to write the private key")
	return cmd
}

package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if dirty {
				rev += "-dirty"
			}
			return "0.0.0-dev+" + rev
		}
	}
	return "0.0.0-dev"
}

// defaultConfigPath is where the packages install the operator's file.
const defaultConfigPath = "/etc/sosappliance/sos.hcl"

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "sosappliance",
		Short: "Transparent accelerator for bulk TCP transfers over long fat networks",
		Long: `sosappliance steers whitelisted TCP connections through OpenFlow switches to
local agents that carry each connection over many parallel TCP streams to the
agent at the server's site. Every node runs it with the same sos.hcl and
converges to it: host tuning, steering rules, switch flows and relays.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newVersionCommand(),
		newValidateCommand(),
		newPlanCommand(),
		newApplyCommand(),
		newRollbackCommand(),
		newRunCommand(),
		newStatusCommand(),
		newKeygenCommand(),
	)
	root.SetFlagErrorFunc(suggestFlag)
	return root
}

// suggestFlag adds the nearest flag of the command to cobra's "unknown
// flag: --nod", as cobra does for a mistyped command.
func suggestFlag(cmd *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return err
	}
	var known []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			known = append(known, f.Name)
		}
	})
	if near := config.Closest(name, known); near != "" {
		return fmt.Errorf("%w; did you mean --%s? (sosappliance %s --help lists them)", err, near, cmd.Name())
	}
	return fmt.Errorf("%w (sosappliance %s --help lists the flags)", err, cmd.Name())
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "sosappliance", versionString())
			return nil
		},
	}
}

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
// flag: --nod", as cobra does for a mistyped command; also to a
// mistyped Terraform-style single-dash flag (-nod), which pflag reads as
// shorthand letters ("unknown shorthand flag: 'n' in -nod").
func suggestFlag(cmd *cobra.Command, err error) error {
	msg, dash := err.Error(), "--"
	name, ok := strings.CutPrefix(msg, "unknown flag: --")
	if !ok {
		_, word, short := strings.Cut(msg, "unknown shorthand flag: ")
		if _, w, found := strings.Cut(word, " in -"); short && found && len(w) > 1 {
			name, dash, ok = w, "-", true
		}
	}
	if !ok {
		return err
	}
	name, _, _ = strings.Cut(name, "=")
	var known []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			known = append(known, f.Name)
		}
	})
	help := cmd.CommandPath() + " --help"
	if near := config.Closest(name, known); near != "" {
		if dash == "-" {
			return fmt.Errorf("unknown flag: -%s; did you mean -%s? (%s lists them)", name, near, help)
		}
		return fmt.Errorf("%w; did you mean %s%s? (%s lists them)", err, dash, near, help)
	}
	return fmt.Errorf("%w (%s lists the flags)", err, help)
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

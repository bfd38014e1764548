// Command sosappliance is the one binary of the appliance: it validates the
// configuration, plans and applies a node's state, and runs as the daemon
// that keeps the node converged.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run executes the CLI and turns errors into exit codes, so tests can drive
// it in-process.
func run(args []string) int {
	return runCommand(newRootCommand(), args)
}

func runCommand(root *cobra.Command, args []string) int {
	root.SetArgs(normalizeArgs(args))
	err := root.Execute()
	var ex exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ex):
		if ex.msg != "" {
			fmt.Fprintln(root.ErrOrStderr(), "sosappliance:", ex.msg)
		}
		return ex.code
	default:
		fmt.Fprintln(root.ErrOrStderr(), "sosappliance:", err)
		return 1
	}
}

// exitError carries a specific exit status (2 for "changes present" with
// -detailed-exitcode, 1 for invalid config) and an optional message.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return fmt.Sprintf("exit status %d", e.code)
}

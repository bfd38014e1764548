// Command lab runs the one-machine lab: `lab demo` compares a direct
// transfer, end-host parallel TCP and sosappliance over an emulated WAN;
// `lab bench-wan` sweeps streams and chunk sizes and writes a CSV and a
// plot; `lab up` and `lab down` bring a lab up to explore by hand and remove
// it (or whatever a crashed run left behind).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: lab COMMAND [flags]

commands:
  demo        bring the lab up, run direct, end-host parallel and sosappliance
              transfers, print them side by side, tear down
  bench-wan   sweep streams and chunk sizes; write a CSV and a PNG plot
  bench-ttfb  time to first byte and total of small GETs: direct, through the
              agents with a cold pool and with a warm one; write a CSV
  up          bring a lab up and leave it running (remove it with lab down)
  down        remove labs brought up with lab up, and any left by a crash
  list        show the labs on this machine

Run "lab COMMAND -h" for the flags of a command.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmds := map[string]func(context.Context, []string, io.Writer, io.Writer) error{
		"demo":       cmdDemo,
		"bench-wan":  cmdBenchWAN,
		"bench-ttfb": cmdBenchTTFB,
		"up":         cmdUp,
		"down":       cmdDown,
		"list":       cmdList,
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintf(stderr, "lab: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	// The first Ctrl-C (or a TERM or HUP) starts an orderly teardown; the
	// context stays registered so that further signals do not cut it short.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	err := cmd(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "lab: interrupted; the lab was torn down")
		return 130
	default:
		fmt.Fprintf(stderr, "lab: %v\n", err)
		return 1
	}
}

// errUsage marks a command line mistake already explained on stderr.
var errUsage = errors.New("usage")

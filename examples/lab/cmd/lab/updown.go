package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/labnet"
)

func cmdUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f labFlags
	fs := flag.NewFlagSet("lab up", flag.ContinueOnError)
	f.register(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	opts, err := f.options(stdout)
	if err != nil {
		return err
	}
	if err := refuseIfUp(opts.StateDir); err != nil {
		return err
	}
	opts.Persistent = true
	lab, err := labnet.Up(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, `
lab %[1]s is up. Its hosts are network namespaces:
  client   %[2]s  (%[3]s)
  server   %[4]s  (%[5]s)
  agents   %[6]s, %[7]s
  switches %[8]s  (Open vSwitch: ovs-ofctl -O OpenFlow13 dump-flows br-a, with OVS_RUNDIR=%[9]s/ovs)
e.g.
  ip netns exec %[4]s iperf3 -s -D
  ip netns exec %[2]s iperf3 -c %[5]s -t 20 -O 3
Logs and the lab's sos.hcl are in %[9]s. Remove it with: lab down
`, lab.ID, lab.Namespace(labnet.Client), labnet.ClientAddr, lab.Namespace(labnet.Server), labnet.ServerAddr,
		lab.Namespace(labnet.AgentA), lab.Namespace(labnet.AgentB), lab.Namespace(labnet.SwitchHost), lab.Dir)
	if clients := lab.Clients(); len(clients) > 1 {
		var agents []string
		for i := range lab.SiteHosts() {
			for _, n := range lab.SiteAgents(i)[1:] {
				agents = append(agents, lab.Namespace(n.Host))
			}
		}
		fmt.Fprintf(stdout, "Two agents per site: also %s; a second client %s (%s). Connections spread over both agent pairs.\n",
			strings.Join(agents, ", "), lab.Namespace(labnet.Client2), labnet.Client2Addr)
	}
	if len(lab.SiteHosts()) == 3 {
		fmt.Fprintf(stdout, "The third site: host %s (%s) behind agent %s.\n",
			lab.Namespace(labnet.HostC), labnet.HostCAddr, lab.Namespace(labnet.AgentC))
	}
	return nil
}

// freshOptions is lf.options for a command that brings up a lab of its
// own: refused while a `lab up` lab runs, with a word about labs of other
// processes.
func (lf labFlags) freshOptions(w io.Writer) (labnet.Options, error) {
	opts, err := lf.options(w)
	if err != nil {
		return opts, err
	}
	if err := refuseIfUp(opts.StateDir); err != nil {
		return opts, err
	}
	warnOtherLabs(opts.StateDir, w)
	return opts, nil
}

// refuseIfUp stops a second `lab up` (or a demo) while a lab brought up by
// hand is still running: it would share the CPU and skew every figure.
func refuseIfUp(stateDir string) error {
	recs, err := labnet.List(stateDir)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if r.Persistent() && !r.Created.IsZero() {
			return fmt.Errorf("lab %s (lab up, %s) is still up; remove it first with: lab down", r.ID, r.Created.Format(time.DateTime))
		}
	}
	return nil
}

func cmdDown(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lab down", flag.ContinueOnError)
	all := fs.Bool("all", false, "also remove labs whose owner (a demo, a test) is still running")
	stateDir := fs.String("state-dir", labnet.DefaultStateDir, "where labs keep their ledgers")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: lab down [--all] [ID...]\n\nWithout IDs it removes every lab brought up with lab up and every lab left by a process that died.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	ids := fs.Args()
	recs, err := labnet.List(*stateDir)
	if err != nil {
		return err
	}
	var errs []error
	removed := 0
	for _, r := range recs {
		switch {
		case len(ids) > 0 && !slices.Contains(ids, r.ID):
			continue
		case len(ids) == 0 && !*all && !r.Persistent() && !r.Orphaned() && !r.Created.IsZero():
			fmt.Fprintf(stdout, "lab %s belongs to running pid %d; leaving it (use --all or its id)\n", r.ID, r.Owner.PID)
			continue
		}
		fmt.Fprintf(stdout, "lab %s: tearing down\n", r.ID)
		if err := labnet.Teardown(r); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	// Namespaces whose lab directory is gone (removed by hand) are strays.
	strays, err := labnet.StrayNamespaces(*stateDir)
	errs = append(errs, err)
	for _, ns := range strays {
		fmt.Fprintf(stdout, "namespace %s has no lab; deleting it\n", ns)
		errs = append(errs, labnet.DeleteNamespace(ns))
	}
	if removed == 0 && len(strays) == 0 && ctx.Err() == nil {
		fmt.Fprintln(stdout, "no lab to remove")
	}
	return errors.Join(errs...)
}

func cmdList(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lab list", flag.ContinueOnError)
	stateDir := fs.String("state-dir", labnet.DefaultStateDir, "where labs keep their ledgers")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	recs, err := labnet.List(*stateDir)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		fmt.Fprintln(stdout, "no labs")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tOWNER\tWAN\tPROCESSES")
	for _, r := range recs {
		owner := "lab up"
		switch {
		case r.Created.IsZero():
			owner = "broken (no ledger)"
		case r.Orphaned():
			owner = fmt.Sprintf("pid %d (gone)", r.Owner.PID)
		case r.Owner != nil:
			owner = fmt.Sprintf("pid %d", r.Owner.PID)
		}
		var procs []string
		for _, p := range r.Processes {
			state := ""
			if !p.Alive() {
				state = "(dead)"
			}
			procs = append(procs, p.Name+state)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.Created.Format(time.DateTime), owner, r.WAN, strings.Join(procs, " "))
	}
	return tw.Flush()
}

package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/labnet"
	"github.com/sosappliance/sosappliance/examples/lab/wanem"
)

// labFlags are the flags every command that brings a lab up shares.
type labFlags struct {
	config       string
	sosappliance string
	wanem        string
	stateDir     string
	rate         string
	queue        string
	rtt          time.Duration
	loss         float64
	seed         int64
	noAppliance  bool
	sites        int
	controllers  int
	agents       int
}

// threeSitesConfig is the lab's config for --sites 3.
const threeSitesConfig = "examples/lab/sos-3sites.hcl"

func (f *labFlags) register(fs *flag.FlagSet) {
	binDir := executableDir()
	d := labnet.DefaultWAN
	fs.StringVar(&f.config, "config", "examples/lab/sos.hcl", "the lab's sos.hcl")
	fs.StringVar(&f.sosappliance, "sosappliance", filepath.Join(binDir, "sosappliance"), "sosappliance binary")
	fs.StringVar(&f.wanem, "wanem", filepath.Join(binDir, "wanem"), "WAN emulator binary")
	fs.StringVar(&f.stateDir, "state-dir", labnet.DefaultStateDir, "where labs keep their ledgers, logs and sockets")
	fs.StringVar(&f.rate, "rate", fmt.Sprintf("%dmbit", d.Rate/1_000_000), "WAN rate of each direction, e.g. 500mbit or 1gbit")
	fs.DurationVar(&f.rtt, "rtt", d.RTT, "WAN round-trip time")
	fs.Float64Var(&f.loss, "loss", d.Loss, "WAN random loss probability per frame and direction")
	fs.StringVar(&f.queue, "queue", "bdp", "WAN drop-tail queue, e.g. 4MB; bdp sizes it to one bandwidth-delay product")
	fs.Int64Var(&f.seed, "seed", d.Seed, "seed of the WAN's loss")
	fs.BoolVar(&f.noAppliance, "no-appliance", false, "bring up the network only: no controller, no agents, switches forward normally")
	fs.IntVar(&f.sites, "sites", 2, "sites on the emulated WAN: 2, or 3 (a third host behind its own agent; takes "+threeSitesConfig+" unless -config says otherwise)")
	fs.IntVar(&f.controllers, "controllers", 1, "1, or 2 for a second controller and a three-member etcd they elect the OpenFlow master on")
	fs.IntVar(&f.agents, "agents", 1, "agents per site: 1, or 2 for a second agent at every site and a second client (client-2), connections spread over both")
}

func (f *labFlags) options(progress io.Writer) (labnet.Options, error) {
	rate, err := wanem.ParseRate(f.rate)
	if err != nil {
		return labnet.Options{}, err
	}
	w := labnet.WAN{Rate: rate, RTT: f.rtt, Loss: f.loss, Seed: f.seed}
	if f.queue != "bdp" {
		if w.QueueBytes, err = wanem.ParseSize(f.queue); err != nil {
			return labnet.Options{}, err
		}
	}
	shape := wanem.Shape{Delay: w.RTT / 2, Rate: w.Rate, QueueBytes: w.QueueBytes, Loss: w.Loss, Seed: w.Seed}
	if err := shape.Validate(); err != nil {
		return labnet.Options{}, fmt.Errorf("WAN: %w", err)
	}
	switch {
	case f.sites == 3 && f.config == "examples/lab/sos.hcl":
		f.config = threeSitesConfig
	case f.sites != 2 && f.sites != 3:
		return labnet.Options{}, fmt.Errorf("-sites %d: the lab has 2 or 3 sites", f.sites)
	}
	opts := labnet.Options{
		Config:   f.config,
		Wanem:    f.wanem,
		WAN:      w,
		StateDir: f.stateDir,
		Progress: progress,
	}
	if f.controllers < 1 || f.controllers > 2 {
		return labnet.Options{}, fmt.Errorf("--controllers %d: the lab runs 1 or 2", f.controllers)
	}
	opts.Controllers = f.controllers
	if f.agents < 1 || f.agents > 2 {
		return labnet.Options{}, fmt.Errorf("--agents %d: the lab runs 1 or 2 agents per site", f.agents)
	}
	opts.Agents = f.agents
	if !f.noAppliance {
		opts.Sosappliance = f.sosappliance
	}
	return opts, nil
}

// executableDir is where make puts the lab's binaries side by side.
func executableDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "bin"
	}
	return filepath.Dir(exe)
}

// parseFlags parses a command's flags; a mistake is reported on stderr.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return errUsage
	}
	return nil
}

// Command wanem runs the lab's WAN emulator: it joins two interfaces of the
// WAN network namespace like a wire, shaping each direction with the same
// delay, rate, queue and loss, until SIGINT or SIGTERM, and prints its
// counters on SIGUSR1, every --stats-every, and on exit.
//
//	ip netns exec wan wanem --a wan0 --b wan1 --delay 100ms --rate 500mbit --loss 0.001 --seed 1
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
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/wanem"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	ifA, ifB   string
	shape      wanem.Shape
	statsEvery time.Duration
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var opts options
	var rate, queue string
	fs := flag.NewFlagSet("wanem", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&opts.ifA, "a", "", "first interface to join (required)")
	fs.StringVar(&opts.ifB, "b", "", "second interface to join (required)")
	fs.DurationVar(&opts.shape.Delay, "delay", 0, "one-way delay of each direction")
	fs.StringVar(&rate, "rate", "0", "rate of each direction, e.g. 500mbit or 1gbit; 0 is unlimited")
	fs.StringVar(&queue, "queue", "bdp", "drop-tail queue of each direction, e.g. 2MB or 4MiB; bdp sizes it to rate × 2×delay")
	fs.Float64Var(&opts.shape.Loss, "loss", 0, "random loss probability of each direction, e.g. 0.001")
	fs.Int64Var(&opts.shape.Seed, "seed", 1, "seed of the loss generators")
	fs.Func("burst", "retired: the link keeps its own clock and loses no sending time to late wake-ups", func(string) error {
		return errors.New("--burst is retired: the link keeps its own clock, so a late wake-up loses no sending time and there is no credit to size; drop the flag")
	})
	fs.DurationVar(&opts.statsEvery, "stats-every", 0, "print counters at this interval; 0 prints them only on SIGUSR1 and exit")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var errs []error
	if opts.ifA == "" || opts.ifB == "" {
		errs = append(errs, errors.New("--a and --b name the interfaces to join"))
	}
	var err error
	if opts.shape.Rate, err = wanem.ParseRate(rate); err != nil {
		errs = append(errs, err)
	}
	if queue != "bdp" {
		if opts.shape.QueueBytes, err = wanem.ParseSize(queue); err != nil {
			errs = append(errs, err)
		} else if opts.shape.QueueBytes == 0 {
			errs = append(errs, errors.New("--queue 0 would drop every frame; use bdp for the default"))
		}
	}
	if err := opts.shape.Validate(); err != nil {
		errs = append(errs, err)
	}
	if opts.statsEvery < 0 {
		errs = append(errs, fmt.Errorf("--stats-every %v is negative", opts.statsEvery))
	}
	return opts, errors.Join(errs...)
}

func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "wanem: %v\n", err)
		return 2
	}
	em, err := wanem.New(opts.ifA, opts.ifB, wanem.Symmetric(opts.shape))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	dump := make(chan os.Signal, 1)
	signal.Notify(dump, syscall.SIGUSR1)
	defer signal.Stop(dump)
	var tick <-chan time.Time
	if opts.statsEvery > 0 {
		ticker := time.NewTicker(opts.statsEvery)
		defer ticker.Stop()
		tick = ticker.C
	}

	fmt.Fprintln(stderr, wanem.JoiningLine(opts.ifA, opts.ifB, opts.shape))

	done := make(chan error, 1)
	go func() { done <- em.Run(ctx) }()
	for {
		select {
		case <-dump:
			fmt.Fprintln(stdout, em.Stats())
		case <-tick:
			fmt.Fprintln(stdout, em.Stats())
		case err := <-done:
			fmt.Fprintln(stdout, em.Stats())
			if err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
			return 0
		}
	}
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/examples/lab/labnet"
	"github.com/sosappliance/sosappliance/examples/lab/measure"
	"github.com/sosappliance/sosappliance/internal/portrange"
)

// The acceptance bars of the demo: sosappliance against the link, the
// end-host parallel transfer and the direct one; and its slowest second
// against the link, leaving out the test's first barSkipSeconds seconds
// (the stripes' start-up).
const (
	barOfLink      = 0.80
	barOfParallel  = 0.90
	barOfDirect    = 4.0
	barOfSecond    = 0.50
	barSkipSeconds = 3
)

// slowestSecond is the lowest of the receiving iperf3's per-second rates
// (Result.ReceiverSeconds) from the (barSkipSeconds+1)th second of its
// test on, omit being the slow start before its measured time; false when
// there is no such second. An interval under half a second, as the last
// can be, is not a second and is left out.
//
// These are the receiver's own seconds, not the interface's: its test
// ends when the client's end of test reaches it, and it reads no more, so
// no second holds time after that. The interface's last second could, by
// up to a second, as its seconds are counted from the sampling second in
// which data began to arrive; after the end a relay still holding data
// delivers it into a receive window that closes.
func slowestSecond(seconds []measure.Interval, omit time.Duration) (float64, bool) {
	low, ok := 0.0, false
	skip := barSkipSeconds - omit.Seconds()
	for _, s := range seconds {
		if s.Start < skip-1e-3 || s.End-s.Start < 0.5 {
			continue
		}
		if !ok || s.Bps < low {
			low, ok = s.Bps, true
		}
	}
	return low, ok
}

// transferFlags are the flags of commands that run iperf3 transfers.
type transferFlags struct {
	duration   time.Duration
	omit       time.Duration
	whitelist  string
	directPort int
}

func (f *transferFlags) register(fs *flag.FlagSet, duration time.Duration) {
	fs.DurationVar(&f.duration, "duration", duration, "measured time of each transfer")
	fs.DurationVar(&f.omit, "omit", 3*time.Second, "slow start run before each transfer and left out of its result")
	fs.StringVar(&f.whitelist, "whitelist", "iperf", "the config's whitelist that sosappliance carries the transfer under")
	fs.IntVar(&f.directPort, "direct-port", 5301, "server port no whitelist names, for the direct and end-host parallel transfers")
}

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var lf labFlags
	var tf transferFlags
	fs := flag.NewFlagSet("lab demo", flag.ContinueOnError)
	lf.register(fs)
	tf.register(fs, 20*time.Second)
	streams := fs.Int("streams", 64, "iperf3 -P of the end-host parallel transfer, and the streams sosappliance stripes over")
	check := fs.Bool("check", false, "exit 1 when sosappliance misses a target")
	out := fs.String("out", "out", "directory for demo-throughput.csv and demo-throughput.png")
	kill := fs.Int("kill-streams", 0, "during the sosappliance transfer, kill this many of agent-a's stripes (ss -K) every 2 s; the transfer goes on")
	keepLogs := fs.Bool("keep-logs", false, "copy the lab's logs (agents, controller, emulator, Open vSwitch, iperf3 servers) into --out/logs before the lab is removed")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	opts, err := lf.freshOptions(stdout)
	if err != nil {
		return err
	}
	wl, err := demoWhitelist(opts.Config, tf, *streams)
	if err != nil {
		return err
	}
	if opts.Sosappliance != "" {
		opts.EditConfig = func(c *labnet.ConfigFile) error {
			c.SetWhitelist(wl)
			return nil
		}
	}

	fmt.Fprintf(stdout, "sosappliance demo: the same unmodified iperf3 transfer three ways over an emulated WAN\n")
	fmt.Fprintf(stdout, "WAN: %s; each transfer %v after %v of slow start\n\n", opts.WAN, tf.duration, tf.omit)
	lab, err := labnet.Up(ctx, opts)
	if err != nil {
		return err
	}
	defer tearDown(lab, stdout)
	if *keepLogs {
		// Deferred after tearDown, so it runs before it.
		defer keepLabLogs(lab.LogDir(), *out, stdout)
	}
	fmt.Fprintln(stdout)

	ports := []int{tf.directPort}
	if lab.Appliance() {
		ports = append(ports, wl.ServerPort)
	}
	if _, err := measure.Server(ctx, lab, ports...); err != nil {
		return err
	}
	runs := []measure.Transfer{
		{Label: "direct, 1 TCP connection", Port: tf.directPort, Parallel: 1},
		{Label: fmt.Sprintf("end-host parallel, iperf3 -P %d", *streams), Port: tf.directPort, Parallel: *streams},
	}
	if lab.Appliance() {
		runs = append(runs, measure.Transfer{Label: fmt.Sprintf("sosappliance, 1 TCP connection, %d stripes", wl.Streams), Port: wl.ServerPort, Parallel: 1})
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	var results []measure.Result
	var timelines []timeline
	// The sosappliance run's seconds at the receiver, and its slowest.
	var sosSeconds []measure.Interval
	var slowest float64
	var slowestOK bool
	for i := range runs {
		runs[i].Duration, runs[i].Omit = tf.duration, tf.omit
		bar := newProgressBar(stdout, runs[i].Label)
		tl := timeline{Label: runs[i].Label}
		stopKilling := func() {}
		sosRun := lab.Appliance() && runs[i].Port == wl.ServerPort
		if sosRun {
			stopKilling = startKilling(ctx, lab, *kill, stdout)
		}
		res, err := measure.Run(ctx, lab, runs[i], func(s measure.Sample) {
			tl.Samples = append(tl.Samples, timelineSample{Seconds: s.Waiting.Seconds(), Bps: s.Bps})
			bar.update(s)
		})
		bar.finish(res, err)
		stopKilling()
		if err != nil {
			return err
		}
		results = append(results, res)
		timelines = append(timelines, tl)
		if sosRun {
			sosSeconds = res.ReceiverSeconds()
			slowest, slowestOK = slowestSecond(sosSeconds, runs[i].Omit)
		}
	}
	missed := printComparison(stdout, lab.WAN(), results, slowest, slowestOK)
	if len(sosSeconds) > 0 {
		fmt.Fprintf(stdout, "\nsosappliance at the server, each second of the measured time (Mbit/s):")
		for _, s := range sosSeconds {
			fmt.Fprintf(stdout, " %.0f", s.Bps/1e6)
		}
		fmt.Fprintln(stdout)
	}
	csvPath := filepath.Join(*out, "demo-throughput.csv")
	pngPath := filepath.Join(*out, "demo-throughput.png")
	if err := writeFile(csvPath, func(w io.Writer) error { return writeTimelines(w, timelines) }); err != nil {
		return err
	}
	if err := writeFile(pngPath, demoChart(timelines, lab.WAN()).WritePNG); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nthroughput per second of each transfer: %s (%s)\n", pngPath, csvPath)
	if missed && *check {
		return errors.New("sosappliance missed a target")
	}
	return nil
}

// demoWhitelist is the whitelist that carries the sosappliance transfer,
// with the demo's stream count, narrowed to the lab's server and one of
// its ports (5201, iperf3's own, when it carries that; else its lowest);
// no whitelist may carry the direct port, in either direction, or the
// baselines would be accelerated too. The lab writes it back as one
// client-opened server and port with the flags' streams, its chunk size,
// queue length and clients: direction, streams = "auto" and agent lists
// of the file's block are not carried over (bench-wan and bench-agents set
// the last two themselves).
func demoWhitelist(path string, tf transferFlags, streams int) (labnet.Whitelist, error) {
	cfg, src, diags := config.LoadFile(path)
	if diags.HasErrors() {
		var b strings.Builder
		config.WriteDiagnostics(&b, diags, src.Bytes)
		return labnet.Whitelist{}, fmt.Errorf("lab config:\n%s", b.String())
	}
	if tf.directPort < 1 || tf.directPort > 65535 {
		return labnet.Whitelist{}, fmt.Errorf("--direct-port %d: not a TCP port", tf.directPort)
	}
	var found *config.Whitelist
	for _, w := range cfg.Whitelists {
		if w.Name == tf.whitelist {
			found = w
		}
		if carries(w, labnet.ClientAddr, labnet.ServerAddr, uint16(tf.directPort)) {
			return labnet.Whitelist{}, fmt.Errorf("--direct-port %d is whitelisted by %q; pick a port no whitelist names", tf.directPort, w.Name)
		}
	}
	if found == nil {
		return labnet.Whitelist{}, fmt.Errorf("%s has no whitelist %q", path, tf.whitelist)
	}
	if !containsAddr(found.Servers, labnet.ServerAddr) {
		return labnet.Whitelist{}, fmt.Errorf("whitelist %q names servers %s; the lab's server is %s", found.Name, strings.Join(prefixStrings(found.Servers), ", "), labnet.ServerAddr)
	}
	if !containsAddr(found.Clients, labnet.ClientAddr) {
		return labnet.Whitelist{}, fmt.Errorf("whitelist %q names clients %s; the lab's client is %s", found.Name, strings.Join(prefixStrings(found.Clients), ", "), labnet.ClientAddr)
	}
	port := uint16(5201)
	if !portrange.ContainsPort(found.Ports, port) {
		port = found.Ports[0].Lo // config.Load leaves no whitelist without a port
	}
	return labnet.Whitelist{
		Name: found.Name, Clients: prefixStrings(found.Clients), Server: labnet.ServerAddr.String(), ServerPort: int(port),
		Streams: streams, ChunkSize: found.ChunkSize, QueueLength: found.QueueLength,
	}, nil
}

// carries reports whether w accelerates a connection that client opens to
// server:port: one of its clients to one of its servers, or, with
// direction = "both", one of its servers to one of its clients.
func carries(w *config.Whitelist, client, server netip.Addr, port uint16) bool {
	if !portrange.ContainsPort(w.Ports, port) {
		return false
	}
	return containsAddr(w.Clients, client) && containsAddr(w.Servers, server) ||
		w.Both() && containsAddr(w.Servers, client) && containsAddr(w.Clients, server)
}

func containsAddr(ps []netip.Prefix, a netip.Addr) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
}

func prefixStrings(ps []netip.Prefix) []string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return s
}

// printComparison prints the results side by side with their ratios and
// reports whether sosappliance missed a target; slowest is its slowest
// second (slowestSecond), if ok.
func printComparison(w io.Writer, wan labnet.WAN, results []measure.Result, slowest float64, slowestOK bool) (missed bool) {
	direct := results[0].ReceivedBps
	fmt.Fprintf(w, "\n%-44s %14s %10s %8s\n", "transfer", "throughput", "x direct", "of link")
	for _, r := range results {
		ofLink := "-"
		if wan.Rate > 0 {
			ofLink = fmt.Sprintf("%.0f%%", 100*r.ReceivedBps/float64(wan.Rate))
		}
		fmt.Fprintf(w, "%-44s %14s %9.1fx %8s\n", r.Label, labnet.FormatRate(r.ReceivedBps), r.ReceivedBps/direct, ofLink)
	}
	if len(results) < 3 {
		fmt.Fprintln(w, "\n(no sosappliance run: the lab was brought up without the appliance)")
		return false
	}
	parallel, sos := results[1].ReceivedBps, results[2].ReceivedBps
	fmt.Fprintf(w, "\nsosappliance / end-host parallel: %.2f\n", sos/parallel)
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		missed = true
		return "MISSED"
	}
	fmt.Fprintln(w, "targets:")
	target := func(what, value string, ok bool) {
		fmt.Fprintf(w, "  sosappliance >= %-28s %7s  %s\n", what, value, mark(ok))
	}
	if wan.Rate > 0 {
		target(fmt.Sprintf("%.0f%% of the link rate", 100*barOfLink), fmt.Sprintf("%.0f%%", 100*sos/float64(wan.Rate)), sos >= barOfLink*float64(wan.Rate))
	}
	target(fmt.Sprintf("%.1f x end-host parallel", barOfParallel), fmt.Sprintf("%.2fx", sos/parallel), sos >= barOfParallel*parallel)
	target(fmt.Sprintf("%.0f x direct", barOfDirect), fmt.Sprintf("%.1fx", sos/direct), sos >= barOfDirect*direct)
	if wan.Rate > 0 && slowestOK {
		// The slowest second after the start-up.
		target(fmt.Sprintf("%.0f%% of the link each second", 100*barOfSecond), fmt.Sprintf("%.0f%%", 100*slowest/float64(wan.Rate)),
			slowest >= barOfSecond*float64(wan.Rate))
	}
	return missed
}

// tearDown removes the lab and says so; it runs on every way out,
// Ctrl-C included.
func tearDown(lab *labnet.Lab, w io.Writer) {
	fmt.Fprintf(w, "\nlab %s: tearing down\n", lab.ID)
	if err := lab.Down(); err != nil {
		fmt.Fprintf(w, "lab %s: teardown: %v\n", lab.ID, err)
		return
	}
	fmt.Fprintf(w, "lab %s: removed; nothing of it is left on this machine\n", lab.ID)
}

// warnOtherLabs mentions labs of other running processes (a test, another
// demo): they share the CPU and lower every figure.
func warnOtherLabs(stateDir string, w io.Writer) {
	recs, err := labnet.List(stateDir)
	if err != nil {
		return
	}
	for _, r := range recs {
		if r.Owner != nil && !r.Orphaned() {
			fmt.Fprintf(w, "note: lab %s of pid %d is running too; both share the CPU\n", r.ID, r.Owner.PID)
		}
	}
}

// progressBar shows a running transfer: redrawn in place on a terminal,
// a line every five seconds otherwise (make's output, CI logs).
type progressBar struct {
	w        io.Writer
	label    string
	terminal bool
	lastLine time.Duration
}

func newProgressBar(w io.Writer, label string) *progressBar {
	b := &progressBar{w: w, label: label}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			b.terminal = true
		}
	}
	if !b.terminal {
		fmt.Fprintf(w, "%s: running\n", label)
	}
	return b
}

func (b *progressBar) update(s measure.Sample) {
	const width = 24
	var now string
	filled := 0
	if s.Flowing {
		filled = min(max(int(float64(width)*s.Elapsed.Seconds()/s.Total.Seconds()), 0), width)
		now = fmt.Sprintf("%3.0f/%.0f s  %s", min(s.Elapsed.Seconds(), s.Total.Seconds()), s.Total.Seconds(), labnet.FormatRate(s.Bps))
		if s.Elapsed > s.Total {
			now = fmt.Sprintf("%3.0f/%.0f s  draining, %s", s.Total.Seconds(), s.Total.Seconds(), labnet.FormatRate(s.Bps))
		}
	} else {
		now = fmt.Sprintf("opening connections (%.0f s)", s.Waiting.Seconds())
	}
	if b.terminal {
		fmt.Fprintf(b.w, "\r%-44s [%s%s] %s   ", b.label, strings.Repeat("#", filled), strings.Repeat(".", width-filled), now)
		return
	}
	if s.Waiting-b.lastLine >= 5*time.Second {
		b.lastLine = s.Waiting
		fmt.Fprintf(b.w, "  %s\n", now)
	}
}

func (b *progressBar) finish(res measure.Result, err error) {
	if b.terminal {
		fmt.Fprint(b.w, "\r\033[K")
	}
	if err != nil {
		fmt.Fprintf(b.w, "%-44s failed\n", b.label)
		return
	}
	fmt.Fprintf(b.w, "%-44s %s\n", b.label, labnet.FormatRate(res.ReceivedBps))
}

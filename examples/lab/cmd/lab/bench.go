package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/labnet"
	"github.com/sosappliance/sosappliance/examples/lab/measure"
	"github.com/sosappliance/sosappliance/examples/lab/plot"
	"github.com/sosappliance/sosappliance/examples/lab/wanem"
)

// benchBasePort is the first server port of the benchmark's whitelists,
// one per stream count and chunk size.
const benchBasePort = 5400

func cmdBenchWAN(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var lf labFlags
	var tf transferFlags
	fs := flag.NewFlagSet("lab bench-wan", flag.ContinueOnError)
	lf.register(fs)
	tf.register(fs, 15*time.Second)
	streamsFlag := fs.String("streams", "1,2,4,8,16,32,64", "stream counts to sweep")
	chunksFlag := fs.String("chunks", "10000,60000,65000", "sosappliance chunk sizes to sweep, in bytes")
	queueLength := fs.Int("queue-length", 0, "queue_length of the benchmark whitelists; 0 takes the --whitelist's")
	out := fs.String("out", "out", "directory for bench-wan.csv and bench-wan.png")
	runs := fs.Int("runs", 1, "runs of the whole sweep; tables show the median and the range")
	concurrentFlag := fs.String("concurrent", "", "sharing sweep: concurrent connection counts K (e.g. 2,4,8), each connection its own sosappliance session")
	concStreams := fs.Int("concurrent-streams", 16, "stripes of each session in the sharing sweep")
	concChunk := fs.Int("concurrent-chunk", 60000, "chunk size of each session in the sharing sweep")
	autoMax := fs.Int("auto-max", 64, `the auto column: one session per chunk size with streams = "auto" and this max_streams; 0 leaves it out`)
	keepLogs := fs.Bool("keep-logs", false, "copy the lab's logs (agents, controller, emulator, Open vSwitch, iperf3 servers) into --out/logs before the lab is removed; each session's lines name its whitelist, bench-sN-cC")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	streams, err := intList(*streamsFlag)
	if err != nil {
		return fmt.Errorf("--streams: %w", err)
	}
	chunks, err := intList(*chunksFlag)
	if err != nil {
		return fmt.Errorf("--chunks: %w", err)
	}
	var concurrent []int
	if *concurrentFlag != "" {
		if concurrent, err = intList(*concurrentFlag); err != nil {
			return fmt.Errorf("--concurrent: %w", err)
		}
	}
	if *runs < 1 {
		return fmt.Errorf("--runs %d: want at least one run", *runs)
	}
	if *autoMax < 0 {
		return fmt.Errorf("--auto-max %d: want a stream count, or 0 for no auto column", *autoMax)
	}
	if *concStreams < 1 || *concChunk < 1 {
		return fmt.Errorf("--concurrent-streams and --concurrent-chunk must be positive")
	}
	if lf.agents > 1 {
		// One against two agents per site (benchagents.go).
		if len(concurrent) == 0 {
			concurrent = []int{8}
		}
		return benchAgents(ctx, lf, agentsBench{k: concurrent, runs: *runs, streams: *concStreams, chunk: *concChunk, out: *out, tf: tf}, stdout)
	}
	opts, err := lf.freshOptions(stdout)
	if err != nil {
		return err
	}
	base, err := demoWhitelist(opts.Config, tf, 1)
	if err != nil {
		return err
	}
	if *queueLength > 0 {
		base.QueueLength = *queueLength
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}

	type cell struct {
		streams, chunk int
		wl             labnet.Whitelist
		// sharingOnly: the sharing sweep's shape, not in the main sweep.
		sharingOnly bool
		// auto: streams = "auto" with max_streams streams.
		auto bool
	}
	var cells []cell
	if opts.Sosappliance != "" {
		for _, n := range streams {
			for _, c := range chunks {
				wl := base
				wl.Name = fmt.Sprintf("bench-s%d-c%d", n, c)
				wl.ServerPort = benchBasePort + len(cells)
				wl.Streams, wl.ChunkSize = n, c
				cells = append(cells, cell{streams: n, chunk: c, wl: wl})
			}
		}
		for _, c := range chunks {
			if *autoMax == 0 {
				break
			}
			wl := base
			wl.Name = fmt.Sprintf("bench-auto-c%d", c)
			wl.ServerPort = benchBasePort + len(cells)
			wl.Streams, wl.ChunkSize, wl.AutoStreams = *autoMax, c, true
			cells = append(cells, cell{streams: *autoMax, chunk: c, wl: wl, auto: true})
		}
		if len(concurrent) > 0 && !slices.ContainsFunc(cells, func(c cell) bool { return !c.auto && c.streams == *concStreams && c.chunk == *concChunk }) {
			wl := base
			wl.Name = fmt.Sprintf("bench-s%d-c%d", *concStreams, *concChunk)
			wl.ServerPort = benchBasePort + len(cells)
			wl.Streams, wl.ChunkSize = *concStreams, *concChunk
			cells = append(cells, cell{streams: *concStreams, chunk: *concChunk, wl: wl, sharingOnly: true})
		}
		opts.EditConfig = func(cf *labnet.ConfigFile) error {
			for _, c := range cells {
				cf.SetWhitelist(c.wl)
			}
			return nil
		}
	}

	fmt.Fprintf(stdout, "sosappliance WAN benchmark: streams %v, chunk sizes %v, %d run(s)\n", streams, chunks, *runs)
	if len(concurrent) > 0 {
		fmt.Fprintf(stdout, "sharing sweep: %v concurrent connections of %d stripes, chunk %d\n", concurrent, *concStreams, *concChunk)
	}
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
	ports := []int{tf.directPort}
	for _, c := range cells {
		ports = append(ports, c.wl.ServerPort)
	}
	if _, err := measure.Server(ctx, lab, ports...); err != nil {
		return err
	}

	// Stream counts are the outer loop so that slow drifts of a shared
	// machine spread over every mode instead of hitting one.
	type job struct {
		point measure.Point
		tr    measure.Transfer
	}
	var sweep []job
	sweep = append(sweep, job{measure.Point{Mode: measure.ModeDirect, Streams: 1},
		measure.Transfer{Label: "direct, 1 TCP connection", Port: tf.directPort, Parallel: 1}})
	for _, n := range streams {
		sweep = append(sweep, job{measure.Point{Mode: measure.ModeParallel, Streams: n},
			measure.Transfer{Label: fmt.Sprintf("iperf3 -P %d", n), Port: tf.directPort, Parallel: n}})
		for _, c := range cells {
			if c.streams == n && !c.sharingOnly && !c.auto {
				sweep = append(sweep, job{measure.Point{Mode: measure.ModeSosappliance, Streams: n, ChunkSize: c.chunk},
					measure.Transfer{Label: fmt.Sprintf("sosappliance %d streams, chunk %d", n, c.chunk), Port: c.wl.ServerPort, Parallel: 1}})
			}
		}
	}
	// The auto column: the session chooses its stream count.
	autoWhitelist := map[int]string{}
	for _, c := range cells {
		if c.auto {
			autoWhitelist[c.chunk] = c.wl.Name
			sweep = append(sweep, job{measure.Point{Mode: measure.ModeAuto, ChunkSize: c.chunk},
				measure.Transfer{Label: fmt.Sprintf("sosappliance auto streams (max %d), chunk %d", c.streams, c.chunk), Port: c.wl.ServerPort, Parallel: 1}})
		}
	}
	// The sharing sweep: K connections at once, each its own session; its
	// baselines are iperf3 -P K and one session of the same shape alone.
	for _, c := range cells {
		if c.auto || c.streams != *concStreams || c.chunk != *concChunk || len(concurrent) == 0 {
			continue
		}
		if c.sharingOnly {
			sweep = append(sweep, job{measure.Point{Mode: measure.ModeSosappliance, Streams: c.streams, ChunkSize: c.chunk},
				measure.Transfer{Label: fmt.Sprintf("sosappliance %d streams, chunk %d", c.streams, c.chunk), Port: c.wl.ServerPort, Parallel: 1}})
		}
		for _, k := range concurrent {
			if k < 2 {
				continue
			}
			if !slices.Contains(streams, k) {
				sweep = append(sweep, job{measure.Point{Mode: measure.ModeParallel, Streams: k},
					measure.Transfer{Label: fmt.Sprintf("iperf3 -P %d", k), Port: tf.directPort, Parallel: k}})
			}
			sweep = append(sweep, job{measure.Point{Mode: measure.ModeSosappliance, Streams: c.streams, ChunkSize: c.chunk, Concurrent: k},
				measure.Transfer{Label: fmt.Sprintf("%d sosappliance sessions of %d streams", k, c.streams), Port: c.wl.ServerPort, Parallel: k}})
		}
	}
	// Whole sweeps repeat, so that a slow spell of a shared machine lands
	// on one run of every cell rather than on every run of one.
	var jobs []job
	for r := 1; r <= *runs; r++ {
		for _, j := range sweep {
			j.point.Run = r
			jobs = append(jobs, j)
		}
	}
	var points []measure.Point
	for i, j := range jobs {
		j.tr.Duration, j.tr.Omit = tf.duration, tf.omit
		label := fmt.Sprintf("[%2d/%d] %s", i+1, len(jobs), j.tr.Label)
		bar := newProgressBar(stdout, label)
		update := bar.update
		chosen := 0
		if j.point.Mode == measure.ModeAuto {
			// The count the session chose, from the agents' status
			// while it runs (it ends with the transfer).
			update = func(s measure.Sample) {
				bar.update(s)
				if s.Flowing {
					chosen = max(chosen, autoChosen(ctx, lab, autoWhitelist[j.point.ChunkSize]))
				}
			}
		}
		socksBefore, socksErr := lab.SwitchPortSockets(ctx)
		wanBefore, wanErr := lab.WANStats(ctx)
		res, err := measure.Run(ctx, lab, j.tr, update)
		bar.finish(res, err)
		if ctx.Err() == nil {
			j.point.SwitchDrops, j.point.SwitchDropsRead = switchDropsSince(ctx, lab, socksBefore, socksErr, stdout)
			j.point.WAN, j.point.WANRead = wanCountsSince(ctx, lab, wanBefore, wanErr, stdout)
		}
		if j.point.Mode == measure.ModeAuto {
			j.point.Streams = chosen
			fmt.Fprintf(stdout, "  auto chose %d streams\n", chosen)
		}
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			// One failed run must not throw away the rest of a long sweep.
			fmt.Fprintf(stdout, "  %v\n", err)
			continue
		}
		j.point.Result = res
		points = append(points, j.point)
	}

	csvPath := filepath.Join(*out, "bench-wan.csv")
	pngPath := filepath.Join(*out, "bench-wan.png")
	if err := writeFile(csvPath, func(w io.Writer) error { return measure.WriteCSV(w, points) }); err != nil {
		return err
	}
	if err := writeFile(pngPath, benchChart(points, lab.WAN()).WritePNG); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nthroughput in Mbit/s over %s:\n\n", lab.WAN())
	if err := measure.WriteTable(stdout, points); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if err := measure.WriteQueueDropTable(stdout, points); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if err := measure.WriteSharingTable(stdout, points); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %s and %s\n", csvPath, pngPath)
	return nil
}

// switchDropsSince lists the lab switch's port sockets again and returns
// the drops since the listing before the transfer, saying so when there
// were any: a lab that drops frames in its own switch judges the
// transfers by a loss rate the WAN was not set to. read is false when
// either listing failed.
func switchDropsSince(ctx context.Context, lab *labnet.Lab, before []labnet.PortSocket, beforeErr error, w io.Writer) (drops uint64, read bool) {
	err := beforeErr
	var after []labnet.PortSocket
	if err == nil {
		after, err = lab.SwitchPortSockets(ctx)
	}
	if err != nil {
		fmt.Fprintf(w, "  switch drops not read: %v\n", err)
		return 0, false
	}
	drops = labnet.DropsSince(before, after)
	if drops > 0 {
		fmt.Fprintf(w, "  the lab's switch dropped %d frames at its port sockets (loss beside the WAN's; see labnet.PortSocket)\n", drops)
	}
	return drops, true
}

// wanCountsSince reads the WAN emulators' counters again and returns what
// they counted since the reading before the transfer (transferCounts),
// printing the queue's share when it dropped anything. read is false when
// either reading failed or the two do not compare.
func wanCountsSince(ctx context.Context, lab *labnet.Lab, before []wanem.Stats, beforeErr error, w io.Writer) (c measure.WANCounts, read bool) {
	err := beforeErr
	var after []wanem.Stats
	if err == nil {
		after, err = lab.WANStats(ctx)
	}
	if err == nil {
		c, err = transferCounts(before, after)
	}
	if err != nil {
		fmt.Fprintf(w, "  WAN counters not read: %v\n", err)
		return measure.WANCounts{}, false
	}
	if c.QueueDrops > 0 {
		fmt.Fprintf(w, "  the WAN's queue dropped %d of the transfer's %d frames (%.2f %%; at random: %d)\n",
			c.QueueDrops, c.Received, c.QueueDropShare()*100, c.LossDrops)
	}
	return c, true
}

// transferCounts is what the emulators (after[i] a later reading of
// before[i]) counted in between in the direction that carried the
// transfer: of each emulator, the direction that received the more bytes
// (the other carries the acknowledgements, half as many frames again,
// which would dilute the queue's share). With three sites a transfer
// crosses two emulators, its site's link to the hub and the hub's to the
// other site, and each counts its frames: the frames are the largest
// count of one emulator (the first on the path saw them all), the drops
// the sum (a frame dropped by the first never reaches the second).
func transferCounts(before, after []wanem.Stats) (measure.WANCounts, error) {
	if len(after) != len(before) {
		return measure.WANCounts{}, fmt.Errorf("%d emulators, %d before the transfer", len(after), len(before))
	}
	var c measure.WANCounts
	for i := range after {
		d, err := after[i].Since(before[i])
		if err != nil {
			return measure.WANCounts{}, err
		}
		l := d.AtoB
		if d.BtoA.ReceivedBytes > l.ReceivedBytes {
			l = d.BtoA
		}
		c.Received = max(c.Received, l.ReceivedPackets)
		c.QueueDrops += l.QueueDropPackets
		c.LossDrops += l.LossDropPackets
	}
	return c, nil
}

// benchChart plots throughput against streams (medians over the runs): one
// line per sosappliance chunk size, one for end-host parallel TCP, and
// levels for the direct transfer and the link rate.
func benchChart(points []measure.Point, wan labnet.WAN) plot.Chart {
	c := plot.Chart{
		Title:   "lab WAN " + wan.String() + ": throughput against streams",
		XLabel:  "streams (iperf3 -P N, or sosappliance stripes of one connection)",
		YLabel:  "Mbit/s",
		XLog2:   true,
		Markers: true,
	}
	series := map[string]*plot.Series{}
	var order []string
	for _, p := range measure.Medians(points) {
		mbps := p.Result.ReceivedBps / 1e6
		var name string
		switch p.Mode {
		case measure.ModeDirect:
			c.Levels = append(c.Levels, plot.Level{Name: fmt.Sprintf("direct %.0f Mbit/s", mbps), Color: plot.Palette[4], Y: mbps})
			continue
		case measure.ModeParallel:
			name = "end-host parallel, iperf3 -P N"
		case measure.ModeAuto:
			// At the stream count it chose (median over the runs).
			if p.Streams == 0 {
				continue
			}
			name = fmt.Sprintf("sosappliance auto, chunk %d", p.ChunkSize)
		default:
			name = fmt.Sprintf("sosappliance, chunk %d", p.ChunkSize)
		}
		s, ok := series[name]
		if !ok {
			s = &plot.Series{Name: name, Color: plot.Palette[len(order)%4]}
			series[name] = s
			order = append(order, name)
		}
		s.Points = append(s.Points, plot.Point{X: float64(p.Streams), Y: mbps})
	}
	for _, name := range order {
		s := series[name]
		slices.SortFunc(s.Points, func(a, b plot.Point) int { return cmp.Compare(a.X, b.X) })
		c.Series = append(c.Series, *s)
	}
	if wan.Rate > 0 {
		c.Levels = append(c.Levels, plot.Level{Name: "link " + labnet.FormatRate(float64(wan.Rate)), Color: plot.Palette[5], Y: float64(wan.Rate) / 1e6})
	}
	return c
}

// autoChosen is the most streams a live session of the whitelist chose at
// any agent of the lab, 0 if none could be read.
func autoChosen(ctx context.Context, lab *labnet.Lab, whitelist string) int {
	chosen := 0
	for _, n := range lab.Nodes() {
		if n.Agent == nil {
			continue
		}
		if c, err := lab.AutoStreamsChosen(ctx, n.Name, whitelist); err == nil {
			chosen = max(chosen, c)
		}
	}
	return chosen
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a list of positive numbers", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// keepLabLogs copies the lab's logs into out/logs (--keep-logs): the lab's
// directory goes with it, and a cell that collapsed can only be traced
// from its agents' lines. It runs on the way out whether the sweep
// finished or failed; its own failure is reported, not returned, so it
// never hides the sweep's result or error.
func keepLabLogs(logDir, out string, w io.Writer) {
	dst := filepath.Join(out, "logs")
	n, err := copyLogs(logDir, dst)
	if err != nil {
		fmt.Fprintf(w, "--keep-logs: %v (%d copied)\n", err, n)
		return
	}
	fmt.Fprintf(w, "copied %d lab log(s) to %s\n", n, dst)
}

// copyLogs copies the *.log files of src into dst (created if need be)
// and returns how many it copied.
func copyLogs(src, dst string) (int, error) {
	names, err := filepath.Glob(filepath.Join(src, "*.log"))
	if err != nil {
		return 0, err
	}
	if len(names) == 0 {
		return 0, fmt.Errorf("no logs in %s", src)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			return n, err
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(name)), data, 0o644); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/examples/lab/labnet"
	"github.com/sosappliance/sosappliance/examples/lab/measure"
)

// `lab bench-wan --agents 2` compares one agent per site with two: in one
// lab with two agents at each site, K concurrent iperf3 connections (-P K,
// each its own session) run under a whitelist that names one agent of each
// site, then under one that spreads over both, in turns, so both are
// measured on the same machine in the same minutes. Each agent's CPU use
// comes from /proc of its process over the transfer.

// benchAgentsPorts are the server ports of the two whitelists.
const (
	benchOnePairPort  = 5500
	benchTwoPairsPort = 5501
)

// agentsCell is one measured transfer of the agents benchmark.
type agentsCell struct {
	K      int
	Agents int // agents per site the whitelist uses
	Run    int
	Bps    float64
	// CPU is each agent's CPU use over the transfer, in cores (1.0 is
	// one core busy), in the order of agentNames; Busy is the whole
	// machine's, kernel included.
	CPU  []float64
	Busy float64
}

type agentsBench struct {
	k       []int
	runs    int
	streams int
	chunk   int
	out     string
	tf      transferFlags
	// agentNames are the lab processes whose CPU use is measured: site
	// a's agents, site b's, then the switch and the WAN emulator.
	agentNames []string
}

// benchAgents runs the comparison; lf.agents is 2.
func benchAgents(ctx context.Context, lf labFlags, b agentsBench, stdout io.Writer) error {
	opts, err := lf.freshOptions(stdout)
	if err != nil {
		return err
	}
	cfg, src, diags := config.LoadFile(opts.Config)
	if diags.HasErrors() {
		var sb strings.Builder
		config.WriteDiagnostics(&sb, diags, src.Bytes)
		return fmt.Errorf("lab config:\n%s", sb.String())
	}
	if len(cfg.Sites) != 2 || opts.Sosappliance == "" {
		return fmt.Errorf("--agents 2: the benchmark needs the two-site lab with the appliance")
	}
	first := [2]string{cfg.Sites[0].Agents[0].Name, cfg.Sites[1].Agents[0].Name}
	base, err := demoWhitelist(opts.Config, b.tf, b.streams)
	if err != nil {
		return err
	}
	base.ChunkSize = b.chunk
	one, two := base, base
	one.Name, one.ServerPort = "bench-one-agent", benchOnePairPort
	one.ClientAgents, one.ServerAgents = []string{first[0]}, []string{first[1]}
	two.Name, two.ServerPort = "bench-two-agents", benchTwoPairsPort
	opts.EditConfig = func(cf *labnet.ConfigFile) error {
		cf.SetWhitelist(one)
		cf.SetWhitelist(two)
		return nil
	}
	fmt.Fprintf(stdout, "sosappliance agents benchmark: K = %v concurrent connections of %d stripes, chunk %d, one against two agents per site, %d run(s)\n",
		b.k, b.streams, b.chunk, b.runs)
	fmt.Fprintf(stdout, "WAN: %s; each transfer %v after %v of slow start\n\n", opts.WAN, b.tf.duration, b.tf.omit)
	lab, err := labnet.Up(ctx, opts)
	if err != nil {
		return err
	}
	defer tearDown(lab, stdout)
	for i := range 2 {
		for _, n := range lab.SiteAgents(i) {
			b.agentNames = append(b.agentNames, n.Name)
		}
	}
	// Beside the agents, the lab's userspace switch and WAN emulator,
	// which share the same cores.
	for _, n := range []string{"ovs-vswitchd", "wanem"} {
		if lab.Process(n) != nil {
			b.agentNames = append(b.agentNames, n)
		}
	}
	if _, err := measure.Server(ctx, lab, benchOnePairPort, benchTwoPairsPort); err != nil {
		return err
	}
	var cells []agentsCell
	for r := 1; r <= b.runs; r++ {
		for _, k := range b.k {
			for _, w := range []labnet.Whitelist{one, two} {
				agents := 2
				if len(w.ClientAgents) > 0 {
					agents = 1
				}
				label := fmt.Sprintf("K=%d, %d agent(s) per site, run %d", k, agents, r)
				bar := newProgressBar(stdout, label)
				c, err := runAgentsCell(ctx, lab, b, measure.Transfer{Label: label, Port: w.ServerPort, Parallel: k}, bar)
				if err != nil {
					if ctx.Err() != nil {
						return err
					}
					fmt.Fprintf(stdout, "  %v\n", err)
					continue
				}
				c.K, c.Agents, c.Run = k, agents, r
				cells = append(cells, c)
			}
		}
	}
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return err
	}
	csvPath := filepath.Join(b.out, "bench-agents.csv")
	if err := writeFile(csvPath, func(w io.Writer) error { return writeAgentsCSV(w, b.agentNames, cells) }); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\naggregate throughput over %s (median of runs) and CPU per agent (cores):\n\n", lab.WAN())
	writeAgentsTable(stdout, b.agentNames, cells)
	fmt.Fprintf(stdout, "\nwrote %s\n", csvPath)
	return nil
}

// runAgentsCell runs one transfer and reads each agent's CPU time around it.
func runAgentsCell(ctx context.Context, lab *labnet.Lab, b agentsBench, tr measure.Transfer, bar *progressBar) (agentsCell, error) {
	tr.Duration, tr.Omit = b.tf.duration, b.tf.omit
	before, err := agentCPU(lab, b.agentNames)
	if err != nil {
		return agentsCell{}, err
	}
	busy, total, _ := machineCPU()
	start := time.Now()
	res, err := measure.Run(ctx, lab, tr, bar.update)
	bar.finish(res, err)
	if err != nil {
		return agentsCell{}, err
	}
	wall := time.Since(start)
	after, err := agentCPU(lab, b.agentNames)
	if err != nil {
		return agentsCell{}, err
	}
	c := agentsCell{Bps: res.ReceivedBps}
	for i := range before {
		c.CPU = append(c.CPU, (after[i]-before[i]).Seconds()/wall.Seconds())
	}
	if busyAfter, totalAfter, err := machineCPU(); err == nil && totalAfter > total {
		c.Busy = float64(busyAfter-busy) / float64(totalAfter-total) * float64(runtime.NumCPU())
	}
	return c, nil
}

// machineCPU reads the machine's busy and total CPU time (all cores, in
// ticks) from /proc/stat: busy includes the kernel's softirq work, which
// no process is charged for.
func machineCPU() (busy, total uint64, err error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: %q", line)
	}
	for i, x := range f[1:] {
		if i >= 8 {
			break // guest time is already in user
		}
		n, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, nil
}

func agentCPU(lab *labnet.Lab, names []string) ([]time.Duration, error) {
	out := make([]time.Duration, len(names))
	for i, n := range names {
		p := lab.Process(n)
		if p == nil {
			return nil, fmt.Errorf("agent %s is not running", n)
		}
		d, err := p.Ref.CPUTime()
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

func writeAgentsCSV(w io.Writer, names []string, cells []agentsCell) error {
	cols := []string{"concurrent", "agents_per_site", "run", "mbps"}
	for _, n := range names {
		cols = append(cols, "cpu_"+n)
	}
	cols = append(cols, "cpu_machine")
	if _, err := fmt.Fprintln(w, strings.Join(cols, ",")); err != nil {
		return err
	}
	for _, c := range cells {
		row := []string{fmt.Sprint(c.K), fmt.Sprint(c.Agents), fmt.Sprint(c.Run), fmt.Sprintf("%.1f", c.Bps/1e6)}
		for _, x := range c.CPU {
			row = append(row, fmt.Sprintf("%.3f", x))
		}
		row = append(row, fmt.Sprintf("%.3f", c.Busy))
		if _, err := fmt.Fprintln(w, strings.Join(row, ",")); err != nil {
			return err
		}
	}
	return nil
}

// writeAgentsTable prints, per K, the median throughput with one and with
// two agents per site, their ratio, and each agent's median CPU use.
func writeAgentsTable(w io.Writer, names []string, cells []agentsCell) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "K\tagents/site\tMbit/s\t"
	for _, n := range names {
		head += "CPU " + n + "\t"
	}
	fmt.Fprintf(tw, "%smachine (of %d)\ttwo/one\t\n", head, runtime.NumCPU())
	var ks []int
	for _, c := range cells {
		if !slices.Contains(ks, c.K) {
			ks = append(ks, c.K)
		}
	}
	for _, k := range ks {
		var mbps [3]float64
		for _, agents := range []int{1, 2} {
			var bps, busy []float64
			cpu := make([][]float64, len(names))
			for _, c := range cells {
				if c.K != k || c.Agents != agents {
					continue
				}
				bps = append(bps, c.Bps)
				busy = append(busy, c.Busy)
				for i, x := range c.CPU {
					cpu[i] = append(cpu[i], x)
				}
			}
			if len(bps) == 0 {
				continue
			}
			mbps[agents] = median(bps) / 1e6
			line := fmt.Sprintf("%d\t%d\t%.0f\t", k, agents, mbps[agents])
			for i := range names {
				line += fmt.Sprintf("%.2f\t", median(cpu[i]))
			}
			line += fmt.Sprintf("%.2f\t", median(busy))
			ratio := ""
			if agents == 2 && mbps[1] > 0 {
				ratio = fmt.Sprintf("%.2f", mbps[2]/mbps[1])
			}
			fmt.Fprintln(tw, line+ratio+"\t")
		}
	}
	tw.Flush()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

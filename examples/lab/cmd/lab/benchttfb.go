package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/examples/lab/labnet"
	"github.com/sosappliance/sosappliance/examples/lab/measure"
)

// The benchmark's server ports: one its whitelist carries, one no
// whitelist names (direct).
const (
	ttfbPort       = 8090
	ttfbDirectPort = 8190
)

// The targets of the warm pool (issue 15) at the lab's 200 ms round trip.
const (
	barWarmFirstByte = 0.6 // time to first byte, warm pool, against direct
	barWarmTotal1MB  = 0.8 // total time of a 1 MB GET, warm pool, against direct
)

// ttfbLab is one lab of the benchmark: with or without a warm pool.
type ttfbLab struct {
	name string // "cold" or "warm"
	pool bool
}

func cmdBenchTTFB(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var lf labFlags
	fs := flag.NewFlagSet("lab bench-ttfb", flag.ContinueOnError)
	lf.register(fs)
	runs := fs.Int("runs", 20, "GETs of each size in each mode")
	sizesFlag := fs.String("sizes", "1000,100000,1000000", "object sizes in bytes")
	streams := fs.Int("streams", 64, "stripes of the benchmark whitelist's sessions")
	chunk := fs.Int("chunk", 60000, "chunk size of the benchmark whitelist")
	poolIdle := fs.Int("pool-min-idle", 0, "min_idle of the warm pool; 0 takes --streams")
	poolMax := fs.Int("pool-max", 0, "max of the warm pool; 0 takes the larger of min_idle and --streams")
	labsFlag := fs.String("labs", "cold,warm", "labs to run: cold (no pool block) and/or warm (a pool toward the server-side agent)")
	out := fs.String("out", "examples/lab/results", "directory for bench-ttfb-DATE.csv")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	sizes, err := intList(*sizesFlag)
	if err != nil {
		return fmt.Errorf("--sizes: %w", err)
	}
	if slices.Max(sizes) > measure.MaxObject {
		return fmt.Errorf("--sizes: at most %d bytes", measure.MaxObject)
	}
	if *runs < 1 || *streams < 1 || *chunk < 1 {
		return errors.New("--runs, --streams and --chunk must be positive")
	}
	var labs []ttfbLab
	for _, n := range strings.Split(*labsFlag, ",") {
		switch strings.TrimSpace(n) {
		case "cold":
			labs = append(labs, ttfbLab{"cold", false})
		case "warm":
			labs = append(labs, ttfbLab{"warm", true})
		default:
			return fmt.Errorf("--labs %q: want cold, warm or both", *labsFlag)
		}
	}
	minIdle := cmp0(*poolIdle, *streams)
	maxIdle := cmp0(*poolMax, max(minIdle, *streams))
	opts, err := lf.freshOptions(stdout)
	if err != nil {
		return err
	}
	if opts.Sosappliance == "" {
		return errors.New("bench-ttfb compares the appliance with direct; drop --no-appliance")
	}
	base, err := demoWhitelist(opts.Config, transferFlags{whitelist: "http", directPort: ttfbDirectPort}, *streams)
	if err != nil {
		return err
	}
	wl := base
	wl.Name, wl.ServerPort, wl.ChunkSize, wl.QueueLength = "ttfb", ttfbPort, *chunk, 0
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	objects, err := measure.NewObjectServer(int64(slices.Max(sizes)))
	if err != nil {
		return err
	}

	fmt.Fprintf(stdout, "sosappliance time to first byte: %d GETs of each of %v bytes with curl, direct and through the agents\n", *runs, sizes)
	fmt.Fprintf(stdout, "WAN: %s; whitelist %d stripes, chunk %d; warm pool min_idle %d, max %d\n\n", opts.WAN, *streams, *chunk, minIdle, maxIdle)
	var fetches []measure.Fetch
	for _, l := range labs {
		got, err := ttfbRun(ctx, opts, l, wl, objects, sizes, *runs, minIdle, maxIdle, stdout)
		fetches = append(fetches, got...)
		if err != nil {
			if ctx.Err() != nil || len(fetches) == 0 {
				return err
			}
			fmt.Fprintf(stdout, "lab %s: %v\n", l.name, err)
		}
	}

	csvPath := filepath.Join(*out, "bench-ttfb-"+time.Now().UTC().Format("2006-01-02")+".csv")
	if err := writeFile(csvPath, func(w io.Writer) error { return measure.WriteFetchCSV(w, fetches) }); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\ncurl's time_starttransfer (first byte) and time_total over %s, median (min-max) of %d:\n\n", opts.WAN, *runs)
	if err := measure.WriteFetchTable(stdout, fetches); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	printTTFBTargets(stdout, fetches, int64(slices.Max(sizes)))
	fmt.Fprintf(stdout, "\nwrote %s\n", csvPath)
	return nil
}

func cmp0(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// ttfbRun brings one lab up, serves the objects on the benchmark's two
// ports and fetches each size runs times, direct and through the agents in
// turn, so a slow spell of the machine hits both alike.
func ttfbRun(ctx context.Context, opts labnet.Options, l ttfbLab, wl labnet.Whitelist, objects *measure.ObjectServer,
	sizes []int, runs, minIdle, maxIdle int, stdout io.Writer) ([]measure.Fetch, error) {
	var farAgent string
	opts.EditConfig = func(cf *labnet.ConfigFile) error {
		cf.SetWhitelist(wl)
		body := cf.Body()
		for _, b := range body.Blocks() {
			if b.Type() == "pool" {
				body.RemoveBlock(b)
			}
		}
		if l.pool {
			body.AppendNewline()
			pb := body.AppendNewBlock("pool", []string{farAgent}).Body()
			pb.SetAttributeValue("min_idle", cty.NumberIntVal(int64(minIdle)))
			pb.SetAttributeValue("max", cty.NumberIntVal(int64(maxIdle)))
		}
		return nil
	}
	// The far agent is the second site's (labnet puts the server there).
	cfgAgents, err := labAgents(opts.Config)
	if err != nil {
		return nil, err
	}
	farAgent = cfgAgents[1]
	fmt.Fprintf(stdout, "--- lab %q: %s\n", l.name, map[bool]string{false: "no pool block (every session opens its stripes)", true: "pool \"" + farAgent + "\" { min_idle = " + strconv.Itoa(minIdle) + ", max = " + strconv.Itoa(maxIdle) + " }"}[l.pool])
	lab, err := labnet.Up(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer tearDown(lab, stdout)
	for _, port := range []int{ttfbPort, ttfbDirectPort} {
		ln, err := lab.Listen(labnet.Server, "tcp", fmt.Sprintf("%s:%d", labnet.ServerAddr, port))
		if err != nil {
			return nil, err
		}
		srv := &http.Server{Handler: objects, ReadHeaderTimeout: 30 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}
	if err := waitPortSteered(ctx, lab, ttfbPort); err != nil {
		return nil, err
	}
	var clientNode string
	for _, n := range lab.Nodes() {
		if n.Agent != nil {
			clientNode = n.Name
			break
		}
	}
	sosMode := measure.FetchCold
	if l.pool {
		sosMode = measure.FetchWarm
	}
	url := func(port, size int) string {
		return fmt.Sprintf("http://%s:%d/bytes/%d", labnet.ServerAddr, port, size)
	}
	// waitPool waits for the pool to hold what a session claims, so each
	// warm GET finds it as a steady trickle of connections would.
	var short int
	waitPool := func() error {
		deadline := time.Now().Add(20 * time.Second)
		for {
			p, ok, err := measure.Pool(ctx, lab, clientNode, farAgent)
			if err != nil {
				return err
			}
			if ok && p.Idle >= min(minIdle, wl.Streams) {
				return nil
			}
			if time.Now().After(deadline) {
				short++
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	// One unrecorded round first: ARP, the server's first accept, the
	// agents' first session.
	var fetches []measure.Fetch
	for run := 0; run <= runs; run++ {
		for _, size := range sizes {
			for _, mode := range []string{measure.FetchDirect, sosMode} {
				port := ttfbDirectPort
				if mode != measure.FetchDirect {
					port = ttfbPort
					if l.pool {
						if err := waitPool(); err != nil {
							return fetches, err
						}
					}
				}
				f, err := measure.Get(ctx, lab, url(port, size))
				if err != nil {
					return fetches, fmt.Errorf("%s GET of %d bytes: %w", mode, size, err)
				}
				if f.Bytes != int64(size) {
					return fetches, fmt.Errorf("%s GET of %d bytes received %d", mode, size, f.Bytes)
				}
				if run == 0 {
					continue
				}
				f.Mode, f.Lab, f.Size, f.Run = mode, l.name, int64(size), run
				fetches = append(fetches, f)
				fmt.Fprintf(stdout, "[%s %2d/%d] %-8s %8s  first byte %.3f s  total %.3f s\n", l.name, run, runs, mode, measure.SizeName(int64(size)), f.FirstByte, f.Total)
				// Let the session end at both agents before the next.
				select {
				case <-ctx.Done():
					return fetches, ctx.Err()
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
	}
	if l.pool {
		if p, ok, err := measure.Pool(ctx, lab, clientNode, farAgent); err == nil && ok {
			fmt.Fprintf(stdout, "pool toward %s after the runs: idle %d, target %d, claims %d, misses %d, refills %d, died %d; %d GET(s) found it short after 20 s\n",
				farAgent, p.Idle, p.Target, p.Claims, p.Misses, p.Refills, p.Died, short)
		}
	}
	return fetches, nil
}

// labAgents names the agents of the lab config's sites, in site order.
func labAgents(path string) ([]string, error) {
	cfg, src, diags := config.LoadFile(path)
	if diags.HasErrors() {
		var b strings.Builder
		config.WriteDiagnostics(&b, diags, src.Bytes)
		return nil, fmt.Errorf("lab config:\n%s", b.String())
	}
	var names []string
	for _, s := range cfg.Sites {
		for _, a := range s.Agents {
			names = append(names, a.Name)
			break
		}
	}
	if len(names) < 2 {
		return nil, fmt.Errorf("%s: want two sites with an agent each", path)
	}
	return names, nil
}

func waitPortSteered(ctx context.Context, lab *labnet.Lab, port int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := lab.PortSteered(ctx, port)
		if err == nil && ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("port %d not steered after 30 s (%v)", port, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// printTTFBTargets checks the warm pool's targets: first byte at most
// 0.6x direct at every size, and the largest GET's total at most 0.8x.
func printTTFBTargets(w io.Writer, fetches []measure.Fetch, largest int64) {
	cells := measure.SummariseFetches(fetches)
	for _, c := range cells {
		if c.Mode != measure.FetchWarm || c.FirstByteRatio == 0 {
			continue
		}
		mark := func(ok bool) string {
			if ok {
				return "met"
			}
			return "MISSED"
		}
		fmt.Fprintf(w, "target: warm first byte of %s <= %.1fx direct: %.2fx, %s\n", measure.SizeName(c.Size), barWarmFirstByte, c.FirstByteRatio, mark(c.FirstByteRatio <= barWarmFirstByte))
		if c.Size == largest {
			fmt.Fprintf(w, "target: warm total of %s <= %.1fx direct: %.2fx, %s\n", measure.SizeName(c.Size), barWarmTotal1MB, c.TotalRatio, mark(c.TotalRatio <= barWarmTotal1MB))
		}
	}
}

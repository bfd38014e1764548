package main

import (
	"bytes"
	"flag"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/labnet"
	"github.com/sosappliance/sosappliance/examples/lab/measure"
	"github.com/sosappliance/sosappliance/examples/lab/wanem"
)

func TestCommandLine(t *testing.T) {
	empty := t.TempDir()
	for _, c := range []struct {
		args     []string
		code     int
		contains string
	}{
		{nil, 2, "usage: lab COMMAND"},
		{[]string{"help"}, 0, "bench-wan"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"list", "--state-dir", empty}, 0, "no labs"},
		{[]string{"demo", "--no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"demo", "--rate", "fast"}, 1, `rate "fast"`},
		{[]string{"demo", "--loss", "2", "--state-dir", empty}, 1, "loss 2 is outside [0, 1]"},
		{[]string{"demo", "--state-dir", empty, "--config", "../../sos.hcl", "--direct-port", "5201"}, 1, "--direct-port 5201 is whitelisted"},
		{[]string{"demo", "--state-dir", empty, "--config", "../../sos.hcl", "--whitelist", "nope"}, 1, `no whitelist "nope"`},
		{[]string{"bench-wan", "--streams", "1,x"}, 1, "--streams"},
		{[]string{"bench-wan", "--concurrent", "4,0"}, 1, "--concurrent"},
		{[]string{"bench-wan", "--runs", "0"}, 1, "--runs 0"},
		{[]string{"bench-wan", "--auto-max", "-1"}, 1, "--auto-max -1"},
		{[]string{"bench-ttfb", "--sizes", "1,x"}, 1, "--sizes"},
		{[]string{"bench-ttfb", "--labs", "hot"}, 1, `--labs "hot"`},
		{[]string{"bench-ttfb", "--no-appliance", "--state-dir", empty}, 1, "drop --no-appliance"},
		{[]string{"bench-ttfb", "-h"}, 0, "-pool-min-idle"},
		{[]string{"demo", "--kill-streams", "many"}, 2, "kill-streams"},
		{[]string{"demo", "-h"}, 0, "-kill-streams"},
		{[]string{"up", "-h"}, 0, "-rtt"},
		{[]string{"up", "-h"}, 0, "-agents"},
		{[]string{"up", "--agents", "3", "--state-dir", empty}, 1, "--agents 3"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		all := out.String() + errb.String()
		if code != c.code || !strings.Contains(all, c.contains) {
			t.Errorf("lab %v: exit %d, want %d with %q; output:\n%s", c.args, code, c.code, c.contains, all)
		}
	}
}

func TestLabFlagsMakeOptions(t *testing.T) {
	var f labFlags
	fs := newFlagSet()
	f.register(fs)
	if err := fs.Parse([]string{"--rate", "1gbit", "--rtt", "100ms", "--loss", "0.0001", "--queue", "4MB", "--seed", "7", "--no-appliance"}); err != nil {
		t.Fatal(err)
	}
	opts, err := f.options(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := labnet.WAN{Rate: 1_000_000_000, RTT: 100 * time.Millisecond, Loss: 0.0001, QueueBytes: 4_000_000, Seed: 7}
	if opts.WAN != want || opts.Sosappliance != "" {
		t.Errorf("options %+v, want WAN %+v and no appliance", opts, want)
	}
}

func TestComparisonShowsRatiosAndTargets(t *testing.T) {
	wan := labnet.WAN{Rate: 500_000_000, RTT: 200 * time.Millisecond, Loss: 0.001}
	results := []measure.Result{
		{Transfer: measure.Transfer{Label: "direct, 1 TCP connection"}, ReceivedBps: 95e6},
		{Transfer: measure.Transfer{Label: "end-host parallel, iperf3 -P 64"}, ReceivedBps: 435e6},
		{Transfer: measure.Transfer{Label: "sosappliance, 1 TCP connection, 64 stripes"}, ReceivedBps: 410e6},
	}
	var b bytes.Buffer
	if missed := printComparison(&b, wan, results, 0, false); missed {
		t.Errorf("410 of 500 Mbit/s against 435 and 95 meets every target:\n%s", b.String())
	}
	for _, want := range []string{"95 Mbit/s", "435 Mbit/s", "410 Mbit/s", "4.6x", "82%", "0.94", "met"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
	results[2].ReceivedBps = 390e6
	b.Reset()
	if missed := printComparison(&b, wan, results, 0, false); !missed || strings.Count(b.String(), "MISSED") != 2 {
		t.Errorf("390 Mbit/s misses the link and parallel targets, not direct:\n%s", b.String())
	}
	// The slowest second after the start-up: 251 of 500 is half the link.
	results[2].ReceivedBps = 410e6
	b.Reset()
	if missed := printComparison(&b, wan, results, 251e6, true); missed || !strings.Contains(b.String(), "50% of the link each second      50%  met") {
		t.Errorf("a slowest second of 251 Mbit/s meets the per-second target:\n%s", b.String())
	}
	b.Reset()
	if missed := printComparison(&b, wan, results, 174e6, true); !missed || !strings.Contains(b.String(), "35%  MISSED") {
		t.Errorf("a second of 174 Mbit/s misses the per-second target:\n%s", b.String())
	}
}

func TestSlowestSecondLeavesStartUpAndShortIntervalsOut(t *testing.T) {
	if _, ok := slowestSecond(nil, 3*time.Second); ok {
		t.Fatal("a slowest second without seconds")
	}
	// The measured time after a 3 s omit: all of it counts.
	seconds := []measure.Interval{
		{Start: 0, End: 1, Bps: 480e6},
		{Start: 1, End: 2, Bps: 260e6}, // the slowest
		{Start: 2, End: 3.001, Bps: 470e6},
		{Start: 3.001, End: 3.2, Bps: 30e6}, // a last interval of 0.2 s
	}
	if got, ok := slowestSecond(seconds, 3*time.Second); !ok || got != 260e6 {
		t.Errorf("slowest second %v (%v), want 260e6", got, ok)
	}
	// Without an omit the first three seconds of the test are left out.
	seconds[0].Bps, seconds[1].Bps, seconds[2].Bps = 50e6, 90e6, 80e6
	seconds = append(seconds, measure.Interval{Start: 3.2, End: 4.2, Bps: 400e6})
	if got, ok := slowestSecond(seconds, 0); !ok || got != 400e6 {
		t.Errorf("slowest second without an omit %v (%v), want 400e6", got, ok)
	}
}

func TestBenchChartFromPoints(t *testing.T) {
	points := []measure.Point{
		{Mode: measure.ModeDirect, Streams: 1, Result: measure.Result{ReceivedBps: 60e6}},
		{Mode: measure.ModeParallel, Streams: 1, Result: measure.Result{ReceivedBps: 60e6}},
		{Mode: measure.ModeParallel, Streams: 64, Result: measure.Result{ReceivedBps: 430e6}},
		{Mode: measure.ModeSosappliance, Streams: 1, ChunkSize: 60000, Result: measure.Result{ReceivedBps: 50e6}},
		{Mode: measure.ModeSosappliance, Streams: 64, ChunkSize: 60000, Result: measure.Result{ReceivedBps: 420e6}},
		{Mode: measure.ModeSosappliance, Streams: 64, ChunkSize: 10000, Result: measure.Result{ReceivedBps: 380e6}},
	}
	c := benchChart(points, labnet.DefaultWAN)
	if len(c.Series) != 3 || len(c.Levels) != 2 {
		t.Fatalf("series %d levels %d: %+v", len(c.Series), len(c.Levels), c)
	}
	if c.Series[1].Name != "sosappliance, chunk 60000" || len(c.Series[1].Points) != 2 {
		t.Errorf("series %+v", c.Series[1])
	}
	path := filepath.Join(t.TempDir(), "bench.png")
	if err := writeFile(path, c.WritePNG); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Error(err)
	}
}

func newFlagSet() *flag.FlagSet { return flag.NewFlagSet("test", flag.ContinueOnError) }

// The agents benchmark's table: medians per K and agents per site, each
// agent's CPU, and the two/one ratio on the two-agent line.
func TestAgentsTable(t *testing.T) {
	names := []string{"a", "a2", "b", "b2"}
	cells := []agentsCell{
		{K: 8, Agents: 1, Run: 1, Bps: 400e6, CPU: []float64{0.9, 0, 0.8, 0}},
		{K: 8, Agents: 1, Run: 2, Bps: 500e6, CPU: []float64{0.95, 0, 0.85, 0}},
		{K: 8, Agents: 2, Run: 1, Bps: 700e6, CPU: []float64{0.5, 0.5, 0.45, 0.45}},
		{K: 8, Agents: 2, Run: 2, Bps: 650e6, CPU: []float64{0.55, 0.5, 0.4, 0.5}},
	}
	var b bytes.Buffer
	writeAgentsTable(&b, names, cells)
	out := b.String()
	for _, want := range []string{"CPU a2", "two/one", "450", "675", "1.50", "0.93"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	var csv bytes.Buffer
	if err := writeAgentsCSV(&csv, names, cells); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(csv.String()), "\n"); len(lines) != 5 || lines[0] != "concurrent,agents_per_site,run,mbps,cpu_a,cpu_a2,cpu_b,cpu_b2,cpu_machine" {
		t.Errorf("csv:\n%s", csv.String())
	}
}

// TestTransferCountsTakeTheDataDirection: of each emulator, the direction
// that received the more bytes (not frames) since the earlier reading
// (not in all); over two emulators in a row (three sites), the frames
// once and the drops of both.
func TestTransferCountsTakeTheDataDirection(t *testing.T) {
	ab := func(aRx, aBytes, aQ, aL, bRx, bBytes, bQ, bL uint64) wanem.Stats {
		return wanem.Stats{AtoBName: "wan-a->em-a", BtoAName: "em-a->wan-a",
			AtoB: wanem.LinkStats{ReceivedPackets: aRx, ReceivedBytes: aBytes, QueueDropPackets: aQ, LossDropPackets: aL},
			BtoA: wanem.LinkStats{ReceivedPackets: bRx, ReceivedBytes: bBytes, QueueDropPackets: bQ, LossDropPackets: bL}}
	}
	second := func(s wanem.Stats) wanem.Stats {
		s.AtoBName, s.BtoAName = "wan-b->em-b", "em-b->wan-b"
		return s
	}
	for _, c := range []struct {
		name          string
		before, after []wanem.Stats
		want          measure.WANCounts
	}{{
		// A to B carried 1,000 frames of data; B to A 1,200 small
		// frames, more frames than the data but fewer bytes.
		name:   "one emulator",
		before: []wanem.Stats{ab(10, 90_000, 0, 0, 700, 50_000, 0, 0)},
		after:  []wanem.Stats{ab(1010, 9_090_000, 20, 1, 1900, 130_000, 100, 0)},
		want:   measure.WANCounts{Received: 1000, QueueDrops: 20, LossDrops: 1},
	}, {
		// B to A had carried a transfer before this one: in all it
		// received the more bytes, in between the fewer.
		name:   "an earlier transfer the other way",
		before: []wanem.Stats{ab(0, 0, 0, 0, 5000, 45_000_000, 7, 7)},
		after:  []wanem.Stats{ab(300, 2_700_000, 4, 1, 5200, 45_013_000, 12, 9)},
		want:   measure.WANCounts{Received: 300, QueueDrops: 4, LossDrops: 1},
	}, {
		name:   "data in the B-to-A way",
		before: []wanem.Stats{ab(0, 0, 0, 0, 5000, 45_000_000, 7, 7)},
		after:  []wanem.Stats{ab(300, 20_000, 0, 0, 5500, 49_500_000, 12, 9)},
		want:   measure.WANCounts{Received: 500, QueueDrops: 5, LossDrops: 2},
	}, {
		// Three sites: 1,000 frames into the first leg, 25 dropped
		// there; the second leg received the 975 left and dropped 5.
		name:   "two legs in a row",
		before: []wanem.Stats{ab(0, 0, 0, 0, 0, 0, 0, 0), second(ab(0, 0, 0, 0, 0, 0, 0, 0))},
		after:  []wanem.Stats{ab(1000, 9_000_000, 20, 5, 600, 40_000, 0, 0), second(ab(400, 26_000, 0, 0, 975, 8_775_000, 3, 2))},
		want:   measure.WANCounts{Received: 1000, QueueDrops: 23, LossDrops: 7},
	}} {
		got, err := transferCounts(c.before, c.after)
		if err != nil || got != c.want {
			t.Errorf("%s: transferCounts = %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	// Readings that do not compare are errors, not counts.
	one := []wanem.Stats{ab(10, 90_000, 0, 0, 7, 500, 0, 0)}
	restarted := []wanem.Stats{ab(5, 45_000, 0, 0, 3, 200, 0, 0)}
	for _, c := range []struct {
		name          string
		before, after []wanem.Stats
		want          string
	}{
		{"an emulator more", one, append(slices.Clone(one), second(one[0])), "2 emulators, 1 before the transfer"},
		{"restarted", one, restarted, "rx_pkts went from 10 down to 5"},
		{"another emulator", one, []wanem.Stats{second(one[0])}, "wan-b->em-b"},
	} {
		if got, err := transferCounts(c.before, c.after); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: transferCounts = %+v, %v; want an error saying %q", c.name, got, err, c.want)
		}
	}
}

const (
	iperfBlock = `whitelist "iperf" {
  clients     = ["10.10.1.0/24"]
  server      = "10.10.2.10"
  server_port = 5201
`
	backBlock = `  streams     = 64
  chunk_size  = 60000
}

whitelist "back" {
  clients      = ["10.10.2.0/24"]
  servers      = ["10.10.1.0/24"]
  server_ports = ["5301"]
  direction    = "both"
`
)

// variant writes sos.hcl with old replaced by new to a temporary file
// and returns its path.
func variant(t *testing.T, old, new string) string {
	t.Helper()
	src, err := os.ReadFile("../../sos.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(src), old) != 1 {
		t.Fatalf("sos.hcl has %d of %q", strings.Count(string(src), old), old)
	}
	p := filepath.Join(t.TempDir(), "sos.hcl")
	if err := os.WriteFile(p, []byte(strings.Replace(string(src), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDemoWhitelistNarrowsToTheLabsServer: whitelists of server lists and
// port ranges (the three-site config's, sos.hcl's "range") carry the
// transfer to the lab's server on one of their ports, and a direct port
// inside any whitelist's range is refused, not accelerated unseen.
func TestDemoWhitelistNarrowsToTheLabsServer(t *testing.T) {
	for _, c := range []struct {
		config, whitelist string
		directPort        int
		wantPort          int
		wantErr           string
	}{
		{config: "../../sos.hcl", whitelist: "iperf", directPort: 5301, wantPort: 5201},
		{config: "../../sos.hcl", whitelist: "range", directPort: 5301, wantPort: 50000},
		{config: "../../sos-3sites.hcl", whitelist: "a-to-b", directPort: 5301, wantPort: 5201},
		{config: "../../sos.hcl", whitelist: "http6", directPort: 5301, wantErr: `whitelist "http6" names servers fd10:10:0:2::10/128; the lab's server is 10.10.2.10`},
		{config: "../../sos.hcl", whitelist: "iperf", directPort: 50010, wantErr: `--direct-port 50010 is whitelisted by "range"`},
		{config: "../../sos.hcl", whitelist: "range", directPort: 5201, wantErr: `--direct-port 5201 is whitelisted by "iperf"`},
		{config: "../../sos.hcl", whitelist: "none", directPort: 5301, wantErr: `has no whitelist "none"`},
		{config: "../../sos.hcl", whitelist: "iperf", directPort: 70000, wantErr: `--direct-port 70000: not a TCP port`},
		// sos.hcl edited: a port list with 5201 and a lower port, one
		// without 5201, clients without the lab's client, and a
		// direction = "both" whitelist whose servers open connections to
		// the lab's server on the direct port.
		{config: variant(t, iperfBlock, strings.Replace(iperfBlock, "server_port = 5201", `server_ports = ["5100-5110", "5201"]`, 1)), whitelist: "iperf", directPort: 5301, wantPort: 5201},
		{config: variant(t, iperfBlock, strings.Replace(iperfBlock, "server_port = 5201", `server_ports = ["5100-5110"]`, 1)), whitelist: "iperf", directPort: 5301, wantPort: 5100},
		{config: variant(t, iperfBlock, strings.Replace(iperfBlock, "10.10.1.0/24", "10.10.1.128/25", 1)), whitelist: "iperf", directPort: 5301,
			wantErr: `whitelist "iperf" names clients 10.10.1.128/25; the lab's client is 10.10.1.10`},
		{config: variant(t, iperfBlock, iperfBlock+backBlock), whitelist: "iperf", directPort: 5301, wantErr: `--direct-port 5301 is whitelisted by "back"`},
		{config: variant(t, iperfBlock, iperfBlock+backBlock), whitelist: "iperf", directPort: 5302, wantPort: 5201},
	} {
		name := c.config + " " + c.whitelist
		wl, err := demoWhitelist(c.config, transferFlags{whitelist: c.whitelist, directPort: c.directPort}, 8)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: %+v, %v; want an error saying %q", name, wl, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if wl.Name != c.whitelist || wl.Server != labnet.ServerAddr.String() || wl.ServerPort != c.wantPort || wl.Streams != 8 || len(wl.Clients) == 0 {
			t.Errorf("%s: %+v, want server %s port %d, 8 streams", name, wl, labnet.ServerAddr, c.wantPort)
		}
	}
}

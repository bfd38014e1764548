package measure

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"text/tabwriter"
)

// Modes of a benchmark point.
const (
	ModeDirect       = "direct"
	ModeParallel     = "parallel"
	ModeSosappliance = "sosappliance"
	// ModeAuto is sosappliance with streams = "auto": Streams is the
	// count the session chose (0 if it could not be read).
	ModeAuto = "sosappliance-auto"
)

// Point is one cell of the benchmark in one run: a mode, a stream count
// (iperf3 -P for parallel, the stripe count for sosappliance) and, for
// sosappliance, the chunk size. Concurrent > 1 makes it a point of the
// sharing sweep: that many end-host connections at once (direct ones, or
// each its own sosappliance session of Streams stripes).
type Point struct {
	Mode       string
	Streams    int
	ChunkSize  int // sosappliance only
	Concurrent int // 0 or 1: one connection
	Run        int // 1-based; points of several runs are summarised by median
	Result     Result
	// SwitchDrops counts the frames the lab's userspace switch dropped
	// at its port sockets from just before the transfer to its end (loss
	// the lab added beside the emulated WAN's), if SwitchDropsRead.
	SwitchDrops     uint64
	SwitchDropsRead bool
	// WAN is what the WAN emulator counted from just before the transfer
	// to its end in the direction that carried it (every emulator's
	// together), if WANRead: the frames it received, those its queue
	// dropped (loss the transfer made itself, by sending faster than the
	// link) and those it dropped at random (the loss it was set to).
	WAN     WANCounts
	WANRead bool
}

// WANCounts are the WAN emulator's frame counts over one transfer.
type WANCounts struct {
	Received, QueueDrops, LossDrops uint64
}

// QueueDropShare is the share of the frames the WAN received that its
// queue dropped (0 with none received).
func (c WANCounts) QueueDropShare() float64 {
	if c.Received == 0 {
		return 0
	}
	return float64(c.QueueDrops) / float64(c.Received)
}

var csvHeader = []string{"mode", "streams", "chunk_size", "concurrent", "run", "throughput_mbps", "sent_mbps",
	"retransmits", "bytes", "seconds", "min_connection_mbps", "max_connection_mbps", "jain_fairness", "switch_drops",
	"wan_frames", "wan_queue_drops", "wan_loss_drops"}

// The headers of results written before the WAN's counts, and before
// switch_drops.
var (
	csvHeaderV2 = csvHeader[:14]
	csvHeaderV1 = csvHeader[:13]
)

// WriteCSV writes the points, one row each, with a header.
func WriteCSV(w io.Writer, points []Point) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	for _, p := range points {
		chunk := ""
		if p.ChunkSize > 0 {
			chunk = strconv.Itoa(p.ChunkSize)
		}
		r := p.Result
		lo, hi, jain := "", "", ""
		if len(r.PerConnectionBps) > 1 {
			lo, hi = f(slices.Min(r.PerConnectionBps)/1e6, 1), f(slices.Max(r.PerConnectionBps)/1e6, 1)
			jain = f(Jain(r.PerConnectionBps), 3)
		}
		drops := ""
		if p.SwitchDropsRead {
			drops = strconv.FormatUint(p.SwitchDrops, 10)
		}
		wan := []string{"", "", ""}
		if p.WANRead {
			for i, v := range []uint64{p.WAN.Received, p.WAN.QueueDrops, p.WAN.LossDrops} {
				wan[i] = strconv.FormatUint(v, 10)
			}
		}
		if err := cw.Write(append([]string{
			p.Mode, strconv.Itoa(p.Streams), chunk, strconv.Itoa(max(p.Concurrent, 1)), strconv.Itoa(max(p.Run, 1)),
			f(r.ReceivedBps/1e6, 1), f(r.SentBps/1e6, 1),
			strconv.Itoa(r.Retransmits), strconv.FormatInt(r.Bytes, 10), f(r.Seconds, 2),
			lo, hi, jain, drops,
		}, wan...)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// ReadCSV reads what WriteCSV wrote (throughput and counts, not the rate of
// each connection).
func ReadCSV(r io.Reader) ([]Point, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("benchmark csv: %w", err)
	}
	if len(rows) == 0 || !slices.Equal(rows[0], csvHeader) && !slices.Equal(rows[0], csvHeaderV2) && !slices.Equal(rows[0], csvHeaderV1) {
		return nil, fmt.Errorf("benchmark csv: header %v, want %v", rows[:min(len(rows), 1)], csvHeader)
	}
	var points []Point
	for i, row := range rows[1:] {
		p := Point{Mode: row[0]}
		var errs [13]error
		if len(row) > 13 && row[13] != "" {
			p.SwitchDrops, errs[9] = strconv.ParseUint(row[13], 10, 64)
			p.SwitchDropsRead = errs[9] == nil
		}
		if len(row) > 16 && row[14] != "" {
			p.WAN.Received, errs[10] = strconv.ParseUint(row[14], 10, 64)
			p.WAN.QueueDrops, errs[11] = strconv.ParseUint(row[15], 10, 64)
			p.WAN.LossDrops, errs[12] = strconv.ParseUint(row[16], 10, 64)
			p.WANRead = true
		} else if len(row) > 16 && row[15]+row[16] != "" {
			// WriteCSV leaves all three empty when the counters were
			// not read; drops without the frames are a damaged row.
			errs[10] = fmt.Errorf("WAN drops %q and %q without wan_frames", row[15], row[16])
		}
		p.Streams, errs[0] = strconv.Atoi(row[1])
		if row[2] != "" {
			p.ChunkSize, errs[1] = strconv.Atoi(row[2])
		}
		p.Concurrent, errs[2] = strconv.Atoi(row[3])
		p.Run, errs[3] = strconv.Atoi(row[4])
		var mbps, sent float64
		mbps, errs[4] = strconv.ParseFloat(row[5], 64)
		sent, errs[5] = strconv.ParseFloat(row[6], 64)
		p.Result.Retransmits, errs[6] = strconv.Atoi(row[7])
		p.Result.Bytes, errs[7] = strconv.ParseInt(row[8], 10, 64)
		p.Result.Seconds, errs[8] = strconv.ParseFloat(row[9], 64)
		for _, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("benchmark csv row %d: %w", i+2, err)
			}
		}
		p.Result.ReceivedBps, p.Result.SentBps = mbps*1e6, sent*1e6
		points = append(points, p)
	}
	return points, nil
}

// Jain is Jain's fairness index of the rates: 1 when all are equal, 1/n
// when one takes everything.
func Jain(rates []float64) float64 {
	var sum, sq float64
	for _, r := range rates {
		sum += r
		sq += r * r
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(rates)) * sq)
}

// Summary is the median of several runs' values and their range.
type Summary struct {
	Median, Min, Max float64
	N                int
}

// Summarise returns the median and range of the values (the mean of the
// middle two for an even count).
func Summarise(vs []float64) Summary {
	if len(vs) == 0 {
		return Summary{}
	}
	s := slices.Clone(vs)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Summary{Median: m, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// String prints Mbit/s: "452" for one run, "452 (439-464)" for several.
func (s Summary) String() string { return s.Format(0) }

// Format is String with prec decimals.
func (s Summary) Format(prec int) string {
	if s.N == 0 {
		return "-"
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	if s.N == 1 {
		return f(s.Median)
	}
	return f(s.Median) + " (" + f(s.Min) + "-" + f(s.Max) + ")"
}

type cellKey struct {
	mode                 string
	streams, chunk, conc int
}

func key(p Point) cellKey {
	if p.Mode == ModeAuto {
		// One cell whatever each run chose.
		return cellKey{p.Mode, 0, p.ChunkSize, max(p.Concurrent, 1)}
	}
	return cellKey{p.Mode, p.Streams, p.ChunkSize, max(p.Concurrent, 1)}
}

// chosen collects the stream counts the auto cells chose over the runs.
func chosen(points []Point) map[cellKey][]float64 {
	c := map[cellKey][]float64{}
	for _, p := range points {
		if p.Mode == ModeAuto {
			c[key(p)] = append(c[key(p)], float64(p.Streams))
		}
	}
	return c
}

// group collects each cell's throughputs over the runs, in Mbit/s.
func group(points []Point) map[cellKey][]float64 {
	g := map[cellKey][]float64{}
	for _, p := range points {
		k := key(p)
		g[k] = append(g[k], p.Result.ReceivedBps/1e6)
	}
	return g
}

// Medians returns one point per cell (single connections only, in the
// order the cells first appear) whose throughput is the median over the
// runs.
func Medians(points []Point) []Point {
	g := group(points)
	counts := chosen(points)
	seen := map[cellKey]bool{}
	var out []Point
	for _, p := range points {
		k := key(p)
		if k.conc > 1 || seen[k] {
			continue
		}
		seen[k] = true
		m := Point{Mode: p.Mode, Streams: p.Streams, ChunkSize: p.ChunkSize, Run: 0}
		m.Result.ReceivedBps = Summarise(g[k]).Median * 1e6
		if p.Mode == ModeAuto {
			m.Streams = int(Summarise(counts[k]).Median + 0.5)
		}
		out = append(out, m)
	}
	return out
}

// WriteTable prints the single-connection points as the published SOS
// tables lay them out: one row per stream count, end-host parallel TCP and
// sosappliance at each chunk size side by side, in Mbit/s, with the direct
// transfer above; a cell of several runs shows the median and the range.
func WriteTable(w io.Writer, points []Point) error {
	return writeGrid(w, points, "Mbit/s", 0, group, true)
}

// WriteQueueDropTable prints, in WriteTable's layout, the share of the
// transfer's frames (Point.WAN) that the WAN's queue dropped
// (median and range over the runs, in percent): what a mode's own
// sending cost the path beside its random loss. It prints nothing when
// no point has the WAN's counts.
func WriteQueueDropTable(w io.Writer, points []Point) error {
	if !slices.ContainsFunc(points, func(p Point) bool { return p.WANRead }) {
		return nil
	}
	fmt.Fprintln(w, "frames dropped by the WAN's queue, % of the transfer's frames:")
	fmt.Fprintln(w)
	return writeGrid(w, points, "%", 1, func(points []Point) map[cellKey][]float64 {
		g := map[cellKey][]float64{}
		for _, p := range points {
			if p.WANRead {
				g[key(p)] = append(g[key(p)], p.WAN.QueueDropShare()*100)
			}
		}
		return g
	}, false)
}

// writeGrid prints the single-connection cells' values (group collects
// them per cell) with prec decimals: the direct transfer, then a row per
// stream count with end-host parallel TCP and each chunk size, then the
// auto cells (with the counts they chose if counts).
func writeGrid(w io.Writer, points []Point, unit string, prec int, group func([]Point) map[cellKey][]float64, counts bool) error {
	var chunks []int
	streams := map[int]bool{}
	var single []Point
	for _, p := range points {
		if max(p.Concurrent, 1) == 1 {
			single = append(single, p)
		}
	}
	auto := false
	for _, p := range single {
		auto = auto || p.Mode == ModeAuto
		if (p.Mode == ModeSosappliance || p.Mode == ModeAuto) && !slices.Contains(chunks, p.ChunkSize) {
			chunks = append(chunks, p.ChunkSize)
		}
		if p.Mode == ModeParallel || p.Mode == ModeSosappliance {
			streams[p.Streams] = true
		}
	}
	g := group(single)
	sort.Ints(chunks)
	if vs, ok := g[cellKey{ModeDirect, 1, 0, 1}]; ok {
		fmt.Fprintf(w, "direct, 1 TCP connection: %s %s\n\n", Summarise(vs).Format(prec), unit)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "streams\tiperf3 -P N\t")
	for _, c := range chunks {
		fmt.Fprintf(tw, "sos chunk %d\t", c)
	}
	fmt.Fprintln(tw)
	var ns []int
	for n := range streams {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	for _, n := range ns {
		fmt.Fprintf(tw, "%d\t%s\t", n, Summarise(g[cellKey{ModeParallel, n, 0, 1}]).Format(prec))
		for _, c := range chunks {
			fmt.Fprintf(tw, "%s\t", Summarise(g[cellKey{ModeSosappliance, n, c, 1}]).Format(prec))
		}
		fmt.Fprintln(tw)
	}
	if auto {
		// streams = "auto": the value, then the counts the runs chose.
		chose := chosen(single)
		fmt.Fprint(tw, "auto\t-\t")
		for _, c := range chunks {
			k := cellKey{ModeAuto, 0, c, 1}
			cell := Summarise(g[k]).Format(prec)
			if n := Summarise(chose[k]); counts && n.N > 0 {
				cell += " @" + n.String()
			}
			fmt.Fprintf(tw, "%s\t", cell)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// WriteSharingTable prints the sharing sweep: for K concurrent end-host
// connections, what iperf3 -P K carried directly, what K sosappliance
// sessions carried together, that against one session of the same shape
// alone, the slowest and fastest session, and Jain's index over the
// sessions (medians over the runs). It prints nothing when there is no
// sweep.
func WriteSharingTable(w io.Writer, points []Point) error {
	type agg struct{ total, lo, hi, jain []float64 }
	sos := map[int]*agg{}
	streams, chunk := 0, 0
	for _, p := range points {
		if p.Mode != ModeSosappliance || p.Concurrent <= 1 {
			continue
		}
		a := sos[p.Concurrent]
		if a == nil {
			a = &agg{}
			sos[p.Concurrent] = a
		}
		streams, chunk = p.Streams, p.ChunkSize
		a.total = append(a.total, p.Result.ReceivedBps/1e6)
		if pc := p.Result.PerConnectionBps; len(pc) > 0 {
			a.lo = append(a.lo, slices.Min(pc)/1e6)
			a.hi = append(a.hi, slices.Max(pc)/1e6)
			a.jain = append(a.jain, Jain(pc))
		}
	}
	if len(sos) == 0 {
		return nil
	}
	g := group(points)
	one := Summarise(g[cellKey{ModeSosappliance, streams, chunk, 1}])
	fmt.Fprintf(w, "sharing: K concurrent connections, each an sosappliance session of %d stripes, chunk %d; one session alone: %s Mbit/s\n\n", streams, chunk, one)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "K\tiperf3 -P K\tsos K sessions\tvs one alone\tslowest\tfastest\tJain\t")
	var ks []int
	for k := range sos {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	for _, k := range ks {
		a := sos[k]
		tot := Summarise(a.total)
		ratio := "-"
		if one.N > 0 && one.Median > 0 {
			ratio = fmt.Sprintf("%.2fx", tot.Median/one.Median)
		}
		jain := "-"
		if len(a.jain) > 0 {
			jain = strconv.FormatFloat(Summarise(a.jain).Median, 'f', 2, 64)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", k, Summarise(g[cellKey{ModeParallel, k, 0, 1}]), tot, ratio,
			Summarise(a.lo), Summarise(a.hi), jain)
	}
	return tw.Flush()
}

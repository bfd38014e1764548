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
)

// Point is one cell of the benchmark: a mode, a stream count (iperf3 -P for
// parallel, the stripe count for sosappliance) and, for sosappliance, the
// chunk size.
type Point struct {
	Mode      string
	Streams   int
	ChunkSize int // sosappliance only
	Result    Result
}

var csvHeader = []string{"mode", "streams", "chunk_size", "throughput_mbps", "sent_mbps", "retransmits", "bytes", "seconds"}

// WriteCSV writes the points, one row each, with a header.
func WriteCSV(w io.Writer, points []Point) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	for _, p := range points {
		chunk := ""
		if p.ChunkSize > 0 {
			chunk = strconv.Itoa(p.ChunkSize)
		}
		r := p.Result
		if err := cw.Write([]string{
			p.Mode, strconv.Itoa(p.Streams), chunk,
			strconv.FormatFloat(r.ReceivedBps/1e6, 'f', 1, 64),
			strconv.FormatFloat(r.SentBps/1e6, 'f', 1, 64),
			strconv.Itoa(r.Retransmits), strconv.FormatInt(r.Bytes, 10),
			strconv.FormatFloat(r.Seconds, 'f', 2, 64),
		}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// ReadCSV reads what WriteCSV wrote (throughput, not the full result).
func ReadCSV(r io.Reader) ([]Point, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("benchmark csv: %w", err)
	}
	if len(rows) == 0 || len(rows[0]) != len(csvHeader) || rows[0][0] != csvHeader[0] {
		return nil, fmt.Errorf("benchmark csv: header %v, want %v", rows[:min(len(rows), 1)], csvHeader)
	}
	var points []Point
	for i, row := range rows[1:] {
		p := Point{Mode: row[0]}
		var errs [6]error
		p.Streams, errs[0] = strconv.Atoi(row[1])
		if row[2] != "" {
			p.ChunkSize, errs[1] = strconv.Atoi(row[2])
		}
		var mbps, sent float64
		mbps, errs[2] = strconv.ParseFloat(row[3], 64)
		sent, errs[3] = strconv.ParseFloat(row[4], 64)
		p.Result.Retransmits, errs[4] = strconv.Atoi(row[5])
		p.Result.Bytes, errs[5] = strconv.ParseInt(row[6], 10, 64)
		for _, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("benchmark csv row %d: %w", i+2, err)
			}
		}
		p.Result.Seconds, err = strconv.ParseFloat(row[7], 64)
		if err != nil {
			return nil, fmt.Errorf("benchmark csv row %d: %w", i+2, err)
		}
		p.Result.ReceivedBps, p.Result.SentBps = mbps*1e6, sent*1e6
		points = append(points, p)
	}
	return points, nil
}

// WriteTable prints the points as the published SOS tables lay them out:
// one row per stream count, end-host parallel TCP and sosappliance at each
// chunk size side by side, in Mbit/s, with the direct transfer above.
func WriteTable(w io.Writer, points []Point) error {
	var chunks []int
	streams := map[int]bool{}
	cell := map[[3]int]float64{} // {mode, streams, chunk}
	modeIndex := map[string]int{ModeDirect: 0, ModeParallel: 1, ModeSosappliance: 2}
	for _, p := range points {
		mi, ok := modeIndex[p.Mode]
		if !ok {
			continue
		}
		if p.Mode == ModeSosappliance && !slices.Contains(chunks, p.ChunkSize) {
			chunks = append(chunks, p.ChunkSize)
		}
		if p.Mode != ModeDirect {
			streams[p.Streams] = true
		}
		cell[[3]int{mi, p.Streams, p.ChunkSize}] = p.Result.ReceivedBps / 1e6
	}
	sort.Ints(chunks)
	if v, ok := cell[[3]int{0, 1, 0}]; ok {
		fmt.Fprintf(w, "direct, 1 TCP connection: %.0f Mbit/s\n\n", v)
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
		fmt.Fprintf(tw, "%d\t%s\t", n, mbps(cell, [3]int{1, n, 0}))
		for _, c := range chunks {
			fmt.Fprintf(tw, "%s\t", mbps(cell, [3]int{2, n, c}))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func mbps(cell map[[3]int]float64, k [3]int) string {
	if v, ok := cell[k]; ok {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return "-"
}

package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"

	"github.com/sosappliance/sosappliance/examples/lab/labnet"
	"github.com/sosappliance/sosappliance/examples/lab/plot"
)

// timeline is one demo transfer's throughput, second by second, from its
// start: the time iperf3 takes to open its connections shows as zero, a
// slow ramp as a slope and a stall as a dip.
type timeline struct {
	Label   string
	Samples []timelineSample
}

type timelineSample struct {
	Seconds float64 // since the transfer started
	Bps     float64 // received over the second before
}

var timelineHeader = []string{"transfer", "seconds", "bits_per_second"}

// writeTimelines writes the timelines as CSV, a row per sample, so that a
// run's chart can be drawn again (readTimelines).
func writeTimelines(w io.Writer, tls []timeline) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(timelineHeader); err != nil {
		return err
	}
	for _, tl := range tls {
		for _, s := range tl.Samples {
			row := []string{tl.Label, strconv.FormatFloat(s.Seconds, 'f', 3, 64), strconv.FormatFloat(s.Bps, 'f', 0, 64)}
			if err := cw.Write(row); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// readTimelines reads what writeTimelines wrote, transfers in their order.
func readTimelines(r io.Reader) ([]timeline, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("timeline csv: %w", err)
	}
	if len(rows) == 0 || len(rows[0]) != len(timelineHeader) || rows[0][0] != timelineHeader[0] {
		return nil, fmt.Errorf("timeline csv: the first row is not %v", timelineHeader)
	}
	var tls []timeline
	for i, row := range rows[1:] {
		secs, err1 := strconv.ParseFloat(row[1], 64)
		bps, err2 := strconv.ParseFloat(row[2], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("timeline csv: row %d: %q is not seconds and bits per second", i+2, row[1:])
		}
		if len(tls) == 0 || tls[len(tls)-1].Label != row[0] {
			tls = append(tls, timeline{Label: row[0]})
		}
		last := &tls[len(tls)-1]
		last.Samples = append(last.Samples, timelineSample{Seconds: secs, Bps: bps})
	}
	return tls, nil
}

// demoChart draws every transfer's throughput per second on one time axis,
// with the link rate.
func demoChart(tls []timeline, wan labnet.WAN) plot.Chart {
	c := plot.Chart{
		Title:     "lab WAN " + wan.String() + ": throughput per second of each transfer",
		XLabel:    "seconds since the transfer started (iperf3 opening its connections included)",
		YLabel:    "Mbit/s",
		XFromZero: true,
		Width:     900, Height: 480,
	}
	for i, tl := range tls {
		s := plot.Series{Name: tl.Label, Color: plot.Palette[i%len(plot.Palette)]}
		for _, x := range tl.Samples {
			s.Points = append(s.Points, plot.Point{X: x.Seconds, Y: x.Bps / 1e6})
		}
		c.Series = append(c.Series, s)
	}
	if wan.Rate > 0 {
		c.Levels = append(c.Levels, plot.Level{Name: "link " + labnet.FormatRate(float64(wan.Rate)), Color: plot.Palette[5], Y: float64(wan.Rate) / 1e6})
	}
	return c
}

package main

import (
	"bytes"
	"flag"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sosappliance/sosappliance/examples/lab/labnet"
)

var update = flag.Bool("update", false, "draw examples/lab/results/demo-throughput.png again from its CSV")

func TestTimelinesRoundTripThroughCSV(t *testing.T) {
	tls := []timeline{
		{Label: "direct, 1 TCP connection", Samples: []timelineSample{{1.001, 0}, {2.002, 12e6}, {3.003, 95.5e6}}},
		{Label: "sosappliance, 1 TCP connection, 64 stripes", Samples: []timelineSample{{1, 0}, {2, 430e6}}},
	}
	var b bytes.Buffer
	if err := writeTimelines(&b, tls); err != nil {
		t.Fatal(err)
	}
	got, err := readTimelines(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Label != tls[0].Label || !slices.Equal(got[0].Samples, tls[0].Samples) || !slices.Equal(got[1].Samples, tls[1].Samples) {
		t.Errorf("read back %+v, wrote %+v", got, tls)
	}
	for _, bad := range []string{"", "a,b\n", "transfer,seconds,bits_per_second\nx,one,2\n"} {
		if _, err := readTimelines(bytes.NewBufferString(bad)); err == nil {
			t.Errorf("%q read without an error", bad)
		}
	}
}

func TestDemoChartHasATransferPerSeries(t *testing.T) {
	tls := []timeline{
		{Label: "direct", Samples: []timelineSample{{1, 0}, {2, 80e6}}},
		{Label: "parallel", Samples: []timelineSample{{1, 0}, {2, 400e6}}},
	}
	c := demoChart(tls, labnet.DefaultWAN)
	if len(c.Series) != 2 || c.Series[1].Name != "parallel" || c.Series[1].Points[1].Y != 400 || c.XLog2 {
		t.Errorf("series %+v", c.Series)
	}
	if len(c.Levels) != 1 || c.Levels[0].Y != float64(labnet.DefaultWAN.Rate)/1e6 {
		t.Errorf("levels %+v", c.Levels)
	}
}

// TestResultsChartIsDrawnFromItsCSV loads the chart the README shows and
// the CSV of the `lab demo` run it is drawn from (-update draws it again).
func TestResultsChartIsDrawnFromItsCSV(t *testing.T) {
	dir := filepath.Join("..", "..", "results")
	f, err := os.Open(filepath.Join(dir, "demo-throughput.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tls, err := readTimelines(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(tls) != 3 {
		t.Fatalf("%d transfers in the recorded demo, want direct, end-host parallel and sosappliance", len(tls))
	}
	c := demoChart(tls, labnet.DefaultWAN)
	pngPath := filepath.Join(dir, "demo-throughput.png")
	if *update {
		if err := writeFile(pngPath, c.WritePNG); err != nil {
			t.Fatal(err)
		}
	}
	pf, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	img, err := png.Decode(pf)
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds() != image.Rect(0, 0, c.Width, c.Height) {
		t.Errorf("%s is %v, the chart %d×%d: draw it again with -update", pngPath, img.Bounds(), c.Width, c.Height)
	}
	// Not blank: each transfer's colour is in it.
	for i, s := range c.Series {
		if !hasColour(img, s.Color) {
			t.Errorf("%s has no pixel of transfer %d (%s)", pngPath, i, s.Name)
		}
	}
}

func hasColour(img image.Image, c interface{ RGBA() (r, g, b, a uint32) }) bool {
	wr, wg, wb, _ := c.RGBA()
	bounds := img.Bounds()
	for x := bounds.Min.X; x < bounds.Max.X; x++ {
		for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if r == wr && g == wg && b == wb {
				return true
			}
		}
	}
	return false
}

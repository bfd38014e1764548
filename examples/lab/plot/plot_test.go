package plot

import (
	"bytes"
	"image"
	"image/png"
	"math"
	"testing"
)

func benchChart() Chart {
	return Chart{
		Title: "throughput against streams", XLabel: "streams", YLabel: "Mbit/s", XLog2: true,
		Series: []Series{
			{Name: "sosappliance 60000", Color: Palette[0], Points: []Point{{1, 40}, {2, 80}, {4, 150}, {8, 300}, {16, 420}, {32, 440}, {64, 450}}},
			{Name: "iperf3 -P N", Color: Palette[1], Points: []Point{{1, 60}, {64, 430}}},
		},
		Levels: []Level{{Name: "link 500 Mbit/s", Color: Palette[2], Y: 500}},
		Width:  800, Height: 500,
	}
}

func TestDrawPutsPointsWhereTheAxesSay(t *testing.T) {
	c := benchChart()
	img := c.Draw()
	if img.Bounds() != image.Rect(0, 0, 800, 500) {
		t.Fatalf("bounds %v", img.Bounds())
	}
	area := image.Rect(marginLeft, marginTop, c.Width-marginRight, c.Height-marginBottom)
	m := c.mapping(area)
	// Log2 x from 1 to 64: 1 at the left edge, 64 at the right, 8 halfway.
	if m.px(1) != area.Min.X || m.px(64) != area.Max.X || m.px(8) != (area.Min.X+area.Max.X)/2 {
		t.Errorf("x mapping: 1→%d 8→%d 64→%d, area %v", m.px(1), m.px(8), m.px(64), area)
	}
	if m.py(0) != area.Max.Y {
		t.Errorf("y=0 at %d, want the bottom %d", m.py(0), area.Max.Y)
	}
	if m.y1 < 500 {
		t.Errorf("y axis ends at %v, below the link level", m.y1)
	}
	for _, s := range c.Series {
		for _, p := range s.Points {
			if got := img.RGBAAt(m.px(p.X), m.py(p.Y)); got != s.Color && !insideLegend(c, area, m.px(p.X), m.py(p.Y)) {
				t.Errorf("%s point %v: pixel %v, want the series colour %v", s.Name, p, got, s.Color)
			}
		}
	}
	// The link level is dashed across the plot.
	y := m.py(500)
	found := 0
	for x := area.Min.X; x < area.Max.X; x++ {
		if img.RGBAAt(x, y) == Palette[2] {
			found++
		}
	}
	if found < area.Dx()/3 {
		t.Errorf("link level drawn on %d of %d pixels", found, area.Dx())
	}
}

func insideLegend(c Chart, area image.Rectangle, x, y int) bool {
	return x < area.Min.X+200 && y < area.Min.Y+20+legendLine*len(c.Series)
}

func TestDrawIsDeterministicAndEncodes(t *testing.T) {
	var a, b bytes.Buffer
	if err := benchChart().WritePNG(&a); err != nil {
		t.Fatal(err)
	}
	if err := benchChart().WritePNG(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the same chart encoded twice differs")
	}
	img, err := png.Decode(&a)
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() != 800 {
		t.Errorf("decoded width %d", img.Bounds().Dx())
	}
}

func TestDrawSurvivesDegenerateData(t *testing.T) {
	for name, c := range map[string]Chart{
		"empty":         {},
		"one point":     {Series: []Series{{Points: []Point{{4, 100}}}}},
		"all zero":      {XLog2: true, Series: []Series{{Points: []Point{{1, 0}, {2, 0}}}}},
		"nan and inf":   {Series: []Series{{Points: []Point{{math.NaN(), 1}, {1, math.Inf(1)}, {2, 3}}}}},
		"zero on log2":  {XLog2: true, Series: []Series{{Points: []Point{{0, 5}, {-1, 5}, {8, 5}}}}},
		"level only":    {Levels: []Level{{Y: 500}}},
		"linear spread": {Series: []Series{{Points: []Point{{10000, 1}, {65000, 2}}}}},
	} {
		t.Run(name, func(t *testing.T) {
			img := c.Draw()
			if img.Bounds().Empty() {
				t.Fatal("empty image")
			}
		})
	}
}

func TestNiceStep(t *testing.T) {
	for _, c := range []struct {
		span float64
		n    int
		want float64
	}{{500, 6, 100}, {470, 6, 100}, {1, 6, 0.2}, {64, 8, 10}, {0, 6, 1}, {12000, 6, 2000}} {
		if got := niceStep(c.span, c.n); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("niceStep(%v, %d) = %v, want %v", c.span, c.n, got, c.want)
		}
	}
}

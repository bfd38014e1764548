package plot

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"slices"
	"testing"

	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

func benchChart() Chart {
	return Chart{
		Title: "throughput against streams", XLabel: "streams", YLabel: "Mbit/s", XLog2: true, Markers: true,
		Series: []Series{
			{Name: "sosappliance 60000", Color: Palette[0], Points: []Point{{1, 40}, {2, 80}, {4, 150}, {8, 300}, {16, 420}, {32, 440}, {64, 450}}},
			{Name: "iperf3 -P N", Color: Palette[1], Points: []Point{{1, 60}, {64, 430}}},
		},
		Levels: []Level{{Name: "link 500 Mbit/s", Color: Palette[2], Y: 500}},
		Width:  800, Height: 500,
	}
}

// drawn renders c as Draw does and returns the image with the mapping of
// data coordinates to its pixels that gonum used.
func drawn(t *testing.T, c Chart) (*image.RGBA, func(Point) image.Point) {
	t.Helper()
	c = c.withDefaults()
	p, err := c.plot()
	if err != nil {
		t.Fatal(err)
	}
	canvas := vgimg.NewWith(vgimg.UseWH(pixels(c.Width), pixels(c.Height)), vgimg.UseDPI(dpi))
	dc := draw.New(canvas)
	p.Draw(dc)
	data := p.DataCanvas(dc)
	tx, ty := p.Transforms(&data)
	img := canvas.Image().(*image.RGBA)
	return img, func(pt Point) image.Point {
		// vg measures in points from the bottom-left corner.
		return image.Pt(int(math.Round(tx(pt.X).Dots(dpi))), c.Height-int(math.Round(ty(pt.Y).Dots(dpi))))
	}
}

// near reports whether a pixel within r of at has colour want.
func near(img *image.RGBA, at image.Point, r int, want color.RGBA) bool {
	for x := at.X - r; x <= at.X+r; x++ {
		for y := at.Y - r; y <= at.Y+r; y++ {
			if img.RGBAAt(x, y) == want {
				return true
			}
		}
	}
	return false
}

func TestDrawPutsPointsWhereTheAxesSay(t *testing.T) {
	c := benchChart()
	img, px := drawn(t, c)
	if img.Bounds() != image.Rect(0, 0, 800, 500) {
		t.Fatalf("bounds %v", img.Bounds())
	}
	// Log2 x from 1 to 64: 8 halfway between, 2 a sixth of the way.
	left, right := px(Point{1, 0}).X, px(Point{64, 0}).X
	if mid := px(Point{8, 0}).X; abs(mid-(left+right)/2) > 1 {
		t.Errorf("x mapping: 1→%d 8→%d 64→%d", left, mid, right)
	}
	if left < 40 || right >= 800 || left >= right {
		t.Errorf("x axis from %d to %d on an image 800 wide", left, right)
	}
	// Y starts at zero at the bottom and reaches above the link level.
	if bottom, link := px(Point{1, 0}).Y, px(Point{1, 500}).Y; bottom < 400 || link > bottom-300 || link < 20 {
		t.Errorf("y mapping: 0→%d 500→%d on an image 500 high", bottom, link)
	}
	for _, s := range c.Series {
		for _, p := range s.Points {
			if at := px(p); !near(img, at, 1, s.Color) {
				t.Errorf("%s point %v at %v: no pixel of the series colour %v", s.Name, p, at, s.Color)
			}
		}
	}
	// The link level is dashed across the plot: its colour on about half
	// the row, in more than one piece.
	y := px(Point{1, 500}).Y
	found, pieces := 0, 0
	for x := left; x < right; x++ {
		on := near(img, image.Pt(x, y), 1, Palette[2])
		if on {
			found++
			if !near(img, image.Pt(x-1, y), 1, Palette[2]) {
				pieces++
			}
		}
	}
	if found < (right-left)/3 || found > (right-left)*9/10 || pieces < 10 {
		t.Errorf("link level: %d of %d pixels in %d dashes", found, right-left, pieces)
	}
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
	if img.Bounds() != image.Rect(0, 0, 800, 500) {
		t.Errorf("decoded size %v", img.Bounds())
	}
	if n := colours(img); n < 5 {
		t.Errorf("the image has %d colours: blank", n)
	}
}

// TestTimeSeriesShowsAStall draws throughput per second of two transfers
// on one time axis, one of which stalls: the stall's seconds sit on the
// zero line, the steady one's on its level.
func TestTimeSeriesShowsAStall(t *testing.T) {
	var steady, stalling []Point
	for s := 0; s <= 25; s++ {
		steady = append(steady, Point{float64(s), 450})
		v := 440.0
		if s >= 10 && s < 14 {
			v = 0
		}
		stalling = append(stalling, Point{float64(s), v})
	}
	c := Chart{Title: "throughput per second", XLabel: "s", YLabel: "Mbit/s", Width: 900, Height: 400,
		Series: []Series{{Name: "steady", Color: Palette[0], Points: steady}, {Name: "stalling", Color: Palette[1], Points: stalling}}}
	img, px := drawn(t, c)
	for _, p := range []Point{{12, 0}, {5, 440}, {20, 440}} {
		if !near(img, px(p), 1, Palette[1]) {
			t.Errorf("stalling transfer at %v (%v) not drawn", p, px(p))
		}
	}
	if near(img, px(Point{12, 440}), 1, Palette[1]) {
		t.Error("the stall is drawn at full rate")
	}
	if !near(img, px(Point{12, 450}), 1, Palette[0]) {
		t.Error("the steady transfer is not drawn through the stall")
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
			img, err := c.Draw()
			if err != nil {
				t.Fatal(err)
			}
			if img.Bounds() != image.Rect(0, 0, 900, 560) {
				t.Fatalf("bounds %v", img.Bounds())
			}
		})
	}
}

func TestPowersOfTwoTicks(t *testing.T) {
	var got []float64
	for _, tk := range (powersOfTwo{}).Ticks(1, 64) {
		got = append(got, tk.Value)
	}
	if want := []float64{1, 2, 4, 8, 16, 32, 64}; !slices.Equal(got, want) {
		t.Errorf("ticks %v, want %v", got, want)
	}
}

func colours(img image.Image) int {
	seen := map[color.Color]bool{}
	b := img.Bounds()
	for x := b.Min.X; x < b.Max.X; x += 3 {
		for y := b.Min.Y; y < b.Max.Y; y += 3 {
			seen[img.At(x, y)] = true
		}
	}
	return len(seen)
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
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

// Package plot draws the lab's charts as PNG with gonum.org/v1/plot: the
// benchmark's throughput against streams, and the demo's throughput per
// second of each transfer on one time axis. Fonts are compiled in, so a
// fresh machine needs no plotting tool.
package plot

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Point is one measurement.
type Point struct{ X, Y float64 }

// Series is one line of the chart.
type Series struct {
	Name   string
	Color  color.RGBA
	Points []Point
}

// Level is a horizontal reference line, such as the link rate.
type Level struct {
	Name  string
	Color color.RGBA
	Y     float64
}

// Chart is a line chart. X may be drawn on a log2 scale (streams 1, 2, 4,
// ... 64); Y starts at zero.
type Chart struct {
	Title, XLabel, YLabel string
	XLog2                 bool
	// Markers draws each point as a dot besides the line: for a few
	// measurements rather than a time series.
	Markers bool
	// XFromZero starts a linear X axis at zero, as a time axis does.
	XFromZero     bool
	Series        []Series
	Levels        []Level
	Width, Height int // pixels; 900×560 when zero
}

// Colors that stay apart on white, for series in order.
var Palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
	{0xff, 0x7f, 0x0e, 0xff}, {0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff},
}

// dpi is the resolution the chart is drawn at, so that its size in pixels
// is Width×Height.
const dpi = 96

// WritePNG draws the chart and encodes it.
func (c Chart) WritePNG(w io.Writer) error {
	img, err := c.Draw()
	if err != nil {
		return err
	}
	if err := png.Encode(w, img); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// Draw renders the chart. Points that are NaN or infinite, or not positive
// on a log2 axis, are left out.
func (c Chart) Draw() (image.Image, error) {
	c = c.withDefaults()
	p, err := c.plot()
	if err != nil {
		return nil, err
	}
	canvas := vgimg.NewWith(vgimg.UseWH(pixels(c.Width), pixels(c.Height)), vgimg.UseDPI(dpi))
	p.Draw(draw.New(canvas))
	return canvas.Image(), nil
}

func (c Chart) withDefaults() Chart {
	if c.Width <= 0 {
		c.Width = 900
	}
	if c.Height <= 0 {
		c.Height = 560
	}
	return c
}

func pixels(n int) vg.Length { return vg.Length(n) * vg.Inch / dpi }

// plot builds the gonum plot of the chart.
func (c Chart) plot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), -vg.Points(4)

	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	var lines []plotter.XYs
	for _, s := range c.Series {
		var xys plotter.XYs
		for _, pt := range s.Points {
			if !c.usable(pt) {
				continue
			}
			xys = append(xys, plotter.XY{X: pt.X, Y: pt.Y})
			xmin, xmax, ymax = math.Min(xmin, pt.X), math.Max(xmax, pt.X), math.Max(ymax, pt.Y)
		}
		lines = append(lines, xys)
	}
	for _, l := range c.Levels {
		if finite(l.Y) {
			ymax = math.Max(ymax, l.Y)
		}
	}
	if math.IsInf(xmin, 1) {
		xmin, xmax = 1, 2
	}
	if c.XFromZero && !c.XLog2 {
		xmin = math.Min(xmin, 0)
	}
	if xmax <= xmin {
		xmax = xmin + 1
	}
	p.Y.Tick.Marker = niceTicks{n: 8}
	p.X.Tick.Marker = niceTicks{n: 10}
	if c.XLog2 {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = powersOfTwo{}
		xmin, xmax = math.Exp2(math.Floor(math.Log2(xmin))), math.Exp2(math.Ceil(math.Log2(xmax)))
		if xmax <= xmin {
			xmax = 2 * xmin
		}
	}
	if ymax <= 0 {
		ymax = 1
	}
	p.X.Min, p.X.Max = xmin, xmax
	// Head room for the legend in the top-left corner.
	entries := len(c.Series) + len(c.Levels)
	p.Y.Min, p.Y.Max = 0, ymax*(1.05+0.06*float64(entries))

	for i, s := range c.Series {
		if len(lines[i]) == 0 {
			continue
		}
		l, err := plotter.NewLine(lines[i])
		if err != nil {
			return nil, fmt.Errorf("plot: series %q: %w", s.Name, err)
		}
		l.Color, l.Width = s.Color, vg.Points(2)
		p.Add(l)
		if c.Markers {
			sc, err := plotter.NewScatter(lines[i])
			if err != nil {
				return nil, fmt.Errorf("plot: series %q: %w", s.Name, err)
			}
			sc.GlyphStyle = draw.GlyphStyle{Color: s.Color, Radius: vg.Points(3), Shape: draw.BoxGlyph{}}
			p.Add(sc)
			p.Legend.Add(s.Name, l, sc)
		} else {
			p.Legend.Add(s.Name, l)
		}
	}
	for _, lv := range c.Levels {
		if !finite(lv.Y) {
			continue
		}
		l, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: lv.Y}, {X: xmax, Y: lv.Y}})
		if err != nil {
			return nil, fmt.Errorf("plot: level %q: %w", lv.Name, err)
		}
		l.Color, l.Width, l.Dashes = lv.Color, vg.Points(1.5), []vg.Length{vg.Points(6), vg.Points(4)}
		p.Add(l)
		p.Legend.Add(lv.Name, l)
	}
	return p, nil
}

func (c Chart) usable(p Point) bool {
	return finite(p.X) && finite(p.Y) && (!c.XLog2 || p.X > 0)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// niceTicks marks about n intervals at a 1, 2 or 5 times a power of ten,
// where gonum's default marks as few as two.
type niceTicks struct{ n int }

func (t niceTicks) Ticks(min, max float64) []plot.Tick {
	step := niceStep(max-min, t.n)
	var ticks []plot.Tick
	for v := math.Ceil(min/step) * step; v <= max+step*1e-9; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return ticks
}

// niceStep is a 1, 2 or 5 times a power of ten that splits span into at
// most about n intervals.
func niceStep(span float64, n int) float64 {
	if span <= 0 || !finite(span) {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, f := range []float64{1, 2, 5, 10} {
		if f*mag >= raw {
			return f * mag
		}
	}
	return 10 * mag
}

// powersOfTwo ticks a log2 axis at 1, 2, 4, ... rather than at powers of
// ten.
type powersOfTwo struct{}

func (powersOfTwo) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log2(min)); e <= math.Ceil(math.Log2(max)); e++ {
		v := math.Exp2(e)
		if v >= min && v <= max {
			ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		}
	}
	return ticks
}

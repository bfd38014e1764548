// Package plot draws the lab benchmark's chart, throughput against
// streams, as a PNG with the standard library's image packages and a bitmap
// font, so that a fresh machine needs no plotting tool.
package plot

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
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
	Series                []Series
	Levels                []Level
	Width, Height         int
}

// Colors that stay apart on white, for series in order.
var Palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
	{0xff, 0x7f, 0x0e, 0xff}, {0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff},
}

var (
	white = color.RGBA{0xff, 0xff, 0xff, 0xff}
	black = color.RGBA{0x20, 0x20, 0x20, 0xff}
	grid  = color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
)

const (
	marginLeft   = 70
	marginRight  = 20
	marginTop    = 40
	marginBottom = 50
	legendLine   = 16
)

// WritePNG draws the chart and encodes it.
func (c Chart) WritePNG(w io.Writer) error {
	if err := png.Encode(w, c.Draw()); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// Draw renders the chart. Points that are NaN or infinite, or not positive
// on a log2 axis, are left out.
func (c Chart) Draw() *image.RGBA {
	if c.Width <= 0 {
		c.Width = 900
	}
	if c.Height <= 0 {
		c.Height = 560
	}
	img := image.NewRGBA(image.Rect(0, 0, c.Width, c.Height))
	draw.Draw(img, img.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)
	area := image.Rect(marginLeft, marginTop, c.Width-marginRight, c.Height-marginBottom)
	m := c.mapping(area)

	for _, y := range m.yTicks {
		py := m.py(y)
		hline(img, area.Min.X, area.Max.X, py, grid)
		label := strconv.FormatFloat(y, 'f', -1, 64)
		text(img, area.Min.X-8-textWidth(label), py+4, label, black)
	}
	for _, x := range m.xTicks {
		px := m.px(x)
		vline(img, px, area.Min.Y, area.Max.Y, grid)
		label := strconv.FormatFloat(x, 'f', -1, 64)
		text(img, px-textWidth(label)/2, area.Max.Y+16, label, black)
	}
	hline(img, area.Min.X, area.Max.X, area.Max.Y, black)
	vline(img, area.Min.X, area.Min.Y, area.Max.Y, black)

	for _, l := range c.Levels {
		if !finite(l.Y) {
			continue
		}
		py := m.py(l.Y)
		for x := area.Min.X; x < area.Max.X; x += 8 {
			hline(img, x, min(x+4, area.Max.X), py, l.Color)
		}
		text(img, area.Max.X-textWidth(l.Name)-4, py-4, l.Name, l.Color)
	}
	for _, s := range c.Series {
		var prev image.Point
		havePrev := false
		for _, p := range s.Points {
			if !m.usable(p) {
				continue
			}
			pt := image.Pt(m.px(p.X), m.py(p.Y))
			if havePrev {
				line(img, prev, pt, s.Color, 2)
			}
			square(img, pt, 3, s.Color)
			prev, havePrev = pt, true
		}
	}

	text(img, (c.Width-textWidth(c.Title))/2, 20, c.Title, black)
	text(img, (area.Min.X+area.Max.X-textWidth(c.XLabel))/2, c.Height-12, c.XLabel, black)
	text(img, 8, marginTop-10, c.YLabel, black)
	c.drawLegend(img, area)
	return img
}

// drawLegend lists the series in the top-left corner of the plot area.
func (c Chart) drawLegend(img *image.RGBA, area image.Rectangle) {
	width := 0
	for _, s := range c.Series {
		width = max(width, textWidth(s.Name))
	}
	if len(c.Series) == 0 {
		return
	}
	box := image.Rect(area.Min.X+10, area.Min.Y+10, area.Min.X+10+width+40, area.Min.Y+14+legendLine*len(c.Series))
	draw.Draw(img, box, &image.Uniform{white}, image.Point{}, draw.Src)
	for i, s := range c.Series {
		y := box.Min.Y + 10 + i*legendLine
		line(img, image.Pt(box.Min.X+6, y), image.Pt(box.Min.X+26, y), s.Color, 2)
		text(img, box.Min.X+32, y+4, s.Name, black)
	}
}

// mapping turns data coordinates into pixels.
type mapping struct {
	area           image.Rectangle
	log2           bool
	x0, x1, y1     float64
	xTicks, yTicks []float64
}

func (c Chart) mapping(area image.Rectangle) mapping {
	m := mapping{area: area, log2: c.XLog2}
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range c.Series {
		for _, p := range s.Points {
			if !m.usable(p) {
				continue
			}
			xmin, xmax, ymax = math.Min(xmin, p.X), math.Max(xmax, p.X), math.Max(ymax, p.Y)
		}
	}
	for _, l := range c.Levels {
		if finite(l.Y) {
			ymax = math.Max(ymax, l.Y)
		}
	}
	if math.IsInf(xmin, 1) {
		xmin, xmax = 1, 2
	}
	if c.XLog2 {
		m.x0, m.x1 = math.Floor(math.Log2(xmin)), math.Ceil(math.Log2(xmax))
		if m.x1 <= m.x0 {
			m.x1 = m.x0 + 1
		}
		for e := m.x0; e <= m.x1; e++ {
			m.xTicks = append(m.xTicks, math.Exp2(e))
		}
	} else {
		step := niceStep(xmax-xmin, 8)
		m.x0, m.x1 = math.Floor(xmin/step)*step, math.Ceil(xmax/step)*step
		if m.x1 <= m.x0 {
			m.x1 = m.x0 + step
		}
		for x := m.x0; x <= m.x1+step/2; x += step {
			m.xTicks = append(m.xTicks, x)
		}
	}
	if ymax <= 0 {
		ymax = 1
	}
	step := niceStep(ymax*1.05, 6)
	m.y1 = math.Ceil(ymax*1.05/step) * step
	for y := 0.0; y <= m.y1+step/2; y += step {
		m.yTicks = append(m.yTicks, y)
	}
	return m
}

func (m mapping) usable(p Point) bool {
	return finite(p.X) && finite(p.Y) && (!m.log2 || p.X > 0)
}

func (m mapping) px(x float64) int {
	if m.log2 {
		x = math.Log2(x)
	}
	f := (x - m.x0) / (m.x1 - m.x0)
	return m.area.Min.X + int(math.Round(f*float64(m.area.Dx())))
}

func (m mapping) py(y float64) int {
	f := y / m.y1
	return m.area.Max.Y - int(math.Round(f*float64(m.area.Dy())))
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

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	d := font.Drawer{Dst: img, Src: &image.Uniform{c}, Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func textWidth(s string) int { return font.MeasureString(basicfont.Face7x13, s).Round() }

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		img.SetRGBA(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		img.SetRGBA(x, y, c)
	}
}

func square(img *image.RGBA, p image.Point, r int, c color.RGBA) {
	draw.Draw(img, image.Rect(p.X-r, p.Y-r, p.X+r+1, p.Y+r+1), &image.Uniform{c}, image.Point{}, draw.Src)
}

// line draws a segment of the given thickness (Bresenham, with a square
// brush).
func line(img *image.RGBA, a, b image.Point, c color.RGBA, thickness int) {
	dx, dy := abs(b.X-a.X), -abs(b.Y-a.Y)
	sx, sy := sign(b.X-a.X), sign(b.Y-a.Y)
	e := dx + dy
	r := thickness / 2
	for {
		for ox := -r; ox <= r; ox++ {
			for oy := -r; oy <= r; oy++ {
				img.SetRGBA(a.X+ox, a.Y+oy, c)
			}
		}
		if a == b {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			a.X += sx
		}
		if e2 <= dx {
			e += dx
			a.Y += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

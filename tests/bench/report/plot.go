package report

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Point is one latency observation at a time since the panel's start.
type Point struct {
	At  time.Duration
	Lat time.Duration
}

// Series is one set of points drawn in one color, named in the legend.
type Series struct {
	Label  string
	Color  color.RGBA
	Points []Point
}

// Colors for series.
var (
	Blue   = color.RGBA{31, 90, 180, 255}
	Orange = color.RGBA{230, 120, 0, 255}
	Green  = color.RGBA{40, 150, 60, 255}
	Purple = color.RGBA{130, 60, 170, 255}
	Grey   = color.RGBA{110, 110, 110, 255}
	Red    = color.RGBA{200, 30, 30, 255}
)

// Shades of the phases in a timeline.
var (
	StageShade = color.RGBA{255, 228, 181, 255}
	SetupShade = color.RGBA{190, 215, 245, 255}
)

// Panel is one scenario's timeline: latency points on a log scale, the
// setup phase and the staging window shaded.
type Panel struct {
	Title                string
	Series               []Series
	SetupStart, SetupEnd time.Duration // shaded blue; both 0: no setup phase
	StageStart, StageEnd time.Duration // shaded; both 0: nothing staged
	ThresholdLine        time.Duration // dashed line (e.g. 100 ms target); 0: none
}

// The latency axis' range: points outside are drawn at its edges.
const yMin, yMax = 100 * time.Microsecond, 10 * time.Second

func msOf(d time.Duration) float64 {
	return float64(min(max(d, yMin), yMax)) / float64(time.Millisecond)
}

// timeline is one panel as a gonum plot.
func timeline(p Panel) (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = p.Title
	pl.X.Label.Text = "s since the loads started"
	pl.Y.Label.Text = "ms"
	pl.Y.Scale, pl.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	pl.Y.Min, pl.Y.Max = msOf(yMin), msOf(yMax)
	pl.Add(plotter.NewGrid())
	pl.Legend.Top, pl.Legend.Left = true, true
	shadeOf := func(from, to time.Duration, c color.RGBA, label string) error {
		if to <= from {
			return nil
		}
		a, b := from.Seconds(), to.Seconds()
		poly, err := plotter.NewPolygon(plotter.XYs{{X: a, Y: msOf(yMin)}, {X: b, Y: msOf(yMin)}, {X: b, Y: msOf(yMax)}, {X: a, Y: msOf(yMax)}})
		if err != nil {
			return err
		}
		poly.Color, poly.LineStyle.Width = c, 0
		pl.Add(poly)
		pl.Legend.Add(label, poly)
		return nil
	}
	if err := shadeOf(p.StageStart, p.StageEnd, StageShade, "staging"); err != nil {
		return nil, err
	}
	if err := shadeOf(p.SetupStart, p.SetupEnd, SetupShade, "setup"); err != nil {
		return nil, err
	}
	last := 0.0
	for _, s := range p.Series {
		if len(s.Points) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(s.Points))
		for i, pt := range s.Points {
			xys[i] = plotter.XY{X: pt.At.Seconds(), Y: msOf(pt.Lat)}
			last = max(last, xys[i].X)
		}
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle.Color, sc.GlyphStyle.Radius, sc.GlyphStyle.Shape = s.Color, vg.Points(1.2), draw.CircleGlyph{}
		pl.Add(sc)
		pl.Legend.Add(s.Label, sc)
	}
	if p.ThresholdLine > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: msOf(p.ThresholdLine)}, {X: max(last, p.StageEnd.Seconds()), Y: msOf(p.ThresholdLine)}})
		if err != nil {
			return nil, err
		}
		l.Color, l.Dashes = Red, []vg.Length{vg.Points(4), vg.Points(3)}
		pl.Add(l)
	}
	return pl, nil
}

// WritePNG draws the panels' timelines one above the other.
func WritePNG(w io.Writer, panels []Panel) error {
	if len(panels) == 0 {
		return errors.New("plot: no panels")
	}
	plots := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		pl, err := timeline(p)
		if err != nil {
			return fmt.Errorf("plot %s: %w", p.Title, err)
		}
		plots[i] = []*plot.Plot{pl}
	}
	return writeTiles(w, plots, vg.Points(900), vg.Points(220)*vg.Length(len(panels)))
}

// Curve is one scenario's latencies, drawn as a CDF: observed latencies
// (Lats), or a histogram's cumulative shares at its bounds (Steps).
type Curve struct {
	Label string
	Color color.RGBA
	Lats  []time.Duration
	Steps []Step
}

// Step is a histogram bound and the share of observations at or below it.
type Step struct {
	Le    time.Duration
	Share float64
}

// CurveColors cycle over the curves of a CDF.
var CurveColors = []color.RGBA{Grey, Red, Blue, Green, Purple, Orange}

// WriteCDF draws the curves' latency CDFs in one plot, latency on a log
// axis: where the tails part is readable at a glance.
func WriteCDF(w io.Writer, title string, curves []Curve) error {
	pl := plot.New()
	pl.Title.Text = title
	pl.X.Label.Text = "latency, ms (log)"
	pl.Y.Label.Text = "share of observations at or below"
	pl.X.Scale, pl.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	pl.Y.Min, pl.Y.Max = 0, 1
	pl.Add(plotter.NewGrid())
	pl.Legend.Top, pl.Legend.Left = false, false
	pl.Legend.YOffs = vg.Points(40)
	n := 0
	for i, c := range curves {
		xys := CDF(c.Lats)
		for _, s := range c.Steps {
			xys = append(xys, plotter.XY{X: msOf(s.Le), Y: s.Share})
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("cdf %s: %w", c.Label, err)
		}
		l.Color, l.Width = c.Color, vg.Points(1.5)
		if l.Color == (color.RGBA{}) {
			l.Color = CurveColors[i%len(CurveColors)]
		}
		pl.Add(l)
		pl.Legend.Add(c.Label, l)
		n++
	}
	if n == 0 {
		return errors.New("cdf: no curve has points")
	}
	return writeTiles(w, [][]*plot.Plot{{pl}}, vg.Points(700), vg.Points(450))
}

// CDF is the empirical CDF of lats as points (ms, share), latencies
// clamped to the latency axis' range.
func CDF(lats []time.Duration) plotter.XYs {
	if len(lats) == 0 {
		return nil
	}
	s := slices.Clone(lats)
	slices.Sort(s)
	xys := make(plotter.XYs, 0, len(s))
	for i, l := range s {
		y := float64(i+1) / float64(len(s))
		if n := len(xys); n > 0 && xys[n-1].X == msOf(l) {
			xys[n-1].Y = y // one point per distinct latency
			continue
		}
		xys = append(xys, plotter.XY{X: msOf(l), Y: y})
	}
	return xys
}

func writeTiles(w io.Writer, plots [][]*plot.Plot, width, height vg.Length) error {
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(96))
	dc := draw.New(img)
	t := draw.Tiles{Rows: len(plots), Cols: 1, PadY: vg.Points(6), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	canvases := plot.Align(plots, t, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

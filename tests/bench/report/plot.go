package report

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"time"
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
)

// Panel is one scenario's timeline: latency points on a log scale, the
// staging window shaded.
type Panel struct {
	Title                string
	Series               []Series
	StageStart, StageEnd time.Duration // shaded; both 0: nothing staged
	Span                 time.Duration // x axis length; 0: up to the last point
	ThresholdLine        time.Duration // dashed line (e.g. 100 ms target); 0: none
}

const (
	panelW, panelH = 1000, 230
	marginL        = 70
	marginR        = 20
	marginT        = 34
	marginB        = 26
	yMin, yMax     = 100 * time.Microsecond, 10 * time.Second
)

var (
	white  = color.RGBA{255, 255, 255, 255}
	black  = color.RGBA{0, 0, 0, 255}
	grid   = color.RGBA{220, 220, 220, 255}
	shade  = color.RGBA{255, 228, 181, 255}
	target = color.RGBA{200, 30, 30, 255}
)

// WritePNG draws the panels one above the other.
func WritePNG(w io.Writer, panels []Panel) error {
	if len(panels) == 0 {
		return errors.New("plot: no panels")
	}
	img := image.NewRGBA(image.Rect(0, 0, panelW, panelH*len(panels)))
	fill(img, img.Bounds(), white)
	for i, p := range panels {
		drawPanel(img, i*panelH, p)
	}
	return png.Encode(w, img)
}

func fill(img *image.RGBA, r image.Rectangle, c color.Color) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.Set(x, y, c)
		}
	}
}

// yPos maps a latency to a pixel row, log scale, clamped to the axis.
func yPos(top int, lat time.Duration) int {
	h := panelH - marginT - marginB
	l := math.Log10(float64(max(lat, yMin)))
	lo, hi := math.Log10(float64(yMin)), math.Log10(float64(yMax))
	f := min((l-lo)/(hi-lo), 1)
	return top + marginT + h - int(f*float64(h))
}

func drawPanel(img *image.RGBA, top int, p Panel) {
	span := p.Span
	for _, sr := range p.Series {
		for _, pt := range sr.Points {
			span = max(span, pt.At)
		}
	}
	span = max(span, p.StageEnd, time.Second)
	plotW := panelW - marginL - marginR
	xPos := func(d time.Duration) int { return marginL + int(float64(plotW)*float64(d)/float64(span)) }
	bottom := top + panelH - marginB

	if p.StageEnd > p.StageStart {
		fill(img, image.Rect(xPos(p.StageStart), top+marginT, xPos(p.StageEnd)+1, bottom+1), shade)
	}
	// Decades on the y axis.
	for d, label := range map[time.Duration]string{
		100 * time.Microsecond: "0.1ms", time.Millisecond: "1ms", 10 * time.Millisecond: "10ms",
		100 * time.Millisecond: "100ms", time.Second: "1s", 10 * time.Second: "10s"} {
		y := yPos(top, d)
		for x := marginL; x < panelW-marginR; x++ {
			img.Set(x, y, grid)
		}
		drawText(img, marginL-6-textWidth(label), y-glyphH/2, label, black)
	}
	if p.ThresholdLine > 0 {
		y := yPos(top, p.ThresholdLine)
		for x := marginL; x < panelW-marginR; x++ {
			if (x/6)%2 == 0 {
				img.Set(x, y, target)
			}
		}
	}
	// Time ticks: about 10 along the axis, on round seconds.
	step := niceStep(span.Seconds() / 10)
	for s := 0.0; s <= span.Seconds()+1e-9; s += step {
		x := xPos(time.Duration(s * float64(time.Second)))
		for y := bottom; y < bottom+4; y++ {
			img.Set(x, y, black)
		}
		label := fmt.Sprintf("%gs", s)
		drawText(img, x-textWidth(label)/2, bottom+7, label, black)
	}
	for x := marginL; x < panelW-marginR; x++ {
		img.Set(x, bottom, black)
	}
	for y := top + marginT; y <= bottom; y++ {
		img.Set(marginL, y, black)
	}
	for _, sr := range p.Series {
		for _, pt := range sr.Points {
			x, y := xPos(pt.At), yPos(top, pt.Lat)
			img.Set(x, y, sr.Color)
			img.Set(x+1, y, sr.Color)
			img.Set(x, y+1, sr.Color)
			img.Set(x+1, y+1, sr.Color)
		}
	}
	drawText(img, marginL, top+4, p.Title, black)
	// Legend on its own line, right-aligned.
	x := panelW - marginR
	for i := len(p.Series) - 1; i >= 0; i-- {
		sr := p.Series[i]
		x -= textWidth(sr.Label)
		drawText(img, x, top+17, sr.Label, sr.Color)
		x -= 3 * glyphW
	}
}

// niceStep rounds a raw step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

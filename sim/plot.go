package sim

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The plots Save writes, drawn with gonum/plot. Their figures are the
// report's own; only how they are shown is chosen here.
const (
	plotWidth, plotHeight = 22 * vg.Centimeter, 13 * vg.Centimeter
	// maxPlotPoints bounds the points drawn per line: a cumulative curve
	// of thousands of steps looks the same with this many, in a file a
	// reader's browser opens at once.
	maxPlotPoints = 600
	// hazardBuckets is the resolution of the daily hazard profile.
	hazardBuckets = 48
)

// plotLine is one named line of a plot.
type plotLine struct {
	name string
	pts  plotter.XYs
}

// writePlots draws work_loss.svg (cumulative work loss per policy, log
// scale: the policies' losses span orders of magnitude), downtime_cdf.svg
// (log downtime axis) and hazard.svg (the 24 h profile of the hazard,
// true and estimated) from the first seed of each row.
func writePlots(dir string, rep *Report, trueHazard func(t float64) float64) error {
	var loss, cdf []plotLine
	var hazard *hazardProfile
	for _, r := range rep.Rows {
		if r.Error != "" || len(r.PerSeed) == 0 {
			continue
		}
		first := r.PerSeed[0]
		l := plotLine{name: r.Name}
		for _, p := range first.LossSeries {
			l.pts = append(l.pts, plotter.XY{X: p.T / 86400, Y: p.LossGPUh})
		}
		loss = append(loss, l)
		d := slices.Clone(first.Downtimes)
		slices.Sort(d)
		c := plotLine{name: r.Name}
		for i, v := range d {
			c.pts = append(c.pts, plotter.XY{X: v, Y: float64(i+1) / float64(len(d))})
		}
		cdf = append(cdf, c)
		if r.Key == "reclaimnet" && len(first.HazardSeries) > 0 {
			hazard = dailyHazard(first.HazardSeries, trueHazard)
		}
	}
	var figs []figure
	if len(loss) > 0 {
		// A policy without a loss has no points: it lost nothing over the
		// whole trace.
		end := 0.0
		for _, l := range loss {
			if len(l.pts) > 0 {
				end = max(end, l.pts[len(l.pts)-1].X)
			}
		}
		for i := range loss {
			if len(loss[i].pts) == 0 {
				loss[i].pts = plotter.XYs{{X: 0, Y: 0}, {X: end, Y: 0}}
			}
		}
		figs = append(figs, logLines("work_loss.svg", "Cumulative work loss (first seed)", "day", "work lost, GPU-h (log)", loss, false),
			logLines("downtime_cdf.svg", "Downtime per interruption, CDF (first seed)", "downtime, s (log)", "fraction of interruptions", cdf, true))
	}
	if hazard != nil {
		figs = append(figs, hazard.figure())
	}
	for _, f := range figs {
		if err := f.write(dir); err != nil {
			return err
		}
	}
	return nil
}

// figure is a plot with its legend, drawn beside it rather than over
// the lines.
type figure struct {
	file   string
	p      *plot.Plot
	legend plot.Legend
	err    error
}

// legendWidth is the column the legend takes right of the plot.
const legendWidth = 9 * vg.Centimeter

// write renders the figure as SVG into dir/file.
func (f figure) write(dir string) error {
	if f.err != nil {
		return fmt.Errorf("plot %s: %w", f.file, f.err)
	}
	c := vgsvg.New(plotWidth+legendWidth, plotHeight)
	dc := draw.New(c)
	f.p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	f.legend.Top, f.legend.Left = true, true
	f.legend.Draw(draw.Crop(dc, plotWidth+vg.Millimeter*3, 0, 0, -vg.Centimeter))
	out, err := os.Create(filepath.Join(dir, f.file))
	if err != nil {
		return fmt.Errorf("write %s: %w", f.file, err)
	}
	_, err = c.WriteTo(out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", f.file, err)
	}
	return nil
}

// plotColours tell up to ten policies apart (a colour-blind-safe
// categorical palette); beyond ten the dashes change too.
var plotColours = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x94, 0x67, 0xbd, 0xff},
	{0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff}, {0xbc, 0xbd, 0x22, 0xff}, {0x17, 0xbe, 0xcf, 0xff},
}

// logLines plots lines on a log axis (y, or x when logX). Values at or
// below zero cannot be drawn on a log axis, so they are drawn at the
// axis floor, a decade below the smallest positive value, and the legend
// says so: a policy that loses nothing stays visible (dashed, on the
// floor) instead of vanishing.
func logLines(file, title, xl, yl string, lines []plotLine, logX bool) figure {
	p := plot.New()
	f := figure{file: file, p: p, legend: plot.NewLegend()}
	p.Title.Text = title
	p.X.Label.Text, p.Y.Label.Text = xl, yl
	p.Add(plotter.NewGrid())
	value := func(pt plotter.XY) float64 {
		if logX {
			return pt.X
		}
		return pt.Y
	}
	smallest := math.Inf(1)
	for _, l := range lines {
		for _, pt := range l.pts {
			if v := value(pt); v > 0 {
				smallest = min(smallest, v)
			}
		}
	}
	if math.IsInf(smallest, 1) {
		smallest = 1
	}
	floor := math.Pow(10, math.Floor(math.Log10(smallest))-1)
	axis := &p.Y
	if logX {
		axis = &p.X
	}
	axis.Scale, axis.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	axis.Min = floor
	if !logX {
		p.X.Min, p.X.Tick.Marker = 0, roundTicks{}
	}
	if logX { // the CDF's fraction
		p.Y.Min, p.Y.Max = 0, 1
		p.Y.Tick.Marker = plot.ConstantTicks{{Value: 0, Label: "0"}, {Value: 0.25, Label: "0.25"}, {Value: 0.5, Label: "0.5"},
			{Value: 0.75, Label: "0.75"}, {Value: 1, Label: "1"}}
	}
	for i, l := range lines {
		pts := thin(l.pts, maxPlotPoints)
		zero := true
		for k := range pts {
			v := &pts[k].Y
			if logX {
				v = &pts[k].X
			}
			if *v > floor {
				zero = false
			} else {
				*v = floor
			}
		}
		name := l.name
		switch {
		case len(pts) == 0:
			name += " (no interruptions)"
		case zero:
			name += " (0: on the axis floor)"
		}
		if len(pts) == 0 { // a legend entry alone
			f.legend.Add(name)
			continue
		}
		ln, err := plotter.NewLine(pts)
		if err != nil {
			f.err = fmt.Errorf("%s: %w", l.name, err)
			return f
		}
		ln.StepStyle = plotter.PostStep // both curves change only at events
		ln.Color = plotColours[i%len(plotColours)]
		ln.Width = vg.Points(1.5)
		ln.Dashes = plotutil.Dashes(i / len(plotColours))
		if zero {
			ln.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			ln.Width = vg.Points(2.5)
		}
		p.Add(ln)
		f.legend.Add(name, ln)
	}
	// Nothing above the floor (no interruptions at all, or no loss): a
	// frame of two decades, as a log axis needs a range.
	axis.Max = max(axis.Max, 100*floor)
	return f
}

// roundTicks labels a linear axis at 1, 2 or 5 × 10ⁿ steps, about six
// of them, written as plainly as the step allows (10, 20, 30; not 10.00).
type roundTicks struct{}

func (roundTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: fmt.Sprintf("%g", lo)}}
	}
	raw := (hi - lo) / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * mag; step >= raw {
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: fmt.Sprintf("%g", math.Round(v/step)*step)})
		for k := 1; k < 5; k++ { // unlabelled minor ticks
			if m := v + float64(k)*step/5; m <= hi {
				ticks = append(ticks, plot.Tick{Value: m})
			}
		}
	}
	return ticks
}

// thin keeps at most n points of a curve, evenly spaced, with its first
// and last.
func thin(pts plotter.XYs, n int) plotter.XYs {
	if len(pts) <= n {
		return slices.Clone(pts)
	}
	out := make(plotter.XYs, 0, n)
	for k := range n {
		out = append(out, pts[k*(len(pts)-1)/(n-1)])
	}
	return out
}

// hazardProfile is the hazard over the day: the estimate λ̂ the
// policy used and the generator's true λ, each averaged per time-of-day
// bucket over the whole trace, per hour.
type hazardProfile struct {
	// Hours are the buckets' centres, hours of the day (UTC).
	Hours []float64
	// Estimated and True are the mean rates per bucket, 1/h; True is nil
	// when the trace has no generator (a loaded trace).
	Estimated, True []float64
}

// dailyHazard folds a hazard series onto one day.
func dailyHazard(series []HazardPoint, trueHazard func(t float64) float64) *hazardProfile {
	est, tru := make([]float64, hazardBuckets), make([]float64, hazardBuckets)
	n := make([]int, hazardBuckets)
	for _, p := range series {
		b := int(math.Mod(p.T, 86400) / 86400 * hazardBuckets)
		b = min(max(b, 0), hazardBuckets-1)
		est[b] += p.Estimated
		if trueHazard != nil {
			tru[b] += trueHazard(p.T) * 3600
		}
		n[b]++
	}
	h := &hazardProfile{}
	for b := range hazardBuckets {
		if n[b] == 0 {
			continue
		}
		h.Hours = append(h.Hours, (float64(b)+0.5)*24/hazardBuckets)
		h.Estimated = append(h.Estimated, est[b]/float64(n[b]))
		if trueHazard != nil {
			h.True = append(h.True, tru[b]/float64(n[b]))
		}
	}
	return h
}

// figure draws the profile: hours 0–24 with a tick every 3 h.
func (h *hazardProfile) figure() figure {
	p := plot.New()
	f := figure{file: "hazard.svg", p: p, legend: plot.NewLegend()}
	p.Title.Text = "Emergency hazard per node over the day (mean over the trace)"
	p.X.Label.Text, p.Y.Label.Text = "hour of day, UTC", "hazard, 1/h"
	p.X.Min, p.X.Max, p.Y.Min = 0, 24, 0
	var ticks []plot.Tick
	for hr := 0; hr <= 24; hr += 3 {
		ticks = append(ticks, plot.Tick{Value: float64(hr), Label: fmt.Sprintf("%02d:00", hr)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	top := slices.Max(h.Estimated)
	if h.True != nil {
		top = max(top, slices.Max(h.True))
	}
	p.Y.Max, p.Y.Tick.Marker = 1.1*top, roundTicks{} // headroom: the peaks stay inside the frame
	p.Add(plotter.NewGrid())
	line := func(name string, ys []float64, c color.Color, dashed bool) error {
		pts := make(plotter.XYs, len(ys))
		for i := range ys {
			pts[i] = plotter.XY{X: h.Hours[i], Y: ys[i]}
		}
		ln, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		ln.Color, ln.Width = c, vg.Points(2)
		if dashed {
			ln.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		}
		p.Add(ln)
		f.legend.Add(name, ln)
		return nil
	}
	if h.True != nil {
		f.err = line("true λ (generator)", h.True, plotColours[2], true)
	}
	if f.err == nil {
		f.err = line("estimated λ̂ (global)", h.Estimated, plotColours[0], false)
	}
	return f
}

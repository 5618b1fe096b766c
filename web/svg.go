package web

import (
	"fmt"
	"html/template"
	"math"
	"slices"
	"strings"
	"time"
)

// chartGeometry is the size of a hazard chart and whether it has axes.
type chartGeometry struct {
	W, H                     float64
	Left, Right, Top, Bottom float64 // margins
	Axes                     bool
}

var (
	chartSize = chartGeometry{W: 560, H: 180, Left: 48, Right: 22, Top: 20, Bottom: 24, Axes: true}
	sparkSize = chartGeometry{W: 120, H: 28, Left: 1, Right: 1, Top: 2, Bottom: 2}
)

const day = 24 * time.Hour

// hazardChart draws a 24-hour hazard profile as inline SVG: one bar per
// bucket (height proportional to the rate, tallest bar = the top of the
// plot), the bucket containing `at` highlighted and a line at `at`'s time
// of day, UTC. The values are the profile's own.
func hazardChart(p HazardProfile, at time.Time, g chartGeometry) template.HTML {
	var b strings.Builder
	class := "hz"
	if !g.Axes {
		class = "hz spark"
	}
	fmt.Fprintf(&b, `<svg class="%s" width="%g" height="%g" viewBox="0 0 %g %g" role="img" xmlns="http://www.w3.org/2000/svg">`, class, g.W, g.H, g.W, g.H)
	n := len(p.Rates)
	peak := 0.0
	for _, r := range p.Rates {
		if r > peak && !math.IsInf(r, 1) && !math.IsNaN(r) {
			peak = r
		}
	}
	pw, ph := g.W-g.Left-g.Right, g.H-g.Top-g.Bottom
	if n == 0 {
		fmt.Fprintf(&b, `<title>no hazard estimate yet</title><text class="empty" x="%g" y="%g">no estimate yet</text></svg>`, g.Left+2, g.Top+ph/2+4)
		return template.HTML(b.String())
	}
	frac := float64(at.UTC().Sub(at.UTC().Truncate(day))) / float64(day)
	now := min(int(frac*float64(n)), n-1)
	fmt.Fprintf(&b, `<title>emergency hazard over the day (UTC): peak %s, now %s</title>`, fmtHazard(peak), fmtHazard(p.Rates[now]))
	bw := pw / float64(n)
	height := func(r float64) float64 {
		if peak <= 0 {
			return 0
		}
		return min(max(r, 0), peak) / peak * ph
	}
	base := g.Top + ph
	if !g.Axes {
		// A sparkline is one step-shaped path: a page lists one per
		// member, and 48 rectangles each would dominate its size.
		fmt.Fprintf(&b, `<path class="area" d="M%.1f %.1f`, g.Left, base)
		for i, r := range p.Rates {
			fmt.Fprintf(&b, `V%.1fH%.1f`, base-height(r), g.Left+float64(i+1)*bw)
		}
		fmt.Fprintf(&b, `V%.1fZ"/>`, base)
	}
	for i, r := range p.Rates {
		if !g.Axes && i != now {
			continue
		}
		h := height(r)
		c := "bar"
		if i == now {
			c = "bar cur"
		}
		fmt.Fprintf(&b, `<rect class="%s" x="%.2f" y="%.2f" width="%.2f" height="%.2f" data-rate="%g">`, c, g.Left+float64(i)*bw, base-h, max(bw-0.5, 0.5), h, r)
		if g.Axes {
			from := time.Duration(i) * day / time.Duration(n)
			to := time.Duration(i+1) * day / time.Duration(n)
			fmt.Fprintf(&b, `<title>%s–%s UTC: %s</title>`, hhmm(from), hhmm(to), fmtHazard(r))
		}
		b.WriteString(`</rect>`)
	}
	x := g.Left + frac*pw
	fmt.Fprintf(&b, `<line class="now" x1="%.2f" y1="%g" x2="%.2f" y2="%g"/>`, x, g.Top, x, g.Top+ph)
	if g.Axes {
		fmt.Fprintf(&b, `<line class="axis" x1="%g" y1="%g" x2="%g" y2="%g"/>`, g.Left, base, g.Left+pw, base)
		fmt.Fprintf(&b, `<line class="axis" x1="%g" y1="%g" x2="%g" y2="%g"/>`, g.Left, g.Top, g.Left, base)
		for hh := 0; hh <= 24; hh += 6 {
			fmt.Fprintf(&b, `<text class="tick" x="%.2f" y="%g" text-anchor="middle">%02d:00</text>`, g.Left+float64(hh)/24*pw, base+16, hh)
		}
		fmt.Fprintf(&b, `<text class="tick" x="%g" y="%g" text-anchor="end">%s</text>`, g.Left-4, g.Top+9, fmtHazard(peak))
		fmt.Fprintf(&b, `<text class="tick" x="%g" y="%g" text-anchor="end">0</text>`, g.Left-4, base)
		anchor := "middle"
		switch {
		case frac < 0.1:
			anchor = "start"
		case frac > 0.9:
			anchor = "end"
		}
		fmt.Fprintf(&b, `<text class="nowlabel" x="%.2f" y="%g" text-anchor="%s">now %s</text>`, x, g.Top-6, anchor, fmtHazard(p.Rates[now]))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func hhmm(d time.Duration) string {
	return fmt.Sprintf("%02d:%02d", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

// bwMatrix is the bandwidth between buildings as a table: rows are the
// sending building, columns the receiving one.
type bwMatrix struct {
	Buildings []string
	Rows      []bwRow
}

type bwRow struct {
	From  string
	Cells []bwCell
}

type bwCell struct {
	Has   bool
	E     BuildingBandwidth
	Class string // bw0 (little) … bw9 (plenty): the cell's colour
}

// newBandwidthMatrix lays out the entries. A cell's colour is its
// available bandwidth as a share of the pair's capacity when known, else of
// the largest value in the matrix.
func newBandwidthMatrix(entries []BuildingBandwidth) bwMatrix {
	var m bwMatrix
	peak := 0.0
	cells := map[[2]string]BuildingBandwidth{}
	for _, e := range entries {
		for _, name := range []string{e.From, e.To} {
			if !slices.Contains(m.Buildings, name) {
				m.Buildings = append(m.Buildings, name)
			}
		}
		if !math.IsInf(e.Available, 1) && e.Basis == BandwidthMeasured {
			peak = max(peak, e.Available)
		}
		cells[[2]string{e.From, e.To}] = e
	}
	slices.Sort(m.Buildings)
	for _, from := range m.Buildings {
		row := bwRow{From: from}
		for _, to := range m.Buildings {
			e, ok := cells[[2]string{from, to}]
			c := bwCell{Has: ok, E: e}
			switch {
			case !ok:
			case e.Basis == BandwidthMeasured:
				c.Class = fmt.Sprintf("bw%d", shareBucket(e.Available, e.Capacity, peak))
			default: // nothing measured: no colour of a share
				c.Class = "unmeasured"
			}
			row.Cells = append(row.Cells, c)
		}
		m.Rows = append(m.Rows, row)
	}
	return m
}

// shareBucket maps available/reference to 0..9.
func shareBucket(available, capacity, peak float64) int {
	ref := capacity
	if ref <= 0 {
		ref = peak
	}
	if ref <= 0 || math.IsNaN(available) {
		return 0
	}
	return min(max(int(available/ref*10), 0), 9)
}

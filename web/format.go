package web

import (
	"fmt"
	"math"
	"time"
)

// Display formats. They convert units (bytes/s to bit/s, 1/s to 1/h) and
// round; they never derive one quantity from another.

// fmtBytes shows a size in binary units (KiB, MiB, GiB, TiB), the units
// the CLI reads and prints sizes in and GPU memory is stated in: one unit
// system for every size on the page (rates stay in bit/s, the network's).
func fmtBytes(n int64) string {
	f := float64(n)
	switch {
	case f >= 1<<40:
		return fmt.Sprintf("%.2f TiB", f/(1<<40))
	case f >= 1<<30:
		return fmt.Sprintf("%.2f GiB", f/(1<<30))
	case f >= 1<<20:
		return fmt.Sprintf("%.1f MiB", f/(1<<20))
	case f >= 1<<10:
		return fmt.Sprintf("%.1f KiB", f/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// fmtRate shows a rate given in bytes/s in bit/s, the unit campus networks
// are described in.
func fmtRate(bytesPerSecond float64) string {
	if math.IsInf(bytesPerSecond, 1) {
		return "∞"
	}
	if math.IsNaN(bytesPerSecond) {
		return "?"
	}
	bits := bytesPerSecond * 8
	switch {
	case bits >= 1e9:
		return fmt.Sprintf("%.2f Gbit/s", bits/1e9)
	case bits >= 1e6:
		return fmt.Sprintf("%.0f Mbit/s", bits/1e6)
	case bits >= 1e3:
		return fmt.Sprintf("%.0f kbit/s", bits/1e3)
	}
	return fmt.Sprintf("%.0f bit/s", bits)
}

// fmtDur shows a duration short and rounded to what a reader needs.
func fmtDur(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d >= 24*time.Hour:
		s = fmt.Sprintf("%dd%02dh", d/(24*time.Hour), (d%(24*time.Hour))/time.Hour)
	case d >= time.Hour:
		s = fmt.Sprintf("%dh%02dm", d/time.Hour, (d%time.Hour)/time.Minute)
	case d >= time.Minute:
		s = fmt.Sprintf("%dm%02ds", d/time.Minute, (d%time.Minute)/time.Second)
	case d >= 10*time.Second:
		s = fmt.Sprintf("%ds", d/time.Second)
	case d >= time.Second:
		s = fmt.Sprintf("%.1fs", d.Seconds())
	default:
		s = fmt.Sprintf("%dms", d/time.Millisecond)
	}
	if neg {
		return "−" + s
	}
	return s
}

// fmtDurPtr shows an optional duration; nil is unknown.
func fmtDurPtr(d *time.Duration) string {
	if d == nil {
		return "—"
	}
	return fmtDur(*d)
}

// fmtHazard shows a hazard given in 1/s as events per hour.
func fmtHazard(perSecond float64) string {
	if math.IsInf(perSecond, 1) {
		return "∞"
	}
	return fmt.Sprintf("%.2f/h", perSecond*3600)
}

// fmtClock shows a time of day in UTC (the hazard profile's clock).
func fmtClock(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("15:04:05 UTC")
}

// fmtStamp shows a time with its day, for times hours or days away.
func fmtStamp(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("Mon 2006-01-02 15:04 UTC")
}

// fmtAgo shows how long before now t was.
func fmtAgo(t, now time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return fmtDur(now.Sub(t)) + " ago"
}

// fmtPct shows part/whole as a percentage.
func fmtPct(part, whole int64) string {
	if whole <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(part)/float64(whole))
}

// fmtProb shows a probability as a percentage, with a decimal below 10 %
// (co-departure figures are mostly small).
func fmtProb(p float64) string {
	switch {
	case math.IsNaN(p):
		return "?"
	case p < 0.1:
		return fmt.Sprintf("%.1f%%", 100*p)
	}
	return fmt.Sprintf("%.0f%%", 100*p)
}

// fmtSeconds shows a score in seconds (P2's σ), ∞ for an unbounded one.
func fmtSeconds(s float64) string {
	switch {
	case math.IsInf(s, 1):
		return "∞"
	case math.IsNaN(s):
		return "?"
	}
	return fmt.Sprintf("%.1f s", s)
}

// fmtGiB shows GPU memory in binary units, as GPU vendors state it.
func fmtGiB(n int64) string {
	return fmt.Sprintf("%.0f GiB", float64(n)/(1<<30))
}

// fmtBuilding names a building; a node without one (no --building) is
// grouped under "no building".
func fmtBuilding(name string) string {
	if name == "" {
		return "no building"
	}
	return name
}

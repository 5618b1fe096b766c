package policy

import (
	"math"
	"time"
)

const secondsPerDay = 86400.0

// bucketWidth returns the width of one bucket in seconds.
func (p HazardProfile) bucketWidth() float64 { return secondsPerDay / float64(len(p.Rates)) }

// secondOfDay returns t's offset into its UTC day, in seconds.
func secondOfDay(t time.Time) float64 {
	u := t.UTC()
	h, m, s := u.Clock()
	return float64(h*3600+m*60+s) + float64(u.Nanosecond())/1e9
}

// At returns the hazard (1/s) at time t: Rates[k] for the bucket k that
// holds t's UTC time of day. An empty profile returns 0.
func (p HazardProfile) At(t time.Time) float64 { return p.atSecond(secondOfDay(t)) }

// atSecond is At for an offset into the UTC day, in seconds.
func (p HazardProfile) atSecond(sec float64) float64 {
	n := len(p.Rates)
	if n == 0 {
		return 0
	}
	k := int(sec * float64(n) / secondsPerDay)
	return p.Rates[max(0, min(k, n-1))]
}

// Mean returns the profile's average hazard over a day, 1/s.
func (p HazardProfile) Mean() float64 {
	if len(p.Rates) == 0 {
		return 0
	}
	var s float64
	for _, r := range p.Rates {
		s += r
	}
	return s / float64(len(p.Rates))
}

// Integral returns ∫_from^to h(u) du, the expected number of events in
// [from, to) (dimensionless). Whole days cost one pass over the buckets, so
// a remaining runtime of weeks is as cheap as an hour. to ≤ from gives 0.
func (p HazardProfile) Integral(from, to time.Time) float64 {
	if len(p.Rates) == 0 || !to.After(from) {
		return 0
	}
	return cumulativeOf(p).between(from, to)
}

// Survival returns exp(−∫_from^to h(u) du), the probability of no event in
// [from, to) under the profile (docs/design.md P2.5).
func (p HazardProfile) Survival(from, to time.Time) float64 {
	return math.Exp(-p.Integral(from, to))
}

// cumulative is a profile's prefix integral over one day: cum[k] is the
// integral from midnight to the start of bucket k; cum[n] the daily total.
// P2's survival costs O(1) per candidate with one per node: the hazard
// estimator builds it with each departure profile, and Tick builds one for
// a profile that comes without it.
type cumulative struct {
	cum   []float64
	rates []float64
	width float64
}

// withPrefix returns p with its prefix integral built into buf (which
// needs room for len(p.Rates)+1 values), for profiles many periods read.
func withPrefix(p HazardProfile, buf []float64) HazardProfile {
	c, _ := cumulativeInto(HazardProfile{Rates: p.Rates}, buf[:0:len(p.Rates)+1])
	p.prefix = c.cum
	return p
}

func cumulativeOf(p HazardProfile) cumulative {
	c, _ := cumulativeInto(p, make([]float64, 0, len(p.Rates)+1))
	return c
}

// cumulativeInto is cumulativeOf taking its prefix array from the end of
// arena (grown in chunks), so a period's thousands of nodes cost a few
// allocations. It returns the arena to pass to the next call.
func cumulativeInto(p HazardProfile, arena []float64) (cumulative, []float64) {
	n := len(p.Rates)
	if len(p.prefix) == n+1 && n > 0 {
		return cumulative{cum: p.prefix, rates: p.Rates, width: p.bucketWidth()}, arena
	}
	if cap(arena)-len(arena) < n+1 {
		arena = make([]float64, 0, max(4096, n+1))
	}
	start := len(arena)
	arena = arena[:start+n+1]
	c := cumulative{cum: arena[start : start+n+1 : start+n+1], rates: p.Rates}
	clear(c.cum)
	if n == 0 {
		return c, arena
	}
	c.width = p.bucketWidth()
	for k, r := range p.Rates {
		c.cum[k+1] = c.cum[k] + max(r, 0)*c.width
	}
	return c, arena
}

// upTo returns the integral from midnight to sec seconds into the day.
func (c cumulative) upTo(sec float64) float64 {
	n := len(c.rates)
	k := max(0, min(int(sec*float64(n)/secondsPerDay), n-1))
	return c.cum[k] + max(c.rates[k], 0)*(sec-float64(k)*c.width)
}

// between returns ∫_from^to of the profile.
func (c cumulative) between(from, to time.Time) float64 {
	if len(c.rates) == 0 || !to.After(from) {
		return 0
	}
	return c.span(secondOfDay(from), to.Sub(from).Seconds())
}

// span returns the integral over span seconds starting a seconds into a
// UTC day (a in [0, 86400)).
func (c cumulative) span(a, span float64) float64 {
	if len(c.rates) == 0 || span <= 0 {
		return 0
	}
	days := math.Floor(span / secondsPerDay)
	total := days * c.cum[len(c.rates)]
	rest := span - days*secondsPerDay
	b := a + rest
	if b <= secondsPerDay {
		return total + c.upTo(b) - c.upTo(a)
	}
	return total + c.cum[len(c.rates)] - c.upTo(a) + c.upTo(b-secondsPerDay)
}

// spanPlan is cumulative.span's bucket arithmetic for one (start, length)
// done once, for every profile with n buckets: P2 integrates thousands of
// nodes' profiles over the same window.
type spanPlan struct {
	n      int
	a, len float64 // start into the day and span, seconds (for fallback)
	days   float64
	ka, kb int     // buckets of the start and the end
	xa, xb float64 // seconds into those buckets
	wrap   bool    // the end falls on the next day
}

func planSpan(n int, a, span float64) spanPlan {
	p := spanPlan{n: n, a: a, len: span}
	if n == 0 || span <= 0 {
		return p
	}
	width := secondsPerDay / float64(n)
	p.days = math.Floor(span / secondsPerDay)
	b := a + span - p.days*secondsPerDay
	if b > secondsPerDay {
		p.wrap, b = true, b-secondsPerDay
	}
	p.ka = max(0, min(int(a/width), n-1))
	p.kb = max(0, min(int(b/width), n-1))
	p.xa, p.xb = a-float64(p.ka)*width, b-float64(p.kb)*width
	return p
}

// integral returns the same value as c.span(p.a, p.len).
func (c cumulative) integral(p spanPlan) float64 {
	n := len(c.rates)
	if n != p.n {
		return c.span(p.a, p.len)
	}
	if n == 0 || p.len <= 0 {
		return 0
	}
	ua := c.cum[p.ka] + max(c.rates[p.ka], 0)*p.xa
	ub := c.cum[p.kb] + max(c.rates[p.kb], 0)*p.xb
	total := p.days * c.cum[n]
	if p.wrap {
		return total + c.cum[n] - ua + ub
	}
	return total + ub - ua
}

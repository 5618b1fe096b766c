package policy

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestHazardProfileIntegralMatchesSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	p := HazardProfile{Rates: make([]float64, 48)}
	for i := range p.Rates {
		p.Rates[i] = rng.Float64() * 1e-4
	}
	base := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	for k := range 50 {
		from := base.Add(time.Duration(rng.Float64() * 3 * 24 * float64(time.Hour)))
		to := from.Add(time.Duration(rng.Float64() * 5 * 24 * float64(time.Hour)))
		var want float64
		const step = 10 * time.Second
		for u := from; u.Before(to); u = u.Add(step) {
			dt := min(step, to.Sub(u))
			want += p.At(u) * dt.Seconds()
		}
		got := p.Integral(from, to)
		// A step straddling a bucket edge misattributes at most 10 s.
		if math.Abs(got-want) > 1e-4*want+1e-4*10*float64(to.Sub(from)/(30*time.Minute)+1) {
			t.Errorf("case %d: integral %g, Riemann sum %g", k, got, want)
		}
		if s := p.Survival(from, to); math.Abs(s-math.Exp(-got)) > 1e-15 {
			t.Errorf("case %d: survival %g, want exp(-%g)", k, s, got)
		}
	}
	if got := p.Integral(base, base); got != 0 {
		t.Errorf("empty span: %g, want 0", got)
	}
	if got := (HazardProfile{}).At(base); got != 0 {
		t.Errorf("empty profile: %g, want 0", got)
	}
}

func TestHazardProfileAtUsesUTCTimeOfDay(t *testing.T) {
	p := HazardProfile{Rates: make([]float64, 24)}
	for i := range p.Rates {
		p.Rates[i] = float64(i)
	}
	loc := time.FixedZone("UTC+2", 2*3600)
	at := time.Date(2026, 1, 5, 13, 30, 0, 0, loc) // 11:30 UTC
	if got := p.At(at); got != 11 {
		t.Errorf("At(13:30 UTC+2) = %g, want bucket 11", got)
	}
}

func TestSpanPlanMatchesSpan(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	p := HazardProfile{Rates: make([]float64, 24)}
	for i := range p.Rates {
		p.Rates[i] = rng.Float64() * 1e-4
	}
	c := cumulativeOf(p)
	for k := range 2000 {
		a := rng.Float64() * secondsPerDay
		span := rng.Float64() * 5 * secondsPerDay
		if k%10 == 0 {
			span = float64(rng.IntN(3)) * secondsPerDay // whole days
		}
		want := c.span(a, span)
		got := c.integral(planSpan(24, a, span))
		if math.Abs(got-want) > 1e-12*math.Max(1, want) {
			t.Fatalf("case %d (a=%g span=%g): planned %g, direct %g", k, a, span, got, want)
		}
	}
	// A plan for another bucket count falls back to the direct integral.
	if got, want := c.integral(planSpan(48, 100, 5000)), c.span(100, 5000); got != want {
		t.Errorf("mismatched plan: %g, want %g", got, want)
	}
}

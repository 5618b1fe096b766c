package policy

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// costRatio computes the gap the long way: the expected cost rate of the
// best fixed interval (found by grid search) over the expected cost rate of
// the state-dependent optimum (each state at its own Δ*).
func costRatio(samples []GapSample) float64 {
	const c = 3.2e9
	var adaptive, w float64
	for _, s := range samples {
		adaptive += s.Weight * OptimalCost(c, s.Hazard, s.Bandwidth)
		w += s.Weight
	}
	fixedCost := func(d float64) float64 {
		var sum float64
		for _, s := range samples {
			sum += s.Weight * CostRate(c, s.Hazard, s.Bandwidth, time.Duration(d*float64(time.Second)))
		}
		return sum
	}
	best := gridArgmin(fixedCost, 10, 1e6, 1e-4)
	return fixedCost(best) / adaptive
}

func TestAdaptivityGapMatchesFixedIntervalCost(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for k := range 20 {
		n := 2 + rng.IntN(20)
		s := make([]GapSample, n)
		for i := range s {
			s[i] = GapSample{Hazard: (0.1 + rng.Float64()*5) / 3600, Bandwidth: 1e7 + rng.Float64()*1e8, Weight: 0.1 + rng.Float64()}
		}
		got, want := AdaptivityGap(s), costRatio(s)
		if math.Abs(got-want) > 1e-6*want {
			t.Errorf("case %d: gap %.8f, cost ratio by grid search %.8f", k, got, want)
		}
		if got < 1-1e-12 {
			t.Errorf("case %d: gap %.8f below 1", k, got)
		}
	}
}

func TestAdaptivityGapIsOneForConstantProduct(t *testing.T) {
	var s []GapSample
	for i := range 24 {
		lam := (0.2 + float64(i)) / 3600
		s = append(s, GapSample{Hazard: lam, Bandwidth: 5e3 / lam}) // λ·B constant
	}
	if got := AdaptivityGap(s); math.Abs(got-1) > 1e-12 {
		t.Errorf("λ·B constant: gap %.15f, want 1", got)
	}
	// Anti-correlated hazard and bandwidth (the campus case) gives a gap > 1.
	s = []GapSample{{Hazard: 6e-4, Bandwidth: 3e7}, {Hazard: 1e-4, Bandwidth: 1e8}}
	if got := AdaptivityGap(s); !(got > 1.001) {
		t.Errorf("anti-correlated trace: gap %.6f, want > 1.001", got)
	}
	if got := AdaptivityGap(nil); got != 1 {
		t.Errorf("empty trace: gap %v, want 1", got)
	}
}

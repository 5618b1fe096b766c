package policy

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// gridArgmin returns the Δ (seconds) minimising f over a geometric grid on
// [lo, hi] with the given relative step.
func gridArgmin(f func(float64) float64, lo, hi, step float64) float64 {
	best, bestV := lo, math.Inf(1)
	for d := lo; d <= hi; d *= 1 + step {
		if v := f(d); v < bestV {
			best, bestV = d, v
		}
	}
	return best
}

func TestOptimalIntervalMatchesGridSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for k := range 40 {
		c := int64(1e8 + rng.Float64()*5e10)      // 100 MB .. 50 GB
		lambda := (0.01 + rng.Float64()*5) / 3600 // 0.01 .. 5 per hour
		b := 1e6 + rng.Float64()*2e8              // 1 MB/s .. 200 MB/s
		want := OptimalInterval(c, lambda, b).Seconds()
		if want >= MaxInterval.Seconds() {
			continue
		}
		got := gridArgmin(func(d float64) float64 {
			return CostRate(c, lambda, b, time.Duration(d*float64(time.Second)))
		}, 1, 2e5, 2e-4)
		if rel := math.Abs(got-want) / want; rel > 5e-4 {
			t.Errorf("case %d (C=%d λ=%g B=%g): grid argmin %.3f s, closed form %.3f s (rel %.2g)", k, c, lambda, b, got, want, rel)
		}
		lStar := OptimalCost(c, lambda, b)
		lAt := CostRate(c, lambda, b, OptimalInterval(c, lambda, b))
		if math.Abs(lStar-lAt)/lStar > 1e-9 {
			t.Errorf("case %d: L* = %g, L(Δ*) = %g", k, lStar, lAt)
		}
	}
}

func TestPaperReferenceInterval(t *testing.T) {
	c := int64(3.2e9)
	b := 0.530e9 / 8 // 0.530 Gbit/s in bytes/s
	lambda := 0.99 / 3600
	got := OptimalInterval(c, lambda, b).Seconds()
	if rel := math.Abs(got-592.7) / 592.7; rel > 0.005 {
		t.Fatalf("Δ* = %.1f s, want 592.7 s within 0.5 %% (rel %.4f)", got, rel)
	}
}

func TestConstrainedIntervalMatchesBoundedGridSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const beta = 0.2
	infeasibleSeen, clippedLow, clippedHigh := 0, 0, 0
	for k := range 300 {
		c := int64(1e8 + rng.Float64()*5e10)
		lambda := (0.01 + rng.Float64()*5) / 3600
		b := 1e6 + rng.Float64()*2e8
		lmax := time.Duration((30 + rng.Float64()*3600) * float64(time.Second))
		got, infeasible := ConstrainedInterval(c, lambda, b, beta, lmax)
		floor := float64(c) / (beta * b)
		ceiling := 2 * lmax.Seconds()
		if floor > ceiling {
			infeasibleSeen++
			if box := IntervalBox(c, lambda, b, beta, lmax); box.Bound != BoundFloor || box.Floor != floor || box.Ceiling != ceiling {
				t.Errorf("case %d: infeasible box %+v, want the floor %.1f bound above the ceiling %.1f", k, box, floor, ceiling)
			}
			if !infeasible || math.Abs(got.Seconds()-math.Min(floor, MaxInterval.Seconds()))/floor > 1e-9 {
				t.Errorf("case %d: floor %.1f > ceiling %.1f: got %v infeasible=%v, want the floor and infeasible", k, floor, ceiling, got, infeasible)
			}
			continue
		}
		if infeasible {
			t.Errorf("case %d: floor %.1f ≤ ceiling %.1f but flagged infeasible", k, floor, ceiling)
		}
		opt := math.Sqrt(2 * float64(c) / (lambda * b))
		bound := IntervalBox(c, lambda, b, beta, lmax).Bound
		switch {
		case opt < floor:
			clippedLow++
			if bound != BoundFloor {
				t.Errorf("case %d: optimum %.1f below the floor %.1f: bound %v, want the floor", k, opt, floor, bound)
			}
		case opt > ceiling:
			clippedHigh++
			if bound != BoundCeiling {
				t.Errorf("case %d: optimum %.1f above the ceiling %.1f: bound %v, want the loss budget", k, opt, ceiling, bound)
			}
		case bound != BoundOptimum:
			t.Errorf("case %d: optimum %.1f inside [%.1f, %.1f]: bound %v, want the optimum", k, opt, floor, ceiling, bound)
		}
		want := gridArgmin(func(d float64) float64 {
			return CostRate(c, lambda, b, time.Duration(d*float64(time.Second)))
		}, floor, ceiling, 2e-4)
		// The grid may miss the upper end by one step.
		if rel := math.Abs(got.Seconds()-want) / want; rel > 5e-4 {
			t.Errorf("case %d: got %.2f s, bounded grid argmin %.2f s", k, got.Seconds(), want)
		}
	}
	if infeasibleSeen == 0 || clippedLow == 0 || clippedHigh == 0 {
		t.Fatalf("random cases did not cover every branch: infeasible %d, floor %d, ceiling %d", infeasibleSeen, clippedLow, clippedHigh)
	}
}

func TestConstrainedIntervalEdges(t *testing.T) {
	tests := []struct {
		name           string
		c              int64
		hazard, b      float64
		lmax           time.Duration
		want           time.Duration
		wantInfeasible bool
	}{
		{"no bandwidth with budget", 1e9, 1e-4, 0, time.Minute, MaxInterval, true},
		{"no bandwidth no budget", 1e9, 1e-4, 0, 0, MaxInterval, false},
		{"zero hazard, no budget: the floor never binds above MaxInterval", 1e9, 0, 1e8, 0, MaxInterval, false},
		{"zero hazard, budget caps", 1e9, 0, 1e8, 10 * time.Minute, 20 * time.Minute, false},
		{"nothing to write", 0, 1e-4, 1e8, 5 * time.Minute, 10 * time.Minute, false},
		{"floor above ceiling", 1e10, 1e-3, 1e6, time.Minute, secondsToDuration(1e10 / (0.2 * 1e6)), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, inf := ConstrainedInterval(tt.c, tt.hazard, tt.b, 0.2, tt.lmax)
			if tt.want == MaxInterval && got != MaxInterval || math.Abs(got.Seconds()-tt.want.Seconds()) > 1e-6*tt.want.Seconds() {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if inf != tt.wantInfeasible {
				t.Errorf("infeasible = %v, want %v", inf, tt.wantInfeasible)
			}
		})
	}
}

func TestFinalCheckpointFeasible(t *testing.T) {
	tests := []struct {
		name            string
		lacking         int64
		bLow            float64
		restart, notice time.Duration
		want            bool
	}{
		{"fits", 1e9, 1e8, 20 * time.Second, 60 * time.Second, true},         // 10 s + 20 s ≤ 60 s
		{"exactly fits", 4e9, 1e8, 20 * time.Second, 60 * time.Second, true}, // 40 + 20 = 60
		{"too big", 4.1e9, 1e8, 20 * time.Second, 60 * time.Second, false},
		{"notice equals restart", 0, 1e8, time.Minute, time.Minute, false},
		{"notice below restart", 0, 1e8, 2 * time.Minute, time.Minute, false},
		{"nothing lacking", 0, 0, 10 * time.Second, time.Minute, true},
		{"no bandwidth", 1, 0, 10 * time.Second, time.Minute, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FinalCheckpointFeasible(tt.lacking, tt.bLow, tt.restart, tt.notice); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

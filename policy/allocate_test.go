package policy

import (
	"math"
	"math/rand/v2"
	"testing"
)

// numericMinimise minimises Σ sqrt(2λC/b) under Σ b ≤ budget, 0 ≤ b ≤ cap
// by pairwise exchange: repeatedly, for each pair, golden-section search
// the amount moved from one to the other. It knows nothing of cube roots.
func numericMinimise(d []CheckpointDemand, budget float64) []float64 {
	n := len(d)
	caps := make([]float64, n)
	var capSum float64
	for i, dm := range d {
		caps[i] = math.Inf(1)
		if dm.Cap > 0 {
			caps[i] = dm.Cap
		}
		capSum += caps[i]
	}
	b := make([]float64, n)
	if capSum <= budget {
		copy(b, caps)
		return b
	}
	// Feasible start using the whole budget: fill equally with caps.
	left := budget
	for left > budget*1e-15 {
		open := 0
		for i := range b {
			if b[i] < caps[i] {
				open++
			}
		}
		step := left / float64(open)
		for i := range b {
			if b[i] < caps[i] {
				add := math.Min(step, caps[i]-b[i])
				b[i] += add
				left -= add
			}
		}
	}
	cost := func(i int, x float64) float64 { return OptimalCost(d[i].Bytes, d[i].Hazard, x) }
	for round := 0; round < 60; round++ {
		for i := range n {
			for j := range n {
				if i == j {
					continue
				}
				// Move t from i to j, t ∈ [0, min(b_i, cap_j − b_j)].
				hi := math.Min(b[i], caps[j]-b[j])
				if hi <= 0 {
					continue
				}
				f := func(t float64) float64 { return cost(i, b[i]-t) + cost(j, b[j]+t) }
				lo, up := 0.0, hi
				g := (math.Sqrt(5) - 1) / 2
				for range 100 {
					m1, m2 := up-g*(up-lo), lo+g*(up-lo)
					if f(m1) < f(m2) {
						up = m2
					} else {
						lo = m1
					}
				}
				t := (lo + up) / 2
				if f(t) < f(0) {
					b[i] -= t
					b[j] += t
				}
			}
		}
	}
	return b
}

func randomDemands(rng *rand.Rand, n int, capped bool) []CheckpointDemand {
	d := make([]CheckpointDemand, n)
	for i := range d {
		d[i] = CheckpointDemand{
			Bytes:  int64(1e8 + rng.Float64()*4e10),
			Hazard: (0.05 + rng.Float64()*3) / 3600,
		}
		if capped && rng.IntN(2) == 0 {
			d[i].Cap = 1e6 + rng.Float64()*4e7
		}
	}
	return d
}

func TestAllocateBandwidthMatchesNumericMinimiser(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for k := range 60 {
		n := 2 + rng.IntN(5)
		d := randomDemands(rng, n, k%2 == 1)
		budget := 1e7 + rng.Float64()*1.2e8
		got := AllocateBandwidth(d, budget)
		num := numericMinimise(d, budget)
		cg, cn := AggregateCost(d, got), AggregateCost(d, num)
		if cg > cn*(1+1e-9) {
			t.Errorf("case %d: allocation cost %.9g above the numeric minimiser's %.9g", k, cg, cn)
		}
		if cn > cg*(1+1e-6) {
			t.Logf("case %d: numeric minimiser stopped at %.9g, closed form %.9g", k, cn, cg)
		}
		for i := range d {
			if rel := math.Abs(got[i]-num[i]) / budget; rel > 1e-4 {
				t.Errorf("case %d job %d: b = %.6g, numeric %.6g", k, i, got[i], num[i])
			}
		}
	}
}

func TestAllocateBandwidthUncappedIsCubeRootAndOptimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for k := range 50 {
		d := randomDemands(rng, 1+rng.IntN(8), false)
		budget := 1e6 + rng.Float64()*1e9
		got := AllocateBandwidth(d, budget)
		var s float64
		for _, dm := range d {
			s += math.Cbrt(dm.Hazard * float64(dm.Bytes))
		}
		for i, dm := range d {
			want := budget * math.Cbrt(dm.Hazard*float64(dm.Bytes)) / s
			if math.Abs(got[i]-want) > 1e-9*budget {
				t.Errorf("case %d job %d: b = %g, want %g", k, i, got[i], want)
			}
		}
		if cg, cm := AggregateCost(d, got), MinAggregateCost(d, budget); math.Abs(cg-cm) > 1e-9*cm {
			t.Errorf("case %d: aggregate cost %g, closed-form minimum %g", k, cg, cm)
		}
	}
}

func TestAllocateBandwidthCapsAndBudget(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for k := range 500 {
		d := randomDemands(rng, 1+rng.IntN(10), true)
		budget := rng.Float64() * 3e8
		got := AllocateBandwidth(d, budget)
		var sum, capSum float64
		allCapped := true
		for i, dm := range d {
			if got[i] < 0 {
				t.Fatalf("case %d job %d: negative rate %g", k, i, got[i])
			}
			if dm.Cap > 0 {
				capSum += dm.Cap
				if got[i] > dm.Cap*(1+1e-12) {
					t.Errorf("case %d job %d: b = %g above cap %g", k, i, got[i], dm.Cap)
				}
			} else {
				allCapped = false
			}
			sum += got[i]
		}
		if sum > budget*(1+1e-12) {
			t.Errorf("case %d: Σb = %g exceeds budget %g", k, sum, budget)
		}
		// The budget is used up unless every job sits at its cap.
		if (!allCapped || capSum > budget) && sum < budget*(1-1e-9) {
			t.Errorf("case %d: Σb = %g leaves budget %g unused with uncapped demand", k, sum, budget)
		}
	}
	if got := AllocateBandwidth([]CheckpointDemand{{Bytes: 1e9, Hazard: 1e-4}}, -5); got[0] != 0 {
		t.Errorf("negative budget: got %g, want 0", got[0])
	}
	if got := AllocateBandwidth([]CheckpointDemand{{Bytes: 0, Hazard: 1e-4}, {Bytes: 1e9, Hazard: 1e-4}}, 100); got[0] != 0 || got[1] != 100 {
		t.Errorf("zero-size job: got %v, want [0 100]", got)
	}
}

package policy

import "math"

// CheckpointDemand is one job's claim on a shared checkpoint budget
// (docs/design.md P1.3/P1.4).
type CheckpointDemand struct {
	Bytes  int64   // C_i, checkpoint payload
	Hazard float64 // λ_i, 1/s (use the upper bound λ̂⁺)
	Cap    float64 // W_i, highest useful rate in bytes/s; ≤ 0 means no cap
}

// weight returns (λ_i·C_i)^(1/3), the job's cube-root weight (P1.3).
func (d CheckpointDemand) weight() float64 {
	if d.Bytes <= 0 || d.Hazard <= 0 {
		return 0
	}
	return math.Cbrt(d.Hazard * float64(d.Bytes))
}

// AllocateBandwidth splits a checkpoint budget (bytes/s) among jobs
// (docs/design.md P1.3 with the caps of P1.4):
//
//	b_i = Bckpt · (λ_i·C_i)^(1/3) / Σ_j (λ_j·C_j)^(1/3)
//
// then every job whose share exceeds its cap W_i is fixed at W_i and the
// rest share the residual budget the same way, until no cap is violated
// (Lemma 2; the result is the unique minimiser of Σ sqrt(2λ_iC_i/b_i) under
// Σ b_i ≤ Bckpt, 0 ≤ b_i ≤ W_i). When every job is capped the budget is not
// fully used: the remainder is what P3 gives back to migrations. A job with
// λ_i·C_i = 0 gets 0. The result has one rate per demand, in order.
func AllocateBandwidth(d []CheckpointDemand, budget float64) []float64 {
	if budget <= 0 || len(d) == 0 {
		return make([]float64, len(d))
	}
	flows := make([]fillFlow, len(d))
	link := []int{0}
	for i, dm := range d {
		c := math.Inf(1)
		if dm.Cap > 0 {
			c = dm.Cap
		}
		flows[i] = fillFlow{weight: dm.weight(), cap: c, links: link}
	}
	return progressiveFill(flows, []float64{budget})
}

// AggregateCost returns Σ_i L*_i = Σ_i sqrt(2·λ_i·C_i / b_i), the total cost
// rate of an allocation when every job runs at its local optimum interval
// for its bandwidth (the objective P1.3 minimises). A job with λC > 0 and
// b ≤ 0 makes it +Inf.
func AggregateCost(d []CheckpointDemand, b []float64) float64 {
	var sum float64
	for i, dm := range d {
		sum += OptimalCost(dm.Bytes, dm.Hazard, b[i])
	}
	return sum
}

// MinAggregateCost returns the optimum of P1.3 without caps:
// sqrt(2/Bckpt) · (Σ_i (λ_i·C_i)^(1/3))^(3/2).
func MinAggregateCost(d []CheckpointDemand, budget float64) float64 {
	var s float64
	for _, dm := range d {
		s += dm.weight()
	}
	if s == 0 {
		return 0
	}
	if budget <= 0 {
		return math.Inf(1)
	}
	return math.Sqrt(2/budget) * math.Pow(s, 1.5)
}

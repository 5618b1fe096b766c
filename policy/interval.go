package policy

import (
	"math"
	"time"
)

// MaxInterval bounds every checkpoint interval P1 returns. It stands in for
// "never" when the hazard is (almost) zero or no bandwidth is available, so
// a caller can still arm a timer. A campus job that has not checkpointed for
// a day is an operator problem worth a flag, not an infinite timer.
const MaxInterval = 24 * time.Hour

// MinHazard is the smallest hazard (1/s) any decision uses: about one event
// per three years. The estimator's upper bound is never below it, so P1 and
// P2 never divide by zero or treat a node as immortal.
const MinHazard = 1e-8

// DefaultCheckpointBytes is the checkpoint size P1 assumes for a job that has
// not reported one yet (the paper's median, 3.2·10⁹ bytes).
const DefaultCheckpointBytes int64 = 3_200_000_000

// CostRate returns the expected cost rate of checkpointing every interval
// (docs/design.md P1.1): L(Δ) = λ·Δ/2 + C/(Beff·Δ), in seconds lost per second of
// runtime. c is the checkpoint payload in bytes, hazard λ is in 1/s, beff is
// the effective bandwidth min(W, B) in bytes/s. A non-positive interval or
// bandwidth gives +Inf.
func CostRate(c int64, hazard, beff float64, interval time.Duration) float64 {
	d := interval.Seconds()
	if d <= 0 || beff <= 0 {
		return math.Inf(1)
	}
	return hazard*d/2 + float64(c)/(beff*d)
}

// OptimalInterval returns the local optimum of P1.1 (docs/design.md P1.2, Lemma 1):
// Δ* = sqrt(2C / (λ·Beff)), c in bytes, hazard in 1/s, beff in bytes/s. It
// returns MaxInterval when the hazard or the bandwidth is not positive or
// the optimum is longer than MaxInterval, and 0 when c ≤ 0.
func OptimalInterval(c int64, hazard, beff float64) time.Duration {
	if c <= 0 {
		return 0
	}
	if hazard <= 0 || beff <= 0 {
		return MaxInterval
	}
	return secondsToDuration(math.Sqrt(2 * float64(c) / (hazard * beff)))
}

// OptimalCost returns L* = sqrt(2·λ·C / Beff) (docs/design.md P1.2), the cost rate at
// Δ*, in seconds lost per second. Non-positive beff gives +Inf.
func OptimalCost(c int64, hazard, beff float64) float64 {
	if beff <= 0 {
		return math.Inf(1)
	}
	if c <= 0 || hazard <= 0 {
		return 0
	}
	return math.Sqrt(2 * hazard * float64(c) / beff)
}

// IntervalBound says what set a job's interval.
type IntervalBound uint8

const (
	// BoundNone: not P1.5's box (P1 off, or a job with no path to
	// checkpoint on: MaxInterval).
	BoundNone IntervalBound = iota
	// BoundOptimum: the hazard optimum sqrt(2C/(λ·b)).
	BoundOptimum
	// BoundFloor: the network floor C/(β·b), above the optimum; when it is
	// also above the ceiling the loss budget cannot be met at this
	// bandwidth (LossBudgetInfeasible) and the floor still wins.
	BoundFloor
	// BoundCeiling: the loss budget's ceiling 2·Lmax.
	BoundCeiling
	// BoundFirst: the early first checkpoint of a job with no live copy
	// off its node (its cost C/b, when that is shorter than the box).
	BoundFirst
	// BoundNow: a checkpoint now (RescueInterval): the last chance before
	// a reclaim, or a job exposed beyond its interval.
	BoundNow
)

func (b IntervalBound) String() string {
	switch b {
	case BoundOptimum:
		return "optimum"
	case BoundFloor:
		return "network floor"
	case BoundCeiling:
		return "loss budget"
	case BoundFirst:
		return "first checkpoint"
	case BoundNow:
		return "now"
	}
	return "none"
}

// Box is docs/design.md P1.5's constrained interval with its parts, in seconds:
// the hazard optimum, the network floor C/(β·b) and the loss-budget
// ceiling 2·Lmax (0: no loss budget).
type Box struct {
	Optimum, Floor, Ceiling float64
	Interval                time.Duration
	Bound                   IntervalBound
	// Infeasible: the floor is above the ceiling (LossBudgetInfeasible).
	Infeasible bool
}

// IntervalBox computes P1.5:
//
//	Δ = clip( sqrt(2C/(λ·b)), floor = C/(β·b), ceiling = 2·Lmax )
//
// c in bytes, hazard λ in 1/s, b the job's allocated bandwidth in bytes/s,
// beta the checkpoint share of the job's slice (0.2), lossBudget Lmax (the
// tolerated expected loss per emergency, Δ/2). A lossBudget ≤ 0 means no
// ceiling. When the floor exceeds the ceiling the floor wins and
// Infeasible is set: checkpointing faster would take more than β of the
// job's slice, i.e. from the budget P1.3 gave other jobs and research
// traffic P3 reserves, so the loss budget is the bound that gives (docs/design.md
// P1.5: "the network cannot checkpoint faster"). With b ≤ 0 the floor is
// infinite: MaxInterval, infeasible whenever a loss budget is set. The
// interval never exceeds MaxInterval.
func IntervalBox(c int64, hazard, b, beta float64, lossBudget time.Duration) Box {
	var box Box
	if lossBudget > 0 {
		box.Ceiling = 2 * lossBudget.Seconds()
	}
	if c <= 0 {
		// Nothing to write: checkpointing is free, so the loss budget
		// (or MaxInterval without one) is the only bound that matters.
		if lossBudget > 0 {
			box.Interval, box.Bound = min(2*lossBudget, MaxInterval), BoundCeiling
			return box
		}
		box.Interval = MaxInterval
		return box
	}
	if b <= 0 || beta <= 0 {
		box.Interval, box.Infeasible = MaxInterval, lossBudget > 0
		return box
	}
	box.Floor = float64(c) / (beta * b)
	box.Optimum = math.Inf(1)
	if hazard > 0 {
		box.Optimum = math.Sqrt(2 * float64(c) / (hazard * b))
	}
	d, bound := box.Optimum, BoundOptimum
	if box.Floor > d {
		d, bound = box.Floor, BoundFloor
	}
	if lossBudget > 0 {
		if box.Floor > box.Ceiling {
			box.Interval, box.Bound, box.Infeasible = secondsToDuration(box.Floor), BoundFloor, true
			return box
		}
		if box.Ceiling < d {
			d, bound = box.Ceiling, BoundCeiling
		}
	}
	box.Interval, box.Bound = secondsToDuration(d), bound
	return box
}

// ConstrainedInterval returns IntervalBox's interval and whether the loss
// budget is infeasible at this bandwidth (LossBudgetInfeasible).
func ConstrainedInterval(c int64, hazard, b, beta float64, lossBudget time.Duration) (interval time.Duration, infeasible bool) {
	box := IntervalBox(c, hazard, b, beta, lossBudget)
	return box.Interval, box.Infeasible
}

// FinalCheckpointFeasible reports whether a zero-loss final checkpoint fits
// in a scheduled reclaim's notice (docs/design.md P1.6): lacking/bLow + restart ≤
// notice, with lacking the bytes the destination still lacks and bLow the
// lower confidence bound Beff⁻ (bytes/s) available to this flow. A notice
// not longer than the restart time is infeasible by definition; so is a
// positive lacking with no bandwidth.
func FinalCheckpointFeasible(lacking int64, bLow float64, restart, notice time.Duration) bool {
	if notice <= restart {
		return false
	}
	if lacking <= 0 {
		return true
	}
	if bLow <= 0 {
		return false
	}
	return float64(lacking)/bLow <= (notice - restart).Seconds()
}

// secondsToDuration converts seconds to a Duration, saturating at
// MaxInterval so a huge or infinite value never overflows.
func secondsToDuration(s float64) time.Duration {
	if math.IsNaN(s) || s >= MaxInterval.Seconds() {
		return MaxInterval
	}
	if s <= 0 {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

package policy

import "math"

// GapSample is one point of a (λe, Beff) trace for the adaptivity gap.
type GapSample struct {
	Hazard    float64 // λe, 1/s
	Bandwidth float64 // Beff, bytes/s
	// Weight is the sample's share of the trace (e.g. its duration in
	// seconds); when every weight is ≤ 0 the samples count equally.
	Weight float64
}

// AdaptivityGap returns Theorem 2's gap over a trace (docs/design.md P1.8):
//
//	gap = sqrt(E[λ]·E[1/B]) / E[sqrt(λ/B)] ≥ 1,
//
// the ratio of the best state-independent fixed interval's cost to the
// state-dependent optimum's; equality iff λ·B is constant. Samples with a
// non-positive bandwidth or a negative hazard are skipped. With no usable
// sample, or a trace whose hazard is zero throughout, it returns 1 (no
// measurable benefit from adapting).
func AdaptivityGap(samples []GapSample) float64 {
	equal := true
	for _, s := range samples {
		if s.Weight > 0 {
			equal = false
			break
		}
	}
	var w, el, einv, eroot float64
	for _, s := range samples {
		if s.Bandwidth <= 0 || s.Hazard < 0 || math.IsNaN(s.Hazard) {
			continue
		}
		wt := s.Weight
		if equal {
			wt = 1
		}
		if wt <= 0 {
			continue
		}
		w += wt
		el += wt * s.Hazard
		einv += wt / s.Bandwidth
		eroot += wt * math.Sqrt(s.Hazard/s.Bandwidth)
	}
	if w == 0 || eroot == 0 {
		return 1
	}
	return math.Sqrt((el/w)*(einv/w)) / (eroot / w)
}

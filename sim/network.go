package sim

import "math"

// The network model. Links carry research traffic (capacity minus the
// trace's "available" sample) and our migration flows. Rates are
// recomputed at every event with weighted progressive filling (max-min
// fairness):
//   - the research traffic of each link direction is elastic TCP,
//     modelled as researchWeight TCP flows that never ask for more than
//     the research demand;
//   - greedy flows (P3 off, Slurm, Bamboo) are TCP flows competing with it;
//   - paced flows (P3 on, and the oracle) ask for their assigned rate and
//     compete the same way: the agent's transfers are QUIC streams whose
//     congestion control still backs off under the pacer and the BPF
//     ceiling, so a paced flow gets its rate unless that exceeds its fair
//     share of a link whose research traffic outgrew the last bandwidth
//     sample. (Were paced flows to keep their rate whatever the research
//     demand, research would keep only what was left.)
// Research degradation is the research demand not delivered, over the time
// a link carries migration traffic.
// Links are full duplex (trace/README.md: capacity_mbps is per direction, and the
// policy budgets each direction): each direction has the link's capacity
// and the research demand capacity − available, and flows only share the
// direction they travel in.

// researchWeight is how many TCP flows the research aggregate of one link
// counts as when it competes with greedy migration flows.
const researchWeight = 2

type simLink struct {
	id       string
	a, b     string
	capacity float64 // bytes/s
	avail    float64 // bytes/s available to migration (latest sample)
	// Accounting while migration traffic is present.
	researchDemand, researchGot float64 // bytes
	migBytes                    float64
	// Current migration and research rates per direction (0: a→b).
	mig, research [2]float64
}

// fillFlow is one participant of the progressive filling.
type fillFlow struct {
	links  []int
	weight float64
	demand float64 // bytes/s; +Inf for none
	rate   float64
	frozen bool
}

// filler computes weighted max-min fair rates with demands
// (progressive filling), reusing its scratch space from call to call: the
// engine refills after every event.
type filler struct {
	used, wsum []float64 // per link direction
	touched    []int     // the directions with a weight this round
	crossed    []int     // the directions the flows cross (the first round's)
}

// fill sets every flow's rate.
func (fl *filler) fill(flows []*fillFlow, capacity []float64) {
	if len(fl.used) != len(capacity) {
		fl.used = resetFloats(fl.used, len(capacity))
		fl.wsum = resetFloats(fl.wsum, len(capacity))
		fl.touched, fl.crossed = fl.touched[:0], fl.crossed[:0]
	}
	// Only the directions the previous call's flows crossed hold anything.
	used, wsum := fl.used, fl.wsum
	for _, l := range fl.crossed {
		used[l] = 0
	}
	for _, l := range fl.touched {
		wsum[l] = 0
	}
	fl.touched, fl.crossed = fl.touched[:0], fl.crossed[:0]
	for _, f := range flows {
		f.rate, f.frozen = 0, false
	}
	level := 0.0
	for iter := 0; iter <= len(flows); iter++ {
		for _, l := range fl.touched {
			wsum[l] = 0
		}
		fl.touched = fl.touched[:0]
		active := 0
		for _, f := range flows {
			if f.frozen {
				continue
			}
			active++
			for _, l := range f.links {
				if wsum[l] == 0 {
					fl.touched = append(fl.touched, l)
				}
				wsum[l] += f.weight
			}
		}
		if active == 0 {
			return
		}
		if iter == 0 {
			fl.crossed = append(fl.crossed, fl.touched...) // every flow is active
		}
		step := math.Inf(1)
		for _, l := range fl.touched {
			if w := wsum[l]; w > 0 {
				step = min(step, (capacity[l]-used[l])/w)
			}
		}
		for _, f := range flows {
			if !f.frozen && f.weight > 0 {
				step = min(step, f.demand/f.weight-level)
			}
		}
		if math.IsInf(step, 1) {
			return
		}
		step = max(step, 0)
		level += step
		for _, f := range flows {
			if f.frozen {
				continue
			}
			inc := f.weight * step
			f.rate += inc
			for _, l := range f.links {
				used[l] += inc
			}
		}
		for _, f := range flows {
			if f.frozen {
				continue
			}
			if f.rate >= f.demand*(1-1e-12) {
				f.frozen = true
				continue
			}
			for _, l := range f.links {
				if used[l] >= capacity[l]*(1-1e-12) {
					f.frozen = true
					break
				}
			}
		}
	}
}

// resetFloats returns s resized to n zeros, reusing its array.
func resetFloats(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	s = s[:n]
	clear(s)
	return s
}

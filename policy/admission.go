package policy

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Reservation returns Bres = max(β3·B, Bmin) (docs/design.md P3.2): the part of a
// link kept for non-migration traffic. capacity B and bmin in bytes/s.
func Reservation(capacity, beta3, bmin float64) float64 {
	return max(beta3*capacity, bmin)
}

// MigrationShare returns Bmig, the rate migration traffic may use on one
// direction of a link (docs/design.md P3.2): B − Bres, never negative, and never more
// than what is measured available to migration (capacity minus the
// research traffic now on the link), so migration never squeezes traffic
// that is already there below its current rate either. All bytes/s.
func MigrationShare(capacity, available, beta3, bmin float64) float64 {
	return max(0, min(available, capacity-Reservation(capacity, beta3, bmin)))
}

// MinRate returns r_min = C / (deadline − start − Tr) (docs/design.md P3.3 with the
// flow's actual start, P3.4b), bytes/s. ok is false when the window
// deadline − start is not longer than the restart time.
func MinRate(bytes int64, start, deadline time.Time, restart time.Duration) (rate float64, ok bool) {
	window := deadline.Sub(start) - restart
	if window <= 0 {
		return 0, false
	}
	if bytes <= 0 {
		return 0, true
	}
	return float64(bytes) / window.Seconds(), true
}

// StaggerOffset returns how long to delay the start of the rank-th (from 0)
// of count new flows sharing a notice (docs/design.md P3.4b): rank·δ with
// δ = notice/count, but never more than half the flow's slack, so the
// r_min recomputed from the delayed start stays at most twice the
// undelayed one and below the path's rate. slack is the deadline minus
// restart minus the transfer time at the path's rate; a non-positive slack
// means no delay.
func StaggerOffset(rank, count int, notice, slack time.Duration) time.Duration {
	if rank <= 0 || count <= 1 || notice <= 0 || slack <= 0 {
		return 0
	}
	return min(time.Duration(rank)*(notice/time.Duration(count)), slack/2)
}

// FlowDemand is one migration flow asking for admission (docs/design.md P3.4).
type FlowDemand struct {
	ID       string
	Deadline time.Time
	// MinRate is r_min from the flow's actual start, bytes/s.
	MinRate float64
	// Links are the directed links of its path, as indexes into the
	// capacity slice given to Admit.
	Links []int
}

// Admit decides which flows are admitted (docs/design.md P3.4): the flows are taken
// by earliest deadline first (ties by ID) and each is admitted when, on
// every link of its path, the load so far plus ceilingFactor·MinRate fits
// in the link's capacity; a flow that does not fit is skipped (degraded
// recovery) and later ones are still tried. When all flows fit this admits
// all of them. Flows are counted at their enforcement ceiling, so the
// isolation bound holds even when senders burst to it. capacity holds each
// directed link's migration share (bytes/s) and is reduced by what the
// admitted flows take. The result is one bool per demand, in order.
func Admit(demands []FlowDemand, capacity []float64, ceilingFactor float64) []bool {
	if ceilingFactor < 1 {
		ceilingFactor = 1
	}
	order := make([]int, len(demands))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := demands[a].Deadline.Compare(demands[b].Deadline); c != 0 {
			return c
		}
		return cmp.Compare(demands[a].ID, demands[b].ID)
	})
	admitted := make([]bool, len(demands))
	for _, i := range order {
		admitted[i] = admitOne(demands[i].MinRate*ceilingFactor, demands[i].Links, capacity)
	}
	return admitted
}

// admitOne charges need to every link in links if it fits on all of them.
// A relative tolerance of 1e-12 absorbs rounding in the sums.
func admitOne(need float64, links []int, capacity []float64) bool {
	for _, l := range links {
		if need > capacity[l]*(1+1e-12) {
			return false
		}
	}
	for _, l := range links {
		capacity[l] = max(0, capacity[l]-need)
	}
	return true
}

// MaxMinShare raises admitted flows above their base rates by max-min
// water-filling (docs/design.md P3.4a step 3): every flow gains at the same pace
// until a link on its path is full, counting each flow at
// ceilingFactor·rate. base are the flows' current rates (already charged
// to capacity), links their directed link indexes, capacity the room left
// per directed link in bytes/s, reduced by what is handed out. It returns
// the new rates.
func MaxMinShare(base []float64, links [][]int, capacity []float64, ceilingFactor float64) []float64 {
	if ceilingFactor < 1 {
		ceilingFactor = 1
	}
	flows := make([]fillFlow, len(base))
	for i := range base {
		flows[i] = fillFlow{weight: 1, base: base[i], cap: math.Inf(1), links: links[i]}
	}
	// Work in rate units (capacity / ceiling factor) on the links in use.
	var used []int
	for _, ls := range links {
		used = append(used, ls...)
	}
	slices.Sort(used)
	used = slices.Compact(used)
	room := make([]float64, len(capacity))
	for _, l := range used {
		room[l] = max(0, capacity[l]) / ceilingFactor
	}
	rates := progressiveFill(flows, room)
	for _, l := range used {
		capacity[l] = max(0, room[l]*ceilingFactor)
	}
	return rates
}

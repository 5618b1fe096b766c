package policy

import (
	"math"
	"slices"
	"time"
)

// DefaultHandoffMargin is the slack a hand-off's final checkpoint keeps
// before its deadline (docs/design.md P3.8): one 1-s control period, by which the
// start may be late, plus one second for the write and restart times
// measured on an earlier run being short this time.
const DefaultHandoffMargin = 2 * time.Second

// ControlPeriod is the leader's control period (docs/design.md §4): the longest a
// decision waits for the next tick, and so the last term of a hand-off's
// downtime limit (P3.8).
const ControlPeriod = time.Second

// FinalSafety is how many times its estimate the final phase of a
// hand-off (write + transfer + restart) may take and still land before the
// deadline (docs/design.md P3.8b). The estimates are measured on earlier runs: on a
// loaded host a final checkpoint's write took twice the slowest of the
// last three. Starting earlier costs no downtime (that is the final
// phase's length, whenever it starts), only computing on the source
// instead of the destination.
const FinalSafety = 2

// FinalStart returns the latest safe start of a hand-off's final
// checkpoint (docs/design.md P3.8b):
// deadline − (margin + FinalSafety·(write + bytes/low + Tr)), where bytes
// is what the destination lacks, write the time the job takes to write its
// checkpoint locally and low the rate the flow is guaranteed (its reserved
// share, never above the path's lower bound B̂⁻). Starting then, the final
// phase lands margin before the deadline even when it takes FinalSafety
// times its estimate; every earlier start gives the same downtime and
// less computing on the source. ok is false when no start is safe: bytes
// to move and no rate.
func FinalStart(bytes int64, write time.Duration, deadline time.Time, low float64, restart, margin time.Duration) (time.Time, bool) {
	if bytes > 0 && !(low > 0) {
		return time.Time{}, false
	}
	phase := max(write, 0) + transferTime(bytes, low) + restart
	return deadline.Add(-(max(margin, 0) + FinalSafety*phase)), true
}

// finalRate is the rate a hand-off whose final checkpoint starts at start
// needs to land by FinalStart's rule (the inverse of FinalStart): bytes
// over what the window leaves for the transfer. ok is false when the
// window leaves nothing.
func finalRate(bytes int64, write time.Duration, start, deadline time.Time, restart, margin time.Duration) (float64, bool) {
	window := deadline.Sub(start) - max(margin, 0)
	transfer := window/FinalSafety - max(write, 0) - restart
	if transfer <= 0 {
		return 0, false
	}
	if bytes <= 0 {
		return 0, true
	}
	return float64(bytes) / transfer.Seconds(), true
}

// DowntimeLimit is the downtime a hand-off or recovery cannot beat
// (docs/design.md P3.8): the bytes the destination lacks at the rate the path gives
// migration then, the restart time, and one control period (for a
// recovery, the failure-detection time in its place).
func DowntimeLimit(bytes int64, rate float64, restart, period time.Duration) time.Duration {
	return transferTime(bytes, rate) + restart + period
}

// FinalFlow is an admitted hand-off asking for its final transfer's rate
// (docs/design.md P3.8).
type FinalFlow struct {
	// MinRate is the rate it was admitted at (r_min), already charged to
	// the room given to FinalRates.
	MinRate float64
	// Cap is the highest rate it can use (the job's write cap); +Inf or 0
	// for none.
	Cap float64
	// Links are its path's directed links, indexes into the room slice.
	Links []int
}

// FinalRates gives admitted hand-offs their final transfer's rate
// (docs/design.md P3.8): max-min water-filling of their paths' migration share with
// floors, each flow at the larger of its r_min and the common water level
// (capped at its Cap), counted at ceilingFactor·rate. Unlike P3.4a's
// step 3, which shares the room above the floors, the level does not
// depend on the floors, so a flow whose floor rises toward its own rate as
// its start nears (r_min from a later start) keeps that rate and its
// start from one period to the next. room is the migration share left per
// directed link at the ceiling (bytes/s) after every admitted flow's
// r_min; the research reservation Bres is not in it, so no rate reaches
// it. room is reduced by what is handed out.
func FinalRates(flows []FinalFlow, room []float64, ceilingFactor float64) []float64 {
	if ceilingFactor < 1 {
		ceilingFactor = 1
	}
	// The whole share of each link in rate units: the room plus the
	// floors already charged to it.
	total := make([]float64, len(room))
	for l := range room {
		total[l] = max(0, room[l]) / ceilingFactor
	}
	for _, f := range flows {
		for _, l := range f.Links {
			total[l] += f.MinRate
		}
	}
	// Fill from zero; a flow whose level stays under its floor is fixed
	// at the floor and the others fill again on what is left (at most
	// one round per flow, each fixing one more).
	fixed := make([]bool, len(flows))
	rates := make([]float64, len(flows))
	fill := make([]fillFlow, len(flows))
	for {
		left := slices.Clone(total)
		for i, f := range flows {
			c := f.Cap
			if !(c > 0) {
				c = math.Inf(1)
			}
			fill[i] = fillFlow{weight: 1, cap: max(c, f.MinRate), links: f.Links}
			if fixed[i] {
				fill[i].weight = 0
				for _, l := range f.Links {
					left[l] -= f.MinRate
				}
			}
		}
		for l := range left {
			left[l] = max(0, left[l])
		}
		x := progressiveFill(fill, left)
		more := false
		for i, f := range flows {
			if !fixed[i] && x[i] < f.MinRate*(1-1e-12) {
				fixed[i], more = true, true
			}
		}
		if !more {
			for i, f := range flows {
				rates[i] = x[i]
				if fixed[i] {
					rates[i] = f.MinRate
				}
			}
			break
		}
	}
	for l := range room {
		used := 0.0
		for i, f := range flows {
			if slices.Contains(f.Links, l) {
				used += rates[i]
			}
		}
		room[l] = max(0, (total[l]-used)*ceilingFactor)
	}
	return rates
}

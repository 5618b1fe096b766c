package sim

import (
	"math"
	"slices"
	"sort"

	"github.com/reclaimnet/reclaimnet/policy"
)

// metrics accumulates a run's figures as events happen.
type metrics struct {
	lostGPUs       float64 // GPU-seconds of work lost
	downtimes      []float64
	interruptions  int
	successes      int
	allocatedGPUs  float64 // GPU-seconds held by jobs
	ckptBytes      float64
	ckptOverhead   float64
	lossSeries     []SeriesPoint
	hazardSeries   []HazardPoint
	infeasible     int
	handoffsOK     int
	handoffsFailed int
	controls       int
	// Breakdown by stop cause: work lost (GPU-s), downtime (GPU-s) and
	// how many interruptions.
	lossBy     [nCauses]float64
	downBy     [nCauses]float64
	countBy    [nCauses]int
	redundancy float64 // GPU-s spent on redundant computation (Slowed)
	// Each successful hand-off's downtime and its limit (docs/design.md P3.8), s.
	handoffDown, handoffLimit []float64
}

// SeriesPoint is one point of cumulative work loss.
type SeriesPoint struct {
	T        float64 `json:"t_s"`
	LossGPUh float64 `json:"loss_gpu_h"`
}

// HazardPoint is the estimated and true hazard at one time.
type HazardPoint struct {
	T         float64 `json:"t_s"`
	Estimated float64 `json:"estimated_per_h"`
}

// finish closes the books at the end of the trace.
func (e *Engine) finish() {
	for _, j := range e.w.jobs {
		e.syncProgress(j)
	}
}

func (e *Engine) result() Result {
	w := e.w
	r := Result{Policy: e.ctrl.Name()}
	r.WorkLossGPUh = e.m.lostGPUs / 3600
	r.Interruptions = e.m.interruptions
	if len(e.m.downtimes) > 0 {
		d := append([]float64(nil), e.m.downtimes...)
		sort.Float64s(d)
		r.MedianDowntimeS = quantile(d, 0.5)
		r.P99DowntimeS = quantile(d, 0.99)
		r.Downtimes = d
	}
	if e.m.interruptions > 0 {
		r.MigrationSuccessPct = 100 * float64(e.m.successes) / float64(e.m.interruptions)
	}
	var dem, got float64
	for _, l := range w.links {
		dem += l.researchDemand
		got += l.researchGot
	}
	if dem > 0 {
		r.DegradationPct = 100 * max(0, 1-got/dem)
	}
	useful := 0.0
	for _, j := range w.jobs {
		useful += j.progress * float64(j.rec.GPUs)
		if j.state == policy.JobDone {
			r.CompletedJobs++
		}
	}
	r.UsefulGPUh = useful / 3600
	r.AllocatedGPUh = e.m.allocatedGPUs / 3600
	if e.m.allocatedGPUs > 0 {
		r.GPUUtilPct = 100 * useful / e.m.allocatedGPUs
	}
	r.CheckpointTB = e.m.ckptBytes / 1e12
	r.CheckpointOverheadGPUh = e.m.ckptOverhead / 3600
	r.HandoffsOK, r.HandoffsFailed = e.m.handoffsOK, e.m.handoffsFailed
	r.LossSeries = e.m.lossSeries
	r.HazardSeries = e.m.hazardSeries
	r.Controls = e.m.controls
	r.LossBudgetInfeasible = e.m.infeasible
	r.Breakdown = LossBreakdown{
		EmergencyGPUh: e.m.lossBy[causeEmergency] / 3600, ScheduledGPUh: e.m.lossBy[causeScheduled] / 3600,
		HandoffFailedGPUh: e.m.lossBy[causeHandoffFailed] / 3600,
		DowntimeGPUh: (e.m.downBy[causeEmergency] + e.m.downBy[causeScheduled] + e.m.downBy[causeHandoff] +
			e.m.downBy[causeHandoffFailed]) / 3600,
		HandoffDowntimeGPUh: e.m.downBy[causeHandoff] / 3600,
		Emergencies:         e.m.countBy[causeEmergency], Scheduled: e.m.countBy[causeScheduled],
		Handoffs: e.m.countBy[causeHandoff], HandoffsFailed: e.m.countBy[causeHandoffFailed],
		RedundancyGPUh: e.m.redundancy / 3600,
	}
	r.TotalLostGPUh = r.WorkLossGPUh + r.Breakdown.DowntimeGPUh + r.Breakdown.RedundancyGPUh
	r.HandoffDowntime = summariseDowntime(e.m.handoffDown, e.m.handoffLimit)
	return r
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	if i < 0 {
		i = 0
	}
	return sorted[min(i, len(sorted)-1)]
}

// summariseDowntime gives the hand-offs' downtime against their limits:
// medians of each and of the per-hand-off ratio, and the largest ratio.
func summariseDowntime(down, limit []float64) DowntimeVsLimit {
	if len(down) == 0 {
		return DowntimeVsLimit{}
	}
	ratio := make([]float64, len(down))
	for i := range down {
		ratio[i] = down[i] / limit[i]
	}
	d, l := slices.Clone(down), slices.Clone(limit)
	sort.Float64s(d)
	sort.Float64s(l)
	sort.Float64s(ratio)
	return DowntimeVsLimit{Count: len(down), MedianS: quantile(d, 0.5), MaxS: d[len(d)-1], MedianLimitS: quantile(l, 0.5),
		MedianRatio: quantile(ratio, 0.5), MaxRatio: ratio[len(ratio)-1], down: down, limit: limit}
}

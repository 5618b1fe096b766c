package sim

// Result is one policy's outcome on one trace and seed.
type Result struct {
	Policy string `json:"policy"`
	Trace  string `json:"trace"`
	Seed   uint64 `json:"seed"`
	// WorkLossGPUh is the computation redone after interruptions.
	WorkLossGPUh    float64 `json:"work_loss_gpu_h"`
	MedianDowntimeS float64 `json:"median_downtime_s"`
	P99DowntimeS    float64 `json:"p99_downtime_s"`
	// Interruptions counts departures (or oracle moves) that stopped a
	// job and after which it ran again.
	Interruptions int `json:"interruptions"`
	// MigrationSuccessPct is the share of interruptions after which the
	// job resumed from a checkpoint losing at most its loss budget.
	MigrationSuccessPct float64 `json:"migration_success_pct"`
	// DegradationPct is the research traffic demand not delivered while
	// migration traffic shared its links.
	DegradationPct float64 `json:"research_degradation_pct"`
	// GPUUtilPct is useful GPU time over GPU time held by jobs.
	GPUUtilPct    float64 `json:"gpu_util_pct"`
	UsefulGPUh    float64 `json:"useful_gpu_h"`
	AllocatedGPUh float64 `json:"allocated_gpu_h"`
	CompletedJobs int     `json:"completed_jobs"`
	CheckpointTB  float64 `json:"checkpoint_tb"`
	// CheckpointOverheadGPUh is the GPU time of periodic checkpoint
	// uploads, the overhead term of P1's cost model (not in WorkLossGPUh).
	CheckpointOverheadGPUh float64 `json:"checkpoint_overhead_gpu_h"`
	HandoffsOK             int     `json:"handoffs_ok"`
	HandoffsFailed         int     `json:"handoffs_failed"`
	LossBudgetInfeasible   int     `json:"loss_budget_infeasible"`
	Controls               int     `json:"control_periods"`
	WallS                  float64 `json:"wall_s"`
	// Breakdown splits the work loss and the downtime by cause.
	Breakdown LossBreakdown `json:"breakdown"`
	// TotalLostGPUh is all the GPU time interruptions cost (docs/design.md P1.9):
	// work loss + downtime + redundant compute. Work loss alone rewards
	// whoever spends most on redundancy.
	TotalLostGPUh float64 `json:"total_lost_gpu_h"`
	// PredictedGap is Theorem 2's gap over the run's own hazard and
	// bandwidth estimates (Tick-driven policies only).
	PredictedGap float64 `json:"predicted_gap,omitempty"`
	// HandoffDowntime is each successful hand-off's downtime against its
	// limit (docs/design.md P3.8).
	HandoffDowntime DowntimeVsLimit `json:"handoff_downtime"`

	Downtimes    []float64     `json:"-"`
	LossSeries   []SeriesPoint `json:"-"`
	HazardSeries []HazardPoint `json:"-"`
}

// LossBreakdown splits a run's lost GPU time by cause. Work loss is
// computation redone (the table's work-loss column is the sum of the three
// loss fields); downtime GPU-h is GPUs × time from the job stopping to
// running again (recovery waits: placement, restore, restart), reported
// beside it, not in it, as in docs/design.md §5.
type LossBreakdown struct {
	// EmergencyGPUh: lost on emergency departures (since the freshest
	// copy that survived off the node).
	EmergencyGPUh float64 `json:"emergency_loss_gpu_h"`
	// ScheduledGPUh: lost on announced departures where no hand-off was
	// started (infeasible, not admitted, or the policy ignores notices).
	ScheduledGPUh float64 `json:"scheduled_no_handoff_loss_gpu_h"`
	// HandoffFailedGPUh: lost when a started hand-off did not finish
	// before the source left.
	HandoffFailedGPUh float64 `json:"handoff_failed_loss_gpu_h"`
	// DowntimeGPUh is every interruption's downtime × GPUs;
	// HandoffDowntimeGPUh the part spent in successful hand-offs.
	DowntimeGPUh        float64 `json:"downtime_gpu_h"`
	HandoffDowntimeGPUh float64 `json:"handoff_downtime_gpu_h"`
	// Counts of interruptions by cause.
	Emergencies    int `json:"emergencies"`
	Scheduled      int `json:"scheduled_no_handoff"`
	Handoffs       int `json:"handoffs"`
	HandoffsFailed int `json:"handoffs_failed"`
	// RedundancyGPUh is GPU time spent on redundant computation (the
	// Bamboo-like baseline), counted against GPU utilisation, not in work
	// loss (the paper's work-loss column counts rollbacks).
	RedundancyGPUh float64 `json:"redundancy_gpu_h"`
}

// DowntimeVsLimit is the hand-offs' downtime (the last step on the source
// to the first on the destination) against the limit docs/design.md P3.8d gives
// each: the time the bytes the destination lacked need at what the path left
// to this migration (its migration share less the other hand-offs' r_min)
// from the final checkpoint's start on, as it was (the room integrated over
// the transfer), + Tr + one control period.
type DowntimeVsLimit struct {
	Count        int     `json:"count"`
	MedianS      float64 `json:"median_s"`
	MaxS         float64 `json:"max_s"`
	MedianLimitS float64 `json:"median_limit_s"`
	// MedianRatio and MaxRatio are of downtime ÷ limit per hand-off.
	MedianRatio float64 `json:"median_ratio"`
	MaxRatio    float64 `json:"max_ratio"`

	down, limit []float64 // per hand-off, seconds: pooled over seeds
}

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
	// PredictedGap is Theorem 2's gap over the run's own hazard and
	// bandwidth estimates (Tick-driven policies only).
	PredictedGap float64 `json:"predicted_gap,omitempty"`

	Downtimes    []float64     `json:"-"`
	LossSeries   []SeriesPoint `json:"-"`
	HazardSeries []HazardPoint `json:"-"`
}

package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/reclaimnet/reclaimnet/trace"
)

// Row is one policy averaged over seeds.
type Row struct {
	Key     string   `json:"key"`
	Name    string   `json:"name"`
	Mean    Result   `json:"mean"`
	PerSeed []Result `json:"per_seed"`
	Error   string   `json:"error,omitempty"`
}

// Report is a whole run of the command: the rows of the table and the
// headline figures.
type Report struct {
	Trace string   `json:"trace"`
	Seeds []uint64 `json:"seeds"`
	Rows  []Row    `json:"rows"`
	// Reductions of ReclaimNet's work loss (percent), when the rows exist.
	ReductionVsSlurm  *float64 `json:"reduction_vs_b1p_pct,omitempty"`
	ReductionVsBamboo *float64 `json:"reduction_vs_b1_pct,omitempty"`
	DistanceToOracle  *float64 `json:"distance_to_oracle_pct,omitempty"`
	// AboveOracleGPUh is ReclaimNet's work loss minus the oracle's, GPU-h:
	// the distance to the oracle that stays defined when the oracle loses
	// nothing (the percentage above needs a loss to divide by).
	AboveOracleGPUh *float64 `json:"above_oracle_gpuh,omitempty"`
	// MeasuredGap is B7's work loss over ReclaimNet's; PredictedGap
	// Theorem 2's gap from ReclaimNet's own estimates.
	MeasuredGap  *float64 `json:"measured_gap,omitempty"`
	PredictedGap *float64 `json:"predicted_gap,omitempty"`
}

// mean averages results field by field.
func mean(rs []Result) Result {
	if len(rs) == 0 {
		return Result{}
	}
	var m Result
	m.Policy = rs[0].Policy
	n := float64(len(rs))
	var down, limit []float64
	for _, r := range rs {
		down, limit = append(down, r.HandoffDowntime.down...), append(limit, r.HandoffDowntime.limit...)
		m.WorkLossGPUh += r.WorkLossGPUh / n
		m.MedianDowntimeS += r.MedianDowntimeS / n
		m.P99DowntimeS += r.P99DowntimeS / n
		m.MigrationSuccessPct += r.MigrationSuccessPct / n
		m.DegradationPct += r.DegradationPct / n
		m.GPUUtilPct += r.GPUUtilPct / n
		m.UsefulGPUh += r.UsefulGPUh / n
		m.AllocatedGPUh += r.AllocatedGPUh / n
		m.CheckpointTB += r.CheckpointTB / n
		m.CheckpointOverheadGPUh += r.CheckpointOverheadGPUh / n
		m.WallS += r.WallS / n
		m.PredictedGap += r.PredictedGap / n
		m.TotalLostGPUh += r.TotalLostGPUh / n
		m.Interruptions += r.Interruptions
		m.CompletedJobs += r.CompletedJobs
		m.HandoffsOK += r.HandoffsOK
		m.HandoffsFailed += r.HandoffsFailed
		m.LossBudgetInfeasible += r.LossBudgetInfeasible
		b, mb := r.Breakdown, &m.Breakdown
		mb.EmergencyGPUh += b.EmergencyGPUh / n
		mb.ScheduledGPUh += b.ScheduledGPUh / n
		mb.HandoffFailedGPUh += b.HandoffFailedGPUh / n
		mb.DowntimeGPUh += b.DowntimeGPUh / n
		mb.HandoffDowntimeGPUh += b.HandoffDowntimeGPUh / n
		mb.RedundancyGPUh += b.RedundancyGPUh / n
		mb.Emergencies += b.Emergencies
		mb.Scheduled += b.Scheduled
		mb.Handoffs += b.Handoffs
		mb.HandoffsFailed += b.HandoffsFailed
	}
	m.HandoffDowntime = summariseDowntime(down, limit)
	return m
}

// Summarise fills the headline figures from the rows.
func (rep *Report) Summarise() {
	get := func(key string) *Row {
		for i := range rep.Rows {
			if rep.Rows[i].Key == key && rep.Rows[i].Error == "" {
				return &rep.Rows[i]
			}
		}
		return nil
	}
	pct := func(v float64) *float64 { return &v }
	rn := get("reclaimnet")
	if rn == nil {
		return
	}
	l := rn.Mean.WorkLossGPUh
	if b := get("b1p"); b != nil && b.Mean.WorkLossGPUh > 0 {
		rep.ReductionVsSlurm = pct(100 * (1 - l/b.Mean.WorkLossGPUh))
	}
	// The paper's 38 % is against the table's B1, not a -b1-refresh variant.
	if b := get("b1"); b != nil && b.Mean.WorkLossGPUh > 0 && b.Name == (BambooLike{Interval: DefaultBambooRefresh}).Name() {
		rep.ReductionVsBamboo = pct(100 * (1 - l/b.Mean.WorkLossGPUh))
	}
	if o := get("b6"); o != nil {
		rep.AboveOracleGPUh = pct(l - o.Mean.WorkLossGPUh)
		if o.Mean.WorkLossGPUh > 0 {
			rep.DistanceToOracle = pct(100 * (l/o.Mean.WorkLossGPUh - 1))
		}
	}
	if b := get("b7"); b != nil && l > 0 {
		rep.MeasuredGap = pct(b.Mean.WorkLossGPUh / l)
	}
	if rn.Mean.PredictedGap > 0 {
		rep.PredictedGap = pct(rn.Mean.PredictedGap)
	}
}

// WriteTable prints the report shaped like docs/design.md §5.
func (rep *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "trace: %s, seeds: %v\n\n", rep.Trace, rep.Seeds)
	fmt.Fprintln(w, "| system | work loss GPU-h ↓ | median downtime s ↓ | p99 downtime s ↓ | migration success % ↑ | research-traffic degradation % ↓ | GPU util % ↑ | interruptions | checkpoint traffic TB | P1 overhead GPU-h |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rep.Rows {
		if r.Error != "" {
			fmt.Fprintf(w, "| %s | not run: %s | | | | | | | | |\n", r.Name, r.Error)
			continue
		}
		m := r.Mean
		down := func(v float64) string {
			if m.Interruptions == 0 {
				return "—"
			}
			return fmt.Sprintf("%.0f", v)
		}
		fmt.Fprintf(w, "| %s | %.2f | %s | %s | %.1f | %.1f | %.1f | %d | %.2f | %.1f |\n", r.Name, m.WorkLossGPUh,
			down(m.MedianDowntimeS), down(m.P99DowntimeS), m.MigrationSuccessPct, m.DegradationPct, m.GPUUtilPct, m.Interruptions,
			m.CheckpointTB, m.CheckpointOverheadGPUh)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The comparison (docs/design.md P1.9): what interruptions cost in GPU time, and the traffic spent against them:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| system | work loss GPU-h | downtime GPU-h | redundant compute GPU-h | total GPU time lost GPU-h | checkpoint traffic TB | research-traffic degradation % |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rep.Rows {
		if r.Error != "" {
			continue
		}
		m := r.Mean
		fmt.Fprintf(w, "| %s | %.2f | %.2f | %.1f | %.2f | %.2f | %.1f |\n", r.Name, m.WorkLossGPUh, m.Breakdown.DowntimeGPUh,
			m.Breakdown.RedundancyGPUh, m.TotalLostGPUh, m.CheckpointTB, m.DegradationPct)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Where the GPU time went (work loss = emergency + scheduled without hand-off + failed hand-off; counts summed over seeds):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| system | emergency loss GPU-h | scheduled, no hand-off, loss GPU-h | failed hand-off loss GPU-h | downtime GPU-h (of it in hand-offs) | emergencies / no hand-off / hand-offs / failed | redundant compute GPU-h |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rep.Rows {
		if r.Error != "" {
			continue
		}
		b := r.Mean.Breakdown
		fmt.Fprintf(w, "| %s | %.2f | %.2f | %.2f | %.2f (%.2f) | %d / %d / %d / %d | %.1f |\n", r.Name, b.EmergencyGPUh, b.ScheduledGPUh,
			b.HandoffFailedGPUh, b.DowntimeGPUh, b.HandoffDowntimeGPUh, b.Emergencies, b.Scheduled, b.Handoffs, b.HandoffsFailed, b.RedundancyGPUh)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Hand-off downtime against its limit (docs/design.md P3.8d: the time the bytes lacked need at the path's migration room as it was + Tr + one control period; pooled over seeds):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| system | hand-offs | median downtime s | max downtime s | median limit s | median downtime/limit | max downtime/limit |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rep.Rows {
		if r.Error != "" {
			continue
		}
		if h := r.Mean.HandoffDowntime; h.Count > 0 {
			fmt.Fprintf(w, "| %s | %d | %.1f | %.1f | %.1f | %.2f | %.2f |\n", r.Name, h.Count, h.MedianS, h.MaxS, h.MedianLimitS, h.MedianRatio, h.MaxRatio)
		} else {
			fmt.Fprintf(w, "| %s | 0 | — | — | — | — | — |\n", r.Name)
		}
	}
	fmt.Fprintln(w)
	line := func(label string, v *float64, paper string) {
		if v != nil {
			fmt.Fprintf(w, "%s: %.1f %% (paper: %s)\n", label, *v, paper)
		}
	}
	line("ReclaimNet work-loss reduction vs B1' Slurm requeue", rep.ReductionVsSlurm, "66 %")
	line("ReclaimNet work-loss reduction vs B1 Bamboo", rep.ReductionVsBamboo, "38 %")
	line("ReclaimNet work loss above the oracle", rep.DistanceToOracle, "7.7 %")
	if rep.AboveOracleGPUh != nil {
		note := ""
		if rep.DistanceToOracle == nil {
			note = " (the oracle lost 0, so no percentage; paper: 7.7 % above an oracle at 2.6 GPU-h)"
		}
		fmt.Fprintf(w, "ReclaimNet work loss above the oracle, absolute: %.2f GPU-h%s\n", *rep.AboveOracleGPUh, note)
	}
	if rep.MeasuredGap != nil {
		fmt.Fprintf(w, "adaptivity gap measured (B7 loss / ReclaimNet loss): %.3f\n", *rep.MeasuredGap)
	}
	if rep.PredictedGap != nil {
		fmt.Fprintf(w, "adaptivity gap predicted (Theorem 2 on ReclaimNet's own estimates): %.3f (paper: 1.052)\n", *rep.PredictedGap)
	}
}

// writeJSON writes v, indented, to dir/name, creating dir.
func writeJSON(dir, name string, v any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create output dir: %w", err)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// Save writes results.json and the SVG plots (plot.go) into dir.
func (rep *Report) Save(dir string, trueHazard func(t float64) float64) error {
	if err := writeJSON(dir, "results.json", rep); err != nil {
		return err
	}
	return writePlots(dir, rep, trueHazard)
}

// RunSuite runs every policy key over every seed's trace. traceFor returns
// the trace of a seed (generated, or the same loaded trace for all seeds).
// Runs are independent and go in parallel on GOMAXPROCS workers; results
// do not depend on the order they finish in.
func RunSuite(keys []string, seeds []uint64, traceFor func(seed uint64) (*trace.Trace, error), opts Options, tune Tuning,
	progress func(key string, seed uint64)) (*Report, error) {
	rep := &Report{Seeds: seeds}
	traces := make([]*trace.Trace, len(seeds))
	for i, seed := range seeds {
		tr, err := traceFor(seed)
		if err != nil {
			return nil, err
		}
		traces[i] = tr
		rep.Trace = tr.Header.Name
	}
	type job struct{ si, ki int }
	results := make([][]Result, len(seeds))
	errs := make([][]error, len(seeds))
	for i := range seeds {
		results[i] = make([]Result, len(keys))
		errs[i] = make([]error, len(keys))
	}
	jobs := make(chan job)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range max(1, min(runtime.GOMAXPROCS(0), len(keys)*len(seeds))) {
		wg.Go(func() {
			for jb := range jobs {
				if progress != nil {
					mu.Lock()
					progress(keys[jb.ki], seeds[jb.si])
					mu.Unlock()
				}
				results[jb.si][jb.ki], errs[jb.si][jb.ki] = RunPolicy(traces[jb.si], keys[jb.ki], opts, seeds[jb.si], tune)
			}
		})
	}
	for si := range seeds {
		for ki := range keys {
			jobs <- job{si, ki}
		}
	}
	close(jobs)
	wg.Wait()
	rows := make([]Row, len(keys))
	for ki, k := range keys {
		rows[ki].Key, rows[ki].Name = k, k
		for si := range seeds {
			if err := errs[si][ki]; err != nil {
				rows[ki].Error = err.Error()
				rows[ki].PerSeed = nil
				break
			}
			rows[ki].PerSeed = append(rows[ki].PerSeed, results[si][ki])
		}
		rows[ki].Mean = mean(rows[ki].PerSeed)
		if len(rows[ki].PerSeed) > 0 {
			rows[ki].Name = rows[ki].PerSeed[0].Policy
		}
	}
	rep.Rows = rows
	rep.Summarise()
	return rep, nil
}

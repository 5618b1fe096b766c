package jobs

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// A scheduled hand-off spends, before its transfer can start, the time to
// write the final checkpoint and commit it locally: on the campus, 2.3 s
// of a 6 s notice. The policy knows the restart time Tr (P1.6: C/B⁻ ≤
// τ − Tr; P3.3: r_min = C/(τ − Tr)) but not that time, and would admit
// hand-offs that cannot finish. The policy has no input of its own for
// it, so the host reports Tr as the
// measured restart plus the slowest of its last checkpoints' write + local
// commit: the leader's feasibility test, r_min and P2's T̄mig then count
// the overhead a hand-off really has (a recovery from a replica writes no
// checkpoint, so its deadlines are a little generous by that much).

// checkpointTimesKept is how many recent checkpoint times count.
const checkpointTimesKept = 3

// trTolerance: a change of the reported Tr smaller than this fraction is
// not worth a log entry.
const trTolerance = 0.1

// noteCheckpointTime records one requested checkpoint's write + commit.
func (w *worker) noteCheckpointTime(d time.Duration) {
	w.set(func() {
		w.ckptTimes = append(w.ckptTimes, d)
		if len(w.ckptTimes) > checkpointTimesKept {
			w.ckptTimes = slices.Clone(w.ckptTimes[len(w.ckptTimes)-checkpointTimesKept:])
		}
	})
}

// reportedRestart is the Tr the host reports: the measured restart plus
// the slowest recent checkpoint write + commit.
func reportedRestart(restart time.Duration, ckptTimes []time.Duration) time.Duration {
	var worst time.Duration
	for _, d := range ckptTimes {
		worst = max(worst, d)
	}
	return restart + worst
}

// reportRestart submits the job's Tr (reportedRestart) when always is set
// (the job just became ready) or when it moved by more than trTolerance
// since the last report.
func (w *worker) reportRestart(ctx context.Context, j state.JobRecord, always bool) {
	var tr, last time.Duration
	w.set(func() { tr, last = reportedRestart(w.restartTime, w.ckptTimes), w.reportedTr })
	if tr <= 0 {
		return
	}
	if !always && last > 0 && (tr-last).Abs() <= time.Duration(trTolerance*float64(last)) {
		return
	}
	if err := w.m.submit(ctx, state.JobReport{Job: w.id, Node: w.m.cfg.Node, RestartTime: tr, Remaining: j.Remaining}); err != nil {
		w.noteErr(fmt.Errorf("report restart time: %w", err))
		return
	}
	w.set(func() { w.reportedTr = tr })
}

// deadlineRepace is how often a hand-off's transfer re-checks its pace
// against the deadline; deadlineMargin is kept after the last byte for the
// receiver's commit and MoveJob.
const (
	deadlineRepace = 250 * time.Millisecond
	deadlineMargin = 300 * time.Millisecond
)

// paceForDeadline is a hand-off transfer's pacing rate: the assigned rate,
// raised to what the remaining bytes need to arrive before the deadline
// (less deadlineMargin) when it started late or fell behind, but never
// above the flow's kernel ceiling: P3 charged the ceiling (CeilingFactor ×
// rate) to every link of the path, so up to it the research reservation
// is untouched, and the kernel would drop what goes faster. Unlimited and
// 0 (paused) stay; without a ceiling the assigned rate stays.
func paceForDeadline(remaining int64, assigned, ceiling float64, left time.Duration) float64 {
	if assigned <= 0 || ceiling <= assigned {
		return assigned
	}
	left -= deadlineMargin
	if remaining <= 0 {
		return assigned
	}
	if left <= 0 {
		return ceiling
	}
	need := float64(remaining) / left.Seconds()
	return max(assigned, min(need, ceiling))
}

// deadlinePace applies paceForDeadline to a hand-off's push; it is called
// every 250 ms of the push, so a pace above the assigned rate is logged at
// debug level.
func (w *worker) deadlinePace(remaining int64, assigned float64, fl *policy.FlowDecision, deadline time.Time) float64 {
	if fl == nil || deadline.IsZero() {
		return assigned
	}
	left := deadline.Sub(w.m.cfg.Now())
	pace := paceForDeadline(remaining, assigned, fl.Ceiling, left)
	if pace > assigned*1.001 {
		w.log.Debug("hand-off behind its deadline: pacing above the assigned rate, within the ceiling",
			"assigned", assigned, "pace", pace, "ceiling", fl.Ceiling, "remaining", remaining, "left", left)
	}
	return pace
}

// progress is what push ps still has to send of cp (all of it before the
// transfer started).
func (w *worker) progress(ps *push, cp state.Checkpoint) int64 {
	w.m.mu.Lock()
	tr := ps.tr
	w.m.mu.Unlock()
	if tr == nil {
		return cp.Size
	}
	return max(cp.Size-tr.Stats().RawBytes, 0)
}

// resumed runs at the job's first readiness on this node: after a
// hand-off or a recovery it reports the time, which ends the downtime in
// the reclaim history, with when its checkpoint was restored here and
// this node's part of its downtime limit (design P3.8d: the bytes fetched
// ÷ their flow's rate + Tr, the restart time tr measured now), and after
// a hand-off it records the downtime (the source's clock at the stop,
// this node's at readiness; a negative skew records nothing).
func (w *worker) resumed(ctx context.Context, j state.JobRecord, tr time.Duration) {
	m := w.m
	var first bool
	w.set(func() { first, w.resumeSeen = !w.resumeSeen, true })
	if !first || j.Node != m.cfg.Node || j.Restarts == 0 {
		return
	}
	now := m.cfg.Now()
	if f := m.cfg.Observe.HandoffDowntime; f != nil && !j.HandoffStopped.IsZero() && !now.Before(j.HandoffStopped) {
		f(now.Sub(j.HandoffStopped))
	}
	c := state.JobReport{Job: w.id, Node: m.cfg.Node, Remaining: j.Remaining, Ready: now}
	var fetched int64
	var rate float64
	w.set(func() { c.Restored, fetched, rate = w.restoredAt, w.fetched, w.fetchRate })
	if fetched == 0 || rate > 0 {
		c.Limit = policy.DowntimeLimit(fetched, rate, tr, 0)
	}
	if err := m.submit(ctx, c); err != nil {
		w.noteErr(fmt.Errorf("report readiness: %w", err))
	}
}

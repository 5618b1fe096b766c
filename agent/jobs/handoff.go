package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/supervisor"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// handoff carries out a hand-off decision for this job (flow 3), at its
// final checkpoint's start (docs/design.md P3.8). The job stops as soon as its final
// checkpoint is written: what it would compute afterwards could not be
// kept.
func (w *worker) handoff(ctx context.Context, job *supervisor.Job, h policy.HandoffDecision) {
	m := w.m
	w.setState(StateHandingOff)
	hctx := ctx
	if !h.Deadline.IsZero() {
		var cancel context.CancelFunc
		hctx, cancel = context.WithDeadline(ctx, h.Deadline)
		defer cancel()
	}
	var cp state.Checkpoint
	have, final := false, false
	// What the job computes after this is not kept: the hand-off's
	// downtime runs from here.
	stopped := m.cfg.Now()
	// The rate the path gives the final transfer now, for its downtime
	// limit: the flow's decided rate (P3.8's share of the lower bound,
	// raised by what is left of the estimate; with P3 off, its max-min
	// share).
	rate := h.FinalRate
	if _, f := flowRate(w.latest(), handoffFlow(w.id), m.cfg.Node, h.To); f != nil {
		rate = max(rate, f.Rate)
	}
	if h.FinalCheckpoint {
		began := time.Now()
		dir, err := job.RequestCheckpoint(hctx)
		if err == nil {
			var v uint64
			if v, err = w.commit(hctx, dir); err == nil {
				cp, err = w.localCheckpoint(v)
				have = err == nil
				final = have
				w.log.Info("final checkpoint written and committed locally", "version", v, "took", time.Since(began),
					"left_to_deadline", time.Until(h.Deadline))
			}
		}
		if err != nil {
			w.noteErr(fmt.Errorf("final checkpoint: %w; handing off the freshest committed version", err))
		}
	}
	w.stop(job)
	st := w.latest()
	if !have {
		if c, ok := st.FreshestCommitted(w.id); ok && m.holds(w.id, c) {
			cp, have = c, true
		}
	}
	// lacked is what the destination lacked of the version handed over:
	// the bytes the final transfer sent (nothing when it held them all,
	// its pre-syncs having sent the rest).
	var lacked int64
	for have && !slices.Contains(holdersOf(w.latest(), w.id, cp.Version), h.To) {
		sent, err := w.migrate(hctx, h, cp)
		lacked = sent
		var rt retarget
		if errors.As(err, &rt) {
			if !rt.h.Admitted() {
				w.log.Warn("hand-off withdrawn during the transfer: the job recovers from its freshest committed replica", "was_to", h.To, "reason", rt.h.Reason)
				w.set(func() { w.state, w.result.reason = StateDegraded, reasonDegraded })
				return
			}
			w.log.Info("hand-off destination changed during the transfer", "from", h.To, "to", rt.h.To)
			h = rt.h
			continue
		}
		if err != nil {
			w.noteErr(fmt.Errorf("hand-off to %s: %w", h.To, err))
			w.set(func() { w.state, w.result.reason = StateFailed, reasonDegraded })
			return
		}
		break
	}
	// The history tells a move with its final checkpoint from one that
	// lost the work since an older version (the owner's report too).
	move := state.MoveJob{Job: w.id, From: m.cfg.Node, To: h.To, At: m.cfg.Now(), Stopped: stopped, NoFinalCheckpoint: !final}
	if rate > 0 || lacked == 0 {
		move.Limit = policy.DowntimeLimit(lacked, rate, w.latest().Jobs[w.id].RestartTime, policy.ControlPeriod)
	}
	if have {
		move.Version = cp.Version
	}
	if err := m.submit(ctx, move); err != nil {
		w.noteErr(fmt.Errorf("commit move to %s: %w", h.To, err))
		w.set(func() { w.state, w.result.reason = StateFailed, reasonDegraded })
		return
	}
	w.log.Info("job handed off", "to", h.To, "version", cp.Version, "final_checkpoint", final)
	// Until this node's copy of the state applies the move, the job still
	// looks placed here: the finish record keeps it from being started again.
	w.set(func() { w.state, w.result.reason = StateMoved, reasonMoved })
}

// migrate pushes cp to the hand-off's destination (class migration) at the
// admitted flow's rate, not before the flow's start, re-pacing on changes,
// and returns the bytes it sent (the chunks the destination lacked).
func (w *worker) migrate(ctx context.Context, h policy.HandoffDecision, cp state.Checkpoint) (int64, error) {
	m := w.m
	st := w.latest()
	rate, fl := flowRate(st, handoffFlow(w.id), m.cfg.Node, h.To)
	if fl != nil {
		if wait := fl.Start.Sub(m.cfg.Now()); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return 0, ctx.Err()
			case <-t.C:
			}
		}
	}
	res := make(chan pushResult, 1)
	ps := w.startPush(ctx, st, cp, h.To, handoffFlow(w.id), policy.ClassMigration, w.deadlinePace(cp.Size, rate, fl, h.Deadline), res)
	check := time.NewTicker(deadlineRepace)
	defer check.Stop()
	for {
		select {
		case r := <-res:
			return w.sent(ps), r.err
		case <-w.notify:
			st := w.latest()
			if nh, ok := handoffFrom(st, w.id, m.cfg.Node); ok && (nh.Degraded || nh.To != h.To) {
				ps.cancel()
				return 0, retarget{nh} // the leader chose again (the destination is leaving, say)
			}
			if r, f := flowRate(st, handoffFlow(w.id), m.cfg.Node, h.To); f != nil {
				rate, fl = r, f
				w.repace(ps, w.deadlinePace(w.progress(ps, cp), rate, fl, h.Deadline))
			}
		case <-check.C:
			w.repace(ps, w.deadlinePace(w.progress(ps, cp), rate, fl, h.Deadline))
		}
	}
}

// sent is the chunk bytes push p sent (uncompressed, over all attempts).
func (w *worker) sent(p *push) int64 {
	w.m.mu.Lock()
	tr := p.tr
	w.m.mu.Unlock()
	if tr == nil {
		return 0
	}
	return tr.Stats().RawBytes
}

// retarget ends a hand-off's transfer when the leader's decision for it
// changed: another destination, or degraded.
type retarget struct{ h policy.HandoffDecision }

func (r retarget) Error() string { return fmt.Sprintf("hand-off decision changed (to %q)", r.h.To) }

// repace gives a push in flight a new assigned rate when it changed.
func (w *worker) repace(p *push, rate float64) {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	w.m.repaceLocked(p, rate)
}

func handoffFrom(st *state.State, id policy.JobID, node policy.NodeID) (policy.HandoffDecision, bool) {
	for _, h := range st.Decisions.Handoffs {
		if h.Job == id && h.From == node {
			return h, true
		}
	}
	return policy.HandoffDecision{}, false
}

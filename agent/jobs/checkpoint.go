package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/supervisor"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

type ckptResult struct {
	dir string
	err error
}

type pushResult struct {
	p   *push
	err error
}

// loop runs the job's periodic checkpoints and pushes until the job ends,
// ctx ends, or a hand-off takes it away.
func (w *worker) loop(ctx context.Context, job *supervisor.Job, deadline time.Time) {
	m := w.m
	ckptRes := make(chan ckptResult, 1)
	pushRes := make(chan pushResult, 1)
	var (
		ckptBusy bool
		cur      *push  // pre-sync push in flight
		queued   uint64 // newest version waiting for cur to finish
		stopped  bool
		dropped  *push          // a push this loop cancelled: its error is no fault
		interval time.Duration  // the job's last decided checkpoint interval
		changed  = 1.0          // the newest version's new share against the one before (changedShare)
		reports  presyncReports // what the pre-sync target holds, told to the leader
	)
	lastCkpt := time.Now()
	var ckptStarted time.Time // when the request in flight was made
	// orderTaken is the decisions whose "checkpoint now" this worker took,
	// at orderTakenAt (its own clock).
	var orderTaken, orderTakenAt time.Time
	timer := time.NewTimer(time.Hour)
	final := time.NewTimer(time.Hour) // a hand-off's final checkpoint start
	final.Stop()
	defer func() {
		timer.Stop()
		final.Stop()
		if !stopped {
			w.stop(job)
		}
		if cur != nil && cur.cancel != nil {
			cur.cancel()
		}
		w.wg.Wait()
		select {
		case r := <-ckptRes:
			if r.dir != "" {
				_ = os.RemoveAll(r.dir)
			}
		default:
		}
	}()
	events := job.Events()
	for {
		st := w.latest()
		j := st.Jobs[w.id]
		jd := jobDecision(st, w.id)
		var d time.Time
		if r, ok := st.Reclaims[m.cfg.Node]; ok {
			d = r.Deadline
		}
		if !d.Equal(deadline) {
			if err := job.SetDeadline(d); err != nil {
				w.noteErr(fmt.Errorf("set deadline: %w", err))
			}
			deadline = d
		}
		if jd.Interval > 0 {
			interval = jd.Interval
		}
		h, handing := handoffFrom(st, w.id, m.cfg.Node)
		handing = handing && j.Node == m.cfg.Node && !h.Degraded
		var finalDue <-chan time.Time
		target, waiting := standbyTarget(st, jd, w.id, m.cfg.Node), false
		if wait := h.FinalStart.Sub(m.cfg.Now()); handing && h.FinalCheckpoint && wait > 0 {
			// The job computes here until its final checkpoint's latest
			// safe start (docs/design.md P3.8), and its new versions keep
			// the destination fresh.
			final.Reset(wait)
			finalDue, handing = final.C, false
			target, waiting = handoffWaitTarget(st, h, w.id, m.cfg.Node), true
		}
		if handing {
			// (A degraded hand-off keeps running while the job is still
			// placed here. With a last-chance checkpoint ordered the loop
			// takes it and pushes it to the standby. Without one, no node
			// could take the job from a replica now (the leader's early
			// recovery would have placed it elsewhere, and this worker
			// ends when the job record moves): stopping would only waste
			// the time until a later decision admits a hand-off, places
			// the job, or the node leaves.)
			if ckptBusy {
				r := <-ckptRes
				ckptBusy = false
				if r.err == nil {
					if _, err := w.commit(ctx, r.dir); err != nil {
						w.noteErr(err)
					}
				}
			}
			if cur != nil {
				cur.cancel()
				<-pushRes
				cur = nil
			}
			stopped = true
			w.handoff(ctx, job, h)
			return
		}
		w.reportPresync(ctx, st, target.to, &reports)
		switch {
		case cur == nil:
		case cur.key.to == target.to:
			w.repace(cur, target.rate)
		case waiting:
			// A push to the old standby has no flow now; the hand-off's
			// path needs the bandwidth and the destination the versions.
			cur.cancel()
			dropped = cur
		default:
			w.repace(cur, presyncRate(st, jd, w.id, m.cfg.Node, cur.key.to))
		}
		var tick <-chan time.Time
		_, leaving := st.Reclaims[m.cfg.Node]
		var takenAt time.Time // of the current decisions' order, if taken here
		if !leaving && st.Decisions.At.Equal(orderTaken) {
			takenAt = orderTakenAt
		}
		due, ok := nextCheckpoint(jd, ckptBusy, cur != nil, lastCkpt, takenAt)
		if waiting {
			due, ok = waitCheckpoint(interval, ckptBusy, lastCkpt, w.slowestCheckpoint(), j.CheckpointBytes, changed, target)
		}
		if ok {
			timer.Reset(max(time.Until(due), 0))
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-w.notify:
		case <-finalDue:
		case ev, ok := <-events:
			if !ok {
				events = nil
				w.ended(ctx, job)
				stopped = true
				return
			}
			switch ev.Kind {
			case supervisor.EventReady:
				w.set(func() { w.restartTime = ev.RestartTime })
				w.reportRestart(ctx, j, true)
				w.resumed(ctx, j, ev.RestartTime)
			case supervisor.EventCheckpointReady:
				if ev.Checkpoint != nil && !ev.Checkpoint.Requested {
					// The job checkpointed by itself (exit 85, or a deadline).
					if v, err := w.commit(ctx, ev.Checkpoint.Dir); err != nil {
						w.noteErr(err)
					} else {
						changed = changedShare(m.cfg.Store, w.id, v)
						cur, queued = w.pushOrQueue(ctx, w.latest(), target, v, cur, queued, pushRes)
					}
				}
			case supervisor.EventExited:
				w.ended(ctx, job)
				stopped = true
				return
			}
		case <-tick:
			if !waiting && jd.Interval <= policy.RescueInterval {
				orderTaken, orderTakenAt = st.Decisions.At, time.Now()
			}
			ckptBusy = true
			lastCkpt = time.Now()
			ckptStarted = lastCkpt
			w.setState(StateCheckpointing)
			w.wg.Go(func() {
				dir, err := job.RequestCheckpoint(ctx)
				ckptRes <- ckptResult{dir, err}
			})
		case r := <-ckptRes:
			ckptBusy = false
			lastCkpt = time.Now() // the interval runs from the end of a request (it may have waited for readiness)
			w.setState(StateRunning)
			if r.err != nil {
				w.set(func() { w.failures++ })
				w.noteErr(fmt.Errorf("checkpoint abandoned: %w", r.err))
				continue
			}
			v, err := w.commit(ctx, r.dir)
			if err != nil {
				w.set(func() { w.failures++ })
				w.noteErr(err)
				continue
			}
			w.noteCheckpointTime(time.Since(ckptStarted))
			w.reportRestart(ctx, j, false)
			changed = changedShare(m.cfg.Store, w.id, v)
			cur, queued = w.pushOrQueue(ctx, w.latest(), target, v, cur, queued, pushRes)
		case r := <-pushRes:
			cur = nil
			if r.err != nil && ctx.Err() == nil && r.p != dropped {
				w.noteErr(fmt.Errorf("pre-sync: %w", r.err))
			}
			if queued != 0 {
				v := queued
				queued = 0
				cur, queued = w.pushOrQueue(ctx, w.latest(), target, v, nil, 0, pushRes)
			}
		}
	}
}

// nowOrderHold is how long a worker that took an order to checkpoint now
// (off a leaving node) waits for decisions newer than that order before
// taking it again: the leader commits identical decisions only when
// something changes, so an order whose checkpoint failed or never got off
// the node is taken again after this.
const nowOrderHold = 30 * time.Second

// nextCheckpoint returns when the worker's checkpoint timer fires, and
// false when it does not run: no interval, or a checkpoint request in
// flight. lastCkpt is when the last request ended. An order to checkpoint
// now (policy.RescueInterval) also waits for the job's push in flight:
// that push is the rescue until it lands (the leader paces it to), and
// versions written every second behind it would only stall the job and
// compete for the disk it is read from; the one written when it lands is
// fresher. takenAt, when not zero, is when this worker took the current
// decisions' order on a node that is not leaving: a job exposed beyond its
// interval checkpoints once per decision, not again in the second between
// its push landing and the leader's next decision, unless nowOrderHold
// passes with no newer decision (a leaving node's last-chance orders
// repeat while time is left, each push making the copy fresher).
func nextCheckpoint(jd policy.JobDecision, ckptBusy, pushing bool, lastCkpt, takenAt time.Time) (time.Time, bool) {
	if jd.Interval <= 0 || ckptBusy {
		return time.Time{}, false
	}
	due := lastCkpt.Add(jd.Interval)
	if jd.Interval <= policy.RescueInterval {
		if pushing {
			return time.Time{}, false
		}
		if !takenAt.IsZero() {
			due = later(due, takenAt.Add(nowOrderHold))
		}
	}
	return due, true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// pushOrQueue starts the pre-sync of version v to the target (the job's
// standby, or a waiting hand-off's destination), or queues it behind the
// push in flight (only the newest queued version is kept: it supersedes
// older ones). A version that could not land before the target's limit is
// not sent.
func (w *worker) pushOrQueue(ctx context.Context, st *state.State, to presyncTarget, v uint64, cur *push, queued uint64, res chan pushResult) (*push, uint64) {
	if cur != nil {
		return cur, max(queued, v)
	}
	if to.to == "" {
		return nil, 0
	}
	cp, err := w.localCheckpoint(v)
	if err != nil {
		w.noteErr(err)
		return nil, 0
	}
	if !to.lands(cp.Size, w.m.cfg.Now()) {
		w.log.Info("pre-sync skipped: the version cannot land before the final checkpoint's start", "version", v, "to", to.to)
		return nil, 0
	}
	return w.startPush(ctx, st, cp, to.to, checkpointFlow(w.id), policy.ClassPresync, to.rate, res), 0
}

func (w *worker) localCheckpoint(v uint64) (state.Checkpoint, error) {
	mf, err := w.m.cfg.Store.Manifest(string(w.id), v)
	if err != nil {
		return state.Checkpoint{}, fmt.Errorf("version %d: %w", v, err)
	}
	return state.Checkpoint{Job: w.id, Version: v, ManifestHash: mf.Hash().String(), Size: mf.TotalSize(), Source: w.m.cfg.Node}, nil
}

func (w *worker) startPush(ctx context.Context, st *state.State, cp state.Checkpoint, to policy.NodeID, flow string, class policy.TrafficClass, rate float64, res chan pushResult) *push {
	pctx, cancel := context.WithCancel(ctx)
	ps := &push{key: pushKey{w.id, cp.Version, to}, flow: flow, class: class, rate: rate, started: w.m.cfg.Now(), cancel: cancel}
	w.set(func() {
		w.pushes = append([]*push{ps}, w.pushes...)
		if len(w.pushes) > 2 {
			w.m.archiveLocked(w.pushes[2:]...)
			w.pushes = w.pushes[:2]
		}
	})
	addr := st.Nodes[to].TransferAddr
	w.wg.Go(func() {
		defer cancel()
		err := w.m.send(pctx, ps, addr, cp)
		w.set(func() { ps.done, ps.err = true, err })
		res <- pushResult{ps, err}
	})
	return ps
}

// commit stores a completed checkpoint directory and the job's outputs as
// the job's next version, records it in the catalogue (source = holder =
// this node) and removes the directory. dir "" stores the outputs alone
// (the version taken when the job ends).
func (w *worker) commit(ctx context.Context, dir string) (uint64, error) {
	m := w.m
	if dir != "" {
		defer os.RemoveAll(dir)
	}
	st := m.cfg.Coord.State()
	v := m.cfg.Store.NextVersion(string(w.id))
	for _, cp := range st.Checkpoints[w.id] {
		if cp.Version >= v {
			v = cp.Version + 1 // never reuse a number another node wrote
		}
	}
	// The marker is the supervisor's protocol, not part of the checkpoint.
	if dir != "" {
		if err := os.Remove(filepath.Join(dir, supervisor.CompleteMarker)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("commit checkpoint: %w", err)
		}
	}
	began := time.Now()
	mf, err := m.cfg.Store.AddCheckpoint(string(w.id), v, dir, w.outputDir(), m.cfg.Now())
	if err != nil {
		return 0, fmt.Errorf("commit checkpoint: %w", err)
	}
	if f := m.cfg.Observe.CheckpointWrite; f != nil {
		f(time.Since(began))
	}
	size := mf.TotalSize()
	w.set(func() { w.checkpoints++; w.lastCkpt = m.cfg.Now() })
	w.log.Info("checkpoint committed locally", "version", v, "bytes", size)
	if err := m.submit(ctx, state.ReplicaComplete{Job: w.id, Version: v, ManifestHash: mf.Hash().String(), Size: size,
		Source: m.cfg.Node, Holder: m.cfg.Node, At: m.cfg.Now()}); err != nil {
		return v, fmt.Errorf("record checkpoint %d: %w", v, err)
	}
	if j, ok := st.Jobs[w.id]; ok && j.Node == m.cfg.Node && j.CheckpointBytes != size {
		if err := m.submit(ctx, state.JobReport{Job: w.id, Node: m.cfg.Node, CheckpointBytes: size, Remaining: j.Remaining}); err != nil {
			w.noteErr(fmt.Errorf("report checkpoint size: %w", err))
		}
	}
	return v, nil
}

// presyncRate is the admitted pre-sync flow's rate, else the job's b_i;
// transfer.Unlimited with P3 off, or without either.
func presyncRate(st *state.State, jd policy.JobDecision, id policy.JobID, from, to policy.NodeID) float64 {
	if r, fl := flowRate(st, checkpointFlow(id), from, to); fl != nil || !paced(st) || jd.Bandwidth <= 0 {
		return r
	}
	return jd.Bandwidth
}

package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/supervisor"
	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// worker runs one job hosted on this node, from restore to stop. Its fields
// below mu-comment are guarded by the manager's mutex.
type worker struct {
	m      *Manager
	id     policy.JobID
	cancel context.CancelFunc
	log    *slog.Logger
	notify chan struct{} // a newer state is in st
	wg     sync.WaitGroup

	// Guarded by m.mu.
	st           *state.State
	state        string
	restoredFrom uint64
	restartTime  time.Duration
	checkpoints  int
	failures     int
	lastCkpt     time.Time
	lastErr      string
	pushes       []*push         // the current or last push, then the one before
	result       finish          // set before the worker ends; reason empty when the job left
	ckptTimes    []time.Duration // the last requested checkpoints' write + local commit (overhead.go)
	reportedTr   time.Duration   // the Tr last reported to the leader
}

func newWorker(m *Manager, id policy.JobID, cancel context.CancelFunc, st *state.State) *worker {
	return &worker{m: m, id: id, cancel: cancel, log: m.log.With("job", id), notify: make(chan struct{}, 1),
		st: st, state: StateStarting}
}

// update hands the worker a newer state; called with m.mu held.
func (w *worker) update(st *state.State) {
	w.st = st
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (w *worker) latest() *state.State {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	return w.st
}

func (w *worker) set(fn func()) {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	fn()
}

func (w *worker) setState(s string) { w.set(func() { w.state = s }) }

func (w *worker) noteErr(err error) {
	w.log.Warn("job", "err", err)
	w.set(func() { w.lastErr = err.Error() })
}

// view is called with m.mu held.
func (w *worker) view(now time.Time) JobView {
	v := JobView{Job: w.id, State: w.state, RestoredFrom: w.restoredFrom, RestartTime: w.restartTime,
		Checkpoints: w.checkpoints, CheckpointFailures: w.failures, LastCheckpoint: w.lastCkpt, LastError: w.lastErr,
		CheckpointTime: slices.Max(append([]time.Duration{0}, w.ckptTimes...))}
	for _, p := range w.pushes {
		v.Transfers = append(v.Transfers, p.view(now))
	}
	return v
}

func (w *worker) dir() string { return filepath.Join(w.m.cfg.WorkDir, string(w.id)) }

func (w *worker) run(ctx context.Context) {
	m := w.m
	st := w.latest()
	j := st.Jobs[w.id]
	w.set(func() { w.result = finish{restarts: j.Restarts} })
	restoreDir, from, err := w.prepare(ctx, st)
	if err != nil {
		if ctx.Err() == nil {
			w.noteErr(err)
			w.set(func() { w.state, w.result.reason = StateFailed, reasonFailed })
		}
		return
	}
	if restoreDir != "" {
		defer os.RemoveAll(restoreDir)
	}
	var deadline time.Time
	if r, ok := st.Reclaims[m.cfg.Node]; ok {
		deadline = r.Deadline
	}
	sig, err := supervisorSignal(j.Spec)
	if err != nil {
		w.noteErr(fmt.Errorf("start: %w", err))
		w.set(func() { w.state, w.result.reason = StateFailed, reasonFailed })
		return
	}
	// The per-job signal and grace come from the replicated spec, so every
	// start and restart, on any node, uses the same ones.
	job, err := m.cfg.Supervisor.Start(ctx, supervisor.Spec{
		JobID: string(w.id), Command: j.Spec.Command, Env: j.Spec.Env, Dir: j.Spec.Dir,
		WorkDir: filepath.Join(w.dir(), "run"), RestoreDir: restoreDir, RestartCount: j.Restarts, Deadline: deadline,
		Signal: sig, Grace: j.Spec.Grace,
	})
	if err != nil {
		if ctx.Err() == nil {
			w.noteErr(fmt.Errorf("start: %w", err))
			w.set(func() { w.state, w.result.reason = StateFailed, reasonFailed })
		}
		return
	}
	m.markLive(w.id)
	w.log.Info("job started", "restored_from", from, "restart_count", j.Restarts)
	w.set(func() { w.state, w.restoredFrom = StateRunning, from })
	w.loop(ctx, job, deadline)
}

// prepare returns the directory the job resumes from (empty for a fresh
// start) and its version: the freshest committed version, fetched by its
// holder's push when it is not here yet; on a corrupt or missing chunk, the
// next older version this node holds.
func (w *worker) prepare(ctx context.Context, st *state.State) (string, uint64, error) {
	m := w.m
	cp, ok := st.FreshestCommitted(w.id)
	if o := st.Jobs[w.id].Restore; o.Version != 0 {
		// Placed by a recovery: its holder pushes this version (the
		// freshest committed one may have left with its holders).
		if c, found := st.CheckpointVersion(w.id, o.Version); found {
			cp, ok = c, true
		}
	}
	if !ok {
		return "", 0, nil
	}
	have := m.holds(w.id, cp)
	if !have && st.Jobs[w.id].Restore.Version == 0 && len(activeHolders(st, w.id, m.cfg.Node)) == 0 {
		// No holder left to send anything: what this node has is all there is.
		w.log.Warn("no active node holds a committed version; resuming from what is here", "freshest", cp.Version, "holders", cp.Holders)
	} else if !have {
		w.setState(StateFetching)
		w.log.Info("waiting for the freshest committed version", "version", cp.Version, "holders", cp.Holders)
		have = w.waitFor(ctx, cp)
		if ctx.Err() != nil {
			return "", 0, ctx.Err()
		}
		if !have {
			w.noteErr(fmt.Errorf("version %d did not arrive within %v; using the newest version held here", cp.Version, m.cfg.FetchTimeout))
		}
	}
	w.setState(StateRestoring)
	var candidates []uint64
	if have {
		candidates = append(candidates, cp.Version)
	}
	local := m.cfg.Store.Versions(string(w.id))
	for i := len(local) - 1; i >= 0; i-- {
		if local[i] < cp.Version {
			candidates = append(candidates, local[i])
		}
	}
	if err := os.MkdirAll(w.dir(), 0o755); err != nil {
		return "", 0, fmt.Errorf("job dir: %w", err)
	}
	for _, v := range candidates {
		dst := filepath.Join(w.dir(), fmt.Sprintf("restore-%d", v))
		if err := os.RemoveAll(dst); err != nil {
			return "", 0, fmt.Errorf("clear restore dir: %w", err)
		}
		err := m.cfg.Store.Restore(string(w.id), v, dst)
		if err == nil {
			return dst, v, nil
		}
		_ = os.RemoveAll(dst)
		if errors.Is(err, ckpt.ErrCorruptChunk) || errors.Is(err, ckpt.ErrChunkMissing) || errors.Is(err, ckpt.ErrNoVersion) {
			w.noteErr(fmt.Errorf("restore version %d: %w; trying the previous one", v, err))
			continue
		}
		return "", 0, fmt.Errorf("restore version %d: %w", v, err)
	}
	// Starting from the beginning would throw away committed work that
	// still exists (and, on a node whose state lags, run a second
	// instance): while an active node holds a committed version, keep
	// waiting for its push (a slow one, on a busy network) instead.
	for holders := activeHolders(st, w.id, m.cfg.Node); len(holders) > 0; holders = activeHolders(st, w.id, m.cfg.Node) {
		w.noteErr(fmt.Errorf("no usable copy of %s here: committed version %d is held by %v; waiting for it rather than starting from the beginning", w.id, cp.Version, holders))
		w.setState(StateFetching)
		if w.waitFor(ctx, cp) {
			dst := filepath.Join(w.dir(), fmt.Sprintf("restore-%d", cp.Version))
			if err := os.RemoveAll(dst); err != nil {
				return "", 0, fmt.Errorf("clear restore dir: %w", err)
			}
			if err := m.cfg.Store.Restore(string(w.id), cp.Version, dst); err != nil {
				_ = os.RemoveAll(dst)
				return "", 0, fmt.Errorf("restore version %d: %w", cp.Version, err)
			}
			w.setState(StateRestoring)
			return dst, cp.Version, nil
		}
		if ctx.Err() != nil {
			return "", 0, ctx.Err()
		}
		// An older version may have been pushed instead (the freshest's
		// holders gone): resume from the newest one that restores here.
		local := m.cfg.Store.Versions(string(w.id))
		for i := len(local) - 1; i >= 0; i-- {
			dst := filepath.Join(w.dir(), fmt.Sprintf("restore-%d", local[i]))
			if err := os.RemoveAll(dst); err != nil {
				return "", 0, fmt.Errorf("clear restore dir: %w", err)
			}
			if err := m.cfg.Store.Restore(string(w.id), local[i], dst); err == nil {
				w.setState(StateRestoring)
				return dst, local[i], nil
			}
			_ = os.RemoveAll(dst)
		}
		st = m.cfg.Coord.State()
		if fresh, ok := st.FreshestCommitted(w.id); ok {
			cp = fresh
		}
	}
	w.noteErr(fmt.Errorf("no usable checkpoint of %s here and no active node holds a committed version (freshest committed %d): starting from the beginning", w.id, cp.Version))
	return "", 0, nil
}

// activeHolders lists the active nodes other than this one that hold a
// committed version of job.
func activeHolders(st *state.State, job policy.JobID, self policy.NodeID) []policy.NodeID {
	var out []policy.NodeID
	for _, cp := range st.Checkpoints[job] {
		if !cp.Committed {
			continue
		}
		for _, h := range cp.Holders {
			if n, ok := st.Nodes[h]; ok && h != self && n.State == state.NodeActive && !slices.Contains(out, h) {
				out = append(out, h)
			}
		}
	}
	slices.Sort(out)
	return out
}

// waitFor waits until the store holds cp, FetchTimeout passes, or nobody
// is left to send it (no restore order and no active holder).
func (w *worker) waitFor(ctx context.Context, cp state.Checkpoint) bool {
	timeout := time.NewTimer(w.m.cfg.FetchTimeout)
	defer timeout.Stop()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for !w.m.holds(w.id, cp) {
		select {
		case <-ctx.Done():
			return false
		case <-timeout.C:
			return w.m.holds(w.id, cp)
		case <-poll.C:
			if st := w.latest(); st.Jobs[w.id].Restore.Version == 0 && len(activeHolders(st, w.id, w.m.cfg.Node)) == 0 {
				return w.m.holds(w.id, cp)
			}
		case <-w.notify:
		}
	}
	return true
}

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
	)
	lastCkpt := time.Now()
	var ckptStarted time.Time // when the request in flight was made
	// orderTaken is the decisions whose "checkpoint now" this worker took,
	// at orderTakenAt (its own clock).
	var orderTaken, orderTakenAt time.Time
	timer := time.NewTimer(time.Hour)
	defer func() {
		timer.Stop()
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
		if h, ok := handoffFrom(st, w.id, m.cfg.Node); ok && j.Node == m.cfg.Node && !h.Degraded {
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
		if cur != nil {
			w.repace(cur, presyncRate(st, jd, w.id, m.cfg.Node, cur.key.to))
		}
		var tick <-chan time.Time
		_, leaving := st.Reclaims[m.cfg.Node]
		var takenAt time.Time // of the current decisions' order, if taken here
		if !leaving && st.Decisions.At.Equal(orderTaken) {
			takenAt = orderTakenAt
		}
		if due, ok := nextCheckpoint(jd, ckptBusy, cur != nil, lastCkpt, takenAt); ok {
			timer.Reset(max(time.Until(due), 0))
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-w.notify:
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
			case supervisor.EventCheckpointReady:
				if ev.Checkpoint != nil && !ev.Checkpoint.Requested {
					// The job checkpointed by itself (exit 85, or a deadline).
					if v, err := w.commit(ctx, ev.Checkpoint.Dir); err != nil {
						w.noteErr(err)
					} else {
						cur, queued = w.pushOrQueue(ctx, w.latest(), v, cur, queued, pushRes)
					}
				}
			case supervisor.EventExited:
				w.ended(ctx, job)
				stopped = true
				return
			}
		case <-tick:
			if jd.Interval <= policy.RescueInterval {
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
			cur, queued = w.pushOrQueue(ctx, w.latest(), v, cur, queued, pushRes)
		case r := <-pushRes:
			cur = nil
			if r.err != nil && ctx.Err() == nil {
				w.noteErr(fmt.Errorf("pre-sync: %w", r.err))
			}
			if queued != 0 {
				v := queued
				queued = 0
				cur, queued = w.pushOrQueue(ctx, w.latest(), v, nil, 0, pushRes)
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

// pushOrQueue starts the pre-sync of version v to the job's standby, or
// queues it behind the push in flight (only the newest queued version is
// kept: it supersedes older ones).
func (w *worker) pushOrQueue(ctx context.Context, st *state.State, v uint64, cur *push, queued uint64, res chan pushResult) (*push, uint64) {
	if cur != nil {
		return cur, max(queued, v)
	}
	jd := jobDecision(st, w.id)
	to := jd.Standby
	if to == "" {
		to = st.Jobs[w.id].Standby
	}
	if to == "" || to == w.m.cfg.Node {
		return nil, 0
	}
	cp, err := w.localCheckpoint(v)
	if err != nil {
		w.noteErr(err)
		return nil, 0
	}
	rate := presyncRate(st, jd, w.id, w.m.cfg.Node, to)
	return w.startPush(ctx, st, cp, to, policy.ClassPresync, rate, res), 0
}

func (w *worker) localCheckpoint(v uint64) (state.Checkpoint, error) {
	mf, err := w.m.cfg.Store.Manifest(string(w.id), v)
	if err != nil {
		return state.Checkpoint{}, fmt.Errorf("version %d: %w", v, err)
	}
	return state.Checkpoint{Job: w.id, Version: v, ManifestHash: mf.Hash().String(), Size: mf.TotalSize(), Source: w.m.cfg.Node}, nil
}

func (w *worker) startPush(ctx context.Context, st *state.State, cp state.Checkpoint, to policy.NodeID, class policy.TrafficClass, rate float64, res chan pushResult) *push {
	pctx, cancel := context.WithCancel(ctx)
	ps := &push{key: pushKey{w.id, cp.Version, to}, class: class, rate: rate, started: w.m.cfg.Now(), cancel: cancel}
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

// commit stores a completed checkpoint directory as the job's next version,
// records it in the catalogue (source = holder = this node) and removes the
// directory.
func (w *worker) commit(ctx context.Context, dir string) (uint64, error) {
	m := w.m
	defer os.RemoveAll(dir)
	st := m.cfg.Coord.State()
	v := m.cfg.Store.NextVersion(string(w.id))
	for _, cp := range st.Checkpoints[w.id] {
		if cp.Version >= v {
			v = cp.Version + 1 // never reuse a number another node wrote
		}
	}
	// The marker is the supervisor's protocol, not part of the checkpoint.
	if err := os.Remove(filepath.Join(dir, supervisor.CompleteMarker)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("commit checkpoint: %w", err)
	}
	mf, err := m.cfg.Store.AddDir(string(w.id), v, dir, m.cfg.Now())
	if err != nil {
		return 0, fmt.Errorf("commit checkpoint: %w", err)
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

// handoff carries out a hand-off decision for this job (flow 3). The job
// stops as soon as its final checkpoint is written: what it would compute
// afterwards could not be kept.
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
	for have && !slices.Contains(holdersOf(w.latest(), w.id, cp.Version), h.To) {
		err := w.migrate(hctx, h, cp)
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
	move := state.MoveJob{Job: w.id, From: m.cfg.Node, To: h.To, At: m.cfg.Now(), NoFinalCheckpoint: !final}
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
// admitted flow's rate, not before the flow's start, re-pacing on changes.
func (w *worker) migrate(ctx context.Context, h policy.HandoffDecision, cp state.Checkpoint) error {
	m := w.m
	st := w.latest()
	rate, fl := flowRate(st, w.id, m.cfg.Node, h.To, policy.ClassMigration)
	if fl != nil {
		if wait := fl.Start.Sub(m.cfg.Now()); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
	res := make(chan pushResult, 1)
	ps := w.startPush(ctx, st, cp, h.To, policy.ClassMigration, w.deadlinePace(cp.Size, rate, fl, h.Deadline), res)
	check := time.NewTicker(deadlineRepace)
	defer check.Stop()
	for {
		select {
		case r := <-res:
			return r.err
		case <-w.notify:
			st := w.latest()
			if nh, ok := handoffFrom(st, w.id, m.cfg.Node); ok && (nh.Degraded || nh.To != h.To) {
				ps.cancel()
				return retarget{nh} // the leader chose again (the destination is leaving, say)
			}
			if r, f := flowRate(st, w.id, m.cfg.Node, h.To, policy.ClassMigration); f != nil {
				rate, fl = r, f
				w.repace(ps, w.deadlinePace(w.progress(ps, cp), rate, fl, h.Deadline))
			}
		case <-check.C:
			w.repace(ps, w.deadlinePace(w.progress(ps, cp), rate, fl, h.Deadline))
		}
	}
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

// ended handles the job's own end: exit 0 reports it done.
func (w *worker) ended(ctx context.Context, job *supervisor.Job) {
	res := job.Wait()
	if res.Err != nil || res.ExitCode != 0 {
		w.noteErr(fmt.Errorf("job ended: exit %d %s: %v", res.ExitCode, res.Signal, res.Err))
		w.set(func() { w.state, w.result.reason = StateFailed, reasonFailed })
		return
	}
	w.set(func() { w.state, w.result.reason = StateExited, reasonExited })
	if err := w.m.submit(ctx, state.JobReport{Job: w.id, Node: w.m.cfg.Node, Remaining: 0, Done: true}); err != nil {
		w.noteErr(fmt.Errorf("report done: %w", err))
	}
}

func (w *worker) stop(job *supervisor.Job) {
	ctx, cancel := context.WithTimeout(context.Background(), w.m.cfg.StopTimeout)
	defer cancel()
	if err := job.Stop(ctx); err != nil {
		w.noteErr(fmt.Errorf("stop: %w", err))
	}
	w.set(func() {
		if w.state == StateRunning || w.state == StateCheckpointing {
			w.state = StateStopped
		}
	})
}

func jobDecision(st *state.State, id policy.JobID) policy.JobDecision {
	for _, jd := range st.Decisions.Jobs {
		if jd.Job == id {
			return jd
		}
	}
	return policy.JobDecision{}
}

func handoffFrom(st *state.State, id policy.JobID, node policy.NodeID) (policy.HandoffDecision, bool) {
	for _, h := range st.Decisions.Handoffs {
		if h.Job == id && h.From == node {
			return h, true
		}
	}
	return policy.HandoffDecision{}, false
}

// presyncRate is the admitted pre-sync flow's rate, else the job's b_i;
// 0 (unpaced) with P3 off.
func presyncRate(st *state.State, jd policy.JobDecision, id policy.JobID, from, to policy.NodeID) float64 {
	if r, fl := flowRate(st, id, from, to, policy.ClassPresync); fl != nil || !paced(st) {
		return r
	}
	return jd.Bandwidth
}

// holdersOf returns the holders of version v of job (none if unknown).
func holdersOf(st *state.State, id policy.JobID, v uint64) []policy.NodeID {
	cp, _ := st.CheckpointVersion(id, v)
	return cp.Holders
}

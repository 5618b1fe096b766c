package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/transfer"
)

// presyncTarget is where a hosted job's new committed versions are pushed,
// and at what pace. Normally that is its standby at the pre-sync flow's
// rate. While an admitted hand-off waits for its final checkpoint's latest
// safe start (docs/design.md P3.8b) it is the hand-off's destination at the
// rate P3 holds for the hand-off on that path (P3.8c: the reservation is
// charged to the links during the wait, so using it takes nothing from
// other flows): the leader decides no checkpoints for a job on a leaving
// node, and every version that lands at the destination before the final
// one leaves the final transfer only the last delta.
type presyncTarget struct {
	to   policy.NodeID // "": no push
	rate float64       // bytes/s (transfer.Unlimited: unpaced)
	// by, when not zero, is the final checkpoint's start: a push must land
	// before it, since the final step cancels a push still in flight and
	// the receiver drops a cancelled push's partial data.
	by time.Time
}

// standbyTarget is the job's usual target: its standby (the decided one,
// else the one on record) at presyncRate.
func standbyTarget(st *state.State, jd policy.JobDecision, id policy.JobID, from policy.NodeID) presyncTarget {
	to := jd.Standby
	if to == "" {
		to = st.Jobs[id].Standby
	}
	if to == "" || to == from {
		return presyncTarget{}
	}
	return presyncTarget{to: to, rate: presyncRate(st, jd, id, from, to)}
}

// handoffWaitTarget is the target during hand-off h's wait: its
// destination, at its flow's decided rate (unpaced with P3 off), else its
// final rate, until its final checkpoint's start.
func handoffWaitTarget(st *state.State, h policy.HandoffDecision, id policy.JobID, from policy.NodeID) presyncTarget {
	rate, fl := flowRate(st, handoffFlow(id), from, h.To)
	if fl == nil && paced(st) {
		rate = h.FinalRate
	}
	return presyncTarget{to: h.To, rate: rate, by: h.FinalStart}
}

// lands reports whether bytes sent from at at the target's rate arrive
// before its limit.
func (p presyncTarget) lands(bytes int64, at time.Time) bool {
	switch {
	case p.by.IsZero() || p.rate == transfer.Unlimited:
		return p.by.IsZero() || at.Before(p.by)
	case p.rate <= 0:
		return false
	}
	return at.Add(time.Duration(float64(bytes) / p.rate * float64(time.Second))).Before(p.by)
}

// maxWaitChange is the largest share of a version's bytes that may be new
// against the version before it for checkpoints in a hand-off's wait to
// pay: beyond it the final version shares little with a pre-synced one
// (a training job's weights change with every step; the campus's
// synthetic jobs write fresh random bytes), so a checkpoint in the wait
// would cost the job its write and the path a whole version without
// shrinking the final transfer.
const maxWaitChange = 0.5

// waitCheckpoint is nextCheckpoint during a hand-off's wait: the job
// checkpoints at its last decided interval (the leader decides none for a
// job on a leaving node) while consecutive versions share most of their
// bytes (changed, the new share of the last one, at most maxWaitChange),
// and only while that checkpoint, written in the slowest recent write
// time, and the push of a whole version of size bytes land at the
// destination before the final checkpoint's start with
// policy.FinalSafety's slack (writes on a loaded machine take several
// times their measured length): one still in flight there would delay the
// final checkpoint, and its push would be cancelled.
func waitCheckpoint(interval time.Duration, ckptBusy bool, lastCkpt time.Time, write time.Duration, size int64, changed float64, p presyncTarget) (time.Time, bool) {
	if interval <= 0 || ckptBusy || p.to == "" || changed > maxWaitChange {
		return time.Time{}, false
	}
	due := lastCkpt.Add(interval)
	if !p.lands(policy.FinalSafety*size, due.Add(policy.FinalSafety*write)) {
		return time.Time{}, false
	}
	return due, true
}

// changedShare is the share of version v's bytes in chunks that the
// newest older version in the store lacks (1 without one): how much of a
// version a pre-sync of the one before it leaves to send.
func changedShare(s *ckpt.Store, job policy.JobID, v uint64) float64 {
	var prev uint64
	for _, pv := range s.Versions(string(job)) {
		if pv < v {
			prev = max(prev, pv)
		}
	}
	fresh, total, ok := newBytes(s, job, prev, v)
	switch {
	case !ok:
		return 1
	case total == 0:
		return 0
	}
	return float64(fresh) / float64(total)
}

// newBytes returns the bytes of version v's chunks that version held
// lacks, and v's total; ok is false when the store lacks either manifest.
func newBytes(s *ckpt.Store, job policy.JobID, held, v uint64) (fresh, total int64, ok bool) {
	mf, err := s.Manifest(string(job), v)
	if err != nil {
		return 0, 0, false
	}
	pm, err := s.Manifest(string(job), held)
	if held == 0 || err != nil {
		return 0, 0, false
	}
	had := map[ckpt.Hash]bool{}
	for _, c := range pm.Chunks() {
		had[c.Hash] = true
	}
	for _, c := range mf.Chunks() {
		total += c.Size
		if !had[c.Hash] {
			fresh += c.Size
		}
	}
	return fresh, total, true
}

// recentDeltas is how many of the newest versions' changes finalDelta
// takes the largest of.
const recentDeltas = 3

// finalDelta is the bytes a checkpoint taken now would send a node that
// holds version held completely (docs/design.md P1.6, P3.8b): what the
// newest version here adds to held, plus the largest change between
// consecutive versions among the newest recentDeltas (the final
// checkpoint's own change, never below one measured), at most size, the
// checkpoint's size on record. It is the whole size when no change is
// measured (fewer than two versions here, or held is not here) or a
// version changed more than maxWaitChange of its bytes: versions then
// share little, and the final one will too.
func finalDelta(s *ckpt.Store, job policy.JobID, held uint64, size int64) int64 {
	vs := s.Versions(string(job))
	slices.Sort(vs)
	if len(vs) < 2 || !slices.Contains(vs, held) {
		return size
	}
	lack, _, ok := newBytes(s, job, held, vs[len(vs)-1])
	if vs[len(vs)-1] == held {
		lack, ok = 0, true
	}
	if !ok {
		return size
	}
	var most int64
	for i := len(vs) - 1; i >= 1 && i >= len(vs)-recentDeltas; i-- {
		fresh, total, ok := newBytes(s, job, vs[i-1], vs[i])
		if !ok || total > 0 && float64(fresh) > maxWaitChange*float64(total) {
			return size
		}
		most = max(most, fresh)
	}
	return max(0, min(size, lack+most))
}

// presyncReports is a worker loop's pre-sync reporting: the last report
// it tried, whether one is in flight, and the last finalDelta with what it
// was computed from (the loop runs on every state change; the delta
// changes only with a new version here or there, or a new size).
type presyncReports struct {
	last  state.Presync
	busy  atomic.Bool
	basis deltaBasis
	delta int64
}

// deltaBasis is what finalDelta's answer depends on: the version the
// target holds, the versions here (the oldest, the newest and how many),
// and the checkpoint's size.
type deltaBasis struct {
	held, oldest, newest uint64
	count                int
	size                 int64
}

// finalDelta returns finalDelta for the target holding held, computed
// again only when its basis changed.
func (r *presyncReports) finalDelta(s *ckpt.Store, job policy.JobID, held uint64, size int64) int64 {
	b := deltaBasis{held: held, size: size}
	if vs := s.Versions(string(job)); len(vs) > 0 {
		b.oldest, b.newest, b.count = vs[0], vs[len(vs)-1], len(vs)
	}
	if b != r.basis || b.count == 0 {
		r.basis, r.delta = b, finalDelta(s, job, held, size)
	}
	return r.delta
}

// reportPresync tells the leader what the job's pre-sync target to holds
// (state.JobReport.Presync): the freshest committed version, when to
// holds it, and finalDelta against it, so the leader times a hand-off's
// final checkpoint on the bytes to lacks (P3.8b). It submits, one at a
// time and without holding up the loop (a hand-off's final checkpoint
// waits on it), only what the job's record does not say yet and was not
// tried last: a report that lost a race with a newer version is made
// again for that one.
func (w *worker) reportPresync(ctx context.Context, st *state.State, to policy.NodeID, r *presyncReports) {
	m := w.m
	j, ok := st.Jobs[w.id]
	cp, committed := st.FreshestCommitted(w.id)
	if !ok || to == "" || j.Node != m.cfg.Node || !committed || !slices.Contains(cp.Holders, to) || r.busy.Load() {
		return
	}
	p := state.Presync{Node: to, Version: cp.Version, Delta: r.finalDelta(m.cfg.Store, w.id, cp.Version, j.CheckpointBytes)}
	if p == r.last || j.Standby == to && j.StandbyVersion == cp.Version && j.StandbyHas == j.CheckpointBytes-p.Delta {
		return
	}
	r.last = p
	r.busy.Store(true)
	w.wg.Go(func() {
		defer r.busy.Store(false)
		err := m.submit(ctx, state.JobReport{Job: w.id, Node: m.cfg.Node, Remaining: j.Remaining, Presync: p})
		switch {
		case err == nil:
			w.log.Info("pre-sync target's copy reported", "to", to, "version", p.Version, "delta", p.Delta, "checkpoint", j.CheckpointBytes)
		case errors.Is(err, state.ErrStalePresync) || errors.Is(err, state.ErrNotPresyncTarget):
			w.log.Debug("pre-sync report overtaken", "to", to, "version", p.Version, "err", err)
		case ctx.Err() == nil:
			w.noteErr(fmt.Errorf("report the pre-sync target's copy: %w", err))
		}
	})
}

// slowestCheckpoint is the slowest of the last requested checkpoints'
// write + local commit here.
func (w *worker) slowestCheckpoint() time.Duration {
	var d time.Duration
	w.set(func() { d = slices.Max(append([]time.Duration{0}, w.ckptTimes...)) })
	return d
}

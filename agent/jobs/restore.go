package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

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
		// Its bytes and their flow's rate count in the downtime limit.
		size, rate := cp.Size, 0.0
		if f, ok := st.Flow(policy.RestorePrefix + string(w.id)); ok {
			rate = f.Rate
		}
		w.set(func() { w.fetched, w.fetchRate = size, rate })
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

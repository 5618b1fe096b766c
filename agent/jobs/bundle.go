package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/transfer"
)

// A job's bundle (state.JobSpec.Bundle, docs/bundles.md) travels like its
// checkpoints: every node that holds it whole sends it to the nodes that
// need it (the job's node, its standby, the holders of its committed
// versions), and the receiver asks only for the chunks it lacks, so a
// bundle already there costs one manifest. The node that runs the job lays
// it out read-only as the job's working directory and starts nothing until
// it has the exact bundle.

// bundleResend is how long a bundle sent to the job's node counts as
// delivered: after it the holders offer it again (a corrupt chunk the
// layout found is removed from the receiver's store, and only a new offer
// brings it back).
const bundleResend = time.Minute

// bundlePoll is how often a worker waiting for its bundle looks again.
const bundlePoll = 200 * time.Millisecond

type bundleKey struct {
	id ckpt.BundleID
	to policy.NodeID
}

// bundleOf returns the bundle of a job record; ok is false for a job
// without one (or a record whose ID does not parse: state validates it).
func bundleOf(j state.JobRecord) (ckpt.BundleID, bool) {
	if j.Spec.Bundle == "" {
		return ckpt.BundleID{}, false
	}
	id, err := ckpt.ParseBundleID(j.Spec.Bundle)
	return id, err == nil
}

// BundleCommand returns argv with a program of the bundle ("./rel", as
// the record keeps it) made absolute inside layout, the bundle's layout on
// this node; other programs (python3, /usr/bin/env) stay as they are.
func BundleCommand(argv []string, layout string) []string {
	out := slices.Clone(argv)
	if len(out) > 0 && strings.HasPrefix(out[0], "./") {
		out[0] = filepath.Join(layout, filepath.FromSlash(out[0]))
	}
	return out
}

// bundleTargets lists the active nodes other than self that should hold
// job's bundle: its node, its standby and the holders of its committed
// versions, sorted.
func bundleTargets(st *state.State, id policy.JobID, self policy.NodeID) []policy.NodeID {
	j := st.Jobs[id]
	cands := []policy.NodeID{j.Node, jobDecision(st, id).Standby}
	for _, cp := range st.Checkpoints[id] {
		if cp.Committed {
			cands = append(cands, cp.Holders...)
		}
	}
	var out []policy.NodeID
	for _, n := range cands {
		if rec, ok := st.Nodes[n]; ok && n != self && rec.State == state.NodeActive && rec.TransferAddr != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// bundlePushes offers the bundles this node holds to the nodes that need
// them (bundleTargets), once per bundle and node (to the job's own node
// again after bundleResend). A first placement's copy to the job's node is
// a decided flow (policy.BundlePrefix): only its sender sends it, paced
// (pacedBundles); the other copies (to the standby and holders) go
// unpaced: a bundle is sent once per node, not per checkpoint. Called with
// m.mu held.
func (m *Manager) bundlePushes(ctx context.Context, st *state.State, wg *sync.WaitGroup) {
	m.pacedBundles(ctx, st, wg)
	now := m.cfg.Now()
	for _, id := range slices.Sorted(maps.Keys(st.Jobs)) {
		j := st.Jobs[id]
		b, ok := bundleOf(j)
		if !ok || j.State == policy.JobDone {
			continue
		}
		var have *bool
		for _, to := range bundleTargets(st, id, m.cfg.Node) {
			key := bundleKey{b, to}
			if f, ok := st.Flow(bundleFlow(id)); ok && f.To == to {
				continue // decided: its sender paces it
			}
			if _, ok := m.bundleFlows[pushKey{id, 0, to}]; ok {
				continue // the paced copy is still under way
			}
			if m.bundleBusy[key] {
				continue
			}
			if sent, ok := m.bundleSent[key]; ok && (to != j.Node || now.Sub(sent) < bundleResend) {
				continue
			}
			if have == nil {
				h := m.cfg.Store.HasBundle(b) == nil
				have = &h
			}
			if !*have {
				break
			}
			m.bundleBusy[key] = true
			addr := st.Nodes[to].TransferAddr
			wg.Go(func() {
				err := m.sendBundle(ctx, b, to, addr, nil)
				m.mu.Lock()
				delete(m.bundleBusy, key)
				if err == nil {
					m.bundleSent[key] = m.cfg.Now()
				}
				m.mu.Unlock()
				if err != nil && ctx.Err() == nil {
					m.log.Warn("bundle push failed", "job", id, "bundle", b.String(), "to", to, "err", err)
				}
			})
		}
	}
}

func bundleFlow(job policy.JobID) string { return policy.BundlePrefix + string(job) }

// pacedBundles carries out the decided bundle flows from this node (a
// first placement's copy to the job's node) at their rates, re-paced every
// period (unpaced with P3 off), and ends those no longer decided: a copy
// still under way stops, since the leader no longer counts it on its
// links (one the leader dropped as landed, while the job stays on its
// destination, runs to its end). A failed copy is retried on the next
// state change. It also notes the decided bundle flows to this node whose
// bundle is here, which FlowProgress reports done (the sender may not know
// yet). Called with m.mu held.
func (m *Manager) pacedBundles(ctx context.Context, st *state.State, wg *sync.WaitGroup) {
	decided := map[pushKey]policy.FlowDecision{}
	m.bundlesHere = m.bundlesHere[:0]
	for _, f := range st.Decisions.Flows {
		if !strings.HasPrefix(f.ID, policy.BundlePrefix) {
			continue
		}
		j, ok := st.Jobs[f.Job]
		b, has := bundleOf(j)
		if !ok || !has || j.State == policy.JobDone || j.Node != f.To {
			continue
		}
		switch m.cfg.Node {
		case f.From:
			decided[pushKey{f.Job, 0, f.To}] = f
		case f.To:
			if m.cfg.Store.HasBundle(b) == nil {
				m.bundlesHere = append(m.bundlesHere, f.ID)
			}
		}
	}
	for key, p := range m.bundleFlows {
		if _, ok := decided[key]; ok {
			continue
		}
		if !p.done {
			if j, ok := st.Jobs[key.job]; ok && j.State != policy.JobDone && j.Node == key.to {
				continue // dropped as landed (the receiver said so first): it ends by itself
			}
			p.cancel()
		}
		m.archiveLocked(p)
		delete(m.bundleFlows, key)
	}
	for _, key := range slices.SortedFunc(maps.Keys(decided), func(a, b pushKey) int { return cmp.Compare(a.job, b.job) }) {
		f := decided[key]
		rate := f.Rate
		if !paced(st) {
			rate = transfer.Unlimited
		}
		if p, ok := m.bundleFlows[key]; ok {
			if !p.done {
				m.repaceLocked(p, rate)
			}
			continue
		}
		b, _ := bundleOf(st.Jobs[key.job])
		addr := st.Nodes[key.to].TransferAddr
		if addr == "" || m.cfg.Store.HasBundle(b) != nil {
			continue
		}
		pctx, cancel := context.WithCancel(ctx)
		ps := &push{key: key, flow: f.ID, class: f.Class, rate: rate, started: m.cfg.Now(), cancel: cancel}
		m.bundleFlows[key] = ps
		wg.Go(func() {
			defer cancel()
			err := m.sendBundle(pctx, b, key.to, addr, ps)
			m.mu.Lock()
			ps.done, ps.err = true, err
			if err == nil {
				m.bundleSent[bundleKey{b, key.to}] = m.cfg.Now()
			} else if m.bundleFlows[key] == ps {
				m.archiveLocked(ps)
				delete(m.bundleFlows, key) // the next state change retries
			}
			m.mu.Unlock()
			if err != nil && pctx.Err() == nil {
				m.log.Warn("paced bundle push failed", "job", key.job, "bundle", b.String(), "to", key.to, "err", err)
			}
		})
	}
}

// sendBundle sends bundle b to node to: as ps's transfer (its class and
// rate, re-paced through ps) when ps is set, else unpaced.
func (m *Manager) sendBundle(ctx context.Context, b ckpt.BundleID, to policy.NodeID, addr string, ps *push) error {
	class, rate := policy.ClassPresync, transfer.Unlimited
	if ps != nil {
		class, rate = ps.class, ps.rate
	}
	tr, err := m.cfg.Client.Start(ctx, transfer.Request{Addr: addr, Node: string(to), JobID: ckpt.BundleKey(b), Version: 1,
		Class: class, Rate: rate})
	if err != nil {
		return fmt.Errorf("send bundle %s to %s: %w", b, to, err)
	}
	if ps != nil {
		m.mu.Lock()
		ps.tr = tr
		m.mu.Unlock()
	}
	if err := tr.Wait(); err != nil {
		return fmt.Errorf("send bundle %s to %s: %w", b, to, err)
	}
	return nil
}

// authorizeBundle accepts a bundle only while a job that is not done uses it.
func authorizeBundle(st *state.State, b ckpt.BundleID) error {
	for _, j := range st.Jobs {
		if id, ok := bundleOf(j); ok && id == b && j.State != policy.JobDone {
			return nil
		}
	}
	return fmt.Errorf("bundle %s: no job that is not done uses it", b)
}

// pinBundle holds bundle b in the local store for every job not done that
// uses it (one pin per job, named after it), so eviction keeps it.
func (m *Manager) pinBundle(st *state.State, b ckpt.BundleID) {
	for id, j := range st.Jobs {
		if bid, ok := bundleOf(j); ok && bid == b && j.State != policy.JobDone {
			if err := m.cfg.Store.Pin(ckpt.BundleKey(b), 1, string(id), time.Time{}); err != nil {
				m.log.Warn("pin bundle", "job", id, "bundle", b.String(), "err", err)
			}
		}
	}
}

// unpinBundle drops a finished job's pin on its bundle (the bundle stays
// while another job's pin holds it).
func (m *Manager) unpinBundle(id policy.JobID, j state.JobRecord) {
	if b, ok := bundleOf(j); ok {
		if err := m.cfg.Store.Unpin(ckpt.BundleKey(b), 1, string(id)); err != nil {
			m.log.Warn("unpin bundle", "job", id, "err", err)
		}
	}
}

// layoutBundle waits until the store holds the job's bundle whole and lays
// it out as the job's working directory (kept from an earlier start when
// it still matches). It returns only with the exact bundle laid out, or
// with ctx's end: a job whose bundle cannot be had here is never started.
func (w *worker) layoutBundle(ctx context.Context, b ckpt.BundleID) (string, error) {
	m := w.m
	dir := filepath.Join(w.dir(), "bundle")
	if _, err := os.Lstat(dir); err == nil {
		if m.cfg.Store.VerifyLayout(b, dir) == nil {
			return dir, nil
		}
		if err := ckpt.RemoveLayout(dir); err != nil {
			return "", fmt.Errorf("remove stale bundle layout: %w", err)
		}
	}
	waiting := time.Time{}
	poll := time.NewTicker(bundlePoll)
	defer poll.Stop()
	for {
		err := m.cfg.Store.HasBundle(b)
		if err == nil {
			if err = m.cfg.Store.LayoutBundle(b, dir); err == nil {
				return dir, nil
			}
			if !errors.Is(err, ckpt.ErrNoBundle) {
				return "", err
			}
		}
		now := m.cfg.Now()
		switch {
		case waiting.IsZero():
			waiting = now
			w.setState(StateFetching)
			w.log.Info("waiting for the job's bundle", "bundle", b.String())
		case now.Sub(waiting) >= m.cfg.FetchTimeout:
			w.noteErr(fmt.Errorf("bundle %s not here after %v: the job does not start here until it arrives (%v)", b, m.cfg.FetchTimeout, err))
			waiting = now
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-poll.C:
		case <-w.notify:
		}
	}
}

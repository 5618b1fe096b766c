package jobs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/reclaimnet/reclaimnet/agent/supervisor"
	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// What a job writes under RECLAIMNET_OUTPUT_DIR is part of each of its
// checkpoint versions (ckpt.OutputDir), restored with the checkpoint on
// whichever node resumes it, stored once more as an outputs-only version
// when the job exits 0, and kept on the job's holders for the job's Keep
// after it ends (docs/bundles.md).

// runDir is the supervisor's work directory for the job (Spec.WorkDir).
func (w *worker) runDir() string { return filepath.Join(w.dir(), "run") }

// outputDir is the job's output directory when it exists (the supervisor
// creates it at the first start here), else "".
func (w *worker) outputDir() string {
	d := supervisor.OutputDir(w.runDir())
	if st, err := os.Stat(d); err == nil && st.IsDir() {
		return d
	}
	return ""
}

// restoreOutputs replaces the job's output directory with the outputs of
// version v, the version it resumes from: what the job wrote after that
// version is lost with the rest of its unsaved work.
func (w *worker) restoreOutputs(v uint64) error {
	mf, err := w.m.cfg.Store.Manifest(string(w.id), v)
	if err != nil {
		return fmt.Errorf("restore outputs: %w", err)
	}
	out := supervisor.OutputDir(w.runDir())
	if err := os.RemoveAll(out); err != nil {
		return fmt.Errorf("restore outputs: %w", err)
	}
	return w.m.cfg.Store.RestoreCheckpoint(mf, "", out)
}

// finalOutputs stores the outputs of a job that exited 0, with its last
// checkpoint, as its last version and sends it to the standby, so that they outlive this node;
// before the job is reported done (a done job's versions are refused).
func (w *worker) finalOutputs(ctx context.Context) {
	// The last checkpoint's files come along (their chunks are stored
	// already), so the version kept is the job's last outputs and
	// checkpoint both.
	dir := ""
	if vs := w.m.cfg.Store.Versions(string(w.id)); len(vs) > 0 {
		dir = filepath.Join(w.dir(), fmt.Sprintf("final-%d", vs[len(vs)-1]))
		if err := os.RemoveAll(dir); err != nil {
			w.noteErr(fmt.Errorf("final outputs: %w", err))
			return
		}
		if err := w.m.cfg.Store.Restore(string(w.id), vs[len(vs)-1], dir); err != nil {
			w.noteErr(fmt.Errorf("final outputs: last checkpoint: %w", err))
			os.RemoveAll(dir)
			dir = ""
		}
	}
	v, err := w.commit(ctx, dir)
	if err != nil {
		w.noteErr(fmt.Errorf("final outputs: %w", err))
		return
	}
	res := make(chan pushResult, 1)
	st := w.latest()
	if p, _ := w.pushOrQueue(ctx, st, standbyTarget(st, jobDecision(st, w.id), w.id, w.m.cfg.Node), v, nil, 0, res); p == nil {
		return
	}
	select {
	case r := <-res:
		if r.err != nil {
			w.noteErr(fmt.Errorf("final outputs to the standby: %w", r.err))
		}
	case <-ctx.Done():
	}
}

// retire keeps an ended job's results: its newest version here (its last
// outputs and checkpoint) is kept for the job's Keep from that version's
// writing (the catalogue's time, so every holder and 'reclaimnet jobs'
// agree), and its pin on its bundle goes. A holder that receives a newer
// version after the job ended (the final outputs' copy still on its way
// when the end is committed) retains that one in turn, so every holder of
// the results keeps the version the state lists. Called with m.mu held.
func (m *Manager) retire(st *state.State, id policy.JobID, j state.JobRecord) {
	kept, retired := m.retired[id]
	if retired {
		// Look at the store again only once the state lists this node as
		// a holder of a newer version (every state change reconciles
		// every ended job).
		cps := st.Checkpoints[id]
		if len(cps) == 0 || cps[len(cps)-1].Version <= kept || !slices.Contains(cps[len(cps)-1].Holders, m.cfg.Node) {
			return
		}
	} else {
		m.unpinBundle(id, j)
		delete(m.live, id)
	}
	vs := m.cfg.Store.Versions(string(id))
	if len(vs) == 0 {
		if !retired {
			if err := m.cfg.Store.SetLive(string(id), false); err != nil {
				m.log.Warn("unpin finished job", "job", id, "err", err)
			}
			m.retired[id] = 0
		}
		return
	}
	v := vs[len(vs)-1]
	if retired && kept >= v {
		return
	}
	if slices.ContainsFunc(m.cfg.Store.Pins(string(id)), func(p ckpt.Pin) bool { return p.Name == ckpt.RetainPin && p.Version == v }) {
		m.retired[id] = v // retained before this process started
		return
	}
	written := m.cfg.Now()
	if cp, ok := st.CheckpointVersion(id, v); ok && !cp.Written.IsZero() {
		written = cp.Written
	} else if mf, err := m.cfg.Store.Manifest(string(id), v); err == nil {
		written = mf.Created
	}
	until := j.KeptUntil(written)
	if _, err := m.cfg.Store.Retain(string(id), until); err != nil {
		m.log.Warn("keep finished job's results", "job", id, "err", err)
		return
	}
	m.retired[id] = v
	m.log.Info("keeping finished job's results", "job", id, "version", v, "until", until)
}

// purge drops the results whose keep time passed.
func (m *Manager) purge() {
	dropped, err := m.cfg.Store.Purge(m.cfg.Now())
	if err != nil {
		m.log.Warn("purge expired results", "err", err)
	}
	for _, mf := range dropped {
		m.log.Info("purged an ended job's results", "job", mf.JobID, "version", mf.Version)
	}
}

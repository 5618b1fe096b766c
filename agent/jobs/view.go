package jobs

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/transfer"
)

// Job states a JobView reports.
const (
	StateStarting      = "starting"
	StateFetching      = "fetching"  // waiting for the freshest committed version to arrive
	StateRestoring     = "restoring" // writing a version into the restore directory
	StateRunning       = "running"
	StateCheckpointing = "checkpointing"
	StateHandingOff    = "handing-off"
	StateMoved         = "moved"
	StateDegraded      = "degraded" // stopped for recovery elsewhere
	StateExited        = "exited"
	StateFailed        = "failed"
	StateStopped       = "stopped"
)

const (
	reasonDegraded = "degraded"
	reasonExited   = "exited"
	reasonFailed   = "failed"
	reasonMoved    = "moved"
)

// push is one transfer this node sends.
type push struct {
	key     pushKey
	flow    string // the decided flow it carries (policy.FlowDecision.ID)
	class   policy.TrafficClass
	rate    float64 // assigned, bytes/s (transfer.Request.Rate)
	started time.Time
	cancel  context.CancelFunc
	tr      *transfer.Transfer
	done    bool
	err     error
}

// TransferView is one outgoing transfer.
type TransferView struct {
	Job     policy.JobID
	Version uint64
	To      policy.NodeID
	// Flow is the ID of the decided flow it carries
	// (policy.FlowDecision.ID: ckpt/, mig/, restore/, evac/, replica/ or
	// bundle/ and the job; Version is 0 for a bundle).
	Flow  string
	Class policy.TrafficClass
	// LocalPort is the transfer's UDP source port (the kernel flow key);
	// 0 until the transfer started.
	LocalPort int
	// AssignedRate is the pacing rate (bytes/s; transfer.Unlimited:
	// unpaced, 0: held at transfer.PausedRate); AchievedRate the bytes
	// sent (after compression) per second since the start.
	AssignedRate float64
	AchievedRate float64
	// BytesDone counts the chunk bytes sent (uncompressed); BytesTotal is
	// the version's size (an upper bound: chunks the receiver holds are not
	// sent).
	BytesDone  int64
	BytesTotal int64
	Started    time.Time
	Done       bool
	Err        string `json:",omitempty"`
}

// JobView is one job hosted (or last hosted) here, for the status page and
// the CLI.
type JobView struct {
	Job   policy.JobID
	State string
	// Interval and Bandwidth are the job's current P1 decision; Standby
	// where its checkpoints go.
	Interval  time.Duration
	Bandwidth float64
	Standby   policy.NodeID
	// LastVersion is the newest version in the catalogue, LastCommitted the
	// freshest committed one and Holders the nodes holding that one.
	LastVersion   uint64
	LastCommitted uint64
	Holders       []policy.NodeID
	// Restarts is the catalogue's count; RestoredFrom the version this
	// node's process resumed from (0: a fresh start); RestartTime the
	// measured start → ready time.
	Restarts     int
	RestoredFrom uint64
	RestartTime  time.Duration
	// CheckpointTime is the slowest of the last requested checkpoints'
	// write + local commit here; the leader's Tr includes it (a hand-off
	// writes one before its transfer can start).
	CheckpointTime time.Duration
	// Checkpoints and CheckpointFailures count this node's requests.
	Checkpoints        int
	CheckpointFailures int
	LastCheckpoint     time.Time
	LastError          string `json:",omitempty"`
	Transfers          []TransferView
}

func (p *push) view(now time.Time) TransferView {
	v := TransferView{Job: p.key.job, Version: p.key.version, To: p.key.to, Flow: p.flow, Class: p.class,
		AssignedRate: p.rate, Started: p.started, Done: p.done}
	if p.err != nil {
		v.Err = p.err.Error()
	}
	if p.tr != nil {
		s := p.tr.Stats()
		v.LocalPort = p.tr.LocalPort()
		v.BytesDone = s.RawBytes
		if mf := p.tr.Manifest(); mf != nil {
			v.BytesTotal = mf.TotalSize()
		}
		if el := now.Sub(p.started).Seconds(); el > 0 {
			v.AchievedRate = float64(s.WireBytes) / el
		}
	}
	return v
}

// View returns the jobs this node runs (or ran and still remembers), with
// the catalogue's figures, sorted by job.
func (m *Manager) View() []JobView {
	st := m.cfg.Coord.State()
	now := m.cfg.Now()
	m.mu.Lock()
	var out []JobView
	seen := map[policy.JobID]bool{}
	for id, w := range m.workers {
		out = append(out, w.view(now))
		seen[id] = true
	}
	var extra []TransferView
	for _, p := range m.pushes {
		extra = append(extra, p.view(now))
	}
	for _, p := range m.bundleFlows {
		extra = append(extra, p.view(now))
	}
	ended := maps.Clone(m.ended)
	m.mu.Unlock()
	for id, j := range st.Jobs {
		if seen[id] || j.Node != m.cfg.Node {
			continue
		}
		// A job that ended here by itself (done, failed) is listed while
		// its last run's view is kept; a cancelled one is not.
		v, ok := ended[id]
		if j.State == policy.JobDone && (!ok || j.End.Kind == state.EndCancelled) {
			continue
		}
		if !ok {
			v = JobView{Job: id, State: StateStopped}
		}
		out = append(out, v)
	}
	for i := range out {
		v := &out[i]
		j := st.Jobs[v.Job]
		v.Restarts = j.Restarts
		v.Standby = j.Standby
		for _, jd := range st.Decisions.Jobs {
			if jd.Job == v.Job {
				v.Interval, v.Bandwidth = jd.Interval, jd.Bandwidth
				if jd.Standby != "" {
					v.Standby = jd.Standby
				}
			}
		}
		if cps := st.Checkpoints[v.Job]; len(cps) > 0 {
			v.LastVersion = cps[len(cps)-1].Version
		}
		if cp, ok := st.FreshestCommitted(v.Job); ok {
			v.LastCommitted, v.Holders = cp.Version, cp.Holders
		}
		for _, t := range extra {
			if t.Job == v.Job {
				v.Transfers = append(v.Transfers, t)
			}
		}
	}
	slices.SortFunc(out, func(a, b JobView) int { return strings.Compare(string(a.Job), string(b.Job)) })
	return out
}

// Transfers returns the outgoing transfers this node knows: per hosted job
// the one in flight and the one before, and the recovery pushes it makes as
// a replica holder.
func (m *Manager) Transfers() []TransferView {
	now := m.cfg.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []TransferView
	for _, w := range m.workers {
		for _, p := range w.pushes {
			out = append(out, p.view(now))
		}
	}
	for _, p := range m.pushes {
		out = append(out, p.view(now))
	}
	for _, p := range m.bundleFlows {
		out = append(out, p.view(now))
	}
	slices.SortFunc(out, func(a, b TransferView) int { return a.Started.Compare(b.Started) })
	return out
}

// TransfersSince returns the transfers this node sent that started at or
// after t: those in flight or listed, and the finished ones it still
// remembers (the last pastTransfers), oldest first.
func (m *Manager) TransfersSince(t time.Time) []TransferView {
	var out []TransferView
	for _, v := range m.Transfers() {
		if !v.Started.Before(t) {
			out = append(out, v)
		}
	}
	m.mu.Lock()
	for _, v := range m.past {
		if !v.Started.Before(t) {
			out = append(out, v)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b TransferView) int { return a.Started.Compare(b.Started) })
	return out
}

// FlowProgress reports the admitted flows this node sends, for the leader's
// telemetry (raft.Telemetry.Flows): a flow's remaining bytes are its
// version's size minus what was sent, zero once the receiver committed.
func (m *Manager) FlowProgress() []state.FlowProgress {
	transfers := m.Transfers()
	var out []state.FlowProgress
	m.mu.Lock()
	for _, id := range m.bundlesHere {
		// A bundle flow to this node whose bundle is here (bundle.go).
		out = append(out, state.FlowProgress{ID: id, Done: true})
	}
	m.mu.Unlock()
	if len(transfers) == 0 {
		// Every node reports this each telemetry interval: most have
		// nothing in flight, and the state is a deep copy.
		return out
	}
	st := m.cfg.Coord.State()
	for _, t := range transfers {
		_, fl := flowRate(st, t.Flow, m.cfg.Node, t.To)
		if fl == nil {
			continue
		}
		rem := max(t.BytesTotal-t.BytesDone, 0)
		done := t.Done && t.Err == ""
		if done {
			rem = 0
		}
		out = append(out, state.FlowProgress{ID: fl.ID, Remaining: rem, Done: done})
	}
	return out
}

package raft

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// Index returns the log index of the last command that changed the state
// (0 for an empty state).
func (f *FSM) Index() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.index
}

// Changed returns a channel that is closed at the next change of the state.
// Read what you need after it closes, then call Changed again.
func (f *FSM) Changed() <-chan struct{} {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.changed
}

// WaitAfter blocks until the state's index is above after (or ctx ends) and
// returns the new index.
func (f *FSM) WaitAfter(ctx context.Context, after uint64) (uint64, error) {
	for {
		f.mu.RLock()
		idx, ch := f.index, f.changed
		f.mu.RUnlock()
		if idx > after {
			return idx, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return idx, ctx.Err()
		}
	}
}

// State returns a deep copy of the whole state.
func (f *FSM) State() *State {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.clone()
}

// Node returns one registry entry.
func (f *FSM) Node(id policy.NodeID) (NodeRecord, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n, ok := f.state.Nodes[id]
	return n.clone(), ok
}

// Nodes returns the registry sorted by ID.
func (f *FSM) Nodes() []NodeRecord {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]NodeRecord, 0, len(f.state.Nodes))
	for _, n := range f.state.Nodes {
		out = append(out, n.clone())
	}
	slices.SortFunc(out, func(a, b NodeRecord) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

// Job returns one job.
func (f *FSM) Job(id policy.JobID) (JobRecord, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	j, ok := f.state.Jobs[id]
	return j.clone(), ok
}

// Jobs returns all jobs sorted by ID.
func (f *FSM) Jobs() []JobRecord {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return sortedJobs(f.state)
}

func sortedJobs(s *State) []JobRecord {
	out := make([]JobRecord, 0, len(s.Jobs))
	for _, j := range s.Jobs {
		out = append(out, j.clone())
	}
	slices.SortFunc(out, func(a, b JobRecord) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

// Checkpoints returns the catalogue of one job, oldest version first.
func (f *FSM) Checkpoints(job policy.JobID) []Checkpoint {
	f.mu.RLock()
	defer f.mu.RUnlock()
	cps := f.state.Checkpoints[job]
	out := make([]Checkpoint, len(cps))
	for i, cp := range cps {
		out[i] = cp.clone()
	}
	return out
}

// FreshestCommitted returns the newest committed version of a job's
// checkpoint, if any.
func (f *FSM) FreshestCommitted(job policy.JobID) (Checkpoint, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.FreshestCommitted(job)
}

// Departures returns the departure log, oldest first.
func (f *FSM) Departures() []Departure {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Clone(f.state.Departures)
}

// Hazards returns the leader's published hazard estimates and when they
// were published.
func (f *FSM) Hazards() (map[policy.NodeID]policy.HazardEstimate, time.Time) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[policy.NodeID]policy.HazardEstimate, len(f.state.Hazards))
	for id, h := range f.state.Hazards {
		out[id] = cloneHazard(h)
	}
	return out, f.state.HazardsAt
}

// Reclaims returns the pending reclaims sorted by node.
func (f *FSM) Reclaims() []policy.Reclaim {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return sortedReclaims(f.state)
}

func sortedReclaims(s *State) []policy.Reclaim {
	out := make([]policy.Reclaim, 0, len(s.Reclaims))
	for _, r := range s.Reclaims {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b policy.Reclaim) int { return strings.Compare(string(a.Node), string(b.Node)) })
	return out
}

// ReclaimReports returns the reclaim history (copies), oldest first.
func (f *FSM) ReclaimReports() []ReclaimReport {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]ReclaimReport, len(f.state.ReclaimReports))
	for i, r := range f.state.ReclaimReports {
		out[i] = r.clone()
	}
	return out
}

// Decisions returns the current decisions.
func (f *FSM) Decisions() DecisionRecord {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Decisions.clone()
}

// RecordedProtocols returns the protocol settings the current decisions
// were made with and the leader that made them; ok is false before any
// leader recorded its own (all protocols on then).
func (f *FSM) RecordedProtocols() (p Protocols, leader policy.NodeID, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.Decisions.Protocols == nil {
		return DefaultProtocols(), f.state.Decisions.Leader, false
	}
	return *f.state.Decisions.Protocols, f.state.Decisions.Leader, true
}

// NodeView is what concerns one node: the jobs it hosts and their P1
// decisions, the flows it sends or receives, the placements onto it and
// the hand-offs from or to it.
type NodeView struct {
	Index      uint64
	Node       NodeRecord
	Jobs       []JobRecord // hosted here (running or migrating away)
	Intervals  []policy.JobDecision
	Flows      []policy.FlowDecision
	Placements []policy.Placement
	Handoffs   []policy.HandoffDecision
	Reclaim    *policy.Reclaim // pending reclaim of this node
	Hazard     policy.HazardEstimate
	DecidedAt  time.Time
}

// View returns what concerns node id, as one consistent copy.
func (f *FSM) View(id policy.NodeID) NodeView {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.state
	v := NodeView{Index: f.index, Node: s.Nodes[id], Hazard: cloneHazard(s.Hazards[id]), DecidedAt: s.Decisions.At}
	hosted := map[policy.JobID]bool{}
	for _, j := range sortedJobs(s) {
		if j.Node == id && j.State != policy.JobDone {
			v.Jobs = append(v.Jobs, j)
			hosted[j.ID] = true
		}
	}
	d := s.Decisions.clone()
	for _, jd := range d.Jobs {
		if hosted[jd.Job] {
			v.Intervals = append(v.Intervals, jd)
		}
	}
	for _, fl := range d.Flows {
		if fl.From == id || fl.To == id {
			v.Flows = append(v.Flows, fl)
		}
	}
	for _, p := range d.Placements {
		if p.To == id || p.From == id {
			v.Placements = append(v.Placements, p)
		}
	}
	for _, h := range d.Handoffs {
		if h.From == id || h.To == id {
			v.Handoffs = append(v.Handoffs, h)
		}
	}
	if r, ok := s.Reclaims[id]; ok {
		v.Reclaim = &r
	}
	return v
}

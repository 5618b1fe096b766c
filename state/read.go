package state

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// Index returns the log index of the last command that changed the state
// (0 for an empty state).
func (s *Store) Index() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.index
}

// Changed returns a channel that is closed at the next change of the state.
// Read what you need after it closes, then call Changed again.
func (s *Store) Changed() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.changed
}

// WaitAfter blocks until the state's index is above after (or ctx ends) and
// returns the new index.
func (s *Store) WaitAfter(ctx context.Context, after uint64) (uint64, error) {
	for {
		s.mu.RLock()
		idx, ch := s.index, s.changed
		s.mu.RUnlock()
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
func (s *Store) State() *State {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.state.clone()
}

// Node returns one registry entry.
func (s *Store) Node(id policy.NodeID) (NodeRecord, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n, ok := s.state.Nodes[id]
	return n.clone(), ok
}

// Nodes returns the registry sorted by ID.
func (s *Store) Nodes() []NodeRecord {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]NodeRecord, 0, len(s.state.Nodes))
	for _, n := range s.state.Nodes {
		out = append(out, n.clone())
	}
	slices.SortFunc(out, func(a, b NodeRecord) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

// Job returns one job.
func (s *Store) Job(id policy.JobID) (JobRecord, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	j, ok := s.state.Jobs[id]
	return j.clone(), ok
}

// Jobs returns all jobs sorted by ID.
func (s *Store) Jobs() []JobRecord {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.state.SortedJobs()
}

// SortedJobs returns copies of the jobs sorted by ID.
func (s *State) SortedJobs() []JobRecord {
	out := make([]JobRecord, 0, len(s.Jobs))
	for _, j := range s.Jobs {
		out = append(out, j.clone())
	}
	slices.SortFunc(out, func(a, b JobRecord) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

// Checkpoints returns the catalogue of one job, oldest version first.
func (s *Store) Checkpoints(job policy.JobID) []Checkpoint {
	s.mu.RLock()
	defer s.mu.RUnlock()
	cps := s.state.Checkpoints[job]
	out := make([]Checkpoint, len(cps))
	for i, cp := range cps {
		out[i] = cp.clone()
	}
	return out
}

// FreshestCommitted returns the newest committed version of a job's
// checkpoint, if any.
func (s *Store) FreshestCommitted(job policy.JobID) (Checkpoint, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.state.FreshestCommitted(job)
}

// Departures returns the departure log, oldest first.
func (s *Store) Departures() []Departure {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.state.Departures)
}

// Hazards returns the leader's published hazard estimates and when they
// were published.
func (s *Store) Hazards() (map[policy.NodeID]policy.HazardEstimate, time.Time) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[policy.NodeID]policy.HazardEstimate, len(s.state.Hazards))
	for id, h := range s.state.Hazards {
		out[id] = cloneHazard(h)
	}
	return out, s.state.HazardsAt
}

// Reclaims returns the pending reclaims sorted by node.
func (s *Store) Reclaims() []policy.Reclaim {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.state.SortedReclaims()
}

// SortedReclaims returns the pending reclaims sorted by node.
func (s *State) SortedReclaims() []policy.Reclaim {
	out := make([]policy.Reclaim, 0, len(s.Reclaims))
	for _, r := range s.Reclaims {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b policy.Reclaim) int { return strings.Compare(string(a.Node), string(b.Node)) })
	return out
}

// ReclaimReports returns the reclaim history (copies), oldest first.
func (s *Store) ReclaimReports() []ReclaimReport {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]ReclaimReport, len(s.state.ReclaimReports))
	for i, r := range s.state.ReclaimReports {
		out[i] = r.clone()
	}
	return out
}

// Decisions returns the current decisions.
func (s *Store) Decisions() DecisionRecord {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.state.Decisions.clone()
}

// RecordedProtocols returns the protocol settings the current decisions
// were made with and the leader that made them; ok is false before any
// leader recorded its own (all protocols on then).
func (s *Store) RecordedProtocols() (p Protocols, leader policy.NodeID, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.state.Decisions.Protocols == nil {
		return DefaultProtocols(), s.state.Decisions.Leader, false
	}
	return *s.state.Decisions.Protocols, s.state.Decisions.Leader, true
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
func (s *Store) View(id policy.NodeID) NodeView {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := s.state
	v := NodeView{Index: s.index, Node: st.Nodes[id], Hazard: cloneHazard(st.Hazards[id]), DecidedAt: st.Decisions.At}
	hosted := map[policy.JobID]bool{}
	for _, j := range st.SortedJobs() {
		if j.Node == id && j.State != policy.JobDone {
			v.Jobs = append(v.Jobs, j)
			hosted[j.ID] = true
		}
	}
	d := st.Decisions.clone()
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
	if r, ok := st.Reclaims[id]; ok {
		v.Reclaim = &r
	}
	return v
}

// PendingReason is why a waiting job (pending or recovering) has no node:
// the reason of the current decisions' placement without a node; empty
// when the job is not waiting or the leader has not decided on it yet.
func (s *State) PendingReason(job policy.JobID) string {
	j, ok := s.Jobs[job]
	if !ok || (j.State != policy.JobPending && j.State != policy.JobRecovering) {
		return ""
	}
	for _, p := range s.Decisions.Placements {
		if p.Job == job && p.To == "" {
			return p.Reason
		}
	}
	return ""
}

// NodeIneligible is why the leader's current decisions keep node out of
// placements, standbys and copies (policy.Ineligible); empty when they do
// not.
func (s *State) NodeIneligible(node policy.NodeID) string {
	for _, v := range s.Decisions.Ineligible {
		if v.Node == node {
			return v.Reason
		}
	}
	return ""
}

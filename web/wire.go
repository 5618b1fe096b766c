package web

import (
	"slices"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// The policy values /v1 shows (flows, reclaims, hand-offs, placements and
// their candidates), in /v1's snake_case with units in names. They keep
// policy's Go field names, so readers in Go use them as they would the
// policy values, and are converted here, at the edge, so policy stays free
// of any wire format.

// Flow is an admitted transfer flow (policy.FlowDecision, docs/design.md P3).
type Flow struct {
	ID   string        `json:"id"`
	Job  policy.JobID  `json:"job"`
	From policy.NodeID `json:"from"`
	To   policy.NodeID `json:"to"`
	// Class is the traffic class (policy.TrafficClass): emergency,
	// migration, presync or none.
	Class string `json:"class"`
	// Rate is the sender's pacing rate; Ceiling and Burst the kernel
	// enforcement bucket (0: none).
	Rate    float64 `json:"rate_bytes_per_s"`
	Ceiling float64 `json:"ceiling_bytes_per_s"`
	Burst   int64   `json:"burst_bytes"`
	// MinRate is r_min from the flow's start (P3.4b).
	MinRate float64 `json:"min_rate_bytes_per_s"`
	// Start is when the flow may start; Deadline is zero for pre-sync and
	// periodic checkpoints.
	Start    time.Time `json:"start,omitzero"`
	Deadline time.Time `json:"deadline,omitzero"`
	// Links are the links the flow crosses.
	Links []string `json:"links"`
}

// WebFlow is f as /v1 shows it.
func WebFlow(f policy.FlowDecision) Flow {
	return Flow{ID: f.ID, Job: f.Job, From: f.From, To: f.To, Class: f.Class.String(), Rate: f.Rate,
		Ceiling: f.Ceiling, Burst: f.Burst, MinRate: f.MinRate, Start: f.Start, Deadline: f.Deadline,
		Links: nonNil(slices.Clone(f.Links))}
}

// Reclaim is an owner's reclaim of a node (policy.Reclaim).
type Reclaim struct {
	Node      policy.NodeID `json:"node"`
	Announced time.Time     `json:"announced"`
	// Deadline is when the node leaves; equal to Announced for an
	// emergency (no notice).
	Deadline time.Time `json:"deadline"`
	// Incarnation is the start of the node's membership the reclaim
	// belongs to (absent when unknown): the node coming back with a later
	// one ends it.
	Incarnation time.Time `json:"incarnation,omitzero"`
}

// WebReclaim is r as /v1 shows it.
func WebReclaim(r policy.Reclaim) Reclaim {
	return Reclaim{Node: r.Node, Announced: r.Announced, Deadline: r.Deadline, Incarnation: r.Incarnation}
}

// Emergency reports whether the reclaim gave no notice.
func (r Reclaim) Emergency() bool { return !r.Deadline.After(r.Announced) }

// Candidate is one node P2 scored for a job, or rejected with a reason
// (policy.Candidate, docs/design.md P2.5).
type Candidate struct {
	Node policy.NodeID `json:"node"`
	// Score is σ_d (lower is better); Transfer, Survival and Remigration
	// its parts: C/bw, S_d(Trem) and T̄mig(d); Bottleneck is bw(s,d).
	Score       float64       `json:"score_s"`
	Transfer    time.Duration `json:"transfer_ns"`
	Survival    float64       `json:"survival"`
	Remigration time.Duration `json:"remigration_ns"`
	Bottleneck  float64       `json:"bottleneck_bytes_per_s"`
	// Rejected says why P2 did not score the node; empty for a scored one.
	Rejected string `json:"rejected,omitempty"`
}

// webCandidates is cs as /v1 shows them ([] when none).
func webCandidates(cs []policy.Candidate) []Candidate {
	out := make([]Candidate, len(cs))
	for i, c := range cs {
		out[i] = Candidate{Node: c.Node, Score: c.Score, Transfer: c.Transfer, Survival: c.Survival,
			Remigration: c.Remigration, Bottleneck: c.Bottleneck, Rejected: string(c.Rejected)}
	}
	return out
}

// Handoff is the plan for a job on a node with a pending reclaim
// (policy.HandoffDecision, docs/design.md P1.6, P2, P3.8).
type Handoff struct {
	Job  policy.JobID  `json:"job"`
	From policy.NodeID `json:"from"`
	// To is the destination; empty when the hand-off is infeasible.
	To policy.NodeID `json:"to,omitempty"`
	// FinalCheckpoint: a zero-loss final checkpoint is ordered (P1.6
	// feasible); otherwise the job recovers from its freshest replica.
	FinalCheckpoint bool `json:"final_checkpoint"`
	// Bytes is what the destination still lacks.
	Bytes    int64     `json:"lacked_bytes"`
	Deadline time.Time `json:"deadline"`
	// FinalStart is when the final checkpoint starts (zero: at once);
	// FinalRate the final transfer's rate.
	FinalStart time.Time `json:"final_start,omitzero"`
	FinalRate  float64   `json:"final_rate_bytes_per_s,omitempty"`
	// Degraded: the job recovers from an older replica, Reason says why.
	Degraded   bool        `json:"degraded"`
	Reason     string      `json:"reason,omitempty"`
	Candidates []Candidate `json:"candidates"`
}

// WebHandoff is h as /v1 shows it.
func WebHandoff(h policy.HandoffDecision) *Handoff {
	return &Handoff{Job: h.Job, From: h.From, To: h.To, FinalCheckpoint: h.FinalCheckpoint, Bytes: h.Bytes,
		Deadline: h.Deadline, FinalStart: h.FinalStart, FinalRate: h.FinalRate, Degraded: h.Degraded,
		Reason: h.Reason, Candidates: webCandidates(h.Candidates)}
}

// Admitted reports whether the hand-off goes ahead: a destination, and
// not degraded (policy.HandoffDecision.Admitted).
func (h *Handoff) Admitted() bool { return h.To != "" && !h.Degraded }

// Placement puts a pending or recovering job on a node (policy.Placement,
// docs/design.md P2.6).
type Placement struct {
	Job policy.JobID `json:"job"`
	// To is the chosen node; empty when none could take the job (Reason).
	To policy.NodeID `json:"to,omitempty"`
	// From is the replica holder the job restores from (empty for a new
	// job or a restart from the beginning).
	From policy.NodeID `json:"from,omitempty"`
	// Recovery: the job restores from a replica, or restarts from the
	// beginning with From empty because no replica survives.
	Recovery   bool        `json:"recovery"`
	Reason     string      `json:"reason,omitempty"`
	Candidates []Candidate `json:"candidates"`
}

// WebPlacement is p as /v1 shows it.
func WebPlacement(p policy.Placement) *Placement {
	return &Placement{Job: p.Job, To: p.To, From: p.From, Recovery: p.Recovery, Reason: p.Reason,
		Candidates: webCandidates(p.Candidates)}
}

package web

import (
	"context"
	"slices"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// Units, everywhere in this file and in the JSON it produces: sizes in bytes,
// rates in bytes per second, hazards in events per second (1/s), durations
// as time.Duration (integer nanoseconds in JSON, keys ending in _ns), times
// as RFC 3339. Every key is snake_case: policy values are shown through
// this package's own types (wire.go), never serialised as policy's Go
// structs.

// Source is what the agent implements: the node's current view of the
// cluster. Status must return a value the caller owns: web fills derived
// fields into it and reads it without locks, so it must not share slices or
// pointers that the agent keeps mutating.
type Source interface {
	Status(ctx context.Context) (Status, error)
}

// Status is everything the page, the JSON API and the metrics show, as one
// node sees it at GeneratedAt.
type Status struct {
	// GeneratedAt is when the source took this view; web fills it with the
	// current time when zero. Ages and countdowns are measured from it.
	GeneratedAt time.Time `json:"generated_at"`
	// Node is the node serving this page.
	Node policy.NodeID `json:"node"`
	// Version is the agent's build version.
	Version   string     `json:"version,omitempty"`
	Cluster   Cluster    `json:"cluster"`
	Jobs      []Job      `json:"jobs"`
	Transfers []Transfer `json:"transfers"`
	Reclaims  Reclaims   `json:"reclaims"`
	Decisions []Decision `json:"decisions"`
	Control   Control    `json:"control"`
	Counters  Counters   `json:"counters"`
	// Sandbox is how the node serving this page runs guest jobs.
	Sandbox Sandbox `json:"sandbox"`
	// CoDeparture lists the node pairs most likely to leave together,
	// highest first (at most MaxNodePairs).
	CoDeparture []NodePair `json:"co_departure"`
	// CoDepartureWindow is how close two departures count as together.
	CoDepartureWindow time.Duration `json:"co_departure_window_ns"`
}

// MaxNodePairs bounds Status.CoDeparture.
const MaxNodePairs = 10

// Sandbox says how a node runs guest jobs (docs/sandbox.md).
type Sandbox struct {
	// Mode is "on" (confined) or "off" (the operator runs jobs
	// unconfined, as the agent's user).
	Mode string `json:"mode"`
	// Available is false when the sandbox is on but cannot confine jobs
	// here: the node then refuses every job (Summary says why).
	Available bool `json:"available"`
	// Summary says it in words, as the agent's log does.
	Summary string `json:"summary"`
}

// Cluster is membership, leadership, hazard and bandwidth.
type Cluster struct {
	// Name is the cluster's name (the gossip label), if set.
	Name string `json:"name,omitempty"`
	// Leader is the Raft leader; empty while there is none.
	Leader  policy.NodeID `json:"leader"`
	Members []Member      `json:"members"`
	// Hazard is the cluster-wide time-of-day emergency profile (λ̂⁺ by
	// bucket, 1/s) that node factors scale; empty when not yet estimated.
	Hazard HazardProfile `json:"hazard"`
	// Bandwidth is the available bandwidth between buildings (the smoothed
	// estimate and its lower confidence bound), one entry per ordered pair.
	Bandwidth []BuildingBandwidth `json:"bandwidth"`
	// Protocols are the protocol switches in force (the paper's ablation).
	Protocols Protocols `json:"protocols"`
}

// NodePair is two nodes and how likely they leave together (docs/design.md P2.7):
// the chance that one leaves within Window of the other's departure, from
// the departure log with the domain they share (building, lab, pool) as
// the prior.
type NodePair struct {
	A      policy.NodeID `json:"a"`
	B      policy.NodeID `json:"b"`
	P      float64       `json:"p"`
	Domain string        `json:"domain"`
}

// Protocols are the protocol switches the leader decides with, which
// apply to the whole cluster, next to this node's own setting (used when
// it leads).
type Protocols struct {
	P1 bool `json:"p1"`
	P2 bool `json:"p2"`
	P3 bool `json:"p3"`
	// FixedInterval is every job's interval while P1 is off.
	FixedInterval time.Duration `json:"fixed_interval_ns"`
	// Summary says it in words ("p1,p3 (P2 off: random destination)").
	Summary string `json:"summary"`
	// DecidedBy is the leader that recorded them; empty before any did
	// (all on).
	DecidedBy policy.NodeID `json:"decided_by,omitempty"`
	// Local is this node's own setting in the same words; Agree is set
	// when it equals the one in force.
	Local string `json:"local"`
	Agree bool   `json:"agree"`
}

// MemberState is a member's gossip state.
type MemberState string

// Member states (memberlist's, plus "leaving" while a reclaim is pending).
const (
	MemberAlive   MemberState = "alive"
	MemberSuspect MemberState = "suspect"
	MemberLeaving MemberState = "leaving"
	MemberDead    MemberState = "dead"
	MemberLeft    MemberState = "left"
)

// RaftRole is a node's place in the Raft configuration.
type RaftRole string

// Raft roles. RaftNone is a gossip-only node (not in the configuration).
const (
	RaftLeader    RaftRole = "leader"
	RaftFollower  RaftRole = "follower"
	RaftCandidate RaftRole = "candidate"
	RaftNonvoter  RaftRole = "nonvoter"
	RaftNone      RaftRole = "none"
)

// raftRoles lists every role, for the metric's state set.
var raftRoles = []RaftRole{RaftLeader, RaftFollower, RaftCandidate, RaftNonvoter, RaftNone}

// KillSwitchMode is the state of a node's BPF kill-switch (docs/design.md P3.7).
type KillSwitchMode string

// Kill-switch modes.
const (
	KillSwitchOff  KillSwitchMode = "off"
	KillSwitchSoft KillSwitchMode = "soft" // new connections dropped
	KillSwitchHard KillSwitchMode = "hard" // anything to a protected port dropped
)

var killSwitchModes = []KillSwitchMode{KillSwitchOff, KillSwitchSoft, KillSwitchHard}

// Member is one node of the cluster.
type Member struct {
	ID       policy.NodeID `json:"id"`
	Building string        `json:"building"`
	// Addr is the gossip address (host:port).
	Addr     string      `json:"addr,omitempty"`
	State    MemberState `json:"state"`
	RaftRole RaftRole    `json:"raft_role"`
	GPU      GPU         `json:"gpu"`
	GPUs     int         `json:"gpus"`
	FreeGPUs int         `json:"free_gpus"`
	// Load is the node's load, 0..1 (P2's θ applies to it).
	Load float64 `json:"load"`
	// Hazard is the node's current emergency hazard λ̂⁺, 1/s (the value of
	// HazardProfile at GeneratedAt, as the leader published it).
	Hazard float64 `json:"hazard_per_s"`
	// HazardProfile is the node's λ̂⁺ over the day, UTC.
	HazardProfile HazardProfile  `json:"hazard_profile"`
	KillSwitch    KillSwitchMode `json:"kill_switch"`
	// KillSwitchDrops counts packets the kill-switch dropped since the
	// node's agent started.
	KillSwitchDrops uint64 `json:"kill_switch_drops"`
	// Storage is set on a storage-role node: it keeps checkpoints, hosts
	// no jobs and is never lent or reclaimed.
	Storage bool `json:"storage,omitempty"`
	// Eligible says whether the node may take jobs, standbys and copies
	// (policy.Ineligible, as the leader last applied it); IneligibleReason
	// why not.
	Eligible         bool   `json:"eligible"`
	IneligibleReason string `json:"ineligible_reason,omitempty"`
	// Lending is what the node's owner policy publishes: its lending
	// windows, its state (lent, reclaiming, owner active, reclaimed, ...)
	// and its next planned reclaim (Until) or when it may be lent again
	// (From); nil when it publishes nothing.
	Lending *Lending `json:"lending,omitempty"`
}

// Lending is a node's lending as its owner policy publishes it.
type Lending struct {
	Windows string    `json:"windows"`
	State   string    `json:"state,omitempty"`
	Until   time.Time `json:"until,omitzero"`
	From    time.Time `json:"from,omitzero"`
}

// BuildingBandwidth is the bandwidth available to migration from one
// building to another (docs/design.md P1.7), bytes/s.
type BuildingBandwidth struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Available is the smoothed estimate B̂, AvailableLow its lower
	// confidence bound B̂⁻ (used for deadline checks), Capacity the
	// configured or probed capacity (0 when unknown).
	Available    float64 `json:"available_bytes_per_s"`
	AvailableLow float64 `json:"available_low_bytes_per_s"`
	Capacity     float64 `json:"capacity_bytes_per_s,omitempty"`
	// Basis is what the figures rest on: BandwidthMeasured,
	// BandwidthDeclared or BandwidthAssumed.
	Basis string `json:"basis"`
}

// What a bandwidth figure rests on.
const (
	// BandwidthMeasured: the nodes' own estimates (docs/design.md P1.7).
	BandwidthMeasured = "measured"
	// BandwidthDeclared: a capacity the operator declared
	// (--uplink-capacity), taken as free; nothing measures it.
	BandwidthDeclared = "declared"
	// BandwidthAssumed: a default capacity nobody measured or declared
	// (1 Gbit/s access, 10 Gbit/s uplink).
	BandwidthAssumed = "assumed"
)

// Job is one training job.
type Job struct {
	ID policy.JobID `json:"id"`
	// State is the replicated state (state.JobRecord.StateName):
	// pending, running, migrating, recovering, done, failed, cancelled.
	State string `json:"state"`
	// UnderWay is what is under way beside the state (state.UnderWay):
	// checkpointing or restoring for a running job, handing off for a
	// migrating one, recovering for a recovering one; empty when nothing.
	UnderWay string `json:"under_way,omitempty"`
	// Reason says why a pending or recovering job has no node (the
	// leader's placement without one); empty otherwise.
	Reason string        `json:"reason,omitempty"`
	Node   policy.NodeID `json:"node,omitempty"`
	GPUs   int           `json:"gpus"`
	// CheckpointBytes is C, the size of one checkpoint.
	CheckpointBytes int64 `json:"checkpoint_bytes"`
	// LossBudget is Lmax, the tolerated expected loss per emergency.
	LossBudget time.Duration `json:"loss_budget_ns"`
	// Standby receives background pre-sync; StandbyHas bytes of the
	// current state are already there.
	Standby    policy.NodeID `json:"standby,omitempty"`
	StandbyHas int64         `json:"standby_has_bytes,omitempty"`
	// Restarts counts the job's restarts (moves and recoveries).
	Restarts int `json:"restarts"`
	// Replicas is k, how many nodes other than the host should keep the
	// job's freshest committed checkpoint (run --replicas, docs/design.md P2.7).
	Replicas int `json:"replicas"`
	// Decision is P1's current decision for the job: the interval and why
	// (hazard, bandwidth, loss-budget flag), the holders P2 keeps its
	// freshest version on and the chance they all leave with the host.
	// Nil when there is none yet.
	Decision *JobDecision `json:"decision"`
	// Box is P1.5's interval box from Decision (derived: web fills it);
	// nil without a decision.
	Box *IntervalBox `json:"interval_box"`
	// LastCheckpoint is the freshest committed checkpoint; nil if none.
	LastCheckpoint *Checkpoint `json:"last_checkpoint"`
	// Failures counts the job's application failures across nodes;
	// MaxFailures is how many it may have before it is failed.
	Failures    int `json:"failures"`
	MaxFailures int `json:"max_failures"`
	// LastExit is how its newest run that ended by itself ended.
	LastExit *JobExit `json:"last_exit,omitempty"`
	// EndedAt is when a done, failed or cancelled job ended (zero when
	// not known); CancelledBy who cancelled it.
	EndedAt     time.Time `json:"ended_at,omitzero"`
	CancelledBy string    `json:"cancelled_by,omitempty"`
	// BundleBytes is the size of the job's bundle (its code and data,
	// docs/bundles.md); 0: none.
	BundleBytes int64 `json:"bundle_bytes,omitempty"`
	// Results are an ended job's kept results; nil for a job that has not
	// ended or has none.
	Results *Results `json:"results,omitempty"`
}

// Results are where an ended job's outputs and last checkpoint are kept
// (reclaimnet fetch) and until when.
type Results struct {
	Version uint64          `json:"version"`
	Holders []policy.NodeID `json:"holders"`
	// KeptUntil is when the holders purge them; zero when unknown.
	KeptUntil time.Time `json:"kept_until,omitzero"`
}

// JobExit is how one run of a job ended (state.JobExit).
type JobExit struct {
	Node     policy.NodeID `json:"node"`
	At       time.Time     `json:"at"`
	ExitCode int           `json:"exit_code"`
	Signal   string        `json:"signal,omitempty"`
	Reason   string        `json:"reason,omitempty"`
	// Description says it in words: "exit 3", "signal killed (out of
	// memory)".
	Description string   `json:"description"`
	LogTail     []string `json:"log_tail,omitempty"`
}

// HazardProfile is a time-of-day hazard (policy.HazardProfile in /v1's
// snake_case): Rates[k] is the rate, events per second, in bucket k of
// equal width covering one UTC day.
type HazardProfile struct {
	Rates []float64 `json:"rates_per_s"`
}

// GPU is one kind of GPU on a node (policy.GPU in /v1's snake_case, units
// in names).
type GPU struct {
	Model      string  `json:"model"`
	VRAM       int64   `json:"vram_bytes"`
	Capability float64 `json:"capability"`
}

// WebGPU is policy.GPU as /v1 shows it.
func WebGPU(g policy.GPU) GPU { return GPU{Model: g.Model, VRAM: g.VRAM, Capability: g.Capability} }

// JobDecision is P1's decision for one job (policy.JobDecision in /v1's
// snake_case, units in names).
type JobDecision struct {
	Bandwidth            float64         `json:"bandwidth_bytes_per_s"`
	Interval             time.Duration   `json:"interval_ns"`
	LossBudgetInfeasible bool            `json:"loss_budget_infeasible"`
	Bound                string          `json:"bound"`
	Floor                time.Duration   `json:"floor_ns"`
	Ceiling              time.Duration   `json:"ceiling_ns"`
	Hazard               float64         `json:"hazard_per_s"`
	Standby              policy.NodeID   `json:"standby,omitempty"`
	Holders              []policy.NodeID `json:"holders,omitempty"`
	Risk                 float64         `json:"risk"`
}

// WebJobDecision is d as /v1 shows it.
func WebJobDecision(d policy.JobDecision) *JobDecision {
	return &JobDecision{Bandwidth: d.Bandwidth, Interval: d.Interval, LossBudgetInfeasible: d.LossBudgetInfeasible,
		Bound: d.Bound.String(), Floor: d.Floor, Ceiling: d.Ceiling, Hazard: d.Hazard, Standby: d.Standby,
		Holders: slices.Clone(d.Holders), Risk: d.Risk}
}

// IntervalBox is the box P1.5 clips a job's interval to (docs/design.md
// P1.5): the network floor C/(β·b), below which checkpoints would take
// more than β of the job's bandwidth, and the loss-budget ceiling 2·Lmax.
type IntervalBox struct {
	Floor time.Duration `json:"floor_ns"`
	// Ceiling is 0 for a job without a loss budget.
	Ceiling time.Duration `json:"ceiling_ns"`
	// Bound names what set the interval (policy.IntervalBound): optimum,
	// network floor, loss budget, first, now or none.
	Bound string `json:"bound"`
	// BudgetUnmet is set when the floor is above the ceiling: at its
	// bandwidth the job cannot checkpoint often enough to meet its loss
	// budget, and the floor wins (the budget is the bound that gives, so
	// checkpoints never take the share of other jobs and research
	// traffic). Shortfall is Floor − Ceiling then.
	BudgetUnmet bool          `json:"budget_unmet"`
	Shortfall   time.Duration `json:"shortfall_ns,omitempty"`
}

// Checkpoint is a committed checkpoint version of a job.
type Checkpoint struct {
	Version     uint64    `json:"version"`
	Bytes       int64     `json:"bytes"`
	CommittedAt time.Time `json:"committed_at"`
	// Holders are the nodes holding this version completely.
	Holders []policy.NodeID `json:"holders"`
	// Age is GeneratedAt − CommittedAt (derived: web fills it).
	Age time.Duration `json:"age_ns"`
}

// Transfer is a checkpoint transfer in flight.
type Transfer struct {
	// Flow is P3's decision for the flow: class, assigned rate, ceiling,
	// deadline (zero for pre-sync), links.
	Flow Flow `json:"flow"`
	// Class is Flow.Class: emergency, migration, presync.
	Class string `json:"class"`
	// Achieved is the rate the sender measured over its last seconds.
	Achieved   float64 `json:"achieved_bytes_per_s"`
	BytesDone  int64   `json:"bytes_done"`
	BytesTotal int64   `json:"bytes_total"`
	// TimeLeft is (BytesTotal − BytesDone) / Achieved; nil while nothing
	// has been measured (derived: web fills it).
	TimeLeft *time.Duration `json:"time_left_ns"`
	// UntilDeadline is Flow.Deadline − GeneratedAt; nil without a deadline
	// (derived).
	UntilDeadline *time.Duration `json:"until_deadline_ns"`
	// Late is set when TimeLeft exceeds UntilDeadline (derived).
	Late bool `json:"late"`
}

// Reclaims are pending and past reclaims and the nodes' kill-switches.
type Reclaims struct {
	Pending []PendingReclaim `json:"pending"`
	// History is newest first.
	History []ReclaimRecord `json:"history"`
}

// PendingReclaim is a reclaim whose node has not left yet.
type PendingReclaim struct {
	Reclaim Reclaim `json:"reclaim"`
	// Jobs are the jobs that must leave the node.
	Jobs []policy.JobID `json:"jobs"`
	// Remaining is Reclaim.Deadline − GeneratedAt, never below 0
	// (derived: web fills it).
	Remaining time.Duration `json:"remaining_ns"`
	// Emergency is Reclaim.Emergency() (derived).
	Emergency bool `json:"emergency"`
}

// ReclaimRecord is a finished reclaim with the report its owner got.
type ReclaimRecord struct {
	Reclaim   Reclaim `json:"reclaim"`
	Emergency bool    `json:"emergency"` // derived
	// Released is when the node was free of ReclaimNet work.
	Released time.Time `json:"released"`
	// OnTime is set when Released was not after Reclaim.Deadline.
	OnTime bool `json:"on_time"`
	// Jobs is the owner's report: what happened to each job.
	Jobs []ReclaimOutcome `json:"jobs"`
	// Detected is set when the cluster found the departure by failure
	// detection; OwnerReport when the owner's report reached the cluster
	// (an emergency's may arrive later, when the agent starts again).
	Detected    bool `json:"detected"`
	OwnerReport bool `json:"owner_report"`
	// Graceful: a departure without a reclaim whose node announced its
	// leave (its agent was stopped) instead of failing.
	Graceful bool `json:"graceful,omitempty"`
}

// ReclaimOutcome is what happened to one job in a reclaim.
type ReclaimOutcome struct {
	Job policy.JobID  `json:"job"`
	To  policy.NodeID `json:"to,omitempty"`
	// Replica is the node the job restored from (a recovery; empty for a
	// hand-off or a restart without any replica) and Version the
	// checkpoint version the job started from (zero when none).
	Replica policy.NodeID `json:"replica,omitempty"`
	Version uint64        `json:"version,omitempty"`
	// FinalCheckpoint is set when a zero-loss final checkpoint was taken;
	// Degraded when the job recovered from an older replica, with Reason.
	FinalCheckpoint bool   `json:"final_checkpoint"`
	Degraded        bool   `json:"degraded"`
	Reason          string `json:"reason,omitempty"`
	// WorkLost is the training time lost. Downtime is how long the job
	// computed nowhere: from its stop (a hand-off's final checkpoint, a
	// departure or an emergency command) until it was ready again on To;
	// zero while that is not known, with Resuming set while the job is
	// placed but has not reported its readiness.
	WorkLost time.Duration `json:"work_lost_ns"`
	Downtime time.Duration `json:"downtime_ns"`
	Resuming bool          `json:"resuming,omitempty"`
	// DowntimeLimit is what the downtime cannot beat (design P3.8d: bytes
	// lacked ÷ path rate + Tr + one control period, or + the detection
	// time for a recovery); 0 when not known.
	DowntimeLimit time.Duration `json:"downtime_limit_ns,omitempty"`
	// Where a recovery's downtime went, from the departure: detection (to
	// the cluster's record of it), placement (to the placement decision),
	// restore (to the checkpoint restored on the new node) and start (to
	// the job's first step there). A hand-off has restore and start only.
	Detection time.Duration `json:"detection_ns,omitempty"`
	Placement time.Duration `json:"placement_ns,omitempty"`
	Restore   time.Duration `json:"restore_ns,omitempty"`
	Start     time.Duration `json:"start_ns,omitempty"`
}

// DecisionKind says what a Decision chose.
type DecisionKind string

// Decision kinds.
const (
	DecisionHandoff   DecisionKind = "handoff"
	DecisionPlacement DecisionKind = "placement"
)

// Decision is one placement or hand-off from a control period, with the
// ranked candidates and the reasons the others were rejected (docs/design.md P2).
// Exactly one of Handoff and Placement is set.
type Decision struct {
	At        time.Time    `json:"at"`
	Kind      DecisionKind `json:"kind"`
	Handoff   *Handoff     `json:"handoff,omitempty"`
	Placement *Placement   `json:"placement,omitempty"`
}

// Control is the leader's last control period.
type Control struct {
	// LastTick is when the decisions shown were made.
	LastTick time.Time `json:"last_tick"`
	// CheckpointBudget is Bckpt (policy.Decisions.CheckpointBudget).
	CheckpointBudget float64 `json:"checkpoint_budget_bytes_per_s"`
	// RefusedDecision is why the state machine refused the leader's last
	// decisions (a policy bug; empty while they commit), RefusedAt when:
	// the decisions shown are then older than the control period.
	RefusedDecision string    `json:"refused_decision,omitempty"`
	RefusedAt       time.Time `json:"refused_at,omitzero"`
}

// Counters are cumulative counts since the cluster's state began (they
// come from the replicated state, so they survive agent restarts).
type Counters struct {
	// AdmittedMigrations and RejectedMigrations count hand-off decisions
	// as first made: with a destination, or degraded (state.Counters).
	AdmittedMigrations uint64 `json:"admitted_migrations"`
	RejectedMigrations uint64 `json:"rejected_migrations"`
	// Handoffs counts hand-offs committed with their final checkpoint;
	// DegradedRecoveries jobs that resumed from an older version instead.
	Handoffs           uint64 `json:"handoffs"`
	DegradedRecoveries uint64 `json:"degraded_recoveries"`
}

// prepare fills the derived fields from GeneratedAt (now when zero). The
// page, the JSON API and the metrics all go through it, so they show the
// same values.
func (s *Status) prepare(now time.Time) {
	if s.GeneratedAt.IsZero() {
		s.GeneratedAt = now
	}
	at := s.GeneratedAt
	s.Cluster.Members = nonNil(s.Cluster.Members)
	s.Cluster.Bandwidth = nonNil(s.Cluster.Bandwidth)
	s.Jobs = nonNil(s.Jobs)
	s.Transfers = nonNil(s.Transfers)
	s.Reclaims.Pending = nonNil(s.Reclaims.Pending)
	s.Reclaims.History = nonNil(s.Reclaims.History)
	s.Decisions = nonNil(s.Decisions)
	s.Cluster.Hazard.Rates = nonNil(s.Cluster.Hazard.Rates)
	for i := range s.Cluster.Members {
		m := &s.Cluster.Members[i]
		m.HazardProfile.Rates = nonNil(m.HazardProfile.Rates)
	}
	for i := range s.Jobs {
		j := &s.Jobs[i]
		if c := j.LastCheckpoint; c != nil {
			c.Age = at.Sub(c.CommittedAt)
		}
		j.Box = nil
		if d := j.Decision; d != nil {
			j.Box = &IntervalBox{Floor: d.Floor, Ceiling: d.Ceiling, Bound: d.Bound,
				BudgetUnmet: d.Ceiling > 0 && d.Floor > d.Ceiling}
			if j.Box.BudgetUnmet {
				j.Box.Shortfall = d.Floor - d.Ceiling
			}
		}
	}
	s.CoDeparture = nonNil(s.CoDeparture)
	for i := range s.Transfers {
		t := &s.Transfers[i]
		t.Class = t.Flow.Class
		t.TimeLeft, t.UntilDeadline, t.Late = nil, nil, false
		if t.Achieved > 0 {
			left := max(t.BytesTotal-t.BytesDone, 0)
			d := time.Duration(float64(left) / t.Achieved * float64(time.Second))
			t.TimeLeft = &d
		}
		if !t.Flow.Deadline.IsZero() {
			d := t.Flow.Deadline.Sub(at)
			t.UntilDeadline = &d
			t.Late = t.TimeLeft != nil && *t.TimeLeft > d
		}
	}
	for i := range s.Reclaims.Pending {
		p := &s.Reclaims.Pending[i]
		p.Remaining = max(p.Reclaim.Deadline.Sub(at), 0)
		p.Emergency = p.Reclaim.Emergency()
	}
	for i := range s.Reclaims.History {
		s.Reclaims.History[i].Emergency = s.Reclaims.History[i].Reclaim.Emergency()
	}
}

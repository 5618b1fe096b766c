package policy

import "time"

// NodeID is a node's gossip name, unique in a cluster.
type NodeID string

// JobID is a job's stable identifier; it survives restarts and moves.
type JobID string

// TrafficClass is the class a flow's packets are marked with (docs/design.md P3.1).
type TrafficClass uint8

const (
	// ClassNone is traffic ReclaimNet leaves exactly as it is.
	ClassNone TrafficClass = iota
	// ClassEmergency is emergency metadata, DSCP EF (46).
	ClassEmergency
	// ClassMigration is a planned migration (hand-off), DSCP AF41 (34).
	ClassMigration
	// ClassPresync is background pre-sync and periodic checkpoints, DSCP CS1 (8).
	ClassPresync
)

// DSCP returns the DSCP code point of the class (0 for ClassNone).
func (c TrafficClass) DSCP() uint8 {
	switch c {
	case ClassEmergency:
		return 46
	case ClassMigration:
		return 34
	case ClassPresync:
		return 8
	}
	return 0
}

func (c TrafficClass) String() string {
	switch c {
	case ClassEmergency:
		return "emergency"
	case ClassMigration:
		return "migration"
	case ClassPresync:
		return "presync"
	}
	return "none"
}

// HazardProfile is a time-of-day intensity: Rates[k] is the hazard (1/s) in
// bucket k of equal width covering one day, UTC. An empty profile means a
// hazard of zero everywhere (callers that decide use an upper bound that is
// never zero; see HazardEstimator).
type HazardProfile struct {
	Rates []float64
	// prefix is Rates' prefix integral (cumulative.cum), where the
	// estimator built it with the profile, so that a control period need
	// not rebuild it per node; nil otherwise. Rates must not change once
	// it is set.
	prefix []float64
}

// GPU describes one kind of GPU on a node.
type GPU struct {
	Model      string  // e.g. "A100-80GB"
	VRAM       int64   // bytes per GPU
	Capability float64 // CUDA compute capability, e.g. 8.0
}

// Node is one machine as the leader sees it in a control period.
type Node struct {
	ID       NodeID
	Building string
	GPU      GPU // the node's GPU kind (nodes are homogeneous inside)
	GPUs     int // total GPUs
	FreeGPUs int // GPUs not used by ReclaimNet jobs
	Load     float64
	// Emergency is the upper confidence bound λ̂⁺ of the node's emergency
	// hazard by time of day (docs/design.md P1.7a); P1 uses it.
	Emergency HazardProfile
	// Departure is the node's hazard of any departure, scheduled or not
	// (docs/design.md P2.5); P2's survival uses it.
	Departure HazardProfile
	// AccessLink is the ID of the link from the node to its building switch.
	AccessLink string
	// Leaving is set while a reclaim of this node is pending or done; a
	// leaving node is never a destination, standby or placement.
	Leaving bool
	// Lab and Pool name failure domains the node shares with others
	// besides its building (a lab's room, a spot pool, a power circuit):
	// the priors of co-departure (docs/design.md P2.7). Empty: none.
	Lab, Pool string `json:",omitzero"`
	// Storage marks a storage-role node (docs/design.md P2.7): it keeps checkpoints,
	// hosts no jobs and is never lent or reclaimed, so P2 takes its hazard
	// as 0 and prefers it as a holder.
	Storage bool `json:",omitzero"`
	// Ineligible, when set, says why the node takes no job, standby or
	// copy this period (Eligibility's verdict); its running jobs stay.
	Ineligible string `json:",omitempty"`
	// LentUntil is the end of the node's known lending time (its owner's
	// lending window, the deadline of the reclaim the owner policy plans);
	// zero: no end known. A node lent for less than Params.LentAhead more
	// is no destination, standby or holder: a job moved there would have
	// to move again at once (docs/owner.md).
	LentUntil time.Time `json:",omitzero"`
}

// Link is one edge of the campus graph (docs/design.md P2.1). Links are full duplex:
// Capacity and the bandwidth figures are per direction, and flows are
// accounted per direction (A→B separately from B→A).
type Link struct {
	ID   string
	A, B string // endpoint vertices: node IDs, building switches, "core"
	// Capacity is the link's rate, bytes/s.
	Capacity float64
	// Available is the smoothed bandwidth available to migration, bytes/s
	// (capacity minus non-migration traffic, docs/design.md P1.7); AvailableLow is
	// its lower confidence bound, used for deadline checks.
	Available, AvailableLow float64
}

// JobState is where a job is in its life.
type JobState uint8

const (
	JobPending    JobState = iota // waiting for a placement
	JobRunning                    // running on Job.Node
	JobMigrating                  // a hand-off is under way
	JobRecovering                 // lost its node; waiting to restart from a replica
	JobDone                       // finished or cancelled
)

func (s JobState) String() string {
	switch s {
	case JobPending:
		return "pending"
	case JobRunning:
		return "running"
	case JobMigrating:
		return "migrating"
	case JobRecovering:
		return "recovering"
	case JobDone:
		return "done"
	}
	return "unknown"
}

// Job is one training job as the leader sees it.
type Job struct {
	ID    JobID
	State JobState
	Node  NodeID // host; empty when pending or recovering
	// CheckpointBytes is C, the payload of one checkpoint.
	CheckpointBytes int64
	// Standby is the node receiving background pre-sync; StandbyHas the
	// bytes of the current state it already holds, so a hand-off to it
	// moves only CheckpointBytes − StandbyHas (docs/design.md P1.6: the
	// agent's host reports the delta its standby lacks).
	Standby    NodeID
	StandbyHas int64
	// Replicas are the nodes holding the freshest committed checkpoint
	// completely (never the host alone: a version counts once off-node).
	Replicas []NodeID
	// LossBudget is Lmax, the tolerated expected loss per emergency.
	LossBudget time.Duration
	GPUs       int
	VRAM       int64   // bytes per GPU the job needs
	Capability float64 // minimum CUDA capability
	// RestartTime is Tr, measured on the job's last restart.
	RestartTime time.Duration
	// Remaining is the expected remaining runtime (Trem, docs/design.md P2.5).
	Remaining time.Duration
	// WriteCap is W_i, the cap on the job's checkpoint bandwidth (disk,
	// NIC, admin), bytes/s; 0 means no cap beyond the network.
	WriteCap float64
	// Copies is k, how many nodes other than the host should hold the
	// job's freshest committed checkpoint (docs/design.md P2.7, `run
	// --replicas K`); 0 means DefaultCopies. The job gets its copies
	// whenever a holder can send one and a node can take it (replicaFor).
	Copies int `json:",omitzero"`
	// AtRisk is the work the job would lose if its host and every holder
	// of its freshest committed version left now: the time since the
	// capture of the newest version some other live node holds, or all of
	// its progress. 0 when not reported (P2.7's holder choice then weighs
	// Exposure). An input computed each period, like Exposure.
	AtRisk time.Duration `json:",omitzero"`
	// BundleBytes is the size of the job's bundle (its code and data,
	// sent once per node) and BundleHolders the nodes that hold it: a
	// hand-off, recovery or rescue to a node outside BundleHolders moves
	// BundleBytes more than the checkpoint.
	BundleBytes   int64    `json:",omitzero"`
	BundleHolders []NodeID `json:",omitzero"`
	// Lacking are the nodes that lack a host path the job declared it
	// reads (reclaimnet run --ro-path): P2 never places the job or its
	// standby there (RejectMissingPath). An input the leader computes
	// from the registry each period, like Exposure.
	Lacking []NodeID `json:",omitzero"`
	// Started is when a running job last started on its host (a start, a
	// restart or a hand-off); zero when not reported. With it and no live
	// holder off the host (Replicas empty), P1 makes the job's first
	// checkpoint early (BoundFirst).
	Started time.Time `json:",omitzero"`
	// Exposure is the work a running job would lose if its host left
	// now: the time since the capture of the freshest version that a live
	// node other than the host holds or is receiving, or since the job
	// last started on its host when that is later. With no such version
	// the job's whole progress is at risk (its copies left with their
	// holders, or it restarted on the node that held its only copy), and
	// the caller reports at least the time since its last start (more
	// when versions of it exist: they all sit on the host). 0 when not
	// reported. An input computed each period, never replicated state
	// (omitted from JSON when 0, so stored records keep their bytes).
	Exposure time.Duration `json:",omitzero"`
}

// Reclaim is an owner's pending reclaim of a node.
type Reclaim struct {
	Node      NodeID
	Announced time.Time
	// Deadline is when the node leaves; equal to Announced for an
	// emergency (τ = 0).
	Deadline time.Time
	// Incarnation is the start of the node's membership the reclaim
	// belongs to, as the replicated state knew it when it recorded the
	// reclaim (zero: unknown). A membership that began after it is not
	// leaving, even one that began within the announcement's whole
	// second (gossip carries a node's start in whole seconds).
	Incarnation time.Time `json:",omitzero"`
}

// Emergency reports whether the reclaim gave no notice.
func (r Reclaim) Emergency() bool { return !r.Deadline.After(r.Announced) }

// Flow is an admitted migration flow carried over from an earlier period.
type Flow struct {
	ID       string
	Job      JobID
	From, To NodeID
	Class    TrafficClass
	// Remaining is the bytes the flow still has to move.
	Remaining int64
	Deadline  time.Time
	Start     time.Time
	Rate      float64
}

// Switches turns each protocol on or off (the paper's ablation, docs/design.md §5).
type Switches struct {
	// P1 off: every job checkpoints at FixedInterval with an equal share.
	P1 bool
	// P2 off: destinations are chosen at random among feasible candidates
	// (seeded by Params.Seed and the job ID, so Tick stays deterministic).
	P2 bool
	// P3 off: no admission, no reservation, no ceilings.
	P3 bool
}

// Params are the tunables of one control period. DefaultParams gives the
// paper's values.
type Params struct {
	BetaP1        float64       // β, checkpoint share of a job's slice (P1.5), 0.2
	BetaP3        float64       // β3, reserved share of each link (P3.2), 0.3
	Bmin          float64       // floor of the reservation, bytes/s (P3.2)
	Alpha         float64       // weight of re-migration risk (P2.5), 1.0
	KMin          int           // locality threshold (P2.4), 2
	MaxLoad       float64       // θ, highest load of a destination (P2.3), 0.8
	CeilingFactor float64       // enforcement ceiling / assigned rate (P3.5), 1.1
	MinBurst      int64         // smallest token-bucket burst, bytes, 256 KiB
	FixedInterval time.Duration // interval when P1 is off, 10 min
	Switches      Switches
	Seed          uint64 // for the P2-off random choice
	// MaxCandidates bounds each Candidates list Tick returns: the best
	// MaxCandidates scored nodes, then up to MaxCandidates rejected ones
	// (by node ID). 0 keeps every node. The choice is always made over all
	// nodes; the bound only keeps decisions small at thousands of nodes.
	MaxCandidates int
	// SoleCopyRisk: when the one node holding a job's freshest copy has
	// more than this chance (from its emergency hazard λ̂⁺) to leave within
	// the job's 2·Lmax, the next checkpoint goes to another standby, so
	// the job's last two versions sit on two nodes, and a recovery from
	// that copy restores onto another node when one can take the job
	// (P2.3's d ≠ s), so the copy stays off the job's node (0.01; 0 keeps
	// the standby while it can take the job and lets the holder host).
	SoleCopyRisk float64
	// HandoffMargin is the slack the final checkpoint's latest safe start
	// keeps before the deadline (docs/design.md P3.8), at least one control period.
	HandoffMargin time.Duration `json:",omitzero"`
	// LentAhead is how long a node must stay lent (Node.LentUntil) to be
	// chosen as destination, standby or holder (15 min: longer than a
	// lending window's default 10-minute notice, so a job does not arrive
	// just before the node's planned reclaim announces itself).
	LentAhead time.Duration
}

// DefaultSoleCopyHorizon is the horizon of SoleCopyRisk for a job without
// a loss budget.
const DefaultSoleCopyHorizon = 10 * time.Minute

// The enforcement bucket's defaults (P3.5): a ceiling at the rate itself,
// or a small burst, collapses QUIC's throughput. The kernel layer never
// enforces less.
const (
	DefaultCeilingFactor = 1.1
	DefaultMinBurst      = 256 << 10
)

// DefaultParams returns the paper's parameters with all protocols on.
func DefaultParams() Params {
	return Params{
		BetaP1:        0.2,
		BetaP3:        0.3,
		Bmin:          0,
		Alpha:         1.0,
		KMin:          2,
		MaxLoad:       0.8,
		CeilingFactor: DefaultCeilingFactor,
		MinBurst:      DefaultMinBurst,
		FixedInterval: 10 * time.Minute,
		Switches:      Switches{P1: true, P2: true, P3: true},
		MaxCandidates: 20,
		SoleCopyRisk:  0.01,
		HandoffMargin: DefaultHandoffMargin,
		LentAhead:     15 * time.Minute,
	}
}

// Snapshot is everything Tick needs about the cluster in one period.
type Snapshot struct {
	Nodes    []Node
	Links    []Link
	Jobs     []Job
	Reclaims []Reclaim
	Flows    []Flow
	Params   Params
	// CoDeparture is the leader's estimate of which nodes leave together
	// (CoDepartureEstimator.Estimate); nil treats departures as
	// independent.
	CoDeparture *CoDeparture
}

// RejectReason says why P2 did not consider a node for a job.
type RejectReason string

const (
	RejectSource     RejectReason = "is the source"
	RejectLeaving    RejectReason = "is leaving"
	RejectVRAM       RejectReason = "not enough VRAM"
	RejectCapability RejectReason = "CUDA capability too low"
	RejectGPUs       RejectReason = "not enough free GPUs"
	RejectLoad       RejectReason = "load above threshold"
	RejectDeadline   RejectReason = "cannot finish before the deadline"
	RejectNoPath     RejectReason = "no path"
	RejectLocality   RejectReason = "other building (enough local candidates)"
	// RejectBandwidth: the path has no migration bandwidth left this period.
	RejectBandwidth RejectReason = "no migration bandwidth on the path"
	// RejectStorage: a storage node keeps checkpoints but hosts no jobs.
	RejectStorage RejectReason = "storage node (hosts no jobs)"
	// RejectIneligible: the node fails the eligibility rule (Node.Ineligible).
	RejectIneligible RejectReason = "not eligible"
	// RejectLendingEnds: the node's lending ends within Params.LentAhead.
	RejectLendingEnds RejectReason = "lending ends soon"
	// RejectMissingPath: the node lacks a path the job reads (run
	// --ro-path).
	RejectMissingPath RejectReason = "lacks a read-only path the job needs"
)

// Candidate is one node P2 scored, or rejected with a reason.
type Candidate struct {
	Node NodeID
	// Score is σ_d in seconds (lower is better); Transfer, Survival and
	// Remigration its parts: C/bw, S_d(Trem), and T̄mig(d).
	Score       float64
	Transfer    time.Duration
	Survival    float64
	Remigration time.Duration
	Bottleneck  float64 // bw(s,d), bytes/s
	Rejected    RejectReason
}

// JobDecision is P1's result for one job.
type JobDecision struct {
	Job       JobID
	Bandwidth float64       // b_i, bytes/s
	Interval  time.Duration // Δ_i
	// LossBudgetInfeasible is set when the network cannot checkpoint often
	// enough to meet the job's loss budget (P1.5): the floor C/(β·b) is
	// above the ceiling 2·Lmax, or the job has no path to checkpoint on.
	LossBudgetInfeasible bool
	// Bound says what set Interval; Floor and Ceiling are P1.5's box
	// (the network floor C/(β·b) and the loss-budget ceiling 2·Lmax; 0
	// when the job has no bandwidth or no loss budget), so the status
	// page can say by how much a budget is missed.
	Bound          IntervalBound
	Floor, Ceiling time.Duration
	// Hazard is the λ̂⁺ used, 1/s.
	Hazard float64
	// Standby is where pre-sync should go (P2.6), empty if none.
	Standby NodeID
	// Holders are the nodes that should keep the job's freshest committed
	// checkpoint (docs/design.md P2.7), most durable first: the live nodes holding
	// it, then the one a ReplicaPrefix flow copies it to this period.
	// Empty when no live node other than the host holds it.
	Holders []NodeID
	// Risk is P2.7's joint figure: the chance that every holder leaves
	// within its restore window given that the host leaves (1 with no
	// holder).
	Risk float64
}

// HandoffDecision is the outcome for a job on a node with a pending reclaim.
type HandoffDecision struct {
	Job  JobID
	From NodeID
	// To is the destination; empty when the hand-off is infeasible.
	To NodeID
	// FinalCheckpoint orders a zero-loss final checkpoint (P1.6 feasible);
	// otherwise the job recovers from its freshest committed replica.
	FinalCheckpoint bool
	// Bytes is what the destination still lacks.
	Bytes    int64
	Deadline time.Time
	// FinalStart is when the job takes its final checkpoint (docs/design.md P3.8):
	// its latest safe start for FinalRate; the job computes on the source
	// until then. Zero: at once (P3 off, or not admitted).
	FinalStart time.Time `json:",omitzero"`
	// FinalRate is the final transfer's rate: r_min plus its max-min share
	// of what the other admitted flows leave (P3.8), bytes/s.
	FinalRate float64 `json:",omitzero"`
	// Degraded is set when the job will recover from an older replica;
	// Reason says why (no candidate, not admitted, not enough time).
	Degraded   bool
	Reason     string
	Candidates []Candidate
}

// Admitted reports whether the hand-off goes ahead: a destination, and not
// degraded.
func (h HandoffDecision) Admitted() bool { return h.To != "" && !h.Degraded }

// Placement puts a pending or recovering job on a node (P2.6 / emergency).
type Placement struct {
	Job JobID
	To  NodeID
	// From is the replica holder the job restores from (empty for a new job).
	From NodeID
	// Recovery is set when the job restores from a replica (or, with From
	// empty, restarts from the beginning because no replica survives).
	Recovery bool
	// Reason says why no node was chosen (To empty): the job stays pending
	// or recovering with it, and the period's other decisions stand.
	Reason     string `json:",omitempty"`
	Candidates []Candidate
}

// FlowDecision is an admitted flow with its rate (P3).
type FlowDecision struct {
	ID       string
	Job      JobID
	From, To NodeID
	Class    TrafficClass
	// Rate is the sender's pacing rate; Ceiling and Burst the kernel
	// enforcement bucket (≈ CeilingFactor·Rate, burst ≥ MinBurst).
	Rate, Ceiling float64
	Burst         int64
	// MinRate is r_min from the flow's actual start (P3.4b).
	MinRate float64
	// Start is when the flow may start (staggered, never past its slack).
	Start    time.Time
	Deadline time.Time // zero for pre-sync / periodic checkpoints
	Links    []string  // the links the flow crosses
}

// Decisions is Tick's output for one control period.
type Decisions struct {
	Jobs       []JobDecision
	Handoffs   []HandoffDecision
	Placements []Placement
	Flows      []FlowDecision
	// CheckpointBudget is Bckpt, what P3 left for P1 (bytes/s, summed over
	// the bottlenecks that P1 allocates on).
	CheckpointBudget float64
	// Ineligible are the nodes the eligibility rule kept out this period
	// (Node.Ineligible), by ID.
	Ineligible []NodeVerdict `json:",omitempty"`
}

package state

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/pki/enroll"
	"github.com/reclaimnet/reclaimnet/policy"
)

// Role is a node's part in the Raft configuration, as the leader last
// recorded it in the registry.
type Role uint8

const (
	// RoleNone: not (yet) in the Raft configuration.
	RoleNone Role = iota
	// RoleNonvoter receives the log but does not vote.
	RoleNonvoter
	// RoleVoter votes and may lead.
	RoleVoter
)

func (r Role) String() string {
	switch r {
	case RoleNonvoter:
		return "non-voter"
	case RoleVoter:
		return "voter"
	}
	return "none"
}

// NodeState says whether a registered node is part of the cluster now.
type NodeState uint8

const (
	// NodeActive is a node that is a member now.
	NodeActive NodeState = iota
	// NodeLeft is a node that departed (its departure is in the log).
	NodeLeft
)

func (s NodeState) String() string {
	if s == NodeLeft {
		return "left"
	}
	return "active"
}

// NodeRecord is one node in the registry.
type NodeRecord struct {
	ID       policy.NodeID
	Building string
	// RaftAddr is where peers reach the node's coordinator (host:port);
	// GossipAddr and TransferAddr its other listeners.
	RaftAddr     string
	GossipAddr   string `json:",omitempty"`
	TransferAddr string `json:",omitempty"`
	GPU          policy.GPU
	GPUs         int
	// Storage marks a storage-role node (reclaimnet agent --role storage,
	// declared in its gossip metadata): it keeps checkpoints, hosts no
	// jobs and is never lent or reclaimed (policy.Node.Storage).
	Storage bool `json:",omitempty"`
	// Lab and Pool name the node's failure domains besides its building
	// (policy.Node.Lab, Pool); empty: none.
	Lab   string `json:",omitempty"`
	Pool  string `json:",omitempty"`
	Role  Role
	State NodeState
	// Joined is when the node's current membership began; Left when it
	// ended (zero while active).
	Joined time.Time
	Left   time.Time `json:",omitzero"`
	// Stretches are the node's recent memberships, oldest first (the
	// exposure the hazard estimator needs). The state machine keeps them;
	// an UpsertNode's own value is ignored.
	Stretches []Interval `json:",omitempty"`
	// Admitted is set once the leader has verified the node's certificate
	// over mutual TLS (the chain to the cluster CA, the node's name, the
	// deny list): only an admitted node receives work, holds replicas or
	// votes. Refused says why a node is not admitted (empty while the
	// check has not run).
	Admitted bool   `json:",omitempty"`
	Refused  string `json:",omitempty"`
	// Paths are the host paths the node's owner lets guest jobs read, as
	// the node announces them: a job's JobSpec.ROPaths must lie in them.
	Paths []string `json:",omitempty"`
	// Lending is the owner's lending windows as the node last announced
	// them ("Mon-Fri 19:00-08:00"), kept so the page shows them after
	// gossip forgets a departed node; empty: none announced.
	Lending string `json:",omitempty"`
}

// HasPaths reports whether every path of want lies in (is or is under)
// one of the node's Paths.
func (n NodeRecord) HasPaths(want []string) bool {
	for _, p := range want {
		if !slices.ContainsFunc(n.Paths, func(have string) bool { return pathWithin(p, have) }) {
			return false
		}
	}
	return true
}

// pathWithin reports whether p is dir or lies under it (both clean and
// absolute).
func pathWithin(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// JobSpec is what a host needs to run a job.
type JobSpec struct {
	Command []string
	Env     []string `json:",omitempty"` // KEY=VALUE
	Dir     string   `json:",omitempty"`
	// Signal is the name of the signal that requests a checkpoint (one of
	// CheckpointSignals, canonical: "USR2", not "SIGUSR2"); empty means the
	// host's default (USR1). A name, not a number: signal numbers differ
	// between architectures, and any node may run the job.
	Signal string `json:",omitempty"`
	// Grace is the time between SIGTERM and SIGKILL when the job is
	// stopped; 0 means the host's default (30 s). At most MaxStopGrace.
	Grace time.Duration `json:",omitempty"`
	// Memory is the job's memory limit in bytes and CPUs its CPU time
	// limit in CPUs (reclaimnet run --memory, --cpus), on every node that
	// runs it; 0 means none of its own (the node's caps on all guest jobs
	// together still bound it).
	Memory int64   `json:",omitempty"`
	CPUs   float64 `json:",omitempty"`
	// Secrets are environment variables whose values are sealed to the
	// cluster secrets key (reclaimnet run --secret-env): the log holds
	// only ciphertext; the host receives each value from a voter,
	// resealed to its certificate, into the job's environment alone.
	Secrets []SealedSecret `json:",omitempty"`
	// Bundle is the ID (64 hex digits, ckpt.BundleID) of the job's bundle:
	// the directory it was submitted from (reclaimnet run --workdir),
	// stored and replicated like a checkpoint and laid out read-only as
	// its working directory on every node that runs it (docs/bundles.md).
	// Empty: the job has none and runs where its command already exists.
	Bundle string `json:",omitempty"`
	// BundleSize is the bundle's size in bytes (its files and symlink
	// targets): what a node that lacks it must receive.
	BundleSize int64 `json:",omitempty"`
	// BundleFrom is the node the job was submitted on, the bundle's first
	// holder.
	BundleFrom policy.NodeID `json:",omitempty"`
	// Keep is how long the job's last version (its outputs and last
	// checkpoint) stays on its holders after the job ends (reclaimnet run
	// --keep), counted from that version's writing; 0 means
	// DefaultKeep.
	Keep time.Duration `json:",omitempty"`
	// ROPaths are host paths the job reads where it runs (reclaimnet run
	// --ro-path: datasets already on the machines), absolute and clean.
	// Only nodes whose announced Paths hold all of them are eligible for
	// it; in the sandbox they are read-only.
	ROPaths []string `json:",omitempty"`
}

// BundleHolders are the nodes that hold job's bundle as far as the
// catalogue tells: the node it was submitted on and the nodes every
// holder sends it to (jobs.bundleTargets: the job's node once it runs
// there, its standby, the holders of its committed versions), active,
// sorted. Nil for a job without a bundle.
func (s *State) BundleHolders(j JobRecord) []policy.NodeID {
	if j.Spec.Bundle == "" {
		return nil
	}
	cands := []policy.NodeID{j.Spec.BundleFrom, j.Standby}
	if j.State == policy.JobRunning && !j.RunningSince.IsZero() {
		cands = append(cands, j.Node)
	}
	for _, cp := range s.Checkpoints[j.ID] {
		if cp.Committed {
			cands = append(cands, cp.Holders...)
		}
	}
	var out []policy.NodeID
	for _, n := range cands {
		if rec, ok := s.Nodes[n]; ok && rec.State == NodeActive && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// DefaultKeep is a job's Keep when it names none (ckpt.DefaultKeep).
const DefaultKeep = 7 * 24 * time.Hour

// KeptUntil is when an ended job's results, written at written, are
// purged: the job's Keep (DefaultKeep when 0) later.
func (j JobRecord) KeptUntil(written time.Time) time.Time {
	keep := j.Spec.Keep
	if keep <= 0 {
		keep = DefaultKeep
	}
	return written.Add(keep)
}

// Results is where an ended job's results are: its newest version, the
// nodes holding it and when they purge it (zero when the version's
// writing time is unknown); ok is false for a job that has
// not ended or has no version.
func (s *State) Results(id policy.JobID) (cp Checkpoint, until time.Time, ok bool) {
	j, found := s.Jobs[id]
	cps := s.Checkpoints[id]
	if !found || j.State != policy.JobDone || len(cps) == 0 {
		return Checkpoint{}, time.Time{}, false
	}
	cp = cps[len(cps)-1]
	if !cp.Written.IsZero() {
		until = j.KeptUntil(cp.Written)
	}
	return cp.clone(), until, true
}

// SealedSecret is one secret environment variable of a job.
type SealedSecret struct {
	Name   string
	Sealed []byte
}

// Bounds of a job's own limits: below them no process starts, or the
// kernel cannot enforce the limit.
const (
	MinJobMemory = 4 << 20
	MinJobCPUs   = 0.01
)

// ValidJobLimits reports whether memory (bytes) and cpus can be a job's
// limits; 0 means none and is valid.
func ValidJobLimits(memory int64, cpus float64) error {
	var errs []error
	if memory < 0 || (memory > 0 && memory < MinJobMemory) {
		errs = append(errs, fmt.Errorf("memory limit %d bytes: want 0 (none) or at least 4 MiB", memory))
	}
	if math.IsNaN(cpus) || math.IsInf(cpus, 0) || cpus < 0 || (cpus > 0 && cpus < MinJobCPUs) {
		errs = append(errs, fmt.Errorf("cpu limit %v: want 0 (none) or at least %v", cpus, MinJobCPUs))
	}
	return errors.Join(errs...)
}

// CheckpointSignals are the signals a job may ask for checkpoint requests
// with: ones a job can catch and whose default action does not matter to
// the supervisor. TERM (the stop signal), KILL and STOP are not among them.
var CheckpointSignals = []string{"USR1", "USR2", "HUP", "INT", "QUIT", "ALRM", "URG", "PWR"}

// MaxReplicas bounds a job's k, the nodes other than its host that keep
// its freshest committed checkpoint (run --replicas): every holder costs
// one more copy of each version on the network.
const MaxReplicas = 8

// ValidReplicas reports whether k can be a job's replica count (1 to
// MaxReplicas; a record's 0 means policy.DefaultCopies).
func ValidReplicas(k int) error {
	if k < 1 || k > MaxReplicas {
		return fmt.Errorf("replicas %d: want 1 to %d", k, MaxReplicas)
	}
	return nil
}

// MaxStopGrace bounds a job's stop grace (a stop must end in bounded time).
const MaxStopGrace = time.Hour

// CanonicalSignal returns the canonical name of a checkpoint signal given
// as "USR2", "SIGUSR2" or "usr2", or an error that lists the valid ones.
func CanonicalSignal(name string) (string, error) {
	n := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(name)), "SIG")
	if slices.Contains(CheckpointSignals, n) {
		return n, nil
	}
	return "", fmt.Errorf("checkpoint signal %q: want one of %s (not TERM, KILL or STOP)", name, strings.Join(CheckpointSignals, ", "))
}

// ValidStopGrace reports whether g can be a job's stop grace (0 < g <=
// MaxStopGrace; a spec's 0 means the default and is checked by callers).
func ValidStopGrace(g time.Duration) error {
	if g <= 0 || g > MaxStopGrace {
		return fmt.Errorf("stop grace %v: want more than 0 and at most %v", g, MaxStopGrace)
	}
	return nil
}

// validate checks the optional per-job settings: the signal must be a
// canonical checkpoint signal, the grace 0 (default) or a valid one.
// bundleIDRE is a bundle ID as ckpt.BundleID.String writes it.
var bundleIDRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (s JobSpec) validate() error {
	if s.Signal != "" && !slices.Contains(CheckpointSignals, s.Signal) {
		if _, err := CanonicalSignal(s.Signal); err != nil {
			return err
		}
		return fmt.Errorf("checkpoint signal %q: not in canonical form (USR2, not SIGUSR2 or usr2)", s.Signal)
	}
	if s.Bundle != "" && !bundleIDRE.MatchString(s.Bundle) {
		return fmt.Errorf("bundle %q: want 64 lower-case hex digits", s.Bundle)
	}
	for _, p := range s.ROPaths {
		if !path.IsAbs(p) || path.Clean(p) != p {
			return fmt.Errorf("read-only path %q: want an absolute, clean path", p)
		}
	}
	if s.Keep < 0 {
		return fmt.Errorf("keep %v: must not be negative", s.Keep)
	}
	if s.BundleSize < 0 || (s.Bundle == "" && s.BundleSize != 0) {
		return fmt.Errorf("bundle size %d without a bundle or negative", s.BundleSize)
	}
	if s.Grace != 0 {
		if err := ValidStopGrace(s.Grace); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for _, sec := range s.Secrets {
		if err := pki.ValidEnvName(sec.Name); err != nil {
			return fmt.Errorf("secret: %w", err)
		}
		if seen[sec.Name] || len(sec.Sealed) == 0 {
			return fmt.Errorf("secret %s: given twice or empty", sec.Name)
		}
		seen[sec.Name] = true
	}
	return ValidJobLimits(s.Memory, s.CPUs)
}

// JobRecord is one job: the leader's view (policy.Job) plus what it takes
// to run it.
type JobRecord struct {
	policy.Job
	Spec      JobSpec
	Owner     string
	Submitted time.Time
	// Restarts counts how often the job was started after its first start
	// (recoveries and hand-offs).
	Restarts int
	// Started reports whether the job was ever placed.
	Started bool
	// Displaced is set while the job waits for recovery after its node
	// left (the state machine fills it at the departure and clears it at
	// the placement, when it records the outcome in the reclaim history).
	Displaced Displacement `json:",omitzero"`
	// RunningSince is when the job last started on its node (the
	// placement's decision time, or a hand-off's MoveJob time); zero when
	// unknown (records from before it was kept).
	RunningSince time.Time `json:",omitzero"`
	// HandoffStopped is MoveJob.Stopped of the hand-off that placed the
	// job on its node; zero after any other placement or when unknown.
	HandoffStopped time.Time `json:",omitzero"`
	// Restore is set while the job, placed by a recovery, waits for its
	// replica holder's push; the state machine clears it when the job's
	// node records the version, and returns the job to recovery when the
	// holder departs first (nobody else would send the copy).
	Restore RestoreOrder `json:",omitzero"`
	// StandbyVersion is the committed version the host's last pre-sync
	// report (JobReport.Presync) found complete at Standby; StandbyHas
	// counts only while it is the freshest committed version Standby holds.
	StandbyVersion uint64 `json:",omitempty"`
	// MaxFailures is how many application failures (JobExited) the job
	// may have, counted across nodes, before it is failed (run
	// --max-failures; 0: the first fails it). Failures counts them,
	// FailureLog keeps the newest with their exit and log lines.
	MaxFailures int       `json:",omitempty"`
	Failures    int       `json:",omitempty"`
	FailureLog  []JobExit `json:",omitempty"`
	// LastExit is how the job's newest run that ended by itself ended
	// (JobExited): a failure, a requeue (exit 85), or exit 0.
	LastExit *JobExit `json:",omitempty"`
	// End is how the job ended (State is then policy.JobDone); zero
	// while it has not, and in records from before it was kept.
	End JobEnd `json:",omitzero"`
	// Events is the job's story, oldest first (the newest maxJobEvents):
	// what the state machine did with it and why.
	Events []JobEvent `json:",omitempty"`
}

// RestoreOrder names the holder that pushes a recovered job's checkpoint
// to its new node, and the version it pushes.
type RestoreOrder struct {
	From    policy.NodeID
	Version uint64
}

// Displacement is the departure that took a job's node away.
type Displacement struct {
	From policy.NodeID
	// At is the departure; Announced the key of its history entry.
	At        time.Time
	Announced time.Time
}

// Checkpoint is one version of one job's checkpoint in the catalogue.
type Checkpoint struct {
	Job          policy.JobID
	Version      uint64
	ManifestHash string
	Size         int64
	// Source is the node that wrote the checkpoint.
	Source policy.NodeID
	// Holders are the nodes that hold the version completely, sorted.
	Holders []policy.NodeID
	// Committed is set once a holder other than Source has it (a version
	// counts only off its source node); CommittedAt is when.
	Committed   bool
	CommittedAt time.Time `json:",omitzero"`
	// Written is when Source committed the version locally (its own
	// ReplicaComplete): about when the job's state was captured, the
	// start of the work a version does not hold. Zero when unknown.
	Written time.Time `json:",omitzero"`
}

// DepartureKind says whether a departure had notice.
type DepartureKind uint8

const (
	// DepartureScheduled had a notice τ > 0.
	DepartureScheduled DepartureKind = iota + 1
	// DepartureEmergency had none.
	DepartureEmergency
)

func (k DepartureKind) String() string {
	switch k {
	case DepartureScheduled:
		return "scheduled"
	case DepartureEmergency:
		return "emergency"
	}
	return "unknown"
}

// Departure is one entry of the departure log.
type Departure struct {
	Node policy.NodeID
	At   time.Time
	Kind DepartureKind
	// Notice is the scheduled reclaim's notice (deadline − announcement),
	// filled in by the state machine from the pending reclaim; 0 for an
	// emergency (and in entries from before it was kept).
	Notice time.Duration `json:",omitempty"`
	// Graceful is set when the node announced its leave in gossip (an
	// agent stopped without a reclaim) rather than failing.
	Graceful bool `json:",omitempty"`
}

// Interval is a stretch of time [From, To); a zero To is still open.
type Interval struct {
	From time.Time
	To   time.Time `json:",omitzero"`
}

// maxStretches bounds a node's membership history.
const maxStretches = 32

// DecisionRecord is the leader's current decisions and when they were made.
type DecisionRecord struct {
	policy.Decisions
	// At is the control period's time; Leader the node that decided.
	At     time.Time
	Leader policy.NodeID
	// Protocols are the switches and fixed interval the leader decided
	// with (nil in records from before they were kept: all on).
	Protocols *Protocols `json:",omitempty"`
}

// State is a full copy of the replicated state. Nothing in it is shared
// with the state machine.
type State struct {
	Nodes       map[policy.NodeID]NodeRecord
	Jobs        map[policy.JobID]JobRecord
	Checkpoints map[policy.JobID][]Checkpoint // by version, ascending
	Departures  []Departure                   // by time, ascending
	Hazards     map[policy.NodeID]policy.HazardEstimate
	HazardsAt   time.Time `json:",omitzero"`
	Reclaims    map[policy.NodeID]policy.Reclaim
	Decisions   DecisionRecord
	// ReclaimReports is the reclaim history, oldest first, at most
	// maxReclaimReports (older snapshots lack it: empty).
	ReclaimReports []ReclaimReport `json:",omitempty"`
	// Counters count what the cluster did since its state began (older
	// snapshots lack them: they count from the upgrade).
	Counters Counters `json:",omitzero"`
	// SecretsKey is the cluster secrets key's public half (X-Wing), which
	// every node seals job secrets to; empty in a cluster without one.
	SecretsKey []byte `json:",omitempty"`
	// Enrollment holds the join tokens (hashed), the nodes that joined
	// with them and the deny list (docs/trust.md).
	Enrollment enroll.Registry `json:",omitzero"`
}

// Counters are cumulative counts kept by the state machine, so every node
// shows the same ones and they survive restarts and leader changes.
type Counters struct {
	// AdmittedHandoffs and DegradedHandoffs count hand-off decisions as
	// the leader first made them: with a destination, or marked degraded
	// (not admitted by P3, no candidate, not enough time). A decision that
	// later changes its verdict counts again.
	AdmittedHandoffs uint64 `json:",omitempty"`
	DegradedHandoffs uint64 `json:",omitempty"`
	// Handoffs counts committed moves with their final checkpoint;
	// DegradedRecoveries jobs that resumed from an older version instead:
	// placed again after their node left, or handed off without the final
	// checkpoint.
	Handoffs           uint64 `json:",omitempty"`
	DegradedRecoveries uint64 `json:",omitempty"`
}

// ReclaimReport is the owner's report of one reclaim, as the reclaimed
// node recorded it.
type ReclaimReport struct {
	Node policy.NodeID
	Kind DepartureKind // scheduled or emergency
	// Reason is why the owner's side took the machine back ("lending
	// window ends 08:00"); empty when the report does not say.
	Reason string `json:",omitempty"`
	// LendingAfter is the node's lending state as it left (reclaimed,
	// owner active, outside window, ...) and LendableFrom the earliest
	// time its owner policy may lend it again (zero: only the owner's
	// lend): what the page shows of a node that is out of the cluster.
	LendingAfter string    `json:",omitempty"`
	LendableFrom time.Time `json:",omitzero"`
	Announced    time.Time
	Deadline     time.Time
	// Completed is when every job had left the node (or the node left).
	Completed time.Time `json:",omitzero"`
	// Isolate is how long the kill-switch flip took; Isolated whether it
	// was enforced at all.
	Isolate  time.Duration
	Isolated bool
	Moved    []policy.JobID `json:",omitempty"`
	Degraded []policy.JobID `json:",omitempty"`
	Finished []policy.JobID `json:",omitempty"`
	// BytesSent is what the node's transfers sent for its jobs since the
	// announcement; UsedFor how long jobs still ran after it.
	BytesSent int64
	UsedFor   time.Duration
	// Left is when the node left (zero until then).
	Left time.Time `json:",omitzero"`
	// Detected is set when the departure was found by failure detection
	// (the node left without a scheduled reclaim); ClusterOnly while the
	// entry holds only what the cluster recorded (the owner's report has
	// not arrived: an emergency's may come when the agent starts again).
	Detected    bool `json:",omitempty"`
	ClusterOnly bool `json:",omitempty"`
	// Graceful: the node without a reclaim left announcing it in gossip
	// (its agent was stopped) instead of failing.
	Graceful bool `json:",omitempty"`
	// Jobs is what the cluster did with each job of the node: the
	// destination, the replica it restored from and the work lost. The
	// state machine records it (MoveJob, placements after the departure);
	// an owner's report never replaces it.
	Jobs []JobOutcome `json:",omitempty"`
}

// JobOutcome is what happened to one job of a reclaimed or departed node.
type JobOutcome struct {
	Job policy.JobID
	To  policy.NodeID `json:",omitempty"`
	// HandedOff: moved by a hand-off before the node left, with its final
	// checkpoint (nothing lost) unless NoFinalCheckpoint: then it resumed
	// from committed version Version and LostWork is the work since.
	HandedOff         bool `json:",omitempty"`
	NoFinalCheckpoint bool `json:",omitempty"`
	// Replica and Version: the committed checkpoint the job restored from
	// (a recovery); both empty when no replica survived and the job
	// restarted from the beginning. A hand-off sets Version alone.
	Replica policy.NodeID `json:",omitempty"`
	Version uint64        `json:",omitempty"`
	// LostWork is the work lost: from the restored version's commit (or
	// the job's submission without a replica) to the departure.
	LostWork time.Duration `json:",omitempty"`
	// At is when the job was placed or moved.
	At time.Time `json:",omitzero"`
	// Stopped is when a handed-off job stopped computing on the node
	// (MoveJob.Stopped); Resumed when it became ready on To (its host's
	// JobReport.Ready). Its downtime runs from Stopped, or from the
	// departure for a recovery, to Resumed. Zero when not known (yet).
	Stopped time.Time `json:",omitzero"`
	Resumed time.Time `json:",omitzero"`
	// Where the downtime went (design P3.8d), each zero when not known:
	// Detected is when the cluster recorded a recovery's departure,
	// Restored when the checkpoint was restored on To, and Limit the
	// downtime the move cannot beat (bytes lacked ÷ path rate + Tr + one
	// control period for a hand-off, + the detection time for a
	// recovery).
	Detected time.Time     `json:",omitzero"`
	Restored time.Time     `json:",omitzero"`
	Limit    time.Duration `json:",omitzero"`
}

func (r ReclaimReport) clone() ReclaimReport {
	r.Jobs = slices.Clone(r.Jobs)
	r.Moved = slices.Clone(r.Moved)
	r.Degraded = slices.Clone(r.Degraded)
	r.Finished = slices.Clone(r.Finished)
	return r
}

// New returns an empty state.
func New() *State {
	return &State{
		Nodes:       map[policy.NodeID]NodeRecord{},
		Jobs:        map[policy.JobID]JobRecord{},
		Checkpoints: map[policy.JobID][]Checkpoint{},
		Hazards:     map[policy.NodeID]policy.HazardEstimate{},
		Reclaims:    map[policy.NodeID]policy.Reclaim{},
	}
}

// clone returns a deep copy of s.
func (s *State) clone() *State {
	c := New()
	for id, n := range s.Nodes {
		c.Nodes[id] = n.clone()
	}
	for id, j := range s.Jobs {
		c.Jobs[id] = j.clone()
	}
	for id, cps := range s.Checkpoints {
		out := make([]Checkpoint, len(cps))
		for i, cp := range cps {
			out[i] = cp.clone()
		}
		c.Checkpoints[id] = out
	}
	c.Departures = slices.Clone(s.Departures)
	for id, h := range s.Hazards {
		c.Hazards[id] = cloneHazard(h)
	}
	c.HazardsAt = s.HazardsAt
	for id, r := range s.Reclaims {
		c.Reclaims[id] = r
	}
	c.Decisions = s.Decisions.clone()
	c.Counters = s.Counters
	c.Enrollment = cloneRegistry(s.Enrollment)
	c.SecretsKey = slices.Clone(s.SecretsKey)
	if s.ReclaimReports != nil {
		c.ReclaimReports = make([]ReclaimReport, len(s.ReclaimReports))
		for i, r := range s.ReclaimReports {
			c.ReclaimReports[i] = r.clone()
		}
	}
	return c
}

func (j JobRecord) clone() JobRecord {
	j.Replicas = slices.Clone(j.Replicas)
	j.Events = slices.Clone(j.Events)
	if j.FailureLog != nil {
		j.FailureLog = slices.Clone(j.FailureLog)
		for i := range j.FailureLog {
			j.FailureLog[i].LogTail = slices.Clone(j.FailureLog[i].LogTail)
		}
	}
	if j.LastExit != nil {
		e := *j.LastExit
		e.LogTail = slices.Clone(e.LogTail)
		j.LastExit = &e
	}
	j.Spec.Command = slices.Clone(j.Spec.Command)
	j.Spec.Env = slices.Clone(j.Spec.Env)
	if j.Spec.Secrets != nil {
		secrets := make([]SealedSecret, len(j.Spec.Secrets))
		for i, sec := range j.Spec.Secrets {
			secrets[i] = SealedSecret{Name: sec.Name, Sealed: slices.Clone(sec.Sealed)}
		}
		j.Spec.Secrets = secrets
	}
	j.Spec.ROPaths = slices.Clone(j.Spec.ROPaths)
	return j
}

func (c Checkpoint) clone() Checkpoint {
	c.Holders = slices.Clone(c.Holders)
	return c
}

func cloneHazard(h policy.HazardEstimate) policy.HazardEstimate {
	h.Emergency.Rates = slices.Clone(h.Emergency.Rates)
	h.EmergencyUpper.Rates = slices.Clone(h.EmergencyUpper.Rates)
	h.Departure.Rates = slices.Clone(h.Departure.Rates)
	h.DepartureUpper.Rates = slices.Clone(h.DepartureUpper.Rates)
	return h
}

func (n NodeRecord) clone() NodeRecord {
	n.Stretches = slices.Clone(n.Stretches)
	n.Paths = slices.Clone(n.Paths)
	return n
}

func (d DecisionRecord) clone() DecisionRecord {
	d.Decisions = cloneDecisions(d.Decisions)
	if d.Protocols != nil {
		p := *d.Protocols
		d.Protocols = &p
	}
	return d
}

func cloneDecisions(d policy.Decisions) policy.Decisions {
	out := policy.Decisions{CheckpointBudget: d.CheckpointBudget, Ineligible: slices.Clone(d.Ineligible)}
	out.Jobs = slices.Clone(d.Jobs)
	if d.Handoffs != nil {
		out.Handoffs = make([]policy.HandoffDecision, len(d.Handoffs))
		for i, h := range d.Handoffs {
			h.Candidates = slices.Clone(h.Candidates)
			out.Handoffs[i] = h
		}
	}
	if d.Placements != nil {
		out.Placements = make([]policy.Placement, len(d.Placements))
		for i, p := range d.Placements {
			p.Candidates = slices.Clone(p.Candidates)
			out.Placements[i] = p
		}
	}
	if d.Flows != nil {
		out.Flows = make([]policy.FlowDecision, len(d.Flows))
		for i, f := range d.Flows {
			f.Links = slices.Clone(f.Links)
			out.Flows[i] = f
		}
	}
	return out
}

// CheckpointVersion returns version v of job's checkpoint from the
// catalogue (not cloned: read only).
func (s *State) CheckpointVersion(job policy.JobID, v uint64) (Checkpoint, bool) {
	cps := s.Checkpoints[job]
	i, ok := slices.BinarySearchFunc(cps, v, func(cp Checkpoint, v uint64) int { return cmp.Compare(cp.Version, v) })
	if !ok {
		return Checkpoint{}, false
	}
	return cps[i], true
}

// Recoverable returns the newest committed version of job that an active
// node other than except holds, with those holders: what a recovery can
// restore (the freshest committed version may be gone with its holders).
func (s *State) Recoverable(job policy.JobID, except policy.NodeID) (Checkpoint, []policy.NodeID, bool) {
	cps := s.Checkpoints[job]
	for i := len(cps) - 1; i >= 0; i-- {
		if !cps[i].Committed {
			continue
		}
		var live []policy.NodeID
		for _, h := range cps[i].Holders {
			if h != except && s.Nodes[h].State == NodeActive {
				live = append(live, h)
			}
		}
		if len(live) > 0 {
			return cps[i].clone(), live, true
		}
	}
	return Checkpoint{}, nil, false
}

// Flow returns the decided flow with id (policy.FlowDecision.ID), if the
// current decisions hold one (not cloned: read only).
func (s *State) Flow(id string) (policy.FlowDecision, bool) {
	for _, f := range s.Decisions.Flows {
		if f.ID == id {
			return f, true
		}
	}
	return policy.FlowDecision{}, false
}

// FreshestCommitted returns the newest committed version of a job's
// checkpoint, if any.
func (s *State) FreshestCommitted(job policy.JobID) (Checkpoint, bool) {
	cps := s.Checkpoints[job]
	for i := len(cps) - 1; i >= 0; i-- {
		if cps[i].Committed {
			return cps[i].clone(), true
		}
	}
	return Checkpoint{}, false
}

package localapi

import (
	"fmt"
	"regexp"
	"time"
)

// Job control operations (reclaimnet run, jobs, logs, cancel).
const (
	OpRun    = "run"
	OpJobs   = "jobs"
	OpLogs   = "logs"
	OpCancel = "cancel"
	// OpJob returns one job's story (Request.JobID, Response.Story).
	OpJob = "job"
)

// More error kinds for the job operations.
const (
	KindUnknownJob = "unknown_job"
	KindJobExists  = "job_exists"
	KindElsewhere  = "elsewhere" // the job runs on another node (logs)
	KindNoLeader   = "no_leader"
)

// JobRequest is a job to submit (OpRun). It names no owner: the agent
// records the caller it identified on its socket (SO_PEERCRED).
type JobRequest struct {
	// Name is the job's ID; empty makes one up.
	Name       string        `json:"name,omitempty"`
	Command    []string      `json:"command"`
	Env        []string      `json:"env,omitempty"`
	Dir        string        `json:"dir,omitempty"`
	GPUs       int           `json:"gpus,omitempty"`
	VRAM       int64         `json:"vram,omitempty"`
	Capability float64       `json:"capability,omitempty"`
	LossBudget time.Duration `json:"loss_budget,omitempty"`
	// SizeHint is the expected checkpoint size (C until one is measured),
	// RuntimeHint the expected runtime (Trem).
	SizeHint    int64         `json:"size_hint,omitempty"`
	RuntimeHint time.Duration `json:"runtime_hint,omitempty"`
	// Signal requests checkpoints ("USR2"; empty: USR1) and Grace is the
	// time between SIGTERM and SIGKILL at stop (0: 30 s), on every node
	// that runs the job.
	Signal string        `json:"signal,omitempty"`
	Grace  time.Duration `json:"grace,omitempty"`
	// Memory (bytes) and CPUs are the job's own limits in the sandbox of
	// every node that runs it (reclaimnet run --memory, --cpus); 0: none
	// beyond the node's caps on all guest jobs together.
	Memory int64   `json:"memory,omitempty"`
	CPUs   float64 `json:"cpus,omitempty"`
	// Secrets are environment variables the agent seals to the cluster
	// secrets key before anything is written (reclaimnet run
	// --secret-env); their values cross only this socket in the clear.
	Secrets map[string]string `json:"secrets,omitempty"`
	// Replicas is k, how many nodes other than the host keep the job's
	// freshest committed checkpoint (reclaimnet run --replicas); 0: the
	// cluster's default (2).
	Replicas int `json:"replicas,omitempty"`
	// MaxFailures is how many application failures (a non-zero exit
	// other than 85, a signal the cluster did not send, a failed start)
	// restart the job from its freshest checkpoint before it is failed.
	MaxFailures int `json:"max_failures,omitempty"`
	// Workdir is the absolute path of the directory the agent takes as the
	// job's bundle (reclaimnet run --workdir; docs/bundles.md); empty: no
	// bundle. MaxBundle caps its size in bytes (0: ckpt.DefaultMaxBundle).
	Workdir   string `json:"workdir,omitempty"`
	MaxBundle int64  `json:"max_bundle,omitempty"`
	// Keep is how long the job's results stay after it ends (reclaimnet
	// run --keep); 0: state.DefaultKeep.
	Keep time.Duration `json:"keep,omitempty"`
	// ROPaths are host paths the job reads where it runs (reclaimnet run
	// --ro-path), absolute: only nodes that have them run it.
	ROPaths []string `json:"ro_paths,omitempty"`
}

// JobInfo is one job as 'reclaimnet jobs' shows it.
type JobInfo struct {
	ID    string `json:"id"`
	State string `json:"state"`
	// UnderWay is what is under way beside the state, with the values of
	// /v1/jobs' under_way (checkpointing, restoring, handing off,
	// recovering); empty when nothing.
	UnderWay string        `json:"under_way,omitempty"`
	Node     string        `json:"node,omitempty"`
	Command  []string      `json:"command"`
	Interval time.Duration `json:"interval_ns"`
	// BudgetUnmet: the interval's floor C/(β·b) is above the loss
	// budget's ceiling 2·Lmax (docs/design.md P1.5): at its bandwidth the
	// job cannot checkpoint often enough to meet its loss budget.
	BudgetUnmet bool   `json:"budget_unmet,omitempty"`
	Standby     string `json:"standby,omitempty"`
	// LastCommitted is the freshest committed checkpoint version (0: none)
	// and Holders the nodes holding it; LastVersion the newest recorded.
	LastCommitted uint64        `json:"last_committed"`
	Holders       []string      `json:"holders,omitempty"`
	LastVersion   uint64        `json:"last_version"`
	Restarts      int           `json:"restarts"`
	RestartTime   time.Duration `json:"restart_time_ns"`
	Submitted     time.Time     `json:"submitted"`
	// Owner is who submitted the job, user@node (the user as the node's
	// kernel identified them); only they and cluster admins cancel it or
	// read its logs.
	Owner string `json:"owner,omitempty"`
	// BundleSize is the size of the job's bundle (0: none).
	BundleSize int64 `json:"bundle_bytes,omitempty"`
	// ResultsOn are the nodes holding an ended job's results (its newest
	// version: outputs and last checkpoint) and KeptUntil when they purge
	// them (reclaimnet fetch).
	ResultsOn []string  `json:"results_on,omitempty"`
	KeptUntil time.Time `json:"kept_until,omitzero"`
	// Reason says why a pending or recovering job has no node.
	Reason string `json:"reason,omitempty"`
	// Failures and MaxFailures: application failures so far and allowed.
	Failures    int `json:"failures"`
	MaxFailures int `json:"max_failures"`
	// LastExit is how its newest run that ended by itself ended;
	// EndedAt when the job ended, CancelledBy who cancelled it.
	LastExit    *JobExit  `json:"last_exit,omitempty"`
	EndedAt     time.Time `json:"ended_at,omitzero"`
	CancelledBy string    `json:"cancelled_by,omitempty"`
}

// JobExit is how one run of a job ended, with the fields of /v1/jobs'.
type JobExit struct {
	Node        string    `json:"node"`
	At          time.Time `json:"at"`
	ExitCode    int       `json:"exit_code"`
	Signal      string    `json:"signal,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	Description string    `json:"description"`
	LogTail     []string  `json:"log_tail,omitempty"`
}

var jobNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidJobName reports whether name can be a job ID (it names files and
// directories on every node).
func ValidJobName(name string) error {
	if !jobNameRE.MatchString(name) {
		return fmt.Errorf("job name %q: want 1–64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// JobStory is one job's full story from the replicated state ('reclaimnet
// jobs JOB'): what it runs and needs, its state, every step the cluster
// took with it and why, its checkpoints and where they are, its failures.
type JobStory struct {
	JobInfo
	Owner      string        `json:"owner,omitempty"`
	Env        []string      `json:"env,omitempty"`
	Dir        string        `json:"dir,omitempty"`
	GPUs       int           `json:"gpus"`
	VRAM       int64         `json:"vram_bytes,omitempty"`
	Capability float64       `json:"capability,omitempty"`
	LossBudget time.Duration `json:"loss_budget_ns"`
	Signal     string        `json:"signal,omitempty"`
	Grace      time.Duration `json:"grace_ns,omitempty"`
	Memory     int64         `json:"memory_bytes,omitempty"`
	CPUs       float64       `json:"cpus,omitempty"`
	// Events are the steps, oldest first; Checkpoints the versions the
	// catalogue keeps, oldest first; FailureLog the newest failures.
	Events      []JobEvent       `json:"events"`
	Checkpoints []CheckpointInfo `json:"checkpoints"`
	FailureLog  []JobExit        `json:"failure_log,omitempty"`
	// Moves are the times the job left a node that was reclaimed or
	// left, oldest first, with the figures of the status page's history
	// row for it.
	Moves []JobMove `json:"moves,omitempty"`
}

// JobMove is what happened to the job when node From was reclaimed or
// left (the history's outcome for it, docs/design.md P3.8d).
type JobMove struct {
	// At is when the reclaim was announced, or the departure recorded.
	At   time.Time `json:"at"`
	From string    `json:"from"`
	To   string    `json:"to,omitempty"`
	// Emergency: reclaimed without notice, or found gone by failure
	// detection (Detected).
	Emergency bool `json:"emergency"`
	Detected  bool `json:"detected,omitempty"`
	// HandedOff: moved by a hand-off before the node left;
	// FinalCheckpoint when with its final checkpoint. Replica is the node a
	// recovery restored from and Version the version the job started
	// from; Reason says why a move was degraded.
	HandedOff       bool          `json:"handed_off"`
	FinalCheckpoint bool          `json:"final_checkpoint"`
	Replica         string        `json:"replica,omitempty"`
	Version         uint64        `json:"version,omitempty"`
	Reason          string        `json:"reason,omitempty"`
	WorkLost        time.Duration `json:"work_lost_ns"`
	// Downtime is from the job's stop (final checkpoint, departure or
	// emergency command) to its first step on To; zero while not known,
	// with Resuming set while it is placed but not ready yet. Limit is
	// what it cannot beat (bytes lacked ÷ path rate + Tr + one control
	// period, + the detection time for a recovery).
	Downtime time.Duration `json:"downtime_ns"`
	Resuming bool          `json:"resuming,omitempty"`
	Limit    time.Duration `json:"downtime_limit_ns,omitempty"`
	// Where the downtime went: detection (to the cluster's record of the
	// departure), placement (to the placement decision), restore (to the
	// checkpoint restored on To), start (to the first step). A hand-off
	// has restore and start only.
	Detection time.Duration `json:"detection_ns,omitempty"`
	Placement time.Duration `json:"placement_ns,omitempty"`
	Restore   time.Duration `json:"restore_ns,omitempty"`
	Start     time.Duration `json:"start_ns,omitempty"`
}

// JobEvent is one step of a job's story (state.JobEvent).
type JobEvent struct {
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"`
	Node    string    `json:"node,omitempty"`
	From    string    `json:"from,omitempty"`
	Version uint64    `json:"version,omitempty"`
	Detail  string    `json:"detail,omitempty"`
}

// CheckpointInfo is one version of a job's checkpoint and its holders.
type CheckpointInfo struct {
	Version     uint64    `json:"version"`
	Bytes       int64     `json:"bytes"`
	Source      string    `json:"source"`
	Holders     []string  `json:"holders"`
	Committed   bool      `json:"committed"`
	CommittedAt time.Time `json:"committed_at,omitzero"`
}

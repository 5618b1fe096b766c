package supervisor

import (
	"errors"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/sandbox"
	"github.com/reclaimnet/reclaimnet/gpu"
)

// Errors callers act on.
var (
	// ErrNotRunning: the job is stopping or has ended.
	ErrNotRunning = errors.New("job not running")
	// ErrCheckpointInProgress: another checkpoint request is pending.
	ErrCheckpointInProgress = errors.New("checkpoint already in progress")
	// ErrCheckpointTimeout: the job did not complete the checkpoint in time;
	// it was abandoned.
	ErrCheckpointTimeout = errors.New("checkpoint timed out")
	// ErrCheckpointFailed: the job reported the checkpoint failed
	// (FailedMarker), or the supervisor could not keep it.
	ErrCheckpointFailed = errors.New("checkpoint failed")
	// ErrJobExited: the job ended while a checkpoint was pending and
	// without completing it.
	ErrJobExited = errors.New("job exited during checkpoint")
	// ErrOutOfMemory: the kernel killed processes of the job at its
	// memory limit (or the guests' cap).
	ErrOutOfMemory = errors.New("out of memory")
	// ErrSandboxUnavailable: jobs cannot be confined on this machine and
	// the sandbox is not off; Supervisor.Sandbox says why.
	ErrSandboxUnavailable = sandbox.ErrUnavailable
)

// EventKind says what happened.
type EventKind int

const (
	// EventStarted: a process of the job started (first start or restart).
	EventStarted EventKind = iota
	// EventReady: the process touched RECLAIMNET_READY_FILE; RestartTime
	// is set.
	EventReady
	// EventCheckpointReady: a checkpoint completed; Checkpoint is set.
	// Requested ones are also returned by RequestCheckpoint.
	EventCheckpointReady
	// EventCheckpointFailed: a checkpoint was abandoned; Err says why.
	EventCheckpointFailed
	// EventRestarting: the job exited 85 and is restarted from the
	// checkpoint it wrote.
	EventRestarting
	// EventWarning: something the operator should know that did not stop
	// the job (log or deadline file not writable, GPU process left over).
	EventWarning
	// EventExited: the job ended for good; Err is set unless it exited 0.
	EventExited
)

func (k EventKind) String() string {
	switch k {
	case EventStarted:
		return "started"
	case EventReady:
		return "ready"
	case EventCheckpointReady:
		return "checkpoint-ready"
	case EventCheckpointFailed:
		return "checkpoint-failed"
	case EventRestarting:
		return "restarting"
	case EventWarning:
		return "warning"
	case EventExited:
		return "exited"
	}
	return "unknown"
}

// Event is one thing that happened to a job.
type Event struct {
	Kind         EventKind
	Time         time.Time
	PID          int
	RestartCount int
	// RestartTime (EventReady) is process start → ready file.
	RestartTime time.Duration
	Checkpoint  *Checkpoint // EventCheckpointReady
	ExitCode    int         // EventRestarting, EventExited
	Err         error
}

// Checkpoint is a completed checkpoint directory. It belongs to the
// caller from now on: the supervisor never deletes it.
type Checkpoint struct {
	Seq   int
	Dir   string
	Bytes int64
	// Took is request → completion (zero for unrequested ones).
	Took time.Duration
	// Requested is false for checkpoints the job wrote by itself (exit 85,
	// or a .complete written without a request).
	Requested    bool
	RestartCount int
}

// Result is how a job ended.
type Result struct {
	// ExitCode of the last process; -1 when a signal killed it.
	ExitCode int
	// Signal that killed the last process, if any.
	Signal string
	// Stopped is true when Stop ended the job.
	Stopped bool
	// Restarts counts exit-85 restarts under this Job.
	Restarts int
	// GPUProcessesLeft lists job processes still holding a GPU after
	// teardown (should be empty).
	GPUProcessesLeft []gpu.Process
	// OOMKills counts the last process's processes the kernel killed at
	// the memory limit; Err then wraps ErrOutOfMemory.
	OOMKills uint64
	// Err explains an abnormal end; nil for exit 0 and for a Stop.
	Err error
}

// Status is a snapshot of a running job.
type Status struct {
	PID            int
	RestartCount   int
	Ready          bool
	RestartTime    time.Duration // last measured; 0 if not yet
	LastCheckpoint *Checkpoint
	Stopping       bool
	Done           bool
	LogDropped     int64 // output bytes lost (disk full)
}

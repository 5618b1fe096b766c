package state

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/reclaimnet/reclaimnet/policy"
)

// EndKind says how a job ended (JobRecord.End; the record's State is then
// policy.JobDone, which the policy treats alike).
type EndKind string

const (
	// EndNone: the job has not ended.
	EndNone EndKind = ""
	// EndDone: the job exited 0 on its node.
	EndDone EndKind = "done"
	// EndFailed: an application failure beyond the job's MaxFailures.
	EndFailed EndKind = "failed"
	// EndCancelled: cancelled by a user.
	EndCancelled EndKind = "cancelled"
)

// PreemptedExit is the job contract's exit code for "checkpoint written,
// restart me" (docs/jobs.md): a requeue, never a failure.
const PreemptedExit = 85

// Bounds of what a job record keeps about its failures.
const (
	// MaxLogTail bounds the log lines one failure keeps, and
	// maxLogLineBytes each line.
	MaxLogTail      = 20
	maxLogLineBytes = 512
	// maxFailureLog is how many failures a record keeps (the newest).
	maxFailureLog = 16
	// MaxMaxFailures bounds run --max-failures.
	MaxMaxFailures = 1000
)

// JobExit is how one run of a job on a node ended by itself (not stopped
// by ReclaimNet): its exit code or the signal that killed it, or why it
// could not start; the node's last log lines of the job.
type JobExit struct {
	Node policy.NodeID
	At   time.Time
	// ExitCode is the process's exit code; -1 when a signal killed it or
	// it never started.
	ExitCode int
	Signal   string `json:",omitempty"`
	// Reason names what the code alone does not say: "out of memory",
	// "start failed: …"; empty for a plain exit.
	Reason  string   `json:",omitempty"`
	LogTail []string `json:",omitempty"`
	// Restart is the record's Restarts when the run began: a report
	// about an earlier run of the job is stale.
	Restart int
}

// Success reports whether the run ended with exit 0.
func (e JobExit) Success() bool { return e.ExitCode == 0 && e.Signal == "" && e.Reason == "" }

// Describe says in words how the run ended: "exit 3", "signal killed (out
// of memory)", "start failed: …".
func (e JobExit) Describe() string {
	var s string
	switch {
	case e.Signal != "":
		s = "signal " + e.Signal
	case e.ExitCode >= 0:
		s = fmt.Sprintf("exit %d", e.ExitCode)
	}
	switch {
	case s == "":
		return e.Reason
	case e.Reason != "":
		return s + " (" + e.Reason + ")"
	}
	return s
}

// JobEnd is how a job ended, once it has (the run that ended it, done or
// failed, is the record's LastExit).
type JobEnd struct {
	Kind EndKind
	At   time.Time `json:",omitzero"`
	// By is who cancelled it.
	By string `json:",omitempty"`
}

// JobExited is the host's report that its run of a job ended by itself.
// Exit 0 ends the job done; exit PreemptedExit requeues it; anything else
// is an application failure: the job restarts from its freshest committed
// checkpoint while its failures (counted across nodes) are at most its
// MaxFailures, then it is failed.
type JobExited struct {
	Job  policy.JobID
	Exit JobExit
}

// Kind of a JobExited command.
func (JobExited) Kind() Kind { return KindJobExited }

func (c JobExited) validate() error {
	e := c.Exit
	switch {
	case c.Job == "" || e.Node == "":
		return invalid("job exit needs job and node")
	case e.At.IsZero():
		return invalid("job exit of %s without time", c.Job)
	case e.ExitCode < -1 || e.ExitCode > 255:
		return invalid("job exit of %s: exit code %d", c.Job, e.ExitCode)
	case e.Restart < 0:
		return invalid("job exit of %s: negative restart", c.Job)
	case len(e.LogTail) > MaxLogTail:
		return invalid("job exit of %s: %d log lines, at most %d", c.Job, len(e.LogTail), MaxLogTail)
	case len(e.Reason) > maxLogLineBytes || len(e.Signal) > 64:
		return invalid("job exit of %s: reason or signal too long", c.Job)
	}
	for _, l := range e.LogTail {
		if len(l) > maxLogLineBytes {
			return invalid("job exit of %s: log line of %d bytes, at most %d", c.Job, len(l), maxLogLineBytes)
		}
	}
	return nil
}

// TrimLogLine makes a log line what a JobExit keeps: valid UTF-8 (JSON
// would replace bad bytes, and the decoded line could grow past the bound)
// cut at a character boundary to at most maxLogLineBytes.
func TrimLogLine(l string) string {
	l = strings.ToValidUTF8(l, "?")
	if len(l) <= maxLogLineBytes {
		return l
	}
	cut := maxLogLineBytes
	for cut > 0 && !utf8.RuneStart(l[cut]) {
		cut--
	}
	return l[:cut]
}

func applyJobExited(s *State, c JobExited) (bool, error) {
	j, ok := s.Jobs[c.Job]
	if !ok {
		return false, fmt.Errorf("exit of %s: %w", c.Job, ErrUnknownJob)
	}
	e := c.Exit
	if x := j.LastExit; x != nil && x.Node == e.Node && x.Restart == e.Restart {
		return false, nil // already applied
	}
	if j.State == policy.JobDone {
		return false, nil // cancelled meanwhile: the end stands
	}
	if j.Node != e.Node || e.Restart != j.Restarts {
		return false, fmt.Errorf("exit of %s from %s (run %d; on %q, run %d): %w", c.Job, e.Node, e.Restart, j.Node, j.Restarts, ErrNotHost)
	}
	j = j.clone()
	e.LogTail = slices.Clone(e.LogTail)
	j.LastExit = &e
	switch {
	case e.Success():
		j.State, j.End = policy.JobDone, JobEnd{Kind: EndDone, At: e.At}
		j.Remaining = 0
	case e.ExitCode == PreemptedExit && e.Signal == "" && e.Reason == "":
		// A requeue: placed again from its freshest checkpoint, not counted.
		j.State, j.Node, j.Restore = policy.JobRecovering, "", RestoreOrder{}
	default:
		j.Failures++
		j.FailureLog = append(j.FailureLog, e)
		if len(j.FailureLog) > maxFailureLog {
			j.FailureLog = j.FailureLog[len(j.FailureLog)-maxFailureLog:]
		}
		if j.Failures > j.MaxFailures {
			j.State, j.End = policy.JobDone, JobEnd{Kind: EndFailed, At: e.At}
		} else {
			j.State, j.Node, j.Restore = policy.JobRecovering, "", RestoreOrder{}
		}
	}
	j.Standby = ""
	j.clearStandbyHas()
	j.addEvent(exitEvent(j, e))
	s.Jobs[c.Job] = j
	return true, nil
}

func applyCancel(s *State, c CancelJob) (bool, error) {
	j, ok := s.Jobs[c.Job]
	if !ok {
		return false, fmt.Errorf("cancel %s: %w", c.Job, ErrUnknownJob)
	}
	if j.State == policy.JobDone {
		return false, nil
	}
	j = j.clone()
	j.State, j.End = policy.JobDone, JobEnd{Kind: EndCancelled, At: c.At, By: c.By}
	j.addEvent(JobEvent{At: c.At, Kind: EventCancelled, Node: j.Node, Detail: "by " + cmp.Or(c.By, "a user")})
	s.Jobs[c.Job] = j
	return true, nil
}

// StateName is the job's state in words, the one every view shows:
// pending, running, migrating, recovering, done, failed or cancelled.
func (j JobRecord) StateName() string {
	if j.State == policy.JobDone && j.End.Kind != EndNone {
		return string(j.End.Kind)
	}
	return j.State.String()
}

package state

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/reclaimnet/reclaimnet/policy"
)

// runningJob returns a state with job j running on node a, allowed
// maxFailures application failures.
func runningJob(t *testing.T, maxFailures int) *State {
	t.Helper()
	s := New()
	mustApply(t, s, SubmitJob{Job: JobRecord{Job: policy.Job{ID: "j", GPUs: 1}, MaxFailures: maxFailures,
		Spec: JobSpec{Command: []string{"train"}}, Owner: "alice", Submitted: t0}})
	place(t, s, "j", "a", t0)
	return s
}

func place(t *testing.T, s *State, job policy.JobID, node policy.NodeID, at time.Time) {
	t.Helper()
	mustApply(t, s, SetDecisions{Decisions: DecisionRecord{At: at, Leader: "a",
		Decisions: policy.Decisions{Placements: []policy.Placement{{Job: job, To: node, Recovery: s.Jobs[job].Started}}}}})
	if j := s.Jobs[job]; j.State != policy.JobRunning || j.Node != node {
		t.Fatalf("placement: %s on %q", j.StateName(), j.Node)
	}
}

func TestJobExitZeroIsDone(t *testing.T) {
	s := runningJob(t, 0)
	mustApply(t, s, JobExited{Job: "j", Exit: JobExit{Node: "a", At: t0.Add(time.Minute)}})
	j := s.Jobs["j"]
	if j.StateName() != "done" || j.End.Kind != EndDone || !j.End.At.Equal(t0.Add(time.Minute)) || j.Failures != 0 {
		t.Fatalf("after exit 0: %s, end %+v, failures %d", j.StateName(), j.End, j.Failures)
	}
}

// TestFailuresCountedAcrossNodes: with --max-failures 1 the first failure
// (on a) restarts the job, the second (on b, after a new placement) fails
// it with its exit code, node, time and log lines.
func TestFailuresCountedAcrossNodes(t *testing.T) {
	s := runningJob(t, 1)
	mustApply(t, s, JobExited{Job: "j", Exit: JobExit{Node: "a", At: t0.Add(time.Minute), ExitCode: 3}})
	j := s.Jobs["j"]
	if j.State != policy.JobRecovering || j.Node != "" || j.Failures != 1 {
		t.Fatalf("after the first failure: %s on %q, %d failures; want recovering", j.StateName(), j.Node, j.Failures)
	}
	place(t, s, "j", "b", t0.Add(2*time.Minute))
	if r := s.Jobs["j"].Restarts; r != 1 {
		t.Fatalf("restarts %d, want 1", r)
	}
	// A repeated report of the run on a changes nothing; one from a node
	// that does not run the job is refused.
	if changed, err := s.Apply(JobExited{Job: "j", Exit: JobExit{Node: "a", At: t0.Add(3 * time.Minute), ExitCode: 1}}); err != nil || changed {
		t.Fatalf("repeated exit: changed %v, err %v", changed, err)
	}
	if _, err := s.Apply(JobExited{Job: "j", Exit: JobExit{Node: "c", At: t0.Add(3 * time.Minute), ExitCode: 1, Restart: 1}}); !errors.Is(err, ErrNotHost) {
		t.Fatalf("exit from another node: %v, want ErrNotHost", err)
	}
	exit := JobExit{Node: "b", At: t0.Add(4 * time.Minute), ExitCode: -1, Signal: "SIGKILL", Reason: "out of memory",
		LogTail: []string{"allocating", "Killed"}, Restart: 1}
	mustApply(t, s, JobExited{Job: "j", Exit: exit})
	j = s.Jobs["j"]
	if j.StateName() != "failed" || j.Failures != 2 || j.Node != "b" {
		t.Fatalf("after the second failure: %s on %q, %d failures; want failed on b", j.StateName(), j.Node, j.Failures)
	}
	if x := j.LastExit; x == nil || x.Node != "b" || x.Signal != "SIGKILL" || x.Reason != "out of memory" || len(x.LogTail) != 2 {
		t.Fatalf("last exit %+v", j.LastExit)
	}
	if got := j.LastExit.Describe(); got != "signal SIGKILL (out of memory)" {
		t.Fatalf("describe %q", got)
	}
	if len(j.FailureLog) != 2 || j.FailureLog[0].Node != "a" || j.FailureLog[0].ExitCode != 3 {
		t.Fatalf("failure log %+v", j.FailureLog)
	}
	// Applying the same report again changes nothing.
	if changed, err := s.Apply(JobExited{Job: "j", Exit: exit}); err != nil || changed {
		t.Fatalf("repeat: changed %v, err %v", changed, err)
	}
}

func TestPreemptedExitRequeuesWithoutCounting(t *testing.T) {
	s := runningJob(t, 0)
	mustApply(t, s, JobExited{Job: "j", Exit: JobExit{Node: "a", At: t0.Add(time.Minute), ExitCode: PreemptedExit}})
	if j := s.Jobs["j"]; j.State != policy.JobRecovering || j.Failures != 0 {
		t.Fatalf("after exit 85: %s, %d failures; want recovering, 0", j.StateName(), j.Failures)
	}
}

func TestCancelledIsNotDone(t *testing.T) {
	s := runningJob(t, 0)
	at := t0.Add(time.Minute)
	mustApply(t, s, CancelJob{Job: "j", By: "bob on a", At: at})
	j := s.Jobs["j"]
	if j.StateName() != "cancelled" || j.End.By != "bob on a" || !j.End.At.Equal(at) {
		t.Fatalf("after cancel: %s, %+v", j.StateName(), j.End)
	}
	// The run's exit after the cancel (it was stopped) changes nothing.
	if changed, err := s.Apply(JobExited{Job: "j", Exit: JobExit{Node: "a", At: at, ExitCode: 143}}); err != nil || changed {
		t.Fatalf("exit after cancel: changed %v, err %v", changed, err)
	}
}

func TestJobExitValidation(t *testing.T) {
	long := strings.Repeat("x", 600)
	for name, c := range map[string]JobExited{
		"no node":    {Job: "j", Exit: JobExit{At: t0}},
		"no time":    {Job: "j", Exit: JobExit{Node: "a"}},
		"bad code":   {Job: "j", Exit: JobExit{Node: "a", At: t0, ExitCode: 300}},
		"long line":  {Job: "j", Exit: JobExit{Node: "a", At: t0, LogTail: []string{long}}},
		"many lines": {Job: "j", Exit: JobExit{Node: "a", At: t0, LogTail: make([]string, MaxLogTail+1)}},
	} {
		if _, err := EncodeCommand(c); !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("%s: %v, want ErrInvalidCommand", name, err)
		}
	}
	bad := SubmitJob{Job: JobRecord{Job: policy.Job{ID: "j"}, MaxFailures: -1, Spec: JobSpec{Command: []string{"x"}}}}
	if _, err := EncodeCommand(bad); !errors.Is(err, ErrInvalidCommand) {
		t.Errorf("negative max failures: %v", err)
	}
}

func TestTrimLogLineStaysValid(t *testing.T) {
	long := strings.Repeat("é", 400) + "\xff"
	got := TrimLogLine(long)
	if len(got) > maxLogLineBytes || !utf8.ValidString(got) {
		t.Fatalf("trimmed line: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	c := JobExited{Job: "j", Exit: JobExit{Node: "a", At: t0, ExitCode: 1, LogTail: []string{got, TrimLogLine("ok\xff")}}}
	b, err := EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeCommand(b); err != nil {
		t.Fatalf("a trimmed line does not survive the log: %v", err)
	}
}

// TestJobStory: the record tells what happened, in order, with causes.
func TestJobStory(t *testing.T) {
	s := runningJob(t, 1)
	mustApply(t, s, ReplicaComplete{Job: "j", Version: 1, ManifestHash: "h", Size: 10, Source: "a", Holder: "a", At: t0.Add(time.Second)})
	mustApply(t, s, ReplicaComplete{Job: "j", Version: 1, ManifestHash: "h", Size: 10, Source: "a", Holder: "b", At: t0.Add(2 * time.Second)})
	mustApply(t, s, JobExited{Job: "j", Exit: JobExit{Node: "a", At: t0.Add(time.Minute), ExitCode: 3}})
	place(t, s, "j", "b", t0.Add(2*time.Minute))
	mustApply(t, s, CancelJob{Job: "j", By: "bob on a", At: t0.Add(3 * time.Minute)})
	var got []string
	for _, e := range s.Jobs["j"].Events {
		got = append(got, string(e.Kind)+" "+string(e.Node)+": "+e.Detail)
	}
	want := []string{
		"submitted : by alice",
		"placed a: first start",
		"checkpoint b: v1 committed (10 bytes) on b",
		"exited a: exit 3: failure 1 of 1 allowed, restarts from its freshest checkpoint",
		"placed b: restarted after exit 3",
		"cancelled b: by bob on a",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("story:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

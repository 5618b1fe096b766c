package jobs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/sandbox"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// failTwice waits for $GO, then exits 3 on its first run and 5 on the
// next, saying which run it is in its log.
const failTwice = `if [ -e "$MARK" ]; then echo "second run"; exit 5; fi
touch "$MARK"
while [ ! -e "$GO" ]; do sleep 0.05; done
echo "first run"
exit 3
`

// TestFailuresCountedAcrossNodesThenFailed: a job allowed one failure
// exits 3 on its first node, is restarted on the other, exits 5 there and
// is failed, with both failures, the last exit code, node and log lines in
// the replicated record.
func TestFailuresCountedAcrossNodesThenFailed(t *testing.T) {
	t.Parallel()
	tc := newCluster(t, []int{0, 1, 1}, fastSupervisor())
	tc.waitVoters(3)
	dir := t.TempDir()
	mark, goFile := filepath.Join(dir, "mark"), filepath.Join(dir, "go")
	tc.submit(state.SubmitJob{Job: state.JobRecord{
		Job:         policy.Job{ID: "flaky", GPUs: 1, CheckpointBytes: 1 << 10, LossBudget: time.Hour},
		Spec:        state.JobSpec{Command: []string{"/bin/sh", "-c", failTwice}, Env: []string{"MARK=" + mark, "GO=" + goFile}},
		MaxFailures: 1,
	}})
	first := tc.waitRunning("flaky", "")
	wait.For(t, 20*time.Second, "the first run started", func() bool { _, err := os.Stat(mark); return err == nil })
	tc.gossip.setFree(first, 0) // the restart must go to the other node
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var j state.JobRecord
	wait.For(t, 40*time.Second, "the job failed", func() bool {
		j = tc.state().Jobs["flaky"]
		return j.StateName() == "failed"
	})
	if j.Failures != 2 || len(j.FailureLog) != 2 {
		t.Fatalf("failures %d, log %+v; want 2", j.Failures, j.FailureLog)
	}
	if a, b := j.FailureLog[0], j.FailureLog[1]; a.Node != first || a.ExitCode != 3 || b.Node == first || b.ExitCode != 5 {
		t.Fatalf("failure log %+v, want exit 3 on %s then exit 5 on the other node", j.FailureLog, first)
	}
	x := j.LastExit
	if x == nil || x.ExitCode != 5 || !slices.Contains(x.LogTail, "second run") || x.At.IsZero() {
		t.Fatalf("last exit %+v, want exit 5 with its log line", x)
	}
	if !j.End.At.Equal(x.At) || j.End.Kind != state.EndFailed {
		t.Fatalf("end %+v", j.End)
	}
}

// TestStartFailureIsReported: a command that cannot start fails the job
// (no failures allowed) with the start error, instead of showing running.
func TestStartFailureIsReported(t *testing.T) {
	t.Parallel()
	tc := newCluster(t, []int{1}, fastSupervisor())
	tc.waitVoters(1)
	tc.submitCommand("missing", []string{"/nonexistent/train"}, nil)
	var j state.JobRecord
	wait.For(t, 30*time.Second, "the job failed", func() bool {
		j = tc.state().Jobs["missing"]
		return j.StateName() == "failed"
	})
	if x := j.LastExit; x == nil || x.ExitCode != -1 || !strings.HasPrefix(x.Reason, "start failed: ") || x.Node != "n00" {
		t.Fatalf("last exit %+v, want a start failure on n00", j.LastExit)
	}
}

// TestOutOfMemoryIsFailed: a confined job over its memory limit is killed
// by the kernel, and the cluster records it as failed "out of memory".
func TestOutOfMemoryIsFailed(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but not root: the sandbox needs root")
		}
		t.Skip("needs root for the sandbox")
	}
	sup := fastSupervisor()
	sup.Sandbox = sandbox.DefaultConfig()
	sup.Sandbox.CgroupParent = fmt.Sprintf("reclaimnet-test-%d-oom", os.Getpid())
	sup.Sandbox.StateDir = t.TempDir()
	tc := newCluster(t, []int{1}, sup)
	tc.waitVoters(1)
	tc.submitSpec("hog", state.JobSpec{Command: []string{"/usr/bin/python3", "-u", "-c", "print('allocating'); a = b'x' * (512 << 20)"},
		Memory: 64 << 20})
	var j state.JobRecord
	wait.For(t, time.Minute, "the job failed", func() bool {
		j = tc.state().Jobs["hog"]
		return j.StateName() == "failed"
	})
	if x := j.LastExit; x == nil || x.Reason != "out of memory" || !slices.Contains(x.LogTail, "allocating") {
		t.Fatalf("last exit %+v, want out of memory with the job's log line", j.LastExit)
	}
}

package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"

	"github.com/reclaimnet/reclaimnet/policy"
)

const debianPython = "/usr/bin/python3"

// TestPyTorchJobSurvivesHostLoss is TestJobSurvivesHostLoss with the real
// workload: examples/pytorch/train.py (Debian's python3-torch) submitted
// through the control socket's run operation to three real agents with
// separate data dirs; checkpoints reach another agent through the
// coordinator and transfer (no shared directory); the host agent is
// stopped abruptly; the job resumes on another agent, and its step counter
// and loss continue from the checkpoint (the resumed step's loss equals
// the one the dead host printed for it: train.py resumes bit for bit).
// It runs alone, not beside the package's parallel tests: importing torch
// takes seconds of CPU, and the dead host's log must hold the step the job
// resumes at.
func TestPyTorchJobSurvivesHostLoss(t *testing.T) {
	if err := exec.Command(debianPython, "-c", "import torch").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s cannot import torch (install python3-torch): %v", debianPython, err)
		}
		t.Skipf("%s cannot import torch (Debian's python3-torch): %v", debianPython, err)
	}
	script, err := filepath.Abs("../examples/pytorch/train.py")
	if err != nil {
		t.Fatal(err)
	}
	c, byName := startJobCluster(t)
	submitter := c.nodes[2]
	resp := call(t, submitter, localapi.Request{Op: localapi.OpRun, Job: &localapi.JobRequest{Name: "torch",
		Command: []string{debianPython, "-u", script, "--step-time", "0.02"}, GPUs: 1, LossBudget: time.Hour, SizeHint: 1 << 20}})
	if resp.Error != "" || resp.JobID != "torch" {
		t.Fatalf("run: got id %q error %q, want id torch", resp.JobID, resp.Error)
	}
	var before localapi.JobInfo
	wait.For(t, 120*time.Second, "job torch running with a committed checkpoint off its host", func() bool {
		j, ok := findJob(call(t, submitter, localapi.Request{Op: localapi.OpJobs}).Jobs, "torch")
		before = j
		if !ok || j.State != policy.JobRunning.String() || j.LastCommitted < 2 {
			return false
		}
		for _, h := range j.Holders {
			if h != j.Node {
				return true
			}
		}
		return false
	})
	host := byName[before.Node]
	hostLog := JobLogPath(host.agent.DataDir(), "torch")
	host.stop(t, true)
	var survivor *testNode
	for _, n := range c.nodes {
		if n != host {
			survivor = n
			break
		}
	}
	var after localapi.JobInfo
	wait.For(t, 120*time.Second, "job torch running on another node", func() bool {
		j, ok := findJob(call(t, survivor, localapi.Request{Op: localapi.OpJobs}).Jobs, "torch")
		after = j
		return ok && j.State == policy.JobRunning.String() && j.Node != "" && j.Node != before.Node
	})
	dest := byName[after.Node]
	restored := regexp.MustCompile(`restored step=(\d+)`)
	var resumedAt int
	var destLog string
	wait.For(t, 90*time.Second, "the resumed job's first step in 'logs' on "+after.Node, func() bool {
		lr := call(t, dest, localapi.Request{Op: localapi.OpLogs, JobID: "torch"})
		destLog = lr.Log
		m := restored.FindStringSubmatch(destLog)
		if m == nil {
			return false
		}
		resumedAt, _ = strconv.Atoi(m[1])
		return regexp.MustCompile(`(?m)^step=` + strconv.Itoa(resumedAt) + ` loss=`).MatchString(destLog)
	})
	if resumedAt == 0 {
		t.Fatal("job resumed at step 0: it restarted from scratch")
	}
	lossAt := func(log string, step int) string {
		m := regexp.MustCompile(`(?m)^step=` + strconv.Itoa(step) + ` loss=(\S+)`).FindStringSubmatch(log)
		if m == nil {
			return ""
		}
		return m[1]
	}
	b, err := os.ReadFile(hostLog)
	if err != nil {
		t.Fatalf("dead host's job log: %v", err)
	}
	src, dst := lossAt(string(b), resumedAt), lossAt(destLog, resumedAt)
	if src == "" {
		t.Fatalf("the dead host never printed step %d, yet the job resumed there", resumedAt)
	}
	if src != dst {
		t.Errorf("step %d: loss %s on the dead host, %s after resuming; want the same (bit-for-bit resume)", resumedAt, src, dst)
	}
	t.Logf("ran on %s (v%d committed, held by %v); resumed on %s at step %d with loss %s", before.Node, before.LastCommitted, before.Holders, after.Node, resumedAt, dst)
}

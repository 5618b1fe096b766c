package jobs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/policy"
)

const debianPython = "/usr/bin/python3"

// The real PyTorch example: checkpoints requested by the manager reach the
// standby through transfer, the host dies, and the job resumes on the
// standby from the committed checkpoint; the step counter continues and the
// first resumed step's loss equals the one the dead host printed for it
// (train.py resumes bit for bit).
func TestPyTorchJobSurvivesHostLoss(t *testing.T) {
	t.Parallel()
	if err := exec.Command(debianPython, "-c", "import torch").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s cannot import torch (install python3-torch): %v", debianPython, err)
		}
		t.Skipf("%s cannot import torch (Debian's python3-torch): %v", debianPython, err)
	}
	script, err := filepath.Abs("../../examples/pytorch/train.py")
	if err != nil {
		t.Fatal(err)
	}
	tc := newCluster(t, []int{0, 1, 1}, fastSupervisor())
	tc.waitVoters(3)
	tc.submitCommand("torch", []string{debianPython, "-u", script, "--step-time", "0.02"}, nil)
	host := tc.waitRunning("torch", "")
	other := policy.NodeID("n01")
	if host == other {
		other = "n02"
	}
	tc.waitCommitted("torch", 2)
	hostLog := filepath.Join(tc.nodes[host].work, "torch", "run", "job.log")
	tc.crash(host)
	if dest := tc.waitRunning("torch", host); dest != other {
		t.Fatalf("job recovered on %s, want %s", dest, other)
	}
	destLog := filepath.Join(tc.nodes[other].work, "torch", "run", "job.log")
	restored := regexp.MustCompile(`restored step=(\d+)`)
	var resumedAt int
	wait.For(t, 60*testInterval, "the resumed job's first step", func() bool {
		b, _ := os.ReadFile(destLog)
		m := restored.FindSubmatch(b)
		if m == nil {
			return false
		}
		resumedAt, _ = strconv.Atoi(string(m[1]))
		return regexp.MustCompile(`(?m)^step=` + strconv.Itoa(resumedAt) + ` loss=`).Match(b)
	})
	if resumedAt == 0 {
		t.Fatalf("job resumed at step 0: it restarted from scratch")
	}
	lossAt := func(path string, step int) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^step=` + strconv.Itoa(step) + ` loss=(\S+)`).FindSubmatch(b)
		if m == nil {
			return ""
		}
		return string(m[1])
	}
	src, dst := lossAt(hostLog, resumedAt), lossAt(destLog, resumedAt)
	if src == "" {
		t.Fatalf("the dead host never printed step %d, yet the job resumed there", resumedAt)
	}
	if src != dst {
		t.Errorf("step %d: loss %s on the dead host, %s after resuming; want the same (bit-for-bit resume)", resumedAt, src, dst)
	}
	t.Logf("resumed at step %d on %s with loss %s", resumedAt, other, dst)
}

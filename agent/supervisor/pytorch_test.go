package supervisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// debianPython is the interpreter that has Debian's python3-torch (the
// python3 first on PATH may not).
const debianPython = "/usr/bin/python3"

// torchPython returns debianPython if it can import torch. Without it the
// test skips, except under CI=true where .ci/run installs python3-torch
// and its absence is a failure.
func torchPython(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, debianPython, "-c", "import torch").CombinedOutput(); err != nil {
		msg := "needs Debian's python3-torch (" + debianPython + " -c 'import torch' failed: " + err.Error() + ": " + strings.TrimSpace(string(out)) + ")"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return debianPython
}

func trainScript(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "examples", "pytorch", "train.py"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("training script: %v", err)
	}
	return p
}

var (
	stepLine     = regexp.MustCompile(`(?m)^step=(\d+) loss=([0-9.]+)$`)
	ckptLine     = regexp.MustCompile(`(?m)^checkpoint step=(\d+) ok=True`)
	restoredLine = regexp.MustCompile(`(?m)^restored step=(\d+) from `)
)

// losses parses the "step=N loss=X" lines of a log; a step seen twice
// keeps its first loss.
func losses(log string) (map[int]string, []int) {
	m := map[int]string{}
	var order []int
	for _, s := range stepLine.FindAllStringSubmatch(log, -1) {
		n, _ := strconv.Atoi(s[1])
		if _, ok := m[n]; !ok {
			m[n] = s[2]
		}
		order = append(order, n)
	}
	return m, order
}

// waitStep waits until the job's log shows step n.
func waitStep(t *testing.T, j *Job, n int, timeout time.Duration) string {
	t.Helper()
	var log string
	waitFor(t, timeout, "step "+strconv.Itoa(n)+" in "+j.LogPath(), func() bool {
		b, _ := os.ReadFile(j.LogPath())
		log = string(b)
		_, order := losses(log)
		return len(order) > 0 && order[len(order)-1] >= n
	})
	return log
}

// TestPyTorchResumeFromCheckpoint runs the real training script, asks it
// for a checkpoint, lets it train on, kills it, and starts it again
// elsewhere (another work directory, a copy of the checkpoint) from that
// checkpoint: the resumed run must begin at the checkpoint's step, not 0,
// and reproduce the killed run's losses for the steps both ran, exactly.
func TestPyTorchResumeFromCheckpoint(t *testing.T) {
	py := torchPython(t)
	script := trainScript(t)
	t.Parallel()
	s := newSupervisor(t, testConfig(t))
	cmd := []string{py, "-u", script, "--step-time", "0.02"}
	first := startJob(t, s, "", func(sp *Spec) { sp.Command = cmd })
	waitStep(t, first, 20, 3*time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := first.RequestCheckpoint(ctx)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	log := readFile(t, first.LogPath())
	m := ckptLine.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no 'checkpoint step=N ok=True' line in the log:\n%s", tail(log))
	}
	ckptStep, _ := strconv.Atoi(m[1])
	if st := first.Status(); st.LastCheckpoint != nil {
		t.Logf("checkpoint %d: %d bytes, request → complete %s", st.LastCheckpoint.Seq, st.LastCheckpoint.Bytes, st.LastCheckpoint.Took)
	}
	if ckptStep < 20 {
		t.Fatalf("checkpoint at step %d, want ≥ 20 (requested after step 20)", ckptStep)
	}
	// Let the first run train past the checkpoint, then kill it.
	log = waitStep(t, first, ckptStep+10, 2*time.Minute)
	if err := first.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	before, _ := losses(log)

	// "Another node": a different work directory and a copy of the files.
	restore := filepath.Join(t.TempDir(), "restore")
	if err := os.CopyFS(restore, os.DirFS(dir)); err != nil {
		t.Fatalf("copy checkpoint: %v", err)
	}
	second := startJob(t, s, "", func(sp *Spec) {
		sp.Command, sp.RestoreDir, sp.RestartCount = cmd, restore, 1
	})
	log2 := waitStep(t, second, ckptStep+10, 3*time.Minute)
	if m := restoredLine.FindStringSubmatch(log2); m == nil || m[1] != strconv.Itoa(ckptStep) {
		t.Fatalf("resumed run: got restore line %v, want 'restored step=%d':\n%s", m, ckptStep, tail(log2))
	}
	after, order := losses(log2)
	if order[0] != ckptStep {
		t.Errorf("resumed run's first step: got %d, want %d (the checkpoint's step, not 0)", order[0], ckptStep)
	}
	if _, ok := after[0]; ok {
		t.Error("resumed run trained step 0 again")
	}
	for n := ckptStep; n < ckptStep+10; n++ {
		if after[n] != before[n] {
			t.Errorf("step %d loss: resumed run %s, killed run %s; want identical", n, after[n], before[n])
		}
	}
	if e := waitEvent(t, second, EventReady, time.Minute); e.RestartTime <= 0 || e.RestartCount != 1 {
		t.Errorf("ready event: got restart time %s count %d, want a measured time and count 1", e.RestartTime, e.RestartCount)
	} else {
		// A figure, not an assertion: process start → state restored.
		t.Logf("restart time (python start, torch import, torch.load, ready): %s", e.RestartTime)
	}

	// A reclaim announced while it runs: the job sees the deadline through
	// RECLAIMNET_DEADLINE_FILE and checkpoints by itself.
	deadline := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	if err := second.SetDeadline(deadline); err != nil {
		t.Fatal(err)
	}
	e := waitEvent(t, second, EventCheckpointReady, time.Minute)
	if e.Checkpoint.Requested {
		t.Errorf("deadline checkpoint: got a requested one, want the job's own")
	}
	b, _ := os.ReadFile(second.LogPath())
	if want := "deadline=" + deadline.Format("2006-01-02T15:04:05+00:00"); !strings.Contains(string(b), want) {
		t.Errorf("log lacks %q:\n%s", want, tail(string(b)))
	}
}

// TestPyTorchExit85 runs the script in self-checkpointing mode: at step 15
// it checkpoints and exits 85; the supervisor restarts it from that
// checkpoint and training continues at step 15.
func TestPyTorchExit85(t *testing.T) {
	py := torchPython(t)
	script := trainScript(t)
	t.Parallel()
	s := newSupervisor(t, testConfig(t))
	j := startJob(t, s, "", func(sp *Spec) {
		sp.Command = []string{py, "-u", script, "--step-time", "0.01", "--exit-after-checkpoint-at", "15"}
	})
	e := waitEvent(t, j, EventCheckpointReady, 3*time.Minute)
	if e.Checkpoint.Requested || e.RestartCount != 0 {
		t.Errorf("checkpoint event: got %+v, want the job's own from restart 0", e.Checkpoint)
	}
	waitEvent(t, j, EventRestarting, time.Minute)
	log := waitStep(t, j, 25, 3*time.Minute)
	if m := restoredLine.FindStringSubmatch(log); m == nil || m[1] != "15" {
		t.Fatalf("no 'restored step=15' line:\n%s", tail(log))
	}
	// The log holds both processes; after the restart header the first
	// step is 15.
	i := strings.LastIndex(log, "=== reclaimnet:")
	_, order := losses(log[i:])
	if len(order) == 0 || order[0] != 15 {
		t.Fatalf("restarted process's steps: got %v, want to start at 15", order)
	}
	all, _ := losses(log[:i])
	if _, ok := all[14]; !ok {
		t.Errorf("first process did not reach step 14 before exiting")
	}
	if _, ok := all[15]; ok {
		t.Errorf("first process trained step 15 before exiting 85")
	}
	if st := j.Status(); st.RestartCount != 1 {
		t.Errorf("restart count: got %d, want 1", st.RestartCount)
	}
}

func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}

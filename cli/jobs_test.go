package cli

import (
	"encoding/json"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"

	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/web"
)

func TestJobCommandsUsage(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"run without command", []string{"run", "--data-dir", dir}, ExitUsage, "no command"},
		{"run bad vram", []string{"run", "--data-dir", dir, "--vram", "20", "--", "true"}, ExitUsage, "--vram"},
		{"run bad capability", []string{"run", "--data-dir", dir, "--capability", "x", "--", "true"}, ExitUsage, "--capability"},
		{"run bad size hint", []string{"run", "--data-dir", dir, "--size-hint", "3 parsecs", "--", "true"}, ExitUsage, "--size-hint"},
		{"run bad signal", []string{"run", "--data-dir", dir, "--signal", "KILL", "--", "true"}, ExitUsage, "--signal"},
		{"run zero gpus", []string{"run", "--data-dir", dir, "--gpus", "0", "--", "true"}, ExitUsage, "--gpus"},
		{"run bad name", []string{"run", "--data-dir", dir, "--name", "../x", "--", "true"}, ExitUsage, "--name"},
		{"run bad env", []string{"run", "--data-dir", dir, "--env", "NOEQUALS", "--", "true"}, ExitUsage, "--env"},
		{"run zero loss budget", []string{"run", "--data-dir", dir, "--loss-budget", "0s", "--", "true"}, ExitUsage, "--loss-budget"},
		{"run signal STOP", []string{"run", "--data-dir", dir, "--signal", "SIGSTOP", "--", "true"}, ExitUsage, "--signal"},
		{"run signal TERM", []string{"run", "--data-dir", dir, "--signal", "TERM", "--", "true"}, ExitUsage, "want one of USR1, USR2"},
		{"run signal unknown", []string{"run", "--data-dir", dir, "--signal", "FOO", "--", "true"}, ExitUsage, `"FOO"`},
		{"run zero grace", []string{"run", "--data-dir", dir, "--grace", "0s", "--", "true"}, ExitUsage, "--grace"},
		{"run zero replicas", []string{"run", "--data-dir", dir, "--replicas", "0", "--", "true"}, ExitUsage, "--replicas"},
		{"run too many replicas", []string{"run", "--data-dir", dir, "--replicas", "9", "--", "true"}, ExitUsage, "want 1 to 8"},
		{"run negative grace", []string{"run", "--data-dir", dir, "--grace", "-5s", "--", "true"}, ExitUsage, "want more than 0"},
		{"run grace over an hour", []string{"run", "--data-dir", dir, "--grace", "61m", "--", "true"}, ExitUsage, "at most 1h"},
		{"run bad grace", []string{"run", "--data-dir", dir, "--grace", "soon", "--", "true"}, ExitUsage, "grace"},
		{"run memory without unit", []string{"run", "--data-dir", dir, "--memory", "16", "--", "true"}, ExitUsage, "--memory"},
		{"run memory below 4MiB", []string{"run", "--data-dir", dir, "--memory", "1MiB", "--", "true"}, ExitUsage, "at least 4 MiB"},
		{"run negative cpus", []string{"run", "--data-dir", dir, "--cpus", "-1", "--", "true"}, ExitUsage, "cpu limit"},
		{"run cpus not a number", []string{"run", "--data-dir", dir, "--cpus", "four", "--", "true"}, ExitUsage, "cpus"},
		{"run with limits", []string{"run", "--data-dir", dir, "--memory", "16GiB", "--cpus", "4", "--", "true"}, ExitError, "no agent running"},
		// Valid values pass validation and reach the agent (none here).
		{"run other signal and grace", []string{"run", "--data-dir", dir, "--signal", "usr2", "--grace", "5s", "--", "true"}, ExitError, "no agent running"},
		{"run grace of an hour", []string{"run", "--data-dir", dir, "--signal", "SIGURG", "--grace", "1h", "--", "true"}, ExitError, "no agent running"},
		{"run no agent", []string{"run", "--data-dir", dir, "--", "true"}, ExitError, "no agent running"},
		{"jobs extra arg", []string{"jobs", "--data-dir", dir, "x", "y"}, ExitUsage, "at most one job ID"},
		{"jobs bad name", []string{"jobs", "--data-dir", dir, "../x"}, ExitUsage, "job name"},
		{"run missing workdir", []string{"run", "--data-dir", dir, "--workdir", filepath.Join(dir, "nope"), "--", "true"}, ExitUsage, "no such directory"},
		{"run workdir a file", []string{"run", "--data-dir", dir, "--workdir", file, "--", "true"}, ExitUsage, "not a directory"},
		{"run bad max bundle", []string{"run", "--data-dir", dir, "--max-bundle", "100", "--", "true"}, ExitUsage, "--max-bundle"},
		{"run zero max bundle", []string{"run", "--data-dir", dir, "--max-bundle", "0B", "--", "true"}, ExitUsage, "--max-bundle"},
		{"jobs no agent", []string{"jobs", "--data-dir", dir}, ExitError, "no agent running"},
		{"logs without job", []string{"logs", "--data-dir", dir}, ExitUsage, "one job"},
		{"logs no agent", []string{"logs", "--data-dir", dir, "j"}, ExitError, "no agent running"},
		{"run bad keep", []string{"run", "--data-dir", dir, "--keep", "7 days", "--", "true"}, ExitUsage, "--keep"},
		{"run zero keep", []string{"run", "--data-dir", dir, "--keep", "0d", "--", "true"}, ExitUsage, "--keep"},
		{"run keep in days", []string{"run", "--data-dir", dir, "--keep", "30d", "--", "true"}, ExitError, "no agent running"},
		{"fetch without job", []string{"fetch", "--data-dir", dir}, ExitUsage, "one job"},
		{"fetch into a full directory", []string{"fetch", "--data-dir", dir, "--out", dir, "j"}, ExitUsage, "not empty"},
		{"fetch no agent", []string{"fetch", "--data-dir", dir, "--out", filepath.Join(dir, "new"), "j"}, ExitError, "no agent running"},
		{"cancel without job", []string{"cancel", "--data-dir", dir}, ExitUsage, "one job"},
		{"cancel no agent", []string{"cancel", "--data-dir", dir, "j"}, ExitError, "no agent running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, tt.args...)
			if code != tt.wantCode || !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("exit %d, stderr %q; want exit %d with %q", code, errOut, tt.wantCode, tt.wantErr)
			}
		})
	}
}

// TestJobCommandsAgainstAgent drives run, jobs, logs and cancel against a
// real single-node agent (--dev, in process). The host's load may keep
// P2 from placing the job, so the job may be pending or running; what is
// checked holds either way.
func TestJobCommandsAgainstAgent(t *testing.T) {
	cfg := soloConfig(t)
	cfg.GPUs = []string{"RTX-4090:24GiB:8.9:x1"}
	// The job's script lies where the owner lets guest jobs read.
	scripts := t.TempDir()
	if err := os.Chmod(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.GuestROPaths = []string{scripts}
	a, _ := startSolo(t, cfg)
	dir := cfg.DataDir

	script := filepath.Join(scripts, "job.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hello from the job\ntouch \"$RECLAIMNET_READY_FILE\"\nwhile :; do sleep 0.1; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "run", "--data-dir", dir, "--name", "cli-job", "--vram", "8GiB", "--capability", "8.0",
		"--size-hint", "1MiB", "--runtime-hint", "1h", "--signal", "USR2", "--grace", "5s", "--memory", "512MiB", "--cpus", "1.5",
		"--replicas", "3", "--", "/bin/sh", script)
	if code != ExitOK || strings.TrimSpace(out) != "cli-job" {
		t.Fatalf("run: exit %d, stdout %q, stderr %q; want exit 0 printing cli-job", code, out, errOut)
	}
	// The signal, grace, limits and replica count are in the replicated
	// record every node reads.
	if j, ok := a.Coordinator().Store().Job("cli-job"); !ok || j.Spec.Signal != "USR2" || j.Spec.Grace != 5*time.Second ||
		j.Spec.Memory != 512<<20 || j.Spec.CPUs != 1.5 || j.Copies != 3 {
		t.Fatalf("replicated spec %+v, %d replicas (found %v), want signal USR2, grace 5s, memory 512 MiB, 1.5 CPUs, 3 replicas", j.Spec, j.Copies, ok)
	}
	code, out, errOut = runCLI(t, "jobs", "--data-dir", dir, "--json")
	if code != ExitOK {
		t.Fatalf("jobs --json: exit %d, stderr %q", code, errOut)
	}
	var jobs web.JobsResponse
	if err := json.Unmarshal([]byte(out), &jobs); err != nil {
		t.Fatalf("jobs --json: %v in %q", err, out)
	}
	if len(jobs.Jobs) != 1 || jobs.Jobs[0].ID != "cli-job" || (jobs.Jobs[0].State != "pending" && jobs.Jobs[0].State != "running") {
		t.Fatalf("jobs: got %+v, want cli-job pending or running", jobs)
	}
	code, out, _ = runCLI(t, "jobs", "--data-dir", dir)
	if code != ExitOK || !strings.Contains(out, "cli-job") || !strings.Contains(out, "STATE") || !strings.Contains(out, "/bin/sh ") {
		t.Errorf("jobs table: exit %d, got %q", code, out)
	}
	// Logs: the job's output once it runs here, else a clear error.
	code, out, errOut = runCLI(t, "logs", "--data-dir", dir, "cli-job")
	if code == ExitOK {
		wait.For(t, 30*time.Second, "the job's output in logs", func() bool {
			_, out, _ = runCLI(t, "logs", "--data-dir", dir, "cli-job")
			return strings.Contains(out, "hello from the job")
		})
	} else if code != ExitError || !strings.Contains(errOut, "no log on this node yet") {
		t.Errorf("logs of a job not started: exit %d, stderr %q; want exit 1 saying there is no log yet", code, errOut)
	}
	if code == ExitOK {
		code, out, errOut = runCLI(t, "logs", "cli-job", "--json", "--data-dir", dir)
		var view LogsView
		if err := json.Unmarshal([]byte(out), &view); code != ExitOK || err != nil || view.JobID != "cli-job" || view.Node != "solo" || !strings.Contains(view.Log, "hello from the job") {
			t.Errorf("logs --json: exit %d, %+v (%v), stderr %q; want the job, its node and its output", code, view, err, errOut)
		}
	}
	if code, _, errOut := runCLI(t, "logs", "--data-dir", dir, "nope"); code != ExitError || !strings.Contains(errOut, `no job "nope"`) {
		t.Errorf("logs of an unknown job: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, "cancel", "--data-dir", dir, "nope"); code != ExitError || !strings.Contains(errOut, `no job "nope"`) {
		t.Errorf("cancel of an unknown job: exit %d, stderr %q", code, errOut)
	}
	if code, out, errOut := runCLI(t, "cancel", "--data-dir", dir, "cli-job"); code != ExitOK || !strings.Contains(out, "cancelled cli-job") {
		t.Fatalf("cancel: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	wait.For(t, 30*time.Second, "the job cancelled", func() bool {
		_, out, _ := runCLI(t, "jobs", "--data-dir", dir, "--json")
		return json.Unmarshal([]byte(out), &jobs) == nil && len(jobs.Jobs) == 1 && jobs.Jobs[0].State == "cancelled"
	})
	if by := jobs.Jobs[0].CancelledBy; !strings.HasSuffix(by, " on solo") || jobs.Jobs[0].EndedAt.IsZero() {
		t.Errorf("cancelled job: by %q at %v, want the user on solo and a time", by, jobs.Jobs[0].EndedAt)
	}
	// The job's story, from the replicated state.
	code, out, errOut = runCLI(t, "jobs", "--data-dir", dir, "cli-job")
	if code != ExitOK || !strings.Contains(out, "Job cli-job: cancelled") || !strings.Contains(out, "(by "+currentUser(t)+" on solo)") || !strings.Contains(out, "submitted") ||
		!strings.Contains(out, "by "+currentUser(t)+" on solo") || !strings.Contains(out, "1 GPU(s), 8192 MiB VRAM each, capability ≥ 8.0") {
		t.Errorf("jobs cli-job: exit %d, stderr %q, story:\n%s", code, errOut, out)
	}
	code, out, _ = runCLI(t, "jobs", "--data-dir", dir, "cli-job", "--json")
	var story localapi.JobStory
	if err := json.Unmarshal([]byte(out), &story); code != ExitOK || err != nil || story.ID != "cli-job" || story.Memory != 512<<20 ||
		len(story.Events) < 2 || story.Events[0].Kind != "submitted" || story.Events[len(story.Events)-1].Kind != "cancelled" {
		t.Errorf("jobs cli-job --json: exit %d, %v, %+v", code, err, story)
	}
	if code, _, errOut := runCLI(t, "jobs", "--data-dir", dir, "nope"); code != ExitError || !strings.Contains(errOut, `no job "nope"`) {
		t.Errorf("jobs of an unknown job: exit %d, stderr %q", code, errOut)
	}
	// More GPUs than any node has: accepted with a warning, and pending
	// with that reason on every view.
	code, out, errOut = runCLI(t, "run", "--data-dir", dir, "--name", "huge", "--gpus", "1000", "--", "/bin/true")
	if code != ExitOK || strings.TrimSpace(out) != "huge" || !strings.Contains(errOut, "warning: no node of the cluster has 1000 GPUs (the largest has 1)") {
		t.Fatalf("run --gpus 1000: exit %d, stdout %q, stderr %q; want exit 0 with a warning", code, out, errOut)
	}
	const reason = "needs 1000 GPUs; the largest node has 1"
	wait.For(t, 30*time.Second, "the pending reason in jobs --json", func() bool {
		_, out, _ := runCLI(t, "jobs", "--data-dir", dir, "--json")
		return json.Unmarshal([]byte(out), &jobs) == nil && len(jobs.Jobs) == 2 && jobs.Jobs[1].State == "pending" && jobs.Jobs[1].Reason == reason
	})
	if _, out, _ := runCLI(t, "jobs", "--data-dir", dir); !strings.Contains(out, reason) || !strings.Contains(out, "cancelled") {
		t.Errorf("jobs table lacks the pending reason or the cancelled state:\n%s", out)
	}

	// A bundle: the job runs from a copy of its directory, with its input.
	bundle := t.TempDir()
	for name, body := range map[string]string{"train.sh": "#!/bin/sh\necho \"read $(cat data/input.txt) in $PWD\"\ntouch \"$RECLAIMNET_READY_FILE\"\nwhile :; do sleep 0.1; done\n",
		"data/input.txt": "forty-two\n", "huge.bin": "ignored\n", ".reclaimnetignore": "*.bin\n"} {
		if err := os.MkdirAll(filepath.Join(bundle, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bundle, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ name, want string }{
		{"./missing.sh", "not a file of the bundle"},
		{"no-such-program-anywhere", "nor on the PATH"},
		{"/no/such/program", "must exist on every node"},
		{"../train.sh", "not a file of the bundle"},
		{filepath.Join(bundle, "huge.bin"), "not a file of the bundle"},
	} {
		if code, _, errOut := runCLI(t, "run", "--data-dir", dir, "--workdir", bundle, "--", c.name); code != ExitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("run -- %s: exit %d, stderr %q; want exit 2 saying %q", c.name, code, errOut, c.want)
		}
	}
	if code, _, errOut := runCLI(t, "run", "--data-dir", dir, "--workdir", bundle, "--max-bundle", "10B", "--", "./train.sh"); code != ExitUsage ||
		!strings.Contains(errOut, "over the bundle size cap of 10 B") {
		t.Errorf("run over the cap: exit %d, stderr %q; want exit 2 naming the cap", code, errOut)
	}
	code, out, errOut = runCLI(t, "run", "--data-dir", dir, "--name", "bundled", "--workdir", bundle, "--", filepath.Join(bundle, "train.sh"))
	if code != ExitOK || strings.TrimSpace(out) != "bundled" {
		t.Fatalf("run --workdir: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	j, ok := a.Coordinator().Store().Job("bundled")
	if !ok || len(j.Spec.Bundle) != 64 || !slices.Equal(j.Spec.Command, []string{"./train.sh"}) {
		t.Fatalf("replicated spec %+v: want a bundle and the command ./train.sh", j.Spec)
	}
	if j.Spec.BundleSize <= 0 || j.Spec.BundleSize > 200 {
		t.Errorf("bundle size %d, want the script, the input and the ignore file only", j.Spec.BundleSize)
	}
	// Unchanged, the directory is the same bundle.
	if code, _, errOut := runCLI(t, "run", "--data-dir", dir, "--name", "bundled2", "--workdir", bundle, "--", "train.sh"); code != ExitOK {
		t.Fatalf("second run: exit %d, stderr %q", code, errOut)
	}
	if j2, _ := a.Coordinator().Store().Job("bundled2"); j2.Spec.Bundle != j.Spec.Bundle || !slices.Equal(j2.Spec.Command, []string{"./train.sh"}) {
		t.Errorf("resubmitted spec %+v, want bundle %s and ./train.sh", j2.Spec, j.Spec.Bundle)
	}
	code, _, errOut = runCLI(t, "logs", "--data-dir", dir, "bundled")
	t.Logf("logs bundled: exit %d %s", code, errOut)
	if code == ExitOK {
		wait.For(t, 30*time.Second, "the bundled job's output", func() bool {
			_, out, _ = runCLI(t, "logs", "--data-dir", dir, "bundled")
			return strings.Contains(out, "read forty-two in ") && strings.Contains(out, filepath.Join("bundled", "bundle"))
		})
	}

}

// TestJobTableSaysWhy: the table's last column says why a job waits, how
// it failed and who cancelled it.
func TestJobTableSaysWhy(t *testing.T) {
	var b strings.Builder
	printJobTable(&b, []localapi.JobInfo{
		{ID: "big", State: "pending", Command: []string{"x"}, Reason: "needs 4 GPUs; the largest node has 2"},
		{ID: "bad", State: "failed", Command: []string{"x"}, Failures: 2, MaxFailures: 1,
			LastExit: &localapi.JobExit{Node: "n2", ExitCode: 3, Description: "exit 3"}},
		{ID: "flaky", State: "running", Node: "n1", Command: []string{"x"}, Failures: 1, MaxFailures: 2,
			LastExit: &localapi.JobExit{Node: "n2", ExitCode: -1, Signal: "killed", Description: "signal killed (out of memory)"}},
		{ID: "gone", State: "cancelled", Command: []string{"x"}, CancelledBy: "bob on n1"},
	})
	for _, want := range []string{
		"needs 4 GPUs; the largest node has 2",
		"exit 3 on n2 (failure 2, 1 allowed)",
		"restarted after signal killed (out of memory) on n2 (failure 1, 2 allowed)",
		"by bob on n1",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// The jobs table says when a job's loss budget cannot be met at its
// bandwidth (the interval's floor above 2·Lmax), and only then.
func TestJobTableBudgetUnmet(t *testing.T) {
	var b strings.Builder
	printJobTable(&b, []localapi.JobInfo{
		{ID: "big", State: "running", Interval: 83 * time.Second, BudgetUnmet: true, Command: []string{"train"}},
		{ID: "small", State: "running", Interval: 16 * time.Second, Command: []string{"train"}},
	})
	lines := strings.Split(b.String(), "\n")
	if len(lines) < 3 || !strings.Contains(lines[1], "1m23s (loss budget unmet)") || strings.Contains(lines[2], "unmet") {
		t.Errorf("table:\n%s\nwant big's interval marked unmet and small's not", b.String())
	}
}

// TestJobStoryMoves: 'jobs JOB' shows each move off a reclaimed or
// departed node with its downtime, its limit and where the time went, as
// the page's history row does.
func TestJobStoryMoves(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	var b strings.Builder
	printJobStory(&b, &localapi.JobStory{JobInfo: localapi.JobInfo{ID: "train", State: "running", Node: "c1"},
		Moves: []localapi.JobMove{
			{At: t0, From: "a1", To: "b1", HandedOff: true, FinalCheckpoint: true, Version: 4, Downtime: 2 * time.Second,
				Limit: 1800 * time.Millisecond, Restore: 1500 * time.Millisecond, Start: 500 * time.Millisecond},
			{At: t0.Add(100 * time.Second), From: "b1", To: "c1", Emergency: true, Detected: true, Replica: "a2", Version: 6,
				Reason: "recovered from the freshest committed replica", WorkLost: 12 * time.Second, Downtime: 9100 * time.Millisecond,
				Limit: 8 * time.Second, Detection: 5 * time.Second, Placement: time.Second, Restore: 2 * time.Second, Start: 1100 * time.Millisecond},
			{At: t0.Add(200 * time.Second), From: "c1", To: "d1", Emergency: true, Reason: "recovered from the freshest committed replica",
				Replica: "a2", Version: 7, Resuming: true},
			{At: t0.Add(300 * time.Second), From: "d1", To: "e1", HandedOff: true, Version: 7, WorkLost: 3 * time.Second,
				Reason: "handed off without its final checkpoint: resumed from committed version v7"},
		}})
	out := b.String()
	for _, want := range []string{
		"Moves:",
		"2026-03-02T10:00:00Z  a1 → b1",
		"hand-off, final checkpoint, lost 0s\n    down 2s, limit 1.8s (restore 1.5s, start 500ms)\n",
		"departure found by failure detection: recovered from the freshest committed replica on a2 (v6), lost 12s",
		"down 9.1s, limit 8s (detection 5s, placement 1s, restore 2s, start 1.1s)",
		"emergency reclaim: recovered from the freshest committed replica on a2 (v7)",
		"not running again yet",
		"d1 → e1  handed off without its final checkpoint: resumed from committed version v7, lost 3s\n    downtime not recorded\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("story lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	printJobStory(&b, &localapi.JobStory{JobInfo: localapi.JobInfo{ID: "still", State: "running"}})
	if strings.Contains(b.String(), "Moves:") {
		t.Errorf("a job that never moved shows a Moves section:\n%s", b.String())
	}
}

// currentUser is the name the agent identifies this test's process by
// (SO_PEERCRED, then the passwd database).
func currentUser(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		return "uid:" + strconv.Itoa(os.Getuid())
	}
	return u.Username
}

// The jobs table and a job's story say what is under way for a running
// job ("running (checkpointing)"); a migrating job's state says it alone.
func TestJobTableUnderWay(t *testing.T) {
	var b strings.Builder
	printJobTable(&b, []localapi.JobInfo{
		{ID: "ck", State: "running", UnderWay: "checkpointing", Node: "n1", Command: []string{"train"}},
		{ID: "mv", State: "migrating", UnderWay: "handing off", Node: "n2", Command: []string{"train"}},
		{ID: "idle", State: "running", Node: "n3", Command: []string{"train"}},
	})
	lines := strings.Split(b.String(), "\n")
	if len(lines) < 4 || !strings.Contains(lines[1], "running (checkpointing)") || strings.Contains(lines[2], "handing off") ||
		!strings.Contains(lines[2], "migrating") || strings.Contains(lines[3], "(") {
		t.Errorf("table:\n%s\nwant ck running (checkpointing), mv migrating, idle running", b.String())
	}
	var story strings.Builder
	printJobStory(&story, &localapi.JobStory{JobInfo: localapi.JobInfo{ID: "ck", State: "running", UnderWay: "restoring", Node: "n1"}})
	if first, _, _ := strings.Cut(story.String(), "\n"); first != "Job ck: running (restoring) on n1" {
		t.Errorf("story's first line %q, want %q", first, "Job ck: running (restoring) on n1")
	}
}

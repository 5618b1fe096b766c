package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/gpu"
)

// ckptJob is a shell job that honours the contract: it installs its USR1
// trap, touches the ready file, and on each request writes the request
// number, how many entries the directory held when the request arrived,
// and the completion marker.
const ckptJob = `
n=0
trap 'n=$((n+1)); e=$(ls -A "$RECLAIMNET_CKPT_DIR" | wc -l); echo $e > "$RECLAIMNET_CKPT_DIR/entries"; echo $n > "$RECLAIMNET_CKPT_DIR/state"; touch "$RECLAIMNET_CKPT_DIR/.complete"' USR1
touch "$RECLAIMNET_READY_FILE"
while :; do sleep 0.05; done
`

func TestConfigAndSpecValidation(t *testing.T) {
	bad := DefaultConfig()
	bad.CheckpointSignal = syscall.SIGKILL
	bad.LogMaxBytes = 10
	if _, err := New(bad); err == nil || !strings.Contains(err.Error(), "cannot be handled") || !strings.Contains(err.Error(), "log max bytes") {
		t.Errorf("New(bad): got %v, want both problems named", err)
	}
	cfg := Config{StopGrace: 7 * time.Second, Sandbox: testSandbox(t)}
	s := newSupervisor(t, cfg)
	if s.cfg.CheckpointSignal != syscall.SIGUSR1 || s.cfg.StopGrace != 7*time.Second || cfg.CheckpointSignal != 0 {
		t.Errorf("populate: got signal %v grace %s (caller's signal %v), want USR1, 7s, caller unchanged", s.cfg.CheckpointSignal, s.cfg.StopGrace, cfg.CheckpointSignal)
	}
	for name, spec := range map[string]Spec{
		"no id":      {Command: []string{"true"}, WorkDir: t.TempDir()},
		"no command": {JobID: "j", WorkDir: t.TempDir()},
		"no workdir": {JobID: "j", Command: []string{"true"}},
		"sigkill":    {JobID: "j", Command: []string{"true"}, WorkDir: t.TempDir(), Signal: syscall.SIGKILL},
	} {
		if _, err := s.Start(context.Background(), spec); err == nil {
			t.Errorf("%s: Start succeeded, want an error", name)
		}
	}
	_, err := s.Start(context.Background(), Spec{JobID: "j", Command: []string{filepath.Join(t.TempDir(), "absent")}, WorkDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("missing program: got %v, want an error naming it", err)
	}
}

func TestSignalByName(t *testing.T) {
	for in, want := range map[string]syscall.Signal{"USR1": syscall.SIGUSR1, "sigusr2": syscall.SIGUSR2, "SIGHUP": syscall.SIGHUP, "10": syscall.Signal(10)} {
		if got, err := SignalByName(in); err != nil || got != want {
			t.Errorf("SignalByName(%q): got %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"KILL", "9", "STOP", "BOGUS", ""} {
		if _, err := SignalByName(in); err == nil {
			t.Errorf("SignalByName(%q): got nil error, want one", in)
		}
	}
}

func TestParseStat(t *testing.T) {
	state, pg, ok := parseStat([]byte("1234 (a) b (c)) S 1 777 777 0 -1 4194560"))
	if !ok || state != 'S' || pg != 777 {
		t.Errorf("got %c %d %v, want S 777 true (name with spaces and parentheses)", state, pg, ok)
	}
	if _, _, ok := parseStat([]byte("garbage")); ok {
		t.Error("garbage: got ok, want not ok")
	}
}

func TestEnvironment(t *testing.T) {
	t.Setenv("RECLAIMNET_DEADLINE", "inherited-must-not-leak")
	s := newSupervisor(t, testConfig(t))
	deadline := time.Date(2026, 5, 1, 10, 30, 0, 0, time.UTC)
	restore := t.TempDir()
	j := startJob(t, s, `env | sort > "$HOME/env.tmp"; ls -A "$RECLAIMNET_CKPT_DIR" | wc -l >> "$HOME/env.tmp"; mv "$HOME/env.tmp" "$HOME/env"`, func(sp *Spec) {
		sp.RestoreDir, sp.RestartCount, sp.Deadline = restore, 3, deadline
		sp.Env = []string{"EXTRA=1", "RECLAIMNET_JOB_ID=spoofed", "LANG=en_GB.UTF-8"}
		sp.Signal = syscall.SIGUSR2
	})
	res := mustWait(t, j, 30*time.Second)
	if res.ExitCode != 0 || res.Err != nil {
		t.Fatalf("result: got %+v, want exit 0 (log: %s)", res, readFile(t, j.LogPath()))
	}
	lines := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(j.spec.Dir, "env"))), "\n")
	got := map[string]string{}
	for _, l := range lines[:len(lines)-1] {
		k, v, _ := strings.Cut(l, "=")
		got[k] = v
	}
	work := j.spec.WorkDir
	// The shell itself adds PWD, SHLVL and _.
	delete(got, "PWD")
	delete(got, "SHLVL")
	delete(got, "_")
	want := map[string]string{
		"PATH":                     "/usr/local/bin:/usr/bin:/bin",
		"HOME":                     filepath.Join(work, "home"),
		"LANG":                     "en_GB.UTF-8",
		"CUDA_DEVICE_ORDER":        "PCI_BUS_ID",
		"CUDA_VISIBLE_DEVICES":     "",
		"NVIDIA_VISIBLE_DEVICES":   "void",
		"EXTRA":                    "1",
		"RECLAIMNET_JOB_ID":        j.spec.JobID,
		"RECLAIMNET_CKPT_DIR":      filepath.Join(work, "ckpt", "incoming"),
		"RECLAIMNET_OUTPUT_DIR":    filepath.Join(work, "output"),
		"RECLAIMNET_RESTORE_DIR":   restore,
		"RECLAIMNET_RESTART_COUNT": "3",
		"RECLAIMNET_DEADLINE":      "2026-05-01T10:30:00Z",
		"RECLAIMNET_DEADLINE_FILE": filepath.Join(work, "deadline"),
		"RECLAIMNET_READY_FILE":    filepath.Join(work, "control", "ready"),
		"RECLAIMNET_CKPT_SIGNAL":   "USR2",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("environment: got %v, want exactly %v", got, want)
	}
	if n := strings.TrimSpace(lines[len(lines)-1]); n != "0" {
		t.Errorf("checkpoint dir entries at start: got %s, want 0", n)
	}
	if d := readFile(t, filepath.Join(work, "deadline")); d != "2026-05-01T10:30:00Z\n" {
		t.Errorf("deadline file: got %q", d)
	}
}

func TestCheckpointRequests(t *testing.T) {
	s := newSupervisor(t, testConfig(t))
	j := startJob(t, s, ckptJob)
	ctx := context.Background()
	var dirs []string
	for i := 1; i <= 3; i++ {
		dir, err := j.RequestCheckpoint(ctx)
		if err != nil {
			t.Fatalf("checkpoint %d: %v", i, err)
		}
		if got := strings.TrimSpace(readFile(t, filepath.Join(dir, "state"))); got != strconv.Itoa(i) {
			t.Errorf("checkpoint %d state: got %q, want %d", i, got, i)
		}
		if got := strings.TrimSpace(readFile(t, filepath.Join(dir, "entries"))); got != "0" {
			t.Errorf("checkpoint %d: directory held %s entries when requested, want 0 (fresh)", i, got)
		}
		dirs = append(dirs, dir)
	}
	if dirs[0] == dirs[1] || dirs[1] == dirs[2] || filepath.Dir(dirs[0]) != filepath.Join(j.spec.WorkDir, "ckpt") {
		t.Errorf("dirs: got %v, want three distinct directories under the job's ckpt/", dirs)
	}
	e := waitEvent(t, j, EventCheckpointReady, 5*time.Second)
	if e.Checkpoint == nil || e.Checkpoint.Dir != dirs[0] || !e.Checkpoint.Requested || e.Checkpoint.Bytes == 0 {
		t.Errorf("first checkpoint event: got %+v, want the first dir, requested, with bytes", e.Checkpoint)
	}
	if st := j.Status(); st.LastCheckpoint == nil || st.LastCheckpoint.Dir != dirs[2] || !st.Ready {
		t.Errorf("status: got %+v, want ready with last checkpoint %s", st, dirs[2])
	}
	if err := j.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	res := j.Wait()
	if !res.Stopped || res.Err != nil {
		t.Errorf("result: got %+v, want stopped without error", res)
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "state")); err != nil {
			t.Errorf("handed-out checkpoint %s removed: %v (the caller owns it)", d, err)
		}
	}
	if _, err := j.RequestCheckpoint(ctx); !errors.Is(err, ErrNotRunning) {
		t.Errorf("request after stop: got %v, want ErrNotRunning", err)
	}
}

// TestSignalWaitsForReady: a shell without a USR1 trap dies of the signal;
// the supervisor must hold the request until the job says it is ready.
func TestSignalWaitsForReady(t *testing.T) {
	s := newSupervisor(t, testConfig(t))
	j := startJob(t, s, `while [ ! -e "$HOME/go" ]; do sleep 0.02; done
`+ckptJob)
	gate := filepath.Join(j.spec.Dir, "go")
	result := make(chan error, 1)
	go func() {
		_, err := j.RequestCheckpoint(context.Background())
		result <- err
	}()
	// Let the request sit at least a few polls before the job gets ready.
	waitFor(t, 5*time.Second, "request registered", func() bool {
		return j.Status().PID != 0
	})
	time.Sleep(200 * time.Millisecond)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-result:
		if err != nil {
			t.Fatalf("checkpoint: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("checkpoint not done 20 s after the job got ready")
	}
	if st := j.Status(); st.Done {
		t.Fatalf("job ended: %+v (signalled before its trap existed?)", j.Wait())
	}
}

func TestCheckpointTimeoutIsAbandoned(t *testing.T) {
	clock := newFakeClock()
	cfg := testConfig(t)
	cfg.Clock = clock
	s := newSupervisor(t, cfg)
	// First request: write a partial file and never complete. Later: complete.
	j := startJob(t, s, `
n=0
trap 'n=$((n+1)); echo partial > "$RECLAIMNET_CKPT_DIR/state"; [ $n -gt 1 ] && touch "$RECLAIMNET_CKPT_DIR/.complete"' USR1
touch "$RECLAIMNET_READY_FILE"
while :; do sleep 0.05; done`, func(sp *Spec) { sp.CheckpointTimeout = time.Minute })
	waitFor(t, 10*time.Second, "job ready", func() bool { return j.Status().Ready })
	result := make(chan error, 1)
	go func() {
		_, err := j.RequestCheckpoint(context.Background())
		result <- err
	}()
	partial := filepath.Join(j.CheckpointDir(), "state")
	waitFor(t, 10*time.Second, "partial checkpoint written", func() bool { _, err := os.Stat(partial); return err == nil })
	clock.Advance(59 * time.Second)
	select {
	case err := <-result:
		t.Fatalf("request ended before its timeout: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	clock.Advance(time.Second)
	var err error
	select {
	case err = <-result:
	case <-time.After(10 * time.Second):
		t.Fatal("no answer after the timeout passed")
	}
	if !errors.Is(err, ErrCheckpointTimeout) || !strings.Contains(err.Error(), "abandoned after 1m0s") {
		t.Errorf("got %v, want ErrCheckpointTimeout after 1m0s", err)
	}
	e := waitEvent(t, j, EventCheckpointFailed, 5*time.Second)
	if !errors.Is(e.Err, ErrCheckpointTimeout) {
		t.Errorf("event: got %v, want the timeout", e.Err)
	}
	// Nothing of the abandoned attempt survives, and nothing was handed on.
	entries, _ := os.ReadDir(filepath.Join(j.spec.WorkDir, "ckpt"))
	for _, e := range entries {
		if e.Name() != "incoming" {
			t.Errorf("left in ckpt/: %s, want only the fresh incoming dir", e.Name())
		}
	}
	if _, err := os.Stat(partial); err == nil {
		t.Error("partial checkpoint file still present")
	}
	// The job is still running and the next checkpoint works.
	dir, err := j.RequestCheckpoint(context.Background())
	if err != nil {
		t.Fatalf("second checkpoint: %v", err)
	}
	if got := filepath.Base(dir); got != "000002" {
		t.Errorf("second checkpoint dir: got %s, want 000002 (number 1 was abandoned, never reused)", got)
	}
}

func TestCheckpointCancelAndInProgress(t *testing.T) {
	s := newSupervisor(t, testConfig(t))
	j := startJob(t, s, `trap 'echo partial > "$RECLAIMNET_CKPT_DIR/state"' USR1
touch "$RECLAIMNET_READY_FILE"
while :; do sleep 0.05; done`)
	waitFor(t, 10*time.Second, "job ready", func() bool { return j.Status().Ready })
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() {
		_, err := j.RequestCheckpoint(ctx)
		result <- err
	}()
	waitFor(t, 10*time.Second, "partial written", func() bool {
		_, err := os.Stat(filepath.Join(j.CheckpointDir(), "state"))
		return err == nil
	})
	if _, err := j.RequestCheckpoint(context.Background()); !errors.Is(err, ErrCheckpointInProgress) {
		t.Errorf("second request: got %v, want ErrCheckpointInProgress", err)
	}
	cancel()
	if err := <-result; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled request: got %v, want context.Canceled", err)
	}
	if _, err := os.Stat(filepath.Join(j.CheckpointDir(), "state")); err == nil {
		t.Error("cancelled checkpoint's file still present")
	}
}

func TestFailedMarker(t *testing.T) {
	s := newSupervisor(t, testConfig(t))
	j := startJob(t, s, `trap 'echo "torch.save: disk quota exceeded" > "$RECLAIMNET_CKPT_DIR/.failed"' USR1
touch "$RECLAIMNET_READY_FILE"
while :; do sleep 0.05; done`)
	_, err := j.RequestCheckpoint(context.Background())
	if !errors.Is(err, ErrCheckpointFailed) || !strings.Contains(err.Error(), "disk quota exceeded") {
		t.Errorf("got %v, want ErrCheckpointFailed with the job's reason", err)
	}
	if j.Status().Done {
		t.Error("job ended after a failed checkpoint, want it running")
	}
}

func TestExit85RestartsFromCheckpoint(t *testing.T) {
	s := newSupervisor(t, testConfig(t))
	j := startJob(t, s, `
if [ -z "$RECLAIMNET_RESTORE_DIR" ]; then
  echo 41 > "$RECLAIMNET_CKPT_DIR/state"
  exit 85
fi
echo "restored $(cat "$RECLAIMNET_RESTORE_DIR/state") restart=$RECLAIMNET_RESTART_COUNT"
touch "$RECLAIMNET_READY_FILE"
while :; do sleep 0.05; done`)
	e := waitEvent(t, j, EventCheckpointReady, 20*time.Second)
	if e.Checkpoint == nil || e.Checkpoint.Requested || e.RestartCount != 0 {
		t.Fatalf("checkpoint event: got %+v, want an unrequested checkpoint of restart 0", e)
	}
	ckpt := e.Checkpoint.Dir
	if e := waitEvent(t, j, EventRestarting, 20*time.Second); e.ExitCode != 85 {
		t.Errorf("restarting event: got exit %d, want 85", e.ExitCode)
	}
	if e := waitEvent(t, j, EventReady, 20*time.Second); e.RestartCount != 1 || e.RestartTime <= 0 {
		t.Errorf("ready event: got restart count %d time %s, want 1 and a positive restart time", e.RestartCount, e.RestartTime)
	}
	waitFor(t, 10*time.Second, "restored line in log", func() bool {
		b, _ := os.ReadFile(j.LogPath())
		return strings.Contains(string(b), "restored 41 restart=1")
	})
	if st := j.Status(); st.RestartCount != 1 || st.LastCheckpoint == nil || st.LastCheckpoint.Dir != ckpt {
		t.Errorf("status: got %+v, want restart count 1 and last checkpoint %s", st, ckpt)
	}
	j.Stop(context.Background())
	if res := j.Wait(); res.Restarts != 1 || !res.Stopped {
		t.Errorf("result: got %+v, want 1 restart, stopped", res)
	}
}

func TestExit85WithoutCheckpointFails(t *testing.T) {
	s := newSupervisor(t, testConfig(t))
	j := startJob(t, s, `exit 85`)
	res := mustWait(t, j, 20*time.Second)
	if res.ExitCode != 85 || res.Err == nil || !strings.Contains(res.Err.Error(), "no checkpoint") || res.Restarts != 0 {
		t.Errorf("got %+v, want exit 85 with a 'no checkpoint' error and no restart", res)
	}
}

func TestUnsolicitedCheckpoint(t *testing.T) {
	s := newSupervisor(t, testConfig(t))
	j := startJob(t, s, `touch "$RECLAIMNET_READY_FILE"
echo self > "$RECLAIMNET_CKPT_DIR/state"; touch "$RECLAIMNET_CKPT_DIR/.complete"
while :; do sleep 0.05; done`)
	e := waitEvent(t, j, EventCheckpointReady, 20*time.Second)
	if e.Checkpoint == nil || e.Checkpoint.Requested || strings.TrimSpace(readFile(t, filepath.Join(e.Checkpoint.Dir, "state"))) != "self" {
		t.Errorf("got %+v, want the job's own checkpoint, not requested", e.Checkpoint)
	}
}

// TestRequestKeepsCheckpointInProgress: a request that arrives while the
// job writes a checkpoint by itself (a job that saves when it sees a
// reclaim deadline, then the agent asks for the final checkpoint) is
// completed by that checkpoint; the request must not clear the files
// already written (the job's marker would then stand alone: an empty
// checkpoint, refused, and the final checkpoint lost).
func TestRequestKeepsCheckpointInProgress(t *testing.T) {
	s := newSupervisor(t, testConfig(t))
	j := startJob(t, s, `trap 'touch "$HOME/signalled"' USR1
touch "$RECLAIMNET_READY_FILE"
echo self > "$RECLAIMNET_CKPT_DIR/state"
while [ ! -e "$HOME/go" ]; do sleep 0.02; done
touch "$RECLAIMNET_CKPT_DIR/.complete"
while :; do sleep 0.05; done`)
	root := filepath.Join(j.spec.WorkDir, "ckpt")
	waitFor(t, 20*time.Second, "the job to start its own checkpoint", func() bool {
		_, err := os.Stat(filepath.Join(root, "incoming", "state"))
		return err == nil
	})
	type reply struct {
		dir string
		err error
	}
	got := make(chan reply, 1)
	go func() {
		dir, err := j.RequestCheckpoint(context.Background())
		got <- reply{dir, err}
	}()
	waitFor(t, 20*time.Second, "the checkpoint signal", func() bool {
		_, err := os.Stat(filepath.Join(j.spec.Dir, "signalled"))
		return err == nil
	})
	if err := os.WriteFile(filepath.Join(j.spec.Dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("request during the job's own checkpoint: %v, want that checkpoint", r.err)
	}
	if state := strings.TrimSpace(readFile(t, filepath.Join(r.dir, "state"))); state != "self" {
		t.Errorf("checkpoint state: got %q, want the job's own checkpoint (self)", state)
	}
}

func TestExitCodes(t *testing.T) {
	s := newSupervisor(t, testConfig(t))
	for _, tt := range []struct {
		script  string
		code    int
		wantErr bool
	}{{"exit 0", 0, false}, {"exit 3", 3, true}, {"kill -9 $$", -1, true}} {
		t.Run(tt.script, func(t *testing.T) {
			res := mustWait(t, startJob(t, s, tt.script), 20*time.Second)
			if res.ExitCode != tt.code || (res.Err != nil) != tt.wantErr || res.Stopped {
				t.Errorf("got %+v, want exit %d, error %v", res, tt.code, tt.wantErr)
			}
		})
	}
}

// groupPIDs waits until the job's process group has n live members.
func groupPIDs(t *testing.T, j *Job, n int) []int {
	t.Helper()
	var pids []int
	waitFor(t, 10*time.Second, strconv.Itoa(n)+" processes in the job's group", func() bool {
		pids, _ = groupMembers(j.Status().PID)
		return len(pids) >= n
	})
	return pids
}

func TestStopKillsWholeGroup(t *testing.T) {
	cfg := testConfig(t)
	cfg.StopGrace = 500 * time.Millisecond
	s := newSupervisor(t, cfg)
	for _, tt := range []struct {
		name, script string
	}{
		{"children", `sleep 1000 & sleep 1000 & sleep 1000`},
		// Everything ignores SIGTERM: only the SIGKILL after the grace works.
		{"children ignoring SIGTERM", `trap '' TERM; sleep 1000 & (sleep 1000 & sleep 1000) & sleep 1000`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := startJob(t, s, tt.script)
			pids := groupPIDs(t, j, 4)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := j.Stop(ctx); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			for _, p := range pids {
				if alive(p) {
					t.Errorf("pid %d survived Stop", p)
				}
			}
			if left, _ := groupMembers(pids[0]); len(left) != 0 {
				t.Errorf("group members after Stop: got %v, want none", left)
			}
			if res := j.Wait(); !res.Stopped || res.Err != nil {
				t.Errorf("result: got %+v, want stopped", res)
			}
		})
	}
}

func TestLeaderExitKillsOrphans(t *testing.T) {
	cfg := testConfig(t)
	cfg.StopGrace = 500 * time.Millisecond
	s := newSupervisor(t, cfg)
	j := startJob(t, s, `sleep 1000 & touch "$HOME/child"; while [ ! -e "$HOME/go" ]; do sleep 0.02; done; exit 0`)
	waitFor(t, 10*time.Second, "the child started", func() bool { return exists(filepath.Join(j.spec.Dir, "child")) })
	child := 0
	members, _ := groupMembers(j.Status().PID)
	for _, p := range members {
		if b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "cmdline")); string(b) == "sleep\x001000\x00" {
			child = p
		}
	}
	if child == 0 {
		t.Fatalf("no 'sleep 1000' among the job's processes %v", members)
	}
	if err := os.WriteFile(filepath.Join(j.spec.Dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res := mustWait(t, j, 20*time.Second)
	if res.ExitCode != 0 || res.Err != nil {
		t.Errorf("result: got %+v, want exit 0", res)
	}
	if alive(child) {
		t.Errorf("orphaned child %d survived its job", child)
	}
}

func TestDeadlineFile(t *testing.T) {
	s := newSupervisor(t, testConfig(t))
	j := startJob(t, s, `touch "$RECLAIMNET_READY_FILE"; while :; do sleep 0.05; done`)
	path := filepath.Join(j.spec.WorkDir, "deadline")
	if got := readFile(t, path); got != "" {
		t.Errorf("deadline file without a reclaim: got %q, want empty", got)
	}
	d := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600))
	if err := j.SetDeadline(d); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, path); got != "2026-01-02T02:04:05Z\n" {
		t.Errorf("deadline file: got %q, want the UTC RFC 3339 line", got)
	}
	if err := j.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, path); got != "" {
		t.Errorf("cleared deadline file: got %q, want empty", got)
	}
	j.Stop(context.Background())
	if err := j.SetDeadline(d); !errors.Is(err, ErrNotRunning) {
		t.Errorf("SetDeadline after stop: got %v, want ErrNotRunning", err)
	}
}

// TestRestartTimeMeasured uses the fake clock: the job becomes ready only
// after the test has advanced the clock by 7 s.
func TestRestartTimeMeasured(t *testing.T) {
	clock := newFakeClock()
	cfg := testConfig(t)
	cfg.Clock = clock
	s := newSupervisor(t, cfg)
	j := startJob(t, s, `while [ ! -e "$HOME/go" ]; do sleep 0.02; done; touch "$RECLAIMNET_READY_FILE"; while :; do sleep 0.05; done`)
	gate := filepath.Join(j.spec.Dir, "go")
	waitEvent(t, j, EventStarted, 5*time.Second)
	clock.Advance(7 * time.Second)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e := waitEvent(t, j, EventReady, 10*time.Second)
	if e.RestartTime != 7*time.Second {
		t.Errorf("restart time: got %s, want 7s", e.RestartTime)
	}
	if got := j.Status().RestartTime; got != 7*time.Second {
		t.Errorf("status restart time: got %s, want 7s", got)
	}
}

func TestLogCapturedAndRotated(t *testing.T) {
	cfg := testConfig(t)
	cfg.LogMaxBytes = 8 << 10
	cfg.LogKeep = 2
	s := newSupervisor(t, cfg)
	// 2000 numbered lines of ~50 bytes, on stdout and stderr: ~100 KB.
	j := startJob(t, s, `i=0; while [ $i -lt 2000 ]; do echo "line $i out xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"; echo "line $i err" >&2; i=$((i+1)); done`)
	res := mustWait(t, j, 60*time.Second)
	if res.Err != nil {
		t.Fatalf("job: %v", res.Err)
	}
	log := j.LogPath()
	for _, p := range []string{log, log + ".1", log + ".2"} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if st.Size() > cfg.LogMaxBytes {
			t.Errorf("%s: %d bytes, want ≤ %d", p, st.Size(), cfg.LogMaxBytes)
		}
	}
	if _, err := os.Stat(log + ".3"); err == nil {
		t.Errorf("%s.3 exists, want only 2 rotated files kept", log)
	}
	last := readFile(t, log)
	if !strings.Contains(last, "line 1999 out") || !strings.Contains(last, "line 1999 err") {
		t.Errorf("current log lacks the last lines of stdout and stderr")
	}
	if strings.Contains(readFile(t, log+".2"), "line 0 out") {
		t.Error("oldest output still kept: rotation did not drop it")
	}
}

// fakeGPU stands in for NVML (no GPU here): the job's PID holds a GPU
// until releaseAfter process lists have been taken.
type fakeGPU struct {
	pid          func() int
	calls        int
	releaseAfter int
}

func (f *fakeGPU) Discover(context.Context) (gpu.Inventory, error) {
	return gpu.Inventory{Source: gpu.SourceNVML}, nil
}

func (f *fakeGPU) Processes(context.Context) ([]gpu.Process, error) {
	f.calls++
	if f.calls > f.releaseAfter {
		return []gpu.Process{{PID: 1, UsedMemory: 1 << 20}}, nil
	}
	return []gpu.Process{{PID: 1, UsedMemory: 1 << 20}, {PID: f.pid(), UsedMemory: 1 << 30}}, nil
}

func TestGPUTeardownCheck(t *testing.T) {
	for _, tt := range []struct {
		name         string
		releaseAfter int
		wantLeft     bool
	}{{"released after a while", 3, false}, {"never released", 1 << 30, true}} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			var j *Job
			fake := &fakeGPU{releaseAfter: tt.releaseAfter}
			cfg.GPU = fake
			cfg.GPUGoneTimeout = 500 * time.Millisecond
			s := newSupervisor(t, cfg)
			j = startJob(t, s, `sleep 1000`)
			pid := j.Status().PID
			fake.pid = func() int { return pid }
			j.Stop(context.Background())
			res := j.Wait()
			if got := len(res.GPUProcessesLeft) > 0; got != tt.wantLeft {
				t.Errorf("GPU processes left: got %+v, want left=%v", res.GPUProcessesLeft, tt.wantLeft)
			}
			if tt.wantLeft && (res.GPUProcessesLeft[0].PID != pid) {
				t.Errorf("left process: got %d, want the job's pid %d", res.GPUProcessesLeft[0].PID, pid)
			}
			if fake.calls < 2 {
				t.Errorf("process lists taken: got %d, want several (polled until gone)", fake.calls)
			}
		})
	}
}

// TestEmptyCheckpointIsRefused: a .complete with no file beside it (what a
// job that writes its next checkpoint too early leaves in the fresh
// directory) fails the request instead of handing on an empty checkpoint;
// the next one works.
func TestEmptyCheckpointIsRefused(t *testing.T) {
	s := newSupervisor(t, testConfig(t))
	j := startJob(t, s, `n=0
trap 'n=$((n+1)); if [ $n -gt 1 ]; then echo ok > "$RECLAIMNET_CKPT_DIR/state"; fi; touch "$RECLAIMNET_CKPT_DIR/.complete"' USR1
touch "$RECLAIMNET_READY_FILE"
while :; do sleep 0.05; done`)
	_, err := j.RequestCheckpoint(context.Background())
	if !errors.Is(err, ErrCheckpointFailed) || !strings.Contains(err.Error(), "holds no files") {
		t.Fatalf("empty checkpoint: got %v, want ErrCheckpointFailed saying it holds no files", err)
	}
	dir, err := j.RequestCheckpoint(context.Background())
	if err != nil || strings.TrimSpace(readFile(t, filepath.Join(dir, "state"))) != "ok" {
		t.Fatalf("next checkpoint: dir %q err %v, want one holding the job's state", dir, err)
	}
}

package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/sandbox"
	"github.com/reclaimnet/reclaimnet/agent/supervisor"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// worker runs one job hosted on this node, from restore to stop. Its fields
// below mu-comment are guarded by the manager's mutex.
type worker struct {
	m      *Manager
	id     policy.JobID
	cancel context.CancelFunc
	log    *slog.Logger
	notify chan struct{} // a newer state is in st
	wg     sync.WaitGroup

	// Guarded by m.mu.
	st           *state.State
	state        string
	restoredFrom uint64
	restartTime  time.Duration
	checkpoints  int
	failures     int
	lastCkpt     time.Time
	lastErr      string
	pushes       []*push         // the current or last push, then the one before
	result       finish          // set before the worker ends; reason empty when the job left
	ckptTimes    []time.Duration // the last requested checkpoints' write + local commit (overhead.go)
	reportedTr   time.Duration   // the Tr last reported to the leader
	resumeSeen   bool            // the first readiness was handled (overhead.go)
	// What this start restored (restore.go): when, and the bytes fetched
	// for it at their flow's rate, for the downtime limit (design P3.8d).
	restoredAt time.Time
	fetched    int64
	fetchRate  float64
}

func newWorker(m *Manager, id policy.JobID, cancel context.CancelFunc, st *state.State) *worker {
	return &worker{m: m, id: id, cancel: cancel, log: m.log.With("job", id), notify: make(chan struct{}, 1),
		st: st, state: StateStarting}
}

// update hands the worker a newer state; called with m.mu held.
func (w *worker) update(st *state.State) {
	w.st = st
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (w *worker) latest() *state.State {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	return w.st
}

func (w *worker) set(fn func()) {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	fn()
}

func (w *worker) setState(s string) { w.set(func() { w.state = s }) }

func (w *worker) noteErr(err error) {
	w.log.Warn("job", "err", err)
	w.set(func() { w.lastErr = err.Error() })
}

// view is called with m.mu held.
func (w *worker) view(now time.Time) JobView {
	v := JobView{Job: w.id, State: w.state, RestoredFrom: w.restoredFrom, RestartTime: w.restartTime,
		Checkpoints: w.checkpoints, CheckpointFailures: w.failures, LastCheckpoint: w.lastCkpt, LastError: w.lastErr,
		CheckpointTime: slices.Max(append([]time.Duration{0}, w.ckptTimes...))}
	for _, p := range w.pushes {
		v.Transfers = append(v.Transfers, p.view(now))
	}
	return v
}

func (w *worker) dir() string { return filepath.Join(w.m.cfg.WorkDir, string(w.id)) }

func (w *worker) run(ctx context.Context) {
	m := w.m
	st := w.latest()
	j := st.Jobs[w.id]
	w.set(func() { w.result = finish{restarts: j.Restarts} })
	command, dir, readOnly := j.Spec.Command, j.Spec.Dir, slices.Clone(j.Spec.ROPaths)
	for _, p := range readOnly {
		if _, err := os.Stat(p); err != nil {
			w.noteErr(fmt.Errorf("read-only path the job needs: %w", err))
			w.set(func() { w.state, w.result.reason = StateFailed, reasonFailed })
			return
		}
	}
	if b, ok := bundleOf(j); ok {
		layout, err := w.layoutBundle(ctx, b)
		if err != nil {
			if ctx.Err() == nil {
				w.noteErr(fmt.Errorf("bundle: %w", err))
				w.set(func() { w.state, w.result.reason = StateFailed, reasonFailed })
			}
			return
		}
		command, readOnly = BundleCommand(command, layout), append(readOnly, layout)
		if dir == "" {
			dir = layout
		}
		st = w.latest() // the wait may have been long
	}
	restoreDir, from, err := w.prepare(ctx, st)
	if err != nil {
		if ctx.Err() == nil {
			w.noteErr(err)
			w.set(func() { w.state, w.result.reason = StateFailed, reasonFailed })
		}
		return
	}
	if restoreDir != "" {
		defer os.RemoveAll(restoreDir)
		if err := w.restoreOutputs(from); err != nil {
			w.noteErr(err)
			w.set(func() { w.state, w.result.reason = StateFailed, reasonFailed })
			return
		}
		w.set(func() { w.restoredAt = m.cfg.Now() })
	}
	var deadline time.Time
	if r, ok := st.Reclaims[m.cfg.Node]; ok {
		deadline = r.Deadline
	}
	sig, err := supervisorSignal(j.Spec)
	if err != nil {
		w.startFailed(ctx, err, "")
		return
	}
	env := j.Spec.Env
	if len(j.Spec.Secrets) > 0 {
		secrets, err := w.secretEnv(ctx, j)
		if err != nil {
			if ctx.Err() == nil {
				w.noteErr(fmt.Errorf("start: %w", err))
				w.set(func() { w.state, w.result.reason = StateFailed, reasonFailed })
			}
			return
		}
		env = append(slices.Clone(env), secrets...)
	}
	gpus := w.takeGPUs(j.GPUs)
	defer w.set(func() { m.gpus.give(gpus) })
	// The per-job signal, grace and limits come from the replicated spec,
	// so every start and restart, on any node, uses the same ones.
	job, err := m.cfg.Supervisor.Start(ctx, supervisor.Spec{
		JobID: string(w.id), Command: command, Env: env, Dir: dir, ReadOnly: readOnly,
		WorkDir: w.runDir(), RestoreDir: restoreDir, RestartCount: j.Restarts, Deadline: deadline,
		Signal: sig, Grace: j.Spec.Grace, GPUs: gpus,
		Limits: sandbox.Limits{MemoryBytes: j.Spec.Memory, CPUs: j.Spec.CPUs},
	})
	if err != nil {
		if ctx.Err() == nil {
			w.startFailed(ctx, err, filepath.Join(w.dir(), "run", "job.log"))
		}
		return
	}
	m.markLive(w.id)
	w.log.Info("job started", "restored_from", from, "restart_count", j.Restarts)
	w.set(func() { w.state, w.restoredFrom = StateRunning, from })
	w.loop(ctx, job, deadline)
}

// takeGPUs picks the devices of this node the job runs on.
func (w *worker) takeGPUs(n int) []int {
	var gpus []int
	var shared bool
	w.set(func() { gpus, shared = w.m.gpus.take(n) })
	if shared {
		w.log.Warn("job shares a GPU with a job still stopping", "gpus", gpus)
	}
	return gpus
}

// ended handles the job's own end: the host reports it to the leader
// (state.JobExited), which ends the job done (exit 0), requeues it (exit
// 85) or counts an application failure; a run the cluster stopped is not
// reported.
func (w *worker) ended(ctx context.Context, job *supervisor.Job) {
	res := job.Wait()
	if res.Stopped {
		w.setState(StateStopped)
		return
	}
	exit := state.JobExit{ExitCode: res.ExitCode, Signal: res.Signal, LogTail: logTail(job.LogPath(), state.MaxLogTail)}
	switch {
	case errors.Is(res.Err, supervisor.ErrOutOfMemory):
		exit.Reason = "out of memory"
	case res.Err != nil && res.ExitCode == 0 && res.Signal == "":
		exit.Reason = state.TrimLogLine(res.Err.Error())
	}
	if exit.Success() {
		w.set(func() { w.state, w.result.reason = StateExited, reasonExited })
		w.finalOutputs(ctx)
	} else {
		w.noteErr(fmt.Errorf("job ended: %s: %v", exit.Describe(), res.Err))
		w.set(func() { w.state, w.result.reason = StateFailed, reasonFailed })
	}
	w.reportExit(ctx, exit)
}

// startFailed reports a run that could not start (a missing program, a bad
// spec): an application failure like a non-zero exit.
func (w *worker) startFailed(ctx context.Context, err error, logPath string) {
	w.noteErr(fmt.Errorf("start: %w", err))
	w.set(func() { w.state, w.result.reason = StateFailed, reasonFailed })
	exit := state.JobExit{ExitCode: -1, Reason: state.TrimLogLine("start failed: " + err.Error())}
	if logPath != "" {
		exit.LogTail = logTail(logPath, state.MaxLogTail)
	}
	w.reportExit(ctx, exit)
}

// reportExit sends the run's end to the leader, retrying while the leader
// cannot be reached: until it lands, the cluster believes the job runs.
func (w *worker) reportExit(ctx context.Context, exit state.JobExit) {
	var restart int
	w.set(func() { restart = w.result.restarts })
	exit.Node, exit.At, exit.Restart = w.m.cfg.Node, time.Now().UTC(), restart
	cmd := state.JobExited{Job: w.id, Exit: exit}
	for attempt := 0; ; attempt++ {
		err := w.m.submit(ctx, cmd)
		if err == nil || errors.Is(err, state.ErrNotHost) || errors.Is(err, state.ErrUnknownJob) || errors.Is(err, state.ErrInvalidCommand) {
			if err != nil {
				w.noteErr(fmt.Errorf("report exit: %w", err)) // the job was moved or ended meanwhile
			}
			return
		}
		if attempt >= 5 || ctx.Err() != nil {
			w.noteErr(fmt.Errorf("report exit: %w", err))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second << attempt):
		}
	}
}

func (w *worker) stop(job *supervisor.Job) {
	ctx, cancel := context.WithTimeout(context.Background(), w.m.cfg.StopTimeout)
	defer cancel()
	if err := job.Stop(ctx); err != nil {
		w.noteErr(fmt.Errorf("stop: %w", err))
	}
	w.set(func() {
		if w.state == StateRunning || w.state == StateCheckpointing {
			w.state = StateStopped
		}
	})
}

func jobDecision(st *state.State, id policy.JobID) policy.JobDecision {
	for _, jd := range st.Decisions.Jobs {
		if jd.Job == id {
			return jd
		}
	}
	return policy.JobDecision{}
}

// holdersOf returns the holders of version v of job (none if unknown).
func holdersOf(st *state.State, id policy.JobID, v uint64) []policy.NodeID {
	cp, _ := st.CheckpointVersion(id, v)
	return cp.Holders
}

// secretEnv fetches the job's secret variables, for at most a minute.
func (w *worker) secretEnv(ctx context.Context, j state.JobRecord) ([]string, error) {
	if w.m.cfg.SecretEnv == nil {
		return nil, errors.New("this node cannot open job secrets")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return w.m.cfg.SecretEnv(ctx, j)
}

// logTail returns up to n of the last lines of the log at path (from its
// last 64 KiB), each cut to what a state.JobExit keeps; none when it
// cannot be read.
func logTail(path string, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	const window = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > window {
		if _, err := f.Seek(-window, io.SeekEnd); err != nil {
			return nil
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, window))
	if err != nil {
		return nil
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	lines = lines[max(len(lines)-n, 0):]
	for i, l := range lines {
		lines[i] = state.TrimLogLine(l)
	}
	return lines
}

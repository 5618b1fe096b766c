package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/sandbox"
)

// Spec is one job to run.
type Spec struct {
	// JobID is the job's stable id (RECLAIMNET_JOB_ID). Required.
	JobID string
	// Command is the program and its arguments. Required.
	Command []string
	// WorkDir is the supervisor's directory for this job: log, ready and
	// deadline files, checkpoint directories. Created if missing. Required.
	WorkDir string
	// Dir is the job's working directory. Empty: WorkDir/home (WorkDir
	// with the sandbox off). A confined job's must lie in its WorkDir, a
	// guest read-only path or ReadOnly. HOME is WorkDir/home for a
	// confined job (writable), Dir otherwise.
	Dir string
	// ReadOnly are more host paths a confined job sees, read-only (its
	// bundle's layout); ignored with the sandbox off.
	ReadOnly []string
	// Env adds KEY=VALUE entries to the job's minimal environment (PATH,
	// HOME, LANG, which it may override). RECLAIMNET_* variables are
	// always the supervisor's.
	Env []string
	// GPUs are the indices of the GPUs the placement gave the job: only
	// their device nodes are reachable (sandbox), and CUDA_VISIBLE_DEVICES
	// and NVIDIA_VISIBLE_DEVICES name them.
	GPUs []int
	// Limits are the job's memory, CPU and pids limits; zero fields take
	// Config.Limits'. Only a confined job is limited.
	Limits sandbox.Limits
	// RestoreDir is the checkpoint to resume from; empty on a first start.
	RestoreDir string
	// RestartCount is the job's restarts so far (RECLAIMNET_RESTART_COUNT).
	RestartCount int
	// Deadline is a pending reclaim's deadline; zero when none.
	Deadline time.Time
	// Signal, Grace and CheckpointTimeout override the Config's when not
	// zero (reclaimnet run --signal, --grace).
	Signal            syscall.Signal
	Grace             time.Duration
	CheckpointTimeout time.Duration
}

func (s Spec) validate() error {
	var errs []error
	if s.JobID == "" {
		errs = append(errs, errors.New("job id is empty"))
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		errs = append(errs, errors.New("command is empty"))
	}
	if s.WorkDir == "" {
		errs = append(errs, errors.New("work dir is empty"))
	}
	if s.RestartCount < 0 {
		errs = append(errs, fmt.Errorf("restart count %d is negative", s.RestartCount))
	}
	if s.Signal == syscall.SIGKILL || s.Signal == syscall.SIGSTOP || s.Signal < 0 {
		errs = append(errs, fmt.Errorf("checkpoint signal %d cannot be handled by a job", s.Signal))
	}
	for _, g := range s.GPUs {
		if g < 0 {
			errs = append(errs, fmt.Errorf("gpu index %d is negative", g))
		}
	}
	if err := s.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Supervisor starts jobs with a shared Config.
type Supervisor struct {
	// Constant after New.
	cfg      Config
	sb       *sandbox.Sandbox // nil with the sandbox off or unavailable
	sbErr    error            // why the sandbox is unavailable
	sbStatus sandbox.Status
}

// New validates cfg (zero fields take DefaultConfig's values) and returns
// a Supervisor. cfg is copied, never changed. Where jobs cannot be
// confined (and the sandbox is not off) it still returns one, whose Start
// refuses every job; Sandbox says why.
func New(cfg Config) (*Supervisor, error) {
	c := cfg.populate()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("supervisor config: %w", err)
	}
	s := &Supervisor{cfg: c}
	if c.Sandbox.Mode == sandbox.Off {
		s.sbStatus = sandbox.Status{Mode: sandbox.Off, Available: true, Reason: "the operator turned the sandbox off"}
		c.Logger.Warn(s.sbStatus.String())
		return s, nil
	}
	sb, err := sandbox.New(c.Sandbox)
	if err != nil {
		s.sbErr = err
		s.sbStatus = sandbox.Status{Mode: sandbox.On, Reason: err.Error()}
		c.Logger.Error(s.sbStatus.String())
		return s, nil
	}
	s.sb, s.sbStatus = sb, sb.Status()
	c.Logger.Info(s.sbStatus.String())
	return s, nil
}

// Close releases the sandbox's cgroups; call it once every job has ended
// (agent shutdown).
func (s *Supervisor) Close() error {
	if s.sb == nil {
		return nil
	}
	return s.sb.Close()
}

// Sandbox says how jobs are confined here: for the agent's log, status
// page and `reclaimnet status`.
func (s *Supervisor) Sandbox() sandbox.Status { return s.sbStatus }

// KillLeftoverJobs kills every confined job an earlier agent left on this
// machine (sandbox.Sandbox.KillLeftovers); the agent calls it at start,
// before it takes work. Without a working sandbox there is nothing to
// find.
func (s *Supervisor) KillLeftoverJobs(ctx context.Context) ([]string, error) {
	if s.sb == nil {
		return nil, nil
	}
	return s.sb.KillLeftovers(ctx)
}

// Job is one supervised job. Its methods are safe for concurrent use; one
// owner goroutine does all the work and ends when the job ends.
type Job struct {
	// Constant after Start.
	cfg      Config
	spec     Spec
	layout   ckptLayout
	log      *rotatingLog
	logger   *slog.Logger
	ready    string // RECLAIMNET_READY_FILE
	deadline string // RECLAIMNET_DEADLINE_FILE
	sb       *sandbox.Sandbox
	id       *sandbox.Identity // the confined job's uid; nil with the sandbox off
	home     string            // HOME

	msgs   chan any
	events chan Event
	done   chan struct{}

	mu     sync.Mutex // protects status and result
	status Status
	result Result
}

// Start starts the job's process and its owner goroutine. ctx bounds the
// start only; the job runs until it ends or Stop is called.
func (s *Supervisor) Start(ctx context.Context, spec Spec) (*Job, error) {
	if err := spec.validate(); err != nil {
		return nil, fmt.Errorf("job spec: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.sbErr != nil {
		return nil, fmt.Errorf("start job %s: %w", spec.JobID, s.sbErr)
	}
	if spec.Signal == 0 {
		spec.Signal = s.cfg.CheckpointSignal
	}
	if spec.Grace == 0 {
		spec.Grace = s.cfg.StopGrace
	}
	if spec.CheckpointTimeout == 0 {
		spec.CheckpointTimeout = s.cfg.CheckpointTimeout
	}
	if spec.Limits.MemoryBytes == 0 {
		spec.Limits.MemoryBytes = s.cfg.Limits.MemoryBytes
	}
	if spec.Limits.CPUs == 0 {
		spec.Limits.CPUs = s.cfg.Limits.CPUs
	}
	if spec.Limits.Pids == 0 {
		spec.Limits.Pids = s.cfg.Limits.Pids
	}
	spec.Command = slices.Clone(spec.Command)
	spec.Env = slices.Clone(spec.Env)
	spec.GPUs = slices.Clone(spec.GPUs)
	if err := os.MkdirAll(spec.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("create job work dir: %w", err)
	}
	// The job sees its directories at these paths: no symlink on the way.
	work, err := filepath.EvalSymlinks(spec.WorkDir)
	if err != nil {
		return nil, fmt.Errorf("job work dir: %w", err)
	}
	spec.WorkDir = work
	j := &Job{
		cfg:      s.cfg,
		spec:     spec,
		layout:   ckptLayout{root: filepath.Join(spec.WorkDir, "ckpt"), uid: -1, gid: -1},
		logger:   s.cfg.Logger.With("job", spec.JobID),
		ready:    filepath.Join(spec.WorkDir, "control", "ready"),
		deadline: filepath.Join(spec.WorkDir, "deadline"),
		sb:       s.sb,
		msgs:     make(chan any),
		events:   make(chan Event, 256),
		done:     make(chan struct{}),
	}
	if s.sb != nil {
		if j.id, err = s.sb.Acquire(); err != nil {
			return nil, fmt.Errorf("start job %s: %w", spec.JobID, err)
		}
		j.layout.uid, j.layout.gid = int(j.id.UID), int(j.id.GID)
	}
	if err := j.prepareDirs(); err != nil {
		j.release()
		return nil, err
	}
	seq, err := j.layout.nextSeq()
	if err != nil {
		j.release()
		return nil, fmt.Errorf("scan checkpoints: %w", err)
	}
	j.log, err = openRotatingLog(filepath.Join(spec.WorkDir, "job.log"), s.cfg.LogMaxBytes, s.cfg.LogKeep)
	if err != nil {
		j.release()
		return nil, err
	}
	r := &runner{j: j, seq: seq, deadline: spec.Deadline, restoreDir: spec.RestoreDir, restartCount: spec.RestartCount}
	if err := r.startProcess(); err != nil {
		j.log.Close()
		j.release()
		return nil, err
	}
	go r.run()
	return j, nil
}

// prepareDirs lays out the work directory: the supervisor's files
// (job.log, deadline, ckpt/) stay its own; what the job writes to
// (ckpt/incoming, control/ for the ready file, home/) is the job's uid's.
func (j *Job) prepareDirs() error {
	work := j.spec.WorkDir
	if err := os.MkdirAll(j.layout.root, 0o755); err != nil {
		return fmt.Errorf("create job work dir: %w", err)
	}
	if err := j.layout.cleanStale(); err != nil {
		return fmt.Errorf("clean job work dir: %w", err)
	}
	dirs := []string{filepath.Join(work, "control"), OutputDir(work)}
	if j.id != nil {
		dirs = append(dirs, filepath.Join(work, "home"))
		if j.spec.Dir == "" {
			j.spec.Dir = filepath.Join(work, "home")
		}
		j.home = filepath.Join(work, "home")
	} else if j.spec.Dir == "" {
		j.spec.Dir = work
	}
	if j.home == "" {
		j.home = j.spec.Dir
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create job work dir: %w", err)
		}
		// A directory kept from an earlier run of the job belongs to
		// the uid it had then.
		if err := j.layout.chownTree(d); err != nil {
			return fmt.Errorf("job work dir: %w", err)
		}
	}
	return nil
}

// release returns the job's uid lease.
func (j *Job) release() {
	if j.id != nil {
		j.id.Release()
	}
}

// LogPath is the job's current output file.
func (j *Job) LogPath() string { return j.log.path }

// OutputDir is RECLAIMNET_OUTPUT_DIR of a job whose Spec.WorkDir is
// workDir: what the job writes there is part of each of its checkpoints
// (docs/bundles.md, Outputs). Its contents are kept across starts.
func OutputDir(workDir string) string { return filepath.Join(workDir, "output") }

// CheckpointDir is RECLAIMNET_CKPT_DIR.
func (j *Job) CheckpointDir() string { return j.layout.incoming() }

// Events delivers what happens to the job; closed when the job has ended.
// It holds the latest 256 events: a reader that falls behind loses the
// oldest (Status and Wait still say where the job is).
func (j *Job) Events() <-chan Event { return j.events }

// Done is closed when the job has ended.
func (j *Job) Done() <-chan struct{} { return j.done }

// Wait blocks until the job has ended and returns how.
func (j *Job) Wait() Result {
	<-j.done
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.result
}

// Status returns a snapshot.
func (j *Job) Status() Status {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.status
	s.LogDropped, _ = j.log.Dropped()
	return s
}

type ckptReq struct {
	ctx   context.Context
	reply chan ckptReply // buffered 1; the owner always answers
}

type ckptReply struct {
	dir string
	err error
}

type stopReq struct{}

type deadlineReq struct {
	t     time.Time
	reply chan error // buffered 1
}

// send hands m to the owner goroutine unless the job has ended.
func (j *Job) send(ctx context.Context, m any) error {
	select {
	case j.msgs <- m:
		return nil
	case <-j.done:
		return ErrNotRunning
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RequestCheckpoint asks the job for a checkpoint and waits for it. It
// returns the completed checkpoint directory, which the caller owns from
// then on (commit it into ckpt/, then remove it). A checkpoint that fails
// or times out is abandoned and returns an error; the job keeps running.
// Cancelling ctx abandons the request.
func (j *Job) RequestCheckpoint(ctx context.Context) (string, error) {
	req := &ckptReq{ctx: ctx, reply: make(chan ckptReply, 1)}
	if err := j.send(ctx, req); err != nil {
		return "", err
	}
	// The owner answers every request it accepted, also when ctx ends
	// (after removing the directory), so the answer is never lost.
	r := <-req.reply
	return r.dir, r.err
}

// SetDeadline announces a reclaim deadline to the job (RECLAIMNET_DEADLINE_FILE
// now, RECLAIMNET_DEADLINE for processes started later). A zero time clears
// it.
// It returns once the file is written (or could not be: a full disk).
func (j *Job) SetDeadline(t time.Time) error {
	req := deadlineReq{t: t, reply: make(chan error, 1)}
	if err := j.send(context.Background(), req); err != nil {
		return err
	}
	return <-req.reply
}

// Stop ends the job: SIGTERM to every process of it, SIGKILL after the
// grace period, until none is left. It returns when the job
// has ended or ctx ends (the stop goes on). Calling it again is harmless.
func (j *Job) Stop(ctx context.Context) error {
	if err := j.send(ctx, stopReq{}); err != nil && !errors.Is(err, ErrNotRunning) {
		return err
	}
	select {
	case <-j.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// jobEnv builds the environment of one process: a minimal PATH, HOME and
// LANG, the job's --env entries (which may override those three, never a
// RECLAIMNET_* variable), then the supervisor's variables; sorted by name.
func jobEnv(home string, extra []string, vars map[string]string) []string {
	env := map[string]string{"PATH": sandbox.GuestPATH, "HOME": home, "LANG": sandbox.GuestLANG}
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		if k == "" || strings.HasPrefix(k, "RECLAIMNET_") {
			continue
		}
		env[k] = v
	}
	maps.Copy(env, vars)
	keys := slices.Sorted(maps.Keys(env))
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k + "=" + env[k]
	}
	return out
}

// gpuEnv names the job's GPUs for CUDA and NVIDIA's container tools. In
// the sandbox only the assigned devices exist, so CUDA numbers them from
// 0; unconfined it sees all, so they are the host's indices (PCI bus
// order, the order of /dev/nvidiaN and NVML). Without an assignment an
// unconfined job keeps seeing every GPU.
func gpuEnv(gpus []int, confined bool) map[string]string {
	if gpus == nil && !confined {
		return nil
	}
	host := make([]string, len(gpus))
	visible := make([]string, len(gpus))
	for i, g := range gpus {
		host[i], visible[i] = strconv.Itoa(g), strconv.Itoa(g)
		if confined {
			visible[i] = strconv.Itoa(i)
		}
	}
	nv := strings.Join(host, ",")
	if nv == "" {
		nv = "void"
	}
	return map[string]string{
		"CUDA_DEVICE_ORDER":      "PCI_BUS_ID",
		"CUDA_VISIBLE_DEVICES":   strings.Join(visible, ","),
		"NVIDIA_VISIBLE_DEVICES": nv,
	}
}

// signalName returns "USR1" for SIGUSR1.
func signalName(s syscall.Signal) string {
	n := strings.ToUpper(s.String())
	for _, c := range []struct {
		sig  syscall.Signal
		name string
	}{
		{syscall.SIGUSR1, "USR1"}, {syscall.SIGUSR2, "USR2"}, {syscall.SIGTERM, "TERM"},
		{syscall.SIGINT, "INT"}, {syscall.SIGHUP, "HUP"}, {syscall.SIGQUIT, "QUIT"},
		{syscall.SIGALRM, "ALRM"}, {syscall.SIGCONT, "CONT"}, {syscall.SIGWINCH, "WINCH"},
	} {
		if c.sig == s {
			return c.name
		}
	}
	return strconv.Itoa(int(s)) + " " + n
}

// SignalByName parses "USR1", "SIGUSR1", "usr2" or a number, for
// reclaimnet run --signal.
func SignalByName(name string) (syscall.Signal, error) {
	n := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(name)), "SIG")
	if v, err := strconv.Atoi(n); err == nil && v > 0 && v < 65 {
		s := syscall.Signal(v)
		if s == syscall.SIGKILL || s == syscall.SIGSTOP {
			return 0, fmt.Errorf("signal %q cannot be handled by a job", name)
		}
		return s, nil
	}
	for _, s := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTERM, syscall.SIGINT,
		syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGALRM, syscall.SIGCONT, syscall.SIGWINCH} {
		if signalName(s) == n {
			return s, nil
		}
	}
	return 0, fmt.Errorf("unknown signal %q (want USR1, USR2, HUP, INT, QUIT, ALRM, TERM, WINCH, CONT or a number)", name)
}

// writeDeadlineFile replaces the deadline file atomically: an empty file
// when t is zero, else one RFC 3339 line.
func writeDeadlineFile(path string, t time.Time) error {
	content := ""
	if !t.IsZero() {
		content = t.UTC().Format(time.RFC3339) + "\n"
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write deadline file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replace deadline file: %w", err)
	}
	return nil
}

package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
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
	// Dir is the job's working directory; WorkDir when empty.
	Dir string
	// Env adds KEY=VALUE entries to the supervisor's environment.
	// RECLAIMNET_* variables are always the supervisor's.
	Env []string
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
	return errors.Join(errs...)
}

// Supervisor starts jobs with a shared Config.
type Supervisor struct {
	cfg Config // constant after New
}

// New validates cfg (zero fields take DefaultConfig's values) and returns
// a Supervisor. cfg is copied, never changed.
func New(cfg Config) (*Supervisor, error) {
	c := cfg.populate()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("supervisor config: %w", err)
	}
	return &Supervisor{cfg: c}, nil
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
	if spec.Signal == 0 {
		spec.Signal = s.cfg.CheckpointSignal
	}
	if spec.Grace == 0 {
		spec.Grace = s.cfg.StopGrace
	}
	if spec.CheckpointTimeout == 0 {
		spec.CheckpointTimeout = s.cfg.CheckpointTimeout
	}
	if spec.Dir == "" {
		spec.Dir = spec.WorkDir
	}
	spec.Command = slices.Clone(spec.Command)
	spec.Env = slices.Clone(spec.Env)
	j := &Job{
		cfg:      s.cfg,
		spec:     spec,
		layout:   ckptLayout{root: filepath.Join(spec.WorkDir, "ckpt")},
		logger:   s.cfg.Logger.With("job", spec.JobID),
		ready:    filepath.Join(spec.WorkDir, "ready"),
		deadline: filepath.Join(spec.WorkDir, "deadline"),
		msgs:     make(chan any),
		events:   make(chan Event, 256),
		done:     make(chan struct{}),
	}
	if err := os.MkdirAll(j.layout.root, 0o755); err != nil {
		return nil, fmt.Errorf("create job work dir: %w", err)
	}
	if err := j.layout.cleanStale(); err != nil {
		return nil, fmt.Errorf("clean job work dir: %w", err)
	}
	seq, err := j.layout.nextSeq()
	if err != nil {
		return nil, fmt.Errorf("scan checkpoints: %w", err)
	}
	j.log, err = openRotatingLog(filepath.Join(spec.WorkDir, "job.log"), s.cfg.LogMaxBytes, s.cfg.LogKeep)
	if err != nil {
		return nil, err
	}
	r := &runner{j: j, seq: seq, deadline: spec.Deadline, restoreDir: spec.RestoreDir, restartCount: spec.RestartCount}
	if err := r.startProcess(); err != nil {
		j.log.Close()
		return nil, err
	}
	go r.run()
	return j, nil
}

// LogPath is the job's current output file.
func (j *Job) LogPath() string { return j.log.path }

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

// Stop ends the job: SIGTERM to its process group, SIGKILL after the grace
// period, until no process of the group is left. It returns when the job
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

// jobEnv builds the environment of one process.
func jobEnv(base, extra []string, vars map[string]string) []string {
	env := make([]string, 0, len(base)+len(extra)+len(vars))
	for _, kv := range append(slices.Clone(base), extra...) {
		if strings.HasPrefix(kv, "RECLAIMNET_") {
			continue
		}
		env = append(env, kv)
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		env = append(env, k+"="+vars[k])
	}
	return env
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

// startCmd starts one process of the job in its own process group with
// stdout and stderr on a pipe.
func startCmd(argv []string, dir string, env []string) (*exec.Cmd, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("output pipe: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	w.Close() // the job holds the only write ends now
	return cmd, r, nil
}

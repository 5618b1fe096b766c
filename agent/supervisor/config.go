package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/sandbox"
	"github.com/reclaimnet/reclaimnet/gpu"
)

// Config holds what every job on a node shares. Spec fields override the
// per-job parts (signal, grace, checkpoint timeout).
type Config struct {
	// CheckpointSignal asks a job for a checkpoint. SIGUSR1 by default.
	CheckpointSignal syscall.Signal
	// CheckpointTimeout is how long a requested checkpoint may take
	// before it is abandoned. 10 minutes by default: a 48 GB checkpoint
	// written at 100 MB/s takes 8.
	CheckpointTimeout time.Duration
	// StopGrace is the time between SIGTERM and SIGKILL. 30 s by default.
	StopGrace time.Duration
	// PollInterval is how often markers and the process group are looked
	// at. 100 ms by default; it bounds the resolution of restart times.
	PollInterval time.Duration
	// LogMaxBytes is the size at which job.log is rotated (64 MiB), and
	// LogKeep how many rotated files are kept (3).
	LogMaxBytes int64
	LogKeep     int
	// GPU, when set, confirms at teardown that the job's processes no
	// longer hold a GPU (NVML or nvidia-smi process lists). Nil: no check.
	GPU gpu.Discoverer
	// GPUGoneTimeout bounds that confirmation (10 s): the driver frees a
	// context shortly after its process dies.
	GPUGoneTimeout time.Duration
	// Clock supplies time for timeouts, grace periods and measurements.
	// The real clock by default.
	Clock Clock
	// Logger receives the supervisor's own log lines. slog.Default() by
	// default.
	Logger *slog.Logger
	// Sandbox is how jobs are confined: on by default (package sandbox,
	// docs/sandbox.md). Mode Off runs them unconfined.
	Sandbox sandbox.Config
	// Limits are a job's resource limits where its spec sets none (no
	// memory or CPU limit of its own, sandbox.DefaultPids processes):
	// every job is also bounded by the guests' caps.
	Limits sandbox.Limits
}

// DefaultConfig returns the production defaults.
func DefaultConfig() Config {
	return Config{
		CheckpointSignal:  syscall.SIGUSR1,
		CheckpointTimeout: 10 * time.Minute,
		StopGrace:         30 * time.Second,
		PollInterval:      100 * time.Millisecond,
		LogMaxBytes:       64 << 20,
		LogKeep:           3,
		GPUGoneTimeout:    10 * time.Second,
		Clock:             RealClock{},
		Sandbox:           sandbox.DefaultConfig(),
	}
}

// DefaultLocalConfig returns defaults for tests on one machine: short
// timeouts and a fast poll.
func DefaultLocalConfig() Config {
	c := DefaultConfig()
	c.CheckpointTimeout = 30 * time.Second
	c.StopGrace = 3 * time.Second
	c.PollInterval = 20 * time.Millisecond
	c.LogMaxBytes = 1 << 20
	c.GPUGoneTimeout = 2 * time.Second
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.CheckpointSignal <= 0 || c.CheckpointSignal == syscall.SIGKILL || c.CheckpointSignal == syscall.SIGSTOP {
		errs = append(errs, fmt.Errorf("checkpoint signal %d cannot be handled by a job", c.CheckpointSignal))
	}
	if c.CheckpointTimeout <= 0 {
		errs = append(errs, fmt.Errorf("checkpoint timeout %s must be positive", c.CheckpointTimeout))
	}
	if c.StopGrace < 0 {
		errs = append(errs, fmt.Errorf("stop grace %s must not be negative", c.StopGrace))
	}
	if c.PollInterval <= 0 {
		errs = append(errs, fmt.Errorf("poll interval %s must be positive", c.PollInterval))
	}
	if c.LogMaxBytes < 4096 {
		errs = append(errs, fmt.Errorf("log max bytes %d must be at least 4096", c.LogMaxBytes))
	}
	if c.LogKeep < 0 {
		errs = append(errs, fmt.Errorf("log keep %d must not be negative", c.LogKeep))
	}
	if err := c.Sandbox.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("default limits: %w", err))
	}
	return errors.Join(errs...)
}

// populate returns a copy with zero fields filled from DefaultConfig (a
// zero duration means "the default", never "none"); the caller's value is
// never changed.
func (c Config) populate() Config {
	d := DefaultConfig()
	if c.CheckpointSignal == 0 {
		c.CheckpointSignal = d.CheckpointSignal
	}
	if c.CheckpointTimeout == 0 {
		c.CheckpointTimeout = d.CheckpointTimeout
	}
	if c.StopGrace == 0 {
		c.StopGrace = d.StopGrace
	}
	if c.PollInterval == 0 {
		c.PollInterval = d.PollInterval
	}
	if c.LogMaxBytes == 0 {
		c.LogMaxBytes = d.LogMaxBytes
	}
	if c.LogKeep == 0 {
		c.LogKeep = d.LogKeep
	}
	if c.GPUGoneTimeout == 0 {
		c.GPUGoneTimeout = d.GPUGoneTimeout
	}
	if c.Clock == nil {
		c.Clock = RealClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Clock is the time source; tests inject a fake one.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of time.Timer the supervisor uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// RealClock is the system clock.
type RealClock struct{}

func (RealClock) Now() time.Time { return time.Now() }

func (RealClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

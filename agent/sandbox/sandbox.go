package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrUnavailable: jobs cannot be confined on this machine (Status.Reason
// says why); no job starts unless the operator chose Off.
var ErrUnavailable = errors.New("sandbox unavailable")

// Status says how this machine confines jobs, for the agent's log, its
// status page and `reclaimnet status`.
type Status struct {
	Mode Mode
	// Available is true when jobs can start: confined (Mode On and the
	// set-up works) or, with Mode Off, unconfined.
	Available bool
	// Reason explains an unavailable sandbox, or says that jobs run
	// unconfined.
	Reason string
	// Cgroups names the layout in use ("cgroup v2 (unified)", ...).
	Cgroups string
	// UIDs is the guest range, "first-last".
	UIDs string
}

func (s Status) String() string {
	switch {
	case s.Mode == Off:
		return "sandbox off: jobs run unconfined, as the agent's user"
	case !s.Available:
		return "jobs cannot be confined, none starts (--sandbox off runs them unconfined): " + s.Reason
	}
	return fmt.Sprintf("sandbox on: %s, guest uids %s", s.Cgroups, s.UIDs)
}

// Sandbox confines the jobs of one agent. Its methods are safe for
// concurrent use.
type Sandbox struct {
	// Constant after New.
	cfg      Config
	cg       *cgroupLayout
	ids      *idPool
	seccomp  []byte
	root     string   // mount point of job roots
	hidden   []string // canonical
	readOnly []string // canonical

	mu   sync.Mutex      // protects live and seq
	live map[string]bool // job cgroups this Sandbox started and has not removed
	seq  int
}

// New checks that jobs can be confined here (root, cgroups, the uid
// range, seccomp, namespaces: a probe runs the set-up once) and prepares
// the parent cgroup with the guests' caps. cfg is copied, never changed;
// its Mode must be On.
func New(cfg Config) (*Sandbox, error) {
	c := cfg.populate()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("sandbox config: %w", err)
	}
	if c.Mode != On {
		return nil, fmt.Errorf("sandbox mode is %s", c.Mode)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: confining jobs needs root (the agent runs as uid %d)", ErrUnavailable, os.Geteuid())
	}
	s := &Sandbox{cfg: c, live: map[string]bool{}, root: filepath.Join(c.StateDir, "root")}
	if err := checkRange(c.FirstUID, c.UIDCount, "/etc/passwd", "/etc/group"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	s.ids = &idPool{first: c.FirstUID, count: c.UIDCount, dir: filepath.Join(c.StateDir, "uids")}
	for _, p := range append(slices.Clone(alwaysHidden), c.HiddenPaths...) {
		r, err := canonical(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("hidden path: %w", err)
		}
		s.hidden = append(s.hidden, r)
	}
	for _, p := range c.ReadOnlyPaths {
		r, err := canonical(p)
		if err != nil {
			return nil, fmt.Errorf("guest read-only path: %w", err)
		}
		if i := slices.IndexFunc(s.hidden, func(h string) bool { return within(r, h) }); i >= 0 {
			return nil, fmt.Errorf("guest read-only path %s lies in the hidden path %s", p, s.hidden[i])
		}
		s.readOnly = append(s.readOnly, r)
	}
	var err error
	if s.seccomp, err = seccompProgram(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if s.cg, err = detectCgroups(c.CgroupParent); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	mem := c.GuestMemory
	if mem == 0 {
		if mem, err = machineMemory(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		mem = mem / 4 * 3
	}
	if err := s.cg.setupParent(mem, c.GuestCPUs); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := os.MkdirAll(s.root, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := s.probe(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return s, nil
}

// Status reports a working sandbox.
func (s *Sandbox) Status() Status {
	return Status{Mode: On, Available: true, Cgroups: s.cg.String(),
		UIDs: fmt.Sprintf("%d-%d", s.cfg.FirstUID, uint64(s.cfg.FirstUID)+uint64(s.cfg.UIDCount)-1)}
}

// ReadOnlyPaths are the owner's read-only paths, resolved.
func (s *Sandbox) ReadOnlyPaths() []string { return slices.Clone(s.readOnly) }

// Acquire leases a uid and gid for a job.
func (s *Sandbox) Acquire() (*Identity, error) { return s.ids.acquire() }

// KillLeftovers kills every job cgroup under this sandbox's parent that
// this Sandbox did not start, with all its processes, and removes it: the
// jobs of an agent that died (and whose processes did not die with it)
// must never run beside their restarted instances. The agent calls it at
// start, before it takes work. It returns the names of the cgroups
// removed.
func (s *Sandbox) KillLeftovers(ctx context.Context) ([]string, error) {
	names, err := s.cg.children()
	if err != nil {
		return nil, fmt.Errorf("list job cgroups: %w", err)
	}
	var killed []string
	var errs []error
	for _, n := range names {
		s.mu.Lock()
		mine := s.live[n]
		s.mu.Unlock()
		if mine {
			continue
		}
		if err := s.cg.load(n).killAndRemove(ctx); err != nil {
			errs = append(errs, fmt.Errorf("leftover job cgroup %s: %w", n, err))
			continue
		}
		killed = append(killed, n)
	}
	return killed, errors.Join(errs...)
}

// Close removes the parent cgroup once every job this Sandbox started has
// ended (leftovers of another agent are killed as KillLeftovers does): an
// agent that stops leaves nothing behind.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	n := len(s.live)
	s.mu.Unlock()
	if n > 0 {
		return fmt.Errorf("close sandbox: %d job processes still run", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.KillLeftovers(ctx); err != nil {
		return fmt.Errorf("close sandbox: %w", err)
	}
	if err := s.cg.removeParent(); err != nil {
		return fmt.Errorf("close sandbox: %w", err)
	}
	return nil
}

// killAndRemove kills everything in the cgroup, waits until it is empty
// and removes it.
func (g *jobGroup) killAndRemove(ctx context.Context) error {
	for {
		ps, err := g.procs()
		if err != nil {
			return err
		}
		if len(ps) == 0 {
			return g.delete()
		}
		if err := g.kill(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d processes still running: %w", len(ps), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// probe runs the set-up of a job once, without a job: namespaces, mounts,
// privilege drop and seccomp all work here, or the error says which does
// not.
func (s *Sandbox) probe() error {
	dir, err := os.MkdirTemp(s.cfg.StateDir, "probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	id, err := s.Acquire()
	if err != nil {
		return err
	}
	defer id.Release()
	p, err := s.start(Spec{Name: "probe", Identity: id, Argv: []string{"/bin/true"}, Dir: dir, Writable: []string{dir}}, true)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	return p.Close()
}

// machineMemory is the machine's RAM in bytes.
func machineMemory() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		var kb int64
		if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
			return kb << 10, nil
		}
	}
	return 0, errors.New("no MemTotal in /proc/meminfo")
}

// starter runs every start of a job's init on one OS thread that never
// exits: Pdeathsig fires when the thread that forked a process ends, not
// the process, and any other thread may be ended by the Go runtime.
var starter = sync.OnceValue(func() chan func() {
	c := make(chan func())
	go func() {
		runtime.LockOSThread()
		for f := range c {
			f()
		}
	}()
	return c
})

func onStarterThread(f func()) {
	done := make(chan struct{})
	starter() <- func() { defer close(done); f() }
	<-done
}

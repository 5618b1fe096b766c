package sandbox

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
)

// Mode says whether jobs are confined.
type Mode int

const (
	// On confines every job; where confinement cannot be set up, no job
	// starts. The default.
	On Mode = iota
	// Off runs jobs unconfined, as the agent's own user with its
	// privileges: for a single trusted lab only. The operator chooses it
	// explicitly (reclaimnet agent --sandbox off), and it is reported.
	Off
)

func (m Mode) String() string {
	switch m {
	case On:
		return "on"
	case Off:
		return "off"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// ParseMode reads "on" or "off" (reclaimnet agent --sandbox).
func ParseMode(s string) (Mode, error) {
	switch s {
	case "on":
		return On, nil
	case "off":
		return Off, nil
	}
	return 0, fmt.Errorf("sandbox mode %q: want on or off", s)
}

// Defaults, documented in docs/sandbox.md.
const (
	// DefaultFirstUID is the first uid (and gid) of the guest range:
	// above the ranges distributions, systemd (dynamic users, containers up
	// to 1879048191) and SSSD's default ID mapping (up to 2000200000) hand
	// out, and below 2^31, where some tools misread ids as negative.
	DefaultFirstUID = 2_100_000_000
	// DefaultUIDCount is the size of the range: jobs running at once on
	// one machine.
	DefaultUIDCount = 1000
	// DefaultPids is a job's process and thread limit.
	DefaultPids = 4096
	// DefaultCgroupParent is the cgroup, under every hierarchy's root,
	// that holds the guests' caps and one cgroup per job.
	DefaultCgroupParent = "reclaimnet"
	// DefaultStateDir holds the uid leases and the mount point of job
	// roots.
	DefaultStateDir = "/run/reclaimnet/sandbox"
	// GuestPATH is the PATH a job gets unless its --env sets one.
	GuestPATH = "/usr/local/bin:/usr/bin:/bin"
	// GuestLANG is the LANG a job gets unless its --env sets one.
	GuestLANG = "C.UTF-8"
)

// Limits are one job's resource limits. Zero means "no limit of this
// kind" beyond the guests' caps; Pids zero means DefaultPids.
type Limits struct {
	// MemoryBytes is the job's memory limit (RAM, page cache and tmpfs
	// files it writes, /tmp and /dev/shm included); no swap.
	MemoryBytes int64
	// CPUs is the job's CPU time limit in CPUs (1.5 = one and a half).
	CPUs float64
	// Pids bounds the job's processes and threads.
	Pids int64
}

// Config is how a machine confines its jobs. The zero value is valid: on,
// with the defaults below.
type Config struct {
	// Mode is On unless the operator chose Off.
	Mode Mode
	// FirstUID and UIDCount are the reserved range: a running job gets one
	// of them as its uid and gid. DefaultFirstUID and DefaultUIDCount when
	// zero. The range must hold no user or group of the passwd and group
	// databases and not the agent's own ids; New checks.
	FirstUID uint32
	UIDCount uint32
	// GuestMemory caps the memory of all jobs together, in bytes
	// (reclaimnet agent --guest-memory). Zero: three quarters of the
	// machine's memory.
	GuestMemory int64
	// GuestCPUs caps the CPU time of all jobs together, in CPUs
	// (--guest-cpus). Zero: no cap.
	GuestCPUs float64
	// ReadOnlyPaths are host directories or files every job sees
	// read-only at the same path (--guest-ro-path, e.g. /datasets).
	ReadOnlyPaths []string
	// HiddenPaths are host paths no job may see even inside a directory
	// it sees: the agent's data directory, its keys and control socket.
	// /etc/shadow and /etc/gshadow are always hidden.
	HiddenPaths []string
	// CgroupParent names the cgroup that holds every job's cgroup
	// (DefaultCgroupParent). Agents sharing a machine need one each: the
	// start-up sweep kills every job cgroup under it.
	CgroupParent string
	// StateDir is DefaultStateDir when empty.
	StateDir string
	// DevDir is where the GPU device nodes are (/dev); a test points it
	// at fake nodes.
	DevDir string
}

// DefaultConfig is the production configuration: on, with every default.
func DefaultConfig() Config {
	return Config{
		Mode:         On,
		FirstUID:     DefaultFirstUID,
		UIDCount:     DefaultUIDCount,
		CgroupParent: DefaultCgroupParent,
		StateDir:     DefaultStateDir,
		DevDir:       "/dev",
	}
}

var cgroupName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$`)

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	c = c.populate()
	var errs []error
	if c.Mode != On && c.Mode != Off {
		errs = append(errs, fmt.Errorf("sandbox mode %d: want on or off", int(c.Mode)))
	}
	if c.FirstUID == 0 {
		errs = append(errs, errors.New("guest uid range must not include 0 (root)"))
	}
	if uint64(c.FirstUID)+uint64(c.UIDCount) > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("guest uid range %d+%d reaches past 2^31-1", c.FirstUID, c.UIDCount))
	}
	if c.FirstUID <= 65535 && uint64(c.FirstUID)+uint64(c.UIDCount) > 65534 {
		errs = append(errs, fmt.Errorf("guest uid range %d+%d includes nobody (65534) or 65535", c.FirstUID, c.UIDCount))
	}
	if c.GuestMemory < 0 {
		errs = append(errs, fmt.Errorf("guest memory %d must not be negative", c.GuestMemory))
	}
	if c.GuestCPUs < 0 || math.IsNaN(c.GuestCPUs) || math.IsInf(c.GuestCPUs, 0) {
		errs = append(errs, fmt.Errorf("guest cpus %v must be a non-negative number", c.GuestCPUs))
	}
	if !cgroupName.MatchString(c.CgroupParent) {
		errs = append(errs, fmt.Errorf("cgroup parent %q: want names of [A-Za-z0-9._-] separated by /", c.CgroupParent))
	}
	for _, p := range append(append([]string{c.StateDir, c.DevDir}, c.ReadOnlyPaths...), c.HiddenPaths...) {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("path %q must be absolute", p))
		}
	}
	for _, p := range c.ReadOnlyPaths {
		if filepath.Clean(p) == "/" {
			errs = append(errs, errors.New("read-only path / would show guests the whole host"))
		}
	}
	return errors.Join(errs...)
}

// populate returns a copy with zero fields filled from DefaultConfig.
func (c Config) populate() Config {
	d := DefaultConfig()
	if c.FirstUID == 0 && c.UIDCount == 0 {
		c.FirstUID, c.UIDCount = d.FirstUID, d.UIDCount
	}
	if c.UIDCount == 0 {
		c.UIDCount = d.UIDCount
	}
	if c.CgroupParent == "" {
		c.CgroupParent = d.CgroupParent
	}
	if c.StateDir == "" {
		c.StateDir = d.StateDir
	}
	if c.DevDir == "" {
		c.DevDir = d.DevDir
	}
	return c
}

// Validate reports limits that cannot be set.
func (l Limits) Validate() error {
	var errs []error
	if l.MemoryBytes < 0 {
		errs = append(errs, fmt.Errorf("memory limit %d must not be negative", l.MemoryBytes))
	}
	if l.MemoryBytes > 0 && l.MemoryBytes < 4<<20 {
		errs = append(errs, fmt.Errorf("memory limit %d is below 4 MiB: no process starts in it", l.MemoryBytes))
	}
	if l.CPUs < 0 || math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) {
		errs = append(errs, fmt.Errorf("cpu limit %v must be a non-negative number", l.CPUs))
	}
	if l.CPUs > 0 && l.CPUs < 0.01 {
		errs = append(errs, fmt.Errorf("cpu limit %v is below 0.01 CPU", l.CPUs))
	}
	if l.Pids < 0 {
		errs = append(errs, fmt.Errorf("pids limit %d must not be negative", l.Pids))
	}
	return errors.Join(errs...)
}

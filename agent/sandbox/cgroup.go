package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

const (
	cgroupRoot = "/sys/fs/cgroup"
	// cpuPeriod is the CFS period of CPU limits (100 ms, the kernel's
	// default).
	cpuPeriod = 100_000
)

// ErrNoCgroups: the machine has no cgroup hierarchy a job can be confined
// in.
var ErrNoCgroups = errors.New("no usable cgroups")

// cgroupLayout is how this machine's cgroups hold jobs:
//
//   - unified (cgroup v2 only, e.g. Debian 12, Ubuntu 22.04): one
//     hierarchy at /sys/fs/cgroup with every controller; devices are
//     filtered by an eBPF program on the job's cgroup;
//   - hybrid (v1 controllers under /sys/fs/cgroup/NAME plus a v2 hierarchy
//     without controllers at /sys/fs/cgroup/unified): limits, devices and
//     the freezer in v1; the v2 group tracks every process and kills them
//     all at once (cgroup.kill);
//   - legacy (v1 only): limits in v1; processes are killed one by one.
type cgroupLayout struct {
	mode   cgroups.CGMode
	v2     string // mount point of the v2 hierarchy in use; "" when none
	v1     bool   // limits live in v1 controllers
	parent string // "/reclaimnet"
}

func (l *cgroupLayout) String() string {
	switch l.mode {
	case cgroups.Unified:
		return "cgroup v2 (unified)"
	case cgroups.Hybrid:
		return "cgroup v1 controllers with a v2 hierarchy (hybrid)"
	case cgroups.Legacy:
		return "cgroup v1 (legacy)"
	}
	return "no cgroups"
}

func detectCgroups(parent string) (*cgroupLayout, error) {
	l := &cgroupLayout{mode: cgroups.Mode(), parent: "/" + parent}
	switch l.mode {
	case cgroups.Unified:
		l.v2 = cgroupRoot
	case cgroups.Hybrid:
		l.v2, l.v1 = filepath.Join(cgroupRoot, "unified"), true
	case cgroups.Legacy:
		l.v1 = true
	default:
		return nil, fmt.Errorf("%w: nothing mounted at %s", ErrNoCgroups, cgroupRoot)
	}
	if l.v1 {
		subs, err := v1Hierarchy()
		if err != nil {
			return nil, err
		}
		var have []string
		for _, s := range subs {
			have = append(have, string(s.Name()))
		}
		for _, need := range []cgroup1.Name{cgroup1.Memory, cgroup1.Cpu, cgroup1.Pids, cgroup1.Devices} {
			if !slices.Contains(have, string(need)) {
				return nil, fmt.Errorf("%w: the v1 %s controller is not mounted under %s", ErrNoCgroups, need, cgroupRoot)
			}
		}
	} else {
		ctrl, err := os.ReadFile(filepath.Join(l.v2, "cgroup.controllers"))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoCgroups, err)
		}
		for _, need := range []string{"memory", "cpu", "pids"} {
			if !slices.Contains(strings.Fields(string(ctrl)), need) {
				return nil, fmt.Errorf("%w: the v2 hierarchy lacks the %s controller", ErrNoCgroups, need)
			}
		}
	}
	return l, nil
}

// v1Hierarchy is the v1 controllers a job uses, those mounted here.
func v1Hierarchy() ([]cgroup1.Subsystem, error) {
	all := []cgroup1.Subsystem{
		cgroup1.NewMemory(cgroupRoot, cgroup1.OptionalSwap()),
		cgroup1.NewCpu(cgroupRoot),
		cgroup1.NewPids(cgroupRoot),
		cgroup1.NewDevices(cgroupRoot),
		cgroup1.NewFreezer(cgroupRoot),
	}
	var out []cgroup1.Subsystem
	for _, s := range all {
		p, ok := s.(interface{ Path(string) string })
		if !ok {
			continue
		}
		if st, err := os.Stat(p.Path("/")); err == nil && st.IsDir() && isCgroupFS(p.Path("/")) {
			out = append(out, s)
		}
	}
	return out, nil
}

func isCgroupFS(p string) bool {
	var st unix.Statfs_t
	return unix.Statfs(p, &st) == nil && (st.Type == unix.CGROUP_SUPER_MAGIC || st.Type == unix.CGROUP2_SUPER_MAGIC)
}

func hasFile(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}

// cpuQuota converts CPUs to a CFS quota per cpuPeriod.
func cpuQuota(cpus float64) int64 {
	return max(int64(math.Round(cpus*cpuPeriod)), 1000)
}

// v1Resources are the limits of a v1 cgroup.
func v1Resources(dir string, memory int64, cpus float64, pids int64, devices []specs.LinuxDeviceCgroup) *specs.LinuxResources {
	r := &specs.LinuxResources{Devices: devices}
	if memory > 0 {
		r.Memory = &specs.LinuxMemory{Limit: &memory}
		if hasFile(filepath.Join(cgroupRoot, "memory", dir), "memory.memsw.limit_in_bytes") {
			swap := memory // memory plus swap: no swap
			r.Memory.Swap = &swap
		}
	}
	if cpus > 0 {
		q, p := cpuQuota(cpus), uint64(cpuPeriod)
		r.CPU = &specs.LinuxCPU{Quota: &q, Period: &p}
	}
	if pids > 0 {
		r.Pids = &specs.LinuxPids{Limit: &pids}
	}
	return r
}

// v2Resources are the limits of a v2 cgroup with controllers (unified).
func v2Resources(dir string, memory int64, cpus float64, pids int64, devices []specs.LinuxDeviceCgroup) *cgroup2.Resources {
	r := &cgroup2.Resources{Devices: devices}
	if memory > 0 {
		r.Memory = &cgroup2.Memory{Max: &memory}
		if hasFile(filepath.Join(cgroupRoot, path.Dir(dir)), "memory.swap.max") || hasFile(filepath.Join(cgroupRoot, dir), "memory.swap.max") {
			zero := int64(0)
			r.Memory.Swap = &zero
		}
	}
	if cpus > 0 {
		q, p := cpuQuota(cpus), uint64(cpuPeriod)
		r.CPU = &cgroup2.CPU{Max: cgroup2.NewCPUMax(&q, &p)}
	}
	if pids > 0 {
		r.Pids = &cgroup2.Pids{Max: pids}
	}
	return r
}

// setupParent creates the parent cgroup with the guests' caps.
func (l *cgroupLayout) setupParent(memory int64, cpus float64) error {
	if l.v1 {
		if _, err := cgroup1.New(cgroup1.StaticPath(l.parent), v1Resources(l.parent, memory, cpus, 0, nil), cgroup1.WithHierarchy(v1Hierarchy)); err != nil {
			return fmt.Errorf("cgroup %s (v1): %w", l.parent, err)
		}
	}
	if l.v2 != "" {
		res := &cgroup2.Resources{}
		if !l.v1 {
			res = v2Resources(l.parent, memory, cpus, 0, nil)
			// Children set pids limits: the controller must reach them.
			res.Pids = &cgroup2.Pids{Max: math.MaxInt32}
		}
		if _, err := cgroup2.NewManager(l.v2, l.parent, res); err != nil {
			return fmt.Errorf("cgroup %s (v2): %w", l.parent, err)
		}
	}
	return nil
}

// jobGroup is the cgroup of one job process and everything it starts.
type jobGroup struct {
	l    *cgroupLayout
	path string // "/reclaimnet/NAME"
	v1   cgroup1.Cgroup
	v2   *cgroup2.Manager
}

func (l *cgroupLayout) create(name string, lim Limits, devices []specs.LinuxDeviceCgroup) (*jobGroup, error) {
	g := &jobGroup{l: l, path: path.Join(l.parent, name)}
	pids := lim.Pids
	if pids == 0 {
		pids = DefaultPids
	}
	var err error
	if l.v1 {
		if g.v1, err = cgroup1.New(cgroup1.StaticPath(g.path), v1Resources(g.path, lim.MemoryBytes, lim.CPUs, pids, devices), cgroup1.WithHierarchy(v1Hierarchy)); err != nil {
			g.delete()
			return nil, fmt.Errorf("create cgroup %s (v1): %w", g.path, err)
		}
	}
	if l.v2 != "" {
		res := &cgroup2.Resources{}
		if !l.v1 {
			res = v2Resources(g.path, lim.MemoryBytes, lim.CPUs, pids, devices)
		}
		if g.v2, err = cgroup2.NewManager(l.v2, g.path, res); err != nil {
			g.delete()
			return nil, fmt.Errorf("create cgroup %s (v2): %w", g.path, err)
		}
	}
	return g, nil
}

// load opens an existing job cgroup (the start-up sweep's leftovers).
func (l *cgroupLayout) load(name string) *jobGroup {
	g := &jobGroup{l: l, path: path.Join(l.parent, name)}
	if l.v1 {
		g.v1, _ = cgroup1.Load(cgroup1.StaticPath(g.path), cgroup1.WithHierarchy(v1Hierarchy))
	}
	if l.v2 != "" {
		if _, err := os.Stat(filepath.Join(l.v2, g.path)); err == nil {
			g.v2, _ = cgroup2.Load(g.path, cgroup2.WithMountpoint(l.v2))
		}
	}
	return g
}

// children lists the names of the job cgroups under the parent, in every
// hierarchy.
func (l *cgroupLayout) children() ([]string, error) {
	var dirs []string
	if l.v2 != "" {
		dirs = append(dirs, filepath.Join(l.v2, l.parent))
	}
	if l.v1 {
		subs, err := v1Hierarchy()
		if err != nil {
			return nil, err
		}
		for _, s := range subs {
			dirs = append(dirs, s.(interface{ Path(string) string }).Path(l.parent))
		}
	}
	var names []string
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.IsDir() && !slices.Contains(names, e.Name()) {
				names = append(names, e.Name())
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// v2Dir opens the v2 cgroup's directory for clone3's CLONE_INTO_CGROUP:
// the process starts inside it, before it can run anything.
func (g *jobGroup) v2Dir() (*os.File, error) {
	if g.v2 == nil {
		return nil, nil
	}
	return os.OpenFile(filepath.Join(g.l.v2, g.path), unix.O_DIRECTORY|unix.O_RDONLY, 0)
}

// addV1 moves pid into the job's v1 cgroups (the v2 one it entered at
// clone).
func (g *jobGroup) addV1(pid int) error {
	if g.v1 == nil {
		return nil
	}
	if err := g.v1.AddProc(uint64(pid)); err != nil {
		return fmt.Errorf("join cgroup %s (v1): %w", g.path, err)
	}
	return nil
}

// procs lists the processes in the job's cgroup.
func (g *jobGroup) procs() ([]int, error) {
	if g.v2 != nil {
		ps, err := g.v2.Procs(true)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		out := make([]int, len(ps))
		for i, p := range ps {
			out[i] = int(p)
		}
		return out, err
	}
	if g.v1 == nil {
		return nil, nil
	}
	ps, err := g.v1.Processes(cgroup1.Pids, true)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	out := make([]int, 0, len(ps))
	for _, p := range ps {
		if !slices.Contains(out, p.Pid) {
			out = append(out, p.Pid)
		}
	}
	return out, err
}

// kill sends SIGKILL to every process of the cgroup: cgroup.kill where
// there is a v2 group, else each process listed, the cgroup frozen while
// they are listed so that none forks past the list.
func (g *jobGroup) kill() error {
	if g.v2 != nil {
		return g.v2.Kill()
	}
	if g.v1 == nil {
		return nil
	}
	frozen := g.v1.Freeze() == nil
	ps, err := g.procs()
	for _, p := range ps {
		syscall.Kill(p, syscall.SIGKILL)
	}
	if frozen {
		g.v1.Thaw()
	}
	return err
}

// oomKills is how many processes of the job the kernel's OOM killer
// killed at the job's (or the guests') memory limit.
func (g *jobGroup) oomKills() (uint64, error) {
	if !g.l.v1 && g.v2 != nil {
		st, err := g.v2.StatFiltered(cgroup2.StatMemoryEvents)
		if err != nil {
			return 0, err
		}
		if st.MemoryEvents == nil {
			return 0, nil
		}
		return st.MemoryEvents.OomKill, nil
	}
	if g.v1 == nil {
		return 0, nil
	}
	st, err := g.v1.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		return 0, err
	}
	return st.GetMemoryOomControl().GetOomKill(), nil
}

// delete removes the job's cgroups; they must be empty.
func (g *jobGroup) delete() error {
	var errs []error
	if g.v2 != nil {
		if err := g.v2.Delete(); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	} else if g.l.v2 != "" {
		os.Remove(filepath.Join(g.l.v2, g.path))
	}
	if g.v1 != nil {
		if err := g.v1.Delete(); err != nil && !errors.Is(err, cgroup1.ErrCgroupDeleted) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeParent removes the (empty) parent cgroup from every hierarchy.
func (l *cgroupLayout) removeParent() error {
	var errs []error
	if l.v2 != "" {
		if m, err := cgroup2.Load(l.parent, cgroup2.WithMountpoint(l.v2)); err == nil {
			if err := m.Delete(); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if l.v1 {
		if c, err := cgroup1.Load(cgroup1.StaticPath(l.parent), cgroup1.WithHierarchy(v1Hierarchy)); err == nil {
			if err := c.Delete(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

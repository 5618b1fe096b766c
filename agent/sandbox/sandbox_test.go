package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"golang.org/x/sys/unix"
)

// testConfig is a sandbox of the test's own: its cgroup parent and state
// directory. It needs root: without it the test skips, except under
// CI=true, where it fails.
func testConfig(t *testing.T) Config {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but not root: the sandbox needs root")
		}
		t.Skip("needs root")
	}
	c := DefaultConfig()
	c.CgroupParent = fmt.Sprintf("reclaimnet-test-%d-%s", os.Getpid(), regexp.MustCompile(`[^A-Za-z0-9._-]`).ReplaceAllString(t.Name(), "_"))
	c.StateDir = t.TempDir()
	return c
}

func newSandbox(t *testing.T, c Config) *Sandbox {
	t.Helper()
	s, err := New(c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// job is a started job process with its own work directory and log.
type job struct {
	*Process
	work string
	log  string
}

// startShell starts script confined, in a work directory owned by the
// job's uid, and stops it at the end of the test.
func startShell(t *testing.T, s *Sandbox, script string, mod ...func(*Spec)) *job {
	t.Helper()
	id, err := s.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(id.Release)
	work := t.TempDir()
	if err := os.Chown(work, int(id.UID), int(id.GID)); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "log")
	out, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	sp := Spec{Name: "t", Identity: id, Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=" + GuestPATH, "HOME=" + work},
		Dir: work, Writable: []string{work}, Output: out}
	for _, m := range mod {
		m(&sp)
	}
	p, err := s.Start(sp)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		p.Kill()
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &job{Process: p, work: work, log: log}
}

func (j *job) waitExit(t *testing.T) Exit {
	t.Helper()
	select {
	case e := <-j.Exited():
		return e
	case <-time.After(time.Minute):
		t.Fatalf("job did not end within a minute:\n%s", j.output(t))
		return Exit{}
	}
}

func (j *job) output(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(j.log)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (j *job) waitFile(t *testing.T, name string) {
	t.Helper()
	wait.For(t, 20*time.Second, name+" in the job's directory", func() bool {
		_, err := os.Stat(filepath.Join(j.work, name))
		return err == nil
	})
}

func TestConfigValidation(t *testing.T) {
	for name, c := range map[string]Config{
		"root in range":   {FirstUID: 0, UIDCount: 10, CgroupParent: "x"},
		"past 2^31":       {FirstUID: 1 << 31, UIDCount: 10},
		"nobody in range": {FirstUID: 65000, UIDCount: 1000},
		"bad parent":      {CgroupParent: "../escape"},
		"relative path":   {ReadOnlyPaths: []string{"datasets"}},
		"all of the host": {ReadOnlyPaths: []string{"/"}},
		"negative cap":    {GuestMemory: -1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero config: %v, want valid (the defaults)", err)
	}
	for name, l := range map[string]Limits{"tiny memory": {MemoryBytes: 1 << 20}, "negative cpus": {CPUs: -1}, "tiny cpus": {CPUs: 0.001}, "negative pids": {Pids: -5}} {
		if err := l.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, l)
		}
	}
	if m, err := ParseMode("off"); err != nil || m != Off {
		t.Errorf("ParseMode(off): %v, %v", m, err)
	}
	if _, err := ParseMode("maybe"); err == nil {
		t.Error("ParseMode(maybe): no error")
	}
}

// TestCheckRange: users and groups of the databases inside the range, and
// the agent's own ids, are refused; ids outside it are not.
func TestCheckRange(t *testing.T) {
	dir := t.TempDir()
	passwd, group := filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	os.WriteFile(passwd, []byte("root:x:0:0::/root:/bin/sh\nalice:x:5005:5005::/home/alice:/bin/sh\n#bob:x:5006:5006::/:/bin/sh\n"), 0o644)
	os.WriteFile(group, []byte("root:x:0:\nlab:x:5010:alice\n"), 0o644)
	if err := checkRange(6000, 100, passwd, group); err != nil {
		t.Errorf("range without users: %v", err)
	}
	err := checkRange(5000, 100, passwd, group)
	if err == nil || !strings.Contains(err.Error(), "user alice") || !strings.Contains(err.Error(), "group lab") || strings.Contains(err.Error(), "bob") {
		t.Errorf("range with alice and lab: got %v, want both named (and not the commented bob)", err)
	}
	if err := checkRange(uint32(os.Getuid()), 1, filepath.Join(dir, "none"), filepath.Join(dir, "none")); err == nil {
		t.Error("range holding the agent's own uid accepted")
	}
}

// TestIdentityLeases: every running job has its own uid, also across two
// agents sharing the machine; a released uid can be leased again; a full
// range says so.
func TestIdentityLeases(t *testing.T) {
	dir := t.TempDir()
	a := &idPool{first: DefaultFirstUID, count: 3, dir: dir}
	b := &idPool{first: DefaultFirstUID, count: 3, dir: dir} // another agent
	var ids []*Identity
	seen := map[uint32]bool{}
	for i, p := range []*idPool{a, b, a} {
		id, err := p.acquire()
		if err != nil {
			t.Fatalf("lease %d: %v", i, err)
		}
		if seen[id.UID] || id.GID != id.UID {
			t.Fatalf("lease %d: uid %d gid %d, want a fresh uid with gid = uid (had %v)", i, id.UID, id.GID, seen)
		}
		seen[id.UID] = true
		ids = append(ids, id)
	}
	if _, err := b.acquire(); !errors.Is(err, ErrNoFreeUID) {
		t.Fatalf("fourth lease of three: got %v, want ErrNoFreeUID", err)
	}
	ids[1].Release()
	ids[1].Release() // harmless
	id, err := a.acquire()
	if err != nil || id.UID != ids[1].UID {
		t.Fatalf("after a release: got %v, %v; want uid %d again", id, err, ids[1].UID)
	}
}

// TestPlan: the system read-only, hidden paths masked before the job's
// own directories are bound and again inside them, binds shallowest
// first, GPU nodes in /dev.
func TestPlan(t *testing.T) {
	v := view{writable: []string{"/data/jobs/j/run"}, readOnly: []string{"/datasets", "/data/jobs/j/run/restore"}, gpus: []string{"/fake/nvidia3"}}
	ops, err := plan(v, []string{"/etc/shadow", "/datasets/private"})
	if err != nil {
		t.Fatal(err)
	}
	idx := func(k mountKind, dst string) int {
		return slices.IndexFunc(ops, func(o mountOp) bool { return o.Kind == k && o.Dst == dst })
	}
	usr := ops[idx(mBind, "/usr")]
	if !usr.RO || usr.Dev {
		t.Errorf("/usr: %+v, want read-only, nodev", usr)
	}
	if idx(mBind, "/home") >= 0 || idx(mBind, "/root") >= 0 || idx(mBind, "/run") >= 0 || idx(mBind, "/var") >= 0 {
		t.Error("plan binds /home, /root, /run or /var")
	}
	if i := idx(mBind, "/dev/nvidia3"); i < 0 || ops[i].Src != "/fake/nvidia3" || !ops[i].Dev {
		t.Errorf("gpu node: %v", ops)
	}
	shadow, ds, run, restore := idx(mMask, "/etc/shadow"), idx(mBind, "/datasets"), idx(mBind, "/data/jobs/j/run"), idx(mBind, "/data/jobs/j/run/restore")
	if shadow < 0 || shadow > ds || ds > run || run > restore {
		t.Errorf("order: shadow mask %d, /datasets %d, work %d, restore %d; want masks, then binds shallowest first", shadow, ds, run, restore)
	}
	if ops[run].RO || !ops[restore].RO || !ops[ds].RO {
		t.Errorf("work dir must be writable, restore and datasets read-only: %+v %+v %+v", ops[run], ops[restore], ops[ds])
	}
	var privateMasks []int
	for i, o := range ops {
		if o.Kind == mMask && o.Dst == "/datasets/private" {
			privateMasks = append(privateMasks, i)
		}
	}
	if len(privateMasks) != 2 || privateMasks[1] < restore {
		t.Errorf("a hidden path inside a bound directory: masks at %v, want one before and one after the binds (after %d)", privateMasks, restore)
	}
}

// TestSeccompProgram: Docker's profile compiles for this architecture.
func TestSeccompProgram(t *testing.T) {
	prog, err := seccompProgram()
	if err != nil {
		t.Fatal(err)
	}
	if len(prog)%8 != 0 || len(prog)/8 < 300 {
		t.Errorf("program of %d bytes, want hundreds of 8-byte instructions", len(prog))
	}
}

// TestLimits: the pids limit stops a fork loop, the CPU limit throttles a
// busy loop, and the guests' memory cap kills a job without a limit of
// its own.
func TestLimits(t *testing.T) {
	c := testConfig(t)
	c.GuestMemory = 64 << 20
	s := newSandbox(t, c)

	j := startShell(t, s, `n=0; while [ $n -lt 60 ]; do sleep 30 & n=$((n+1)); echo $n > "$HOME/n"; done; echo all started`,
		func(sp *Spec) { sp.Limits.Pids = 20 })
	j.waitExit(t)
	b, _ := os.ReadFile(filepath.Join(j.work, "n"))
	if n, _ := strconv.Atoi(strings.TrimSpace(string(b))); n >= 20 || strings.Contains(j.output(t), "all started") || !strings.Contains(j.output(t), "fork") {
		t.Errorf("a fork loop under a pids limit of 20 started %d processes:\n%s", n, j.output(t))
	}
	j.Kill()

	busy := startShell(t, s, `end=$(($(date +%s) + 2)); while [ $(date +%s) -lt $end ]; do :; done`, func(sp *Spec) { sp.Limits.CPUs = 0.1 })
	busy.waitExit(t)
	if n := busy.g.throttled(t); n == 0 {
		t.Error("a busy loop under a 0.1-CPU limit was never throttled")
	}

	hog := startShell(t, s, `exec python3 -c "a = b'x' * (256 << 20)"`)
	if e := hog.waitExit(t); e.Signal != syscall.SIGKILL {
		t.Errorf("a 256 MiB job under a 64 MiB guest cap: %+v, want killed", e)
	}
	if hog.OOMKills() == 0 {
		t.Error("OOM kill not counted")
	}
}

// throttled is how often the kernel throttled the job's CPU time.
func (g *jobGroup) throttled(t *testing.T) uint64 {
	t.Helper()
	if g.l.v1 {
		st, err := g.v1.Stat(cgroup1.IgnoreNotExist)
		if err != nil {
			t.Fatal(err)
		}
		return st.GetCPU().GetThrottling().GetThrottledPeriods()
	}
	st, err := g.v2.StatFiltered(cgroup2.StatCPU)
	if err != nil {
		t.Fatal(err)
	}
	return st.GetCPU().GetNrThrottled()
}

// TestDeviceCgroup: a process in the job's cgroup cannot open a GPU node
// it was not given even where the node exists (outside the job's /dev),
// and reaches the one it was given (ENXIO: no driver behind the fake
// node).
func TestDeviceCgroup(t *testing.T) {
	dev := t.TempDir()
	for name, minor := range map[string]uint32{"nvidia0": 0, "nvidia1": 1} {
		p := filepath.Join(dev, name)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(195, minor))); err != nil {
			t.Fatal(err)
		}
	}
	c := testConfig(t)
	c.DevDir = dev
	s := newSandbox(t, c)
	j := startShell(t, s, `touch "$HOME/up"; exec sleep 1000`, func(sp *Spec) { sp.GPUs = []int{0} })
	j.waitFile(t, "up")
	procsFile := filepath.Join(cgroupRoot, "devices", j.Cgroup(), "cgroup.procs")
	if !s.cg.v1 {
		procsFile = filepath.Join(s.cg.v2, j.Cgroup(), "cgroup.procs")
	}
	for node, want := range map[string]string{"nvidia0": "No such device or address", "nvidia1": "Operation not permitted"} {
		// An intruder in the job's cgroup but in the host's mount namespace.
		out, _ := exec.Command("/bin/sh", "-c", `echo $$ > "$1" && exec cat "$2"`, "sh", procsFile, filepath.Join(dev, node)).CombinedOutput()
		if !strings.Contains(string(out), want) {
			t.Errorf("open %s from the job's cgroup: %q, want %q", node, out, want)
		}
	}
}

// TestHiddenInsideReadOnlyPath: a hidden path inside a directory the
// owner shares is masked there.
func TestHiddenInsideReadOnlyPath(t *testing.T) {
	shared := t.TempDir()
	os.MkdirAll(filepath.Join(shared, "private"), 0o755)
	os.WriteFile(filepath.Join(shared, "private", "key"), []byte("secret"), 0o644)
	os.WriteFile(filepath.Join(shared, "public"), []byte("data"), 0o644)
	c := testConfig(t)
	c.ReadOnlyPaths = []string{shared}
	c.HiddenPaths = []string{filepath.Join(shared, "private")}
	s := newSandbox(t, c)
	j := startShell(t, s, `cat "$1/public"; echo; ls -A "$1/private" | wc -l; cat "$1/private/key" 2>&1`, func(sp *Spec) {
		sp.Argv = append(sp.Argv, "sh", shared)
	})
	if e := j.waitExit(t); e.Code == -1 {
		t.Fatalf("job: %+v", e)
	}
	out := j.output(t)
	if !strings.HasPrefix(out, "data\n0\n") || strings.Contains(out, "secret") {
		t.Errorf("job output: %q, want the shared file, an empty private dir and no key", out)
	}
}

// TestSignals: the checkpoint signal reaches the main process only, the
// stop signal every process of the job (one that left the process group
// with setsid too).
func TestSignals(t *testing.T) {
	s := newSandbox(t, testConfig(t))
	j := startShell(t, s, `
trap 'echo main USR1' USR1
trap 'echo main TERM; exit 0' TERM
(trap 'echo child USR1' USR1; trap 'echo child TERM; exit 0' TERM; touch "$HOME/child"; while :; do sleep 0.05; done) &
setsid sh -c 'trap "echo setsid TERM; exit 0" TERM; touch "$HOME/setsid"; while :; do sleep 0.05; done' &
touch "$HOME/main"
while :; do sleep 0.05; done`)
	for _, f := range []string{"main", "child", "setsid"} {
		j.waitFile(t, f)
	}
	if err := j.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the main process's USR1 trap", func() bool { return strings.Contains(j.output(t), "main USR1") })
	if err := j.Terminate(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-j.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("job did not end after SIGTERM:\n%s", j.output(t))
	}
	out := j.output(t)
	for _, want := range []string{"main TERM", "child TERM", "setsid TERM"} {
		if !strings.Contains(out, want) {
			t.Errorf("%q missing:\n%s", want, out)
		}
	}
	if strings.Contains(out, "child USR1") {
		t.Errorf("the checkpoint signal reached a child:\n%s", out)
	}
	if err := j.Signal(syscall.SIGKILL); err == nil {
		t.Error("Signal(SIGKILL): no error, want a refusal (only forwarded signals)")
	}
}

// TestLifeline: when the agent's end of the lifeline closes (as when the
// agent dies, whatever its threads did), the init kills the job.
func TestLifeline(t *testing.T) {
	s := newSandbox(t, testConfig(t))
	j := startShell(t, s, `setsid sleep 1000 & touch "$HOME/up"; exec sleep 1000`)
	j.waitFile(t, "up")
	ps, _ := j.Procs()
	if len(ps) < 3 {
		t.Fatalf("processes: %v, want the init, the job and its setsid child", ps)
	}
	j.life.Close()
	select {
	case <-j.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("job still running 10 s after its lifeline closed")
	}
	for _, p := range ps {
		if alive(p) {
			t.Errorf("process %d survived", p)
		}
	}
}

// TestKillLeftovers: a job cgroup this sandbox did not start (an earlier
// agent's, whose job outlived it) is killed with its processes and
// removed; the sandbox's own running job is left alone.
func TestKillLeftovers(t *testing.T) {
	s := newSandbox(t, testConfig(t))
	mine := startShell(t, s, `touch "$HOME/up"; exec sleep 1000`)
	mine.waitFile(t, "up")

	g, err := s.cg.create("earlier.7.1", Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	orphan := exec.Command("/bin/sleep", "1000")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { orphan.Process.Kill(); orphan.Wait() })
	if err := g.addV1(orphan.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if g.v2 != nil {
		if err := g.v2.AddProc(uint64(orphan.Process.Pid)); err != nil {
			t.Fatal(err)
		}
	}
	reaped := make(chan struct{})
	go func() { orphan.Wait(); close(reaped) }()

	gone, err := s.KillLeftovers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gone, []string{"earlier.7.1"}) {
		t.Errorf("removed: got %v, want [earlier.7.1]", gone)
	}
	select {
	case <-reaped:
	case <-time.After(10 * time.Second):
		t.Error("the leftover job's process survived the sweep")
	}
	names, _ := s.cg.children()
	if !slices.Equal(names, []string{mine.Name()}) {
		t.Errorf("job cgroups after the sweep: %v, want only the running job's %s", names, mine.Name())
	}
	if ps, _ := mine.Procs(); len(ps) < 2 {
		t.Errorf("the sandbox's own job lost its processes: %v", ps)
	}
}

// TestStartErrors: a missing program, an invisible working directory and
// a GPU that does not exist are refused with what is wrong.
func TestStartErrors(t *testing.T) {
	s := newSandbox(t, testConfig(t))
	id, err := s.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer id.Release()
	work := t.TempDir()
	base := Spec{Name: "bad", Identity: id, Argv: []string{"/bin/true"}, Env: []string{"PATH=" + GuestPATH}, Dir: work, Writable: []string{work}}
	for name, tt := range map[string]struct {
		mod  func(*Spec)
		want string
	}{
		"missing program": {func(sp *Spec) { sp.Argv = []string{"/nonexistent/prog"} }, "/nonexistent/prog"},
		"not on PATH":     {func(sp *Spec) { sp.Argv = []string{"no-such-command-here"} }, "not found on PATH"},
		"invisible dir":   {func(sp *Spec) { sp.Dir = "/root" }, "not visible"},
		"missing gpu":     {func(sp *Spec) { sp.GPUs = []int{97} }, "gpu 97"},
		"no identity":     {func(sp *Spec) { sp.Identity = nil }, "identity"},
	} {
		sp := base
		tt.mod(&sp)
		if _, err := s.Start(sp); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error naming %q", name, err, tt.want)
		}
	}
	if names, _ := s.cg.children(); len(names) != 0 {
		t.Errorf("failed starts left cgroups %v", names)
	}
}

// TestNewRefusesWithoutRoot: an unprivileged agent cannot confine jobs
// and says so (checked in a child running as nobody).
func TestNewRefusesWithoutRoot(t *testing.T) {
	if os.Getenv("RECLAIMNET_TEST_UNPRIVILEGED") == "1" {
		_, err := New(Config{StateDir: os.TempDir()})
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "needs root") {
			t.Fatalf("New as uid %d: got %v, want ErrUnavailable saying it needs root", os.Getuid(), err)
		}
		return
	}
	testConfig(t) // root, to run the child as nobody
	// The child must be able to run a copy of this test binary.
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandbox.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestNewRefusesWithoutRoot$")
	cmd.Env = append(os.Environ(), "RECLAIMNET_TEST_UNPRIVILEGED=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
}

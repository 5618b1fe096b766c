package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/sandbox"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"golang.org/x/sys/unix"
)

// probeScript runs as a guest job and reports, one line each, what it can
// do from the inside: who it is, its capabilities, which of the agent's
// files it reaches, whether it can signal a host process, which processes
// it sees, whether seccomp refuses a user namespace, where it can write.
const probeScript = `
echo "id $(id -u) $(id -g) [$(id -G)]"
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | tr -d ' \t' | sed 's/^/status /'
for f in /etc/shadow "$PROBE_DATA/tls/node-key.pem" "$PROBE_DATA/gossip.key" "$PROBE_DATA/agent.sock" "$PROBE_OTHER/job.log" /root /home /run /var; do
  if [ ! -e "$f" ]; then echo "path absent $f"
  elif [ -d "$f" ] && ls "$f" >/dev/null 2>&1; then echo "path readable $f"
  elif [ ! -d "$f" ] && cat "$f" >/dev/null 2>&1; then echo "path readable $f"
  else echo "path unreadable $f"; fi
done
echo "datadir $(ls -A "$PROBE_DATA" | tr '\n' ' ')"
if kill -0 "$PROBE_HOSTPID" 2>/dev/null; then echo "kill0 ok"; else echo "kill0 failed"; fi
kill -9 "$PROBE_HOSTPID" 2>/dev/null
for p in /proc/[0-9]*; do echo "proc ${p#/proc/} $(cat $p/comm 2>/dev/null)"; done
if unshare -U true 2>/dev/null; then echo "unshare ok"; else echo "unshare failed"; fi
if touch "$PROBE_RO/x" 2>/dev/null; then echo "rowrite ok"; else echo "rowrite failed"; fi
if touch /tmp/probe 2>/dev/null; then echo "tmpwrite ok"; else echo "tmpwrite failed"; fi
echo "tmp $(ls -A /tmp | tr '\n' ' ')"
echo "dev $(ls -A /dev | tr '\n' ' ')"
echo "probe done"
`

// probeReport is the probe's log, by first word.
type probeReport map[string][]string

func parseProbe(log string) probeReport {
	r := probeReport{}
	for _, line := range strings.Split(log, "\n") {
		k, v, _ := strings.Cut(line, " ")
		r[k] = append(r[k], v)
	}
	return r
}

func (r probeReport) one(t *testing.T, key string) string {
	t.Helper()
	if len(r[key]) != 1 {
		t.Fatalf("probe line %q: got %q, want one", key, r[key])
	}
	return r[key][0]
}

// fakeAgentDataDir lays out what an agent keeps on a node, as a guest
// must not find it: keys, the control socket (listening), another job's
// directory. It returns the data dir and the work dir of a job in it.
func fakeAgentDataDir(t *testing.T, job string) (data, work string) {
	t.Helper()
	data = t.TempDir()
	for _, d := range []string{"tls", "jobs/other/run", "jobs/" + job + "/run"} {
		if err := os.MkdirAll(filepath.Join(data, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, mode := range map[string]os.FileMode{"tls/node-key.pem": 0o600, "gossip.key": 0o600, "jobs/other/run/job.log": 0o644} {
		if err := os.WriteFile(filepath.Join(data, name), []byte("secret\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("unix", filepath.Join(data, "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return data, filepath.Join(data, "jobs", job, "run")
}

// hostProcess starts a process of the host as nobody, as the owner's
// processes a guest must not reach.
func hostProcess(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// TestSandboxProbe runs the probe as a guest job in the agent's real
// layout (its work dir inside the data dir) and checks every report.
func TestSandboxProbe(t *testing.T) {
	data, work := fakeAgentDataDir(t, "probe")
	ro := t.TempDir()
	if err := os.Chmod(ro, 0o777); err != nil { // writable by anyone, but mounted read-only
		t.Fatal(err)
	}
	marker, err := os.CreateTemp("/tmp", "reclaimnet-host-marker-")
	if err != nil {
		t.Fatal(err)
	}
	marker.Close()
	t.Cleanup(func() { os.Remove(marker.Name()) })
	host := hostProcess(t)
	cfg := testConfig(t)
	cfg.Sandbox.HiddenPaths = []string{data}
	cfg.Sandbox.ReadOnlyPaths = append(cfg.Sandbox.ReadOnlyPaths, ro)
	s := newSupervisor(t, cfg)
	j := startJob(t, s, probeScript, func(sp *Spec) {
		sp.WorkDir = work
		sp.Env = []string{"PROBE_DATA=" + data, "PROBE_OTHER=" + filepath.Join(data, "jobs/other/run"),
			"PROBE_HOSTPID=" + strconv.Itoa(host.Process.Pid), "PROBE_RO=" + ro}
	})
	if res := mustWait(t, j, 30*time.Second); res.ExitCode != 0 {
		t.Fatalf("probe: %+v\n%s", res, readFile(t, j.LogPath()))
	}
	log := readFile(t, j.LogPath())
	r := parseProbe(log)
	if len(r["probe"]) != 1 {
		t.Fatalf("probe did not finish:\n%s", log)
	}

	idf := strings.SplitN(r.one(t, "id"), " ", 3)
	if len(idf) != 3 {
		t.Fatalf("id line %q: want UID GID [GROUPS]", r.one(t, "id"))
	}
	uid, _ := strconv.Atoi(idf[0])
	gid, _ := strconv.Atoi(idf[1])
	groups := idf[2]
	first := sandbox.DefaultFirstUID
	if uid < first || uid >= first+sandbox.DefaultUIDCount || uid == os.Getuid() || gid != uid {
		t.Errorf("guest uid %d gid %d: want one of the guest range %d+, not the agent's %d, gid = uid", uid, gid, first, os.Getuid())
	}
	if groups != "["+strconv.Itoa(gid)+"]" {
		t.Errorf("groups: got %s, want only its own gid (no supplementary groups)", groups)
	}
	status := map[string]string{}
	for _, l := range r["status"] {
		k, v, _ := strings.Cut(l, ":")
		status[k] = v
	}
	for k, want := range map[string]string{"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"} {
		if status[k] != want {
			t.Errorf("%s: got %q, want %s", k, status[k], want)
		}
	}
	paths := map[string]string{}
	for _, l := range r["path"] {
		state, p, _ := strings.Cut(l, " ")
		paths[p] = state
	}
	for _, p := range []string{filepath.Join(data, "tls/node-key.pem"), filepath.Join(data, "gossip.key"), filepath.Join(data, "agent.sock"),
		filepath.Join(data, "jobs/other/run/job.log"), "/root", "/home", "/run", "/var"} {
		if r, _ := filepath.EvalSymlinks("/etc/resolv.conf"); p == "/run" && strings.HasPrefix(r, "/run/") {
			continue // bound at its target so that name lookups work
		}
		if paths[p] != "absent" {
			t.Errorf("%s: %s from inside the job, want absent", p, paths[p])
		}
	}
	if paths["/etc/shadow"] == "readable" || paths["/etc/shadow"] == "" {
		t.Errorf("/etc/shadow: got %q, want unreadable or absent", paths["/etc/shadow"])
	}
	if got := strings.TrimSpace(r.one(t, "datadir")); got != "jobs" {
		t.Errorf("agent data dir from inside: got %q, want only the path to its own dir (jobs)", got)
	}
	if got := r.one(t, "kill0"); got != "failed" {
		t.Errorf("kill -0 of a host process: %s, want failed", got)
	}
	if st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(host.Process.Pid), "stat")); err != nil || strings.Contains(string(st), ") Z") {
		t.Error("the host process died: the job could kill it")
	}
	var comms []string
	for _, l := range r["proc"] {
		pid, comm, _ := strings.Cut(l, " ")
		if n, _ := strconv.Atoi(pid); n > 100 {
			t.Errorf("job sees process %s (%s): PIDs of its own namespace are small", pid, comm)
		}
		comms = append(comms, comm)
	}
	if slices.Contains(comms, "sleep") || slices.Contains(comms, "supervisor.test") || len(comms) > 8 {
		t.Errorf("processes seen from inside: %v, want only the job's own (its init, the shell and its pipeline)", comms)
	}
	if got := r.one(t, "unshare"); got != "failed" {
		t.Errorf("unshare -U (user namespace): %s, want failed (seccomp)", got)
	}
	if got := r.one(t, "rowrite"); got != "failed" {
		t.Errorf("write into a read-only path (mode 0777 on the host): %s, want failed", got)
	}
	if got := r.one(t, "tmpwrite"); got != "ok" {
		t.Errorf("write into /tmp: %s, want ok (a private /tmp)", got)
	}
	if strings.Contains(r.one(t, "tmp"), filepath.Base(marker.Name())) {
		t.Errorf("/tmp from inside shows the host's %s", marker.Name())
	}
	if got, want := strings.Fields(r.one(t, "dev")), []string{"fd", "full", "null", "random", "shm", "stderr", "stdin", "stdout", "tty", "urandom", "zero"}; !slices.Equal(got, want) {
		t.Errorf("/dev: got %v, want %v", got, want)
	}
}

// TestSandboxOutOfMemory: a job over its memory limit is killed by the
// kernel and the supervisor says so.
func TestSandboxOutOfMemory(t *testing.T) {
	s := newSupervisor(t, testConfig(t))
	j := startJob(t, s, "", func(sp *Spec) {
		sp.Command = []string{debianPython, "-c", "a = b'x' * (512 << 20); print('allocated')"}
		sp.Limits.MemoryBytes = 64 << 20
	})
	res := mustWait(t, j, time.Minute)
	if !errors.Is(res.Err, ErrOutOfMemory) || !strings.Contains(res.Err.Error(), "out of memory") || res.OOMKills == 0 || res.Signal != "killed" {
		t.Fatalf("result: got %+v, want killed, ErrOutOfMemory, OOM kills counted", res)
	}
	if strings.Contains(readFile(t, j.LogPath()), "allocated") {
		t.Error("the job allocated 512 MiB under a 64 MiB limit")
	}
}

// cgroupOf is a process's cgroup membership as /proc shows it.
func cgroupOf(pid int) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	return string(b)
}

// findProcess returns a live host process in pid's cgroup whose command
// line is argv.
func findProcess(pid int, argv ...string) int {
	want := strings.Join(argv, "\x00") + "\x00"
	cg := cgroupOf(pid)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); string(b) == want && cgroupOf(p) == cg && alive(p) {
			return p
		}
	}
	return 0
}

// TestSandboxStopKillsSetsidChild: a child that leaves the job's process
// group with setsid still dies when the job is stopped.
func TestSandboxStopKillsSetsidChild(t *testing.T) {
	cfg := testConfig(t)
	cfg.StopGrace = 500 * time.Millisecond
	s := newSupervisor(t, cfg)
	j := startJob(t, s, `setsid sleep 1001 & touch "$RECLAIMNET_READY_FILE"; while :; do sleep 0.05; done`)
	wait.For(t, 10*time.Second, "job ready", func() bool { return j.Status().Ready })
	var child int
	wait.For(t, 10*time.Second, "the setsid child", func() bool {
		child = findProcess(j.Status().PID, "sleep", "1001")
		return child != 0
	})
	if _, pg, _ := parseStat([]byte(readFile(t, filepath.Join("/proc", strconv.Itoa(child), "stat")))); pg == j.Status().PID {
		t.Fatalf("child %d is still in the job's process group: setsid did not take it out", child)
	}
	if err := j.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if alive(child) {
		t.Errorf("setsid child %d survived Stop", child)
	}
}

// helperAgentEnv carries the sandbox configuration to
// TestHelperAgent, which stands in for an agent.
const helperAgentEnv = "RECLAIMNET_TEST_HELPER_AGENT"

// TestHelperAgent is not a test: run by TestSandboxJobDiesWithAgent as a
// separate process, it starts a job in the sandbox it is given, writes
// the job's main PID to a file and waits to be killed.
func TestHelperAgent(t *testing.T) {
	arg := os.Getenv(helperAgentEnv)
	if arg == "" {
		t.Skip("helper process for TestSandboxJobDiesWithAgent")
	}
	var h struct {
		Sandbox sandbox.Config
		Work    string
		PIDFile string
	}
	if err := json.Unmarshal([]byte(arg), &h); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultLocalConfig()
	cfg.Sandbox = h.Sandbox
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	j, err := s.Start(context.Background(), Spec{JobID: "orphan", WorkDir: h.Work,
		Command: []string{"/bin/sh", "-c", `setsid sleep 1002 & touch "$RECLAIMNET_READY_FILE"; exec sleep 1003`}})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "job ready", func() bool { return j.Status().Ready })
	if err := os.WriteFile(h.PIDFile, []byte(strconv.Itoa(j.Status().PID)), 0o644); err != nil {
		t.Fatal(err)
	}
	select {}
}

// TestSandboxJobDiesWithAgent: SIGKILL of the agent (a helper process)
// ends its job, setsid children included; the next agent's start-up sweep
// finds the dead job's cgroup and removes it.
func TestSandboxJobDiesWithAgent(t *testing.T) {
	cfg := testConfig(t)
	work := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "pid")
	arg, _ := json.Marshal(map[string]any{"Sandbox": cfg.Sandbox, "Work": work, "PIDFile": pidFile})
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperAgent$", "-test.v")
	helper.Env = append(os.Environ(), helperAgentEnv+"="+string(arg))
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	helper.Stderr = helper.Stdout
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { helper.Process.Kill(); helper.Wait() })
	go func() { // drains the helper's output into the test log
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			t.Log("helper: " + sc.Text())
		}
	}()
	var mainPID int
	wait.For(t, 30*time.Second, "the helper agent's job", func() bool {
		b, err := os.ReadFile(pidFile)
		mainPID, _ = strconv.Atoi(string(b))
		return err == nil && mainPID != 0
	})
	var child int
	wait.For(t, 10*time.Second, "the job's setsid child", func() bool {
		child = findProcess(mainPID, "sleep", "1002")
		return child != 0
	})
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.ForWhy(t, 10*time.Second, "the job to die with its agent", func() (bool, string) {
		return !alive(mainPID) && !alive(child), "main alive " + strconv.FormatBool(alive(mainPID)) + ", setsid child alive " + strconv.FormatBool(alive(child))
	})

	next := newSupervisor(t, cfg)
	gone, err := next.KillLeftoverJobs(context.Background())
	if err != nil {
		t.Fatalf("KillLeftoverJobs: %v", err)
	}
	if len(gone) != 1 || !strings.HasPrefix(gone[0], "orphan.") {
		t.Errorf("leftover cgroups removed: got %v, want the orphan's", gone)
	}
	if again, _ := next.KillLeftoverJobs(context.Background()); len(again) != 0 {
		t.Errorf("second sweep: got %v, want nothing left", again)
	}
}

// TestSandboxUnavailableRefusesJobs: a sandbox that cannot be set up
// (here: a guest range that holds the system's users) refuses every job
// with the reason; with the sandbox off, jobs run unconfined, as root,
// and the supervisor says so.
func TestSandboxUnavailableRefusesJobs(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sandbox.FirstUID, cfg.Sandbox.UIDCount = 1, 100
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v, want a supervisor that refuses jobs", err)
	}
	st := s.Sandbox()
	if st.Available || st.Mode != sandbox.On || !strings.Contains(st.Reason, "guest range") {
		t.Fatalf("status: got %+v, want unavailable, saying the range holds users", st)
	}
	_, err = s.Start(context.Background(), Spec{JobID: "refused", Command: []string{"/bin/true"}, WorkDir: t.TempDir()})
	if !errors.Is(err, ErrSandboxUnavailable) || !strings.Contains(err.Error(), "guest range") {
		t.Errorf("Start: got %v, want ErrSandboxUnavailable with the reason", err)
	}

	cfg = testConfig(t)
	cfg.Sandbox.Mode = sandbox.Off
	off := newSupervisor(t, cfg)
	if st := off.Sandbox(); st.Mode != sandbox.Off || !st.Available || !strings.Contains(st.String(), "unconfined") {
		t.Errorf("status with the sandbox off: got %+v (%s), want off, available, saying unconfined", st, st)
	}
	j := startJob(t, off, `id -u > "$HOME/uid"`)
	if res := mustWait(t, j, 20*time.Second); res.Err != nil {
		t.Fatal(res.Err)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(j.spec.Dir, "uid"))); got != strconv.Itoa(os.Getuid()) {
		t.Errorf("uid with the sandbox off: got %s, want the agent's %d", got, os.Getuid())
	}
}

// TestSandboxGPUs gives a job GPU 1 of two fake ones (device nodes with
// NVIDIA's major number and no driver behind them): only its node is in
// the job's /dev (opening it reaches the missing driver: ENXIO), the
// other is absent, and the environment names it.
func TestSandboxGPUs(t *testing.T) {
	dev := t.TempDir()
	for name, minor := range map[string]int{"nvidia0": 0, "nvidia1": 1, "nvidiactl": 255} {
		p := filepath.Join(dev, name)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(195, uint32(minor)))); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o666); err != nil { // as NVIDIA's nodes are
			t.Fatal(err)
		}
	}
	cfg := testConfig(t)
	cfg.Sandbox.DevDir = dev
	s := newSupervisor(t, cfg)
	j := startJob(t, s, `for d in nvidia0 nvidia1 nvidiactl; do
  if [ ! -e /dev/$d ]; then echo "$d absent"; elif ( : < /dev/$d ) 2>/dev/null; then echo "$d open"; else echo "$d exists"; fi
done
python3 -c 'import os, errno
try:
    os.open("/dev/nvidia1", os.O_RDWR)
except OSError as e:
    print("nvidia1-errno", errno.errorcode[e.errno])'
echo "env $CUDA_VISIBLE_DEVICES $NVIDIA_VISIBLE_DEVICES"`, func(sp *Spec) { sp.GPUs = []int{1} })
	if res := mustWait(t, j, 20*time.Second); res.Err != nil {
		t.Fatalf("%v\n%s", res.Err, readFile(t, j.LogPath()))
	}
	log := readFile(t, j.LogPath())
	for _, want := range []string{"nvidia0 absent", "nvidia1 exists", "nvidiactl exists", "nvidia1-errno ENXIO", "env 0 1"} {
		if !strings.Contains(log, want+"\n") {
			t.Errorf("job log lacks %q:\n%s", want, log)
		}
	}
}

// TestSandboxCheckpointSealed: what a confined job hands over is made the
// supervisor's before anyone reads it. A symlink (to a host file the
// agent, as root, would read) fails the checkpoint; a .failed that is a
// FIFO does not block the supervisor; a good checkpoint ends root's and
// readable, and the job can no longer change it.
func TestSandboxCheckpointSealed(t *testing.T) {
	s := newSupervisor(t, testConfig(t))
	j := startJob(t, s, `n=0
trap 'n=$((n+1)); D="$RECLAIMNET_CKPT_DIR"
case $n in
  1) echo x > "$D/state"; ln -s /etc/shadow "$D/steal"; touch "$D/.complete" ;;
  2) mkfifo "$D/.failed" ;;
  *) (umask 077; echo secret-state > "$D/state"); mkdir "$D/sub"; echo y > "$D/sub/more"; echo "$D" > "$HOME/last"; touch "$D/.complete" ;;
esac' USR1
touch "$RECLAIMNET_READY_FILE"
while [ ! -s "$HOME/go" ]; do sleep 0.05; done
p=$(cat "$HOME/go")
if echo z > "$p/state" 2>/dev/null; then echo "overwrite ok"; else echo "overwrite failed"; fi
if ln -s /etc/shadow "$p/sub/new" 2>/dev/null; then echo "link ok"; else echo "link failed"; fi`)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := j.RequestCheckpoint(ctx); !errors.Is(err, ErrCheckpointFailed) || !strings.Contains(err.Error(), "steal") {
		t.Errorf("checkpoint with a symlink: got %v, want it failed, naming the link", err)
	}
	if _, err := j.RequestCheckpoint(ctx); !errors.Is(err, ErrCheckpointFailed) || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO as .failed: got %v, want a failed checkpoint saying so", err)
	}
	dir, err := j.RequestCheckpoint(ctx)
	if err != nil {
		t.Fatalf("good checkpoint: %v", err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "state"), filepath.Join(dir, "sub"), filepath.Join(dir, "sub", "more")} {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 0 || st.Gid != 0 || st.Mode&0o444 != 0o444 || st.Mode&0o022 != 0 {
			t.Errorf("%s: uid %d gid %d mode %o, want root's, readable by all, writable by none but root", p, st.Uid, st.Gid, st.Mode&0o7777)
		}
	}
	// The job, which sees the path, tries to change what it handed over.
	if err := os.WriteFile(filepath.Join(j.spec.Dir, "go"), []byte(dir), 0o644); err != nil {
		t.Fatal(err)
	}
	mustWait(t, j, 20*time.Second)
	log := readFile(t, j.LogPath())
	if !strings.Contains(log, "overwrite failed") || !strings.Contains(log, "link failed") {
		t.Errorf("the job changed its sealed checkpoint:\n%s", log)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(dir, "state"))); got != "secret-state" {
		t.Errorf("checkpoint state: got %q, want secret-state", got)
	}
}

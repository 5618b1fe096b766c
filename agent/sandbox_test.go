package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"

	"github.com/reclaimnet/reclaimnet/agent/jobs"
	"github.com/reclaimnet/reclaimnet/agent/sandbox"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/web"
)

// startSolo starts a one-node cluster (load pinned low), with mod applied
// to its configuration.
func startSolo(t *testing.T, mod func(*Config)) (*testCluster, *testNode) {
	t.Helper()
	c := newTestCluster(t)
	c.load = func() float64 { return 0.25 }
	cfg := c.config("solo")
	cfg.GPUs = []string{"RTX-4090:24GiB:8.9:x1"}
	if mod != nil {
		mod(&cfg)
	}
	n := c.start(cfg)
	wait.For(t, 30*time.Second, "a leader", func() bool { return n.agent.coord.IsLeader() })
	return c, n
}

// submit runs a job through the control socket, as 'reclaimnet run' does.
func submit(t *testing.T, n *testNode, jr localapi.JobRequest) {
	t.Helper()
	if jr.LossBudget == 0 {
		jr.LossBudget = time.Hour
	}
	if resp := call(t, n, localapi.Request{Op: localapi.OpRun, Job: &jr}); resp.Error != "" {
		t.Fatalf("run %s: %s", jr.Name, resp.Error)
	}
}

// waitLog waits until the job's log on n holds want and returns it.
func waitLog(t *testing.T, n *testNode, job, want string, within time.Duration) string {
	t.Helper()
	var log string
	wait.For(t, within, fmt.Sprintf("%q in job %s's log", want, job), func() bool {
		b, _ := os.ReadFile(JobLogPath(n.agent.DataDir(), job))
		log = string(b)
		return strings.Contains(log, want)
	})
	return log
}

// webStatus fetches n's /v1/status.
func webStatus(t *testing.T, n *testNode) web.Status {
	t.Helper()
	resp, err := http.Get("http://" + n.info.HTTPAddr + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st web.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// cgroupFile is the job's cgroup file as the host's layout names it (v1
// controller hierarchies, or the unified one): parent/JOB.UID.N/file.
func cgroupFile(t *testing.T, parent, job, v1ctrl, file string) string {
	t.Helper()
	root := "/sys/fs/cgroup"
	if cgroups.Mode() != cgroups.Unified {
		root = filepath.Join(root, v1ctrl)
	}
	m, _ := filepath.Glob(filepath.Join(root, parent, job+".*", file))
	if len(m) != 1 {
		t.Fatalf("job %s's cgroup file %s under %s/%s: found %v, want one", job, file, root, parent, m)
	}
	b, err := os.ReadFile(m[0])
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// probeJob reports from inside a guest job what it can reach: its
// identity, capabilities, the paths in $PROBE_PATHS (readable, present
// but not readable, or absent), whether it can connect to $PROBE_SOCKET
// and signal the host process $PROBE_PID, and how many processes it sees.
// Then it waits to be stopped.
const probeJob = `#!/bin/sh
echo "ids $(id -u) $(id -g) $(id -G)"
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\t'
for p in /etc/shadow $PROBE_PATHS; do
  if [ -d "$p" ]; then
    # The job's own directory lies under jobs/: its mount point shows.
    if [ -n "$(ls -A "$p" 2>/dev/null | grep -v '^jobs$')" ]; then echo "path readable $p"; else echo "path present $p"; fi
  elif cat "$p" >/dev/null 2>&1; then echo "path readable $p"
  elif [ -e "$p" ]; then echo "path present $p"
  else echo "path absent $p"; fi
done
if python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$PROBE_SOCKET" 2>/dev/null; then echo "socket connected"; else echo "socket refused"; fi
if kill -0 "$PROBE_PID" 2>/dev/null; then echo "signal host ok"; else echo "signal host refused"; fi
echo "procs $(ls /proc | grep -c '^[0-9]')"
echo "gpus [$CUDA_VISIBLE_DEVICES] [$NVIDIA_VISIBLE_DEVICES]"
echo "probe done"
touch "$RECLAIMNET_READY_FILE"
exec sleep 1000
`

// TestGuestJobProbe submits a probe job to a real agent, as 'reclaimnet
// run --memory 256MiB --cpus 0.5' does: from inside, it runs as a guest
// uid without capabilities or privileges, cannot read the shadow file,
// the agent's data dir, its TLS key or gossip key file, cannot reach the
// control socket or signal the agent, and sees only its own processes; on
// the host, its cgroup (under this agent's own parent) carries the limits
// it asked for. A second job over its memory limit fails "out of memory".
// /v1/status says the sandbox is on.
func TestGuestJobProbe(t *testing.T) {
	var keyFile, tlsDir string
	c, n := startSolo(t, func(cfg *Config) {
		keyFile = filepath.Join(filepath.Dir(cfg.DataDir), "gossip.key")
		if err := os.WriteFile(keyFile, []byte(cfg.GossipKey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg.GossipKey, cfg.GossipKeyFile = "", keyFile
		tlsDir = cfg.TLSDir
	})
	data := n.agent.DataDir()
	sock := filepath.Join(data, localapi.SocketFile)
	script := c.writeScript("probe.sh", probeJob)
	submit(t, n, localapi.JobRequest{Name: "probe", Command: []string{"/bin/sh", script}, GPUs: 1,
		Memory: 256 << 20, CPUs: 0.5,
		Env: []string{"PROBE_PATHS=" + strings.Join([]string{script, data, filepath.Join(data, "agent.lock"), filepath.Join(data, "raft"),
			filepath.Join(tlsDir, "node-key.pem"), keyFile}, " "), "PROBE_SOCKET=" + sock, "PROBE_PID=" + strconv.Itoa(os.Getpid())}})
	log := waitLog(t, n, "probe", "probe done", 60*time.Second)
	t.Logf("probe:\n%s", log)

	var uid, gid int
	var groups string
	for _, line := range strings.Split(log, "\n") {
		if strings.HasPrefix(line, "ids ") {
			fmt.Sscanf(line, "ids %d %d %s", &uid, &gid, &groups)
		}
	}
	if uid < sandbox.DefaultFirstUID || uid >= sandbox.DefaultFirstUID+sandbox.DefaultUIDCount || gid != uid || groups != strconv.Itoa(gid) {
		t.Errorf("job ran as uid %d gid %d groups %q, want one guest id of %d+%d for all three", uid, gid, groups, sandbox.DefaultFirstUID, sandbox.DefaultUIDCount)
	}
	for _, want := range []string{"CapInh:0000000000000000", "CapPrm:0000000000000000", "CapEff:0000000000000000",
		"CapBnd:0000000000000000", "CapAmb:0000000000000000", "NoNewPrivs:1", "Seccomp:2",
		"socket refused", "signal host refused", "gpus [] [void]"} {
		if !strings.Contains(log, want+"\n") {
			t.Errorf("probe log lacks %q", want)
		}
	}
	// The probe's own script is the one path it may read: it shows the
	// probe tells a readable path from the others.
	if strings.Count(log, "path readable") != 1 || !strings.Contains(log, "path readable "+script+"\n") {
		t.Errorf("the job read one of the agent's files or /etc/shadow, or could not read its own script")
	}
	var procs int
	for _, line := range strings.Split(log, "\n") {
		fmt.Sscanf(line, "procs %d", &procs)
	}
	if procs < 1 || procs > 6 {
		t.Errorf("the job saw %d processes, want only its own (init, shell, the listing)", procs)
	}

	parent, err := cgroupParent("solo", data)
	if err != nil {
		t.Fatal(err)
	}
	if cgroups.Mode() == cgroups.Unified {
		if got := cgroupFile(t, parent, "probe", "", "memory.max"); got != strconv.Itoa(256<<20) {
			t.Errorf("memory.max %s, want 256 MiB", got)
		}
		if got := cgroupFile(t, parent, "probe", "", "cpu.max"); got != "50000 100000" {
			t.Errorf("cpu.max %q, want half a CPU", got)
		}
	} else {
		if got := cgroupFile(t, parent, "probe", "memory", "memory.limit_in_bytes"); got != strconv.Itoa(256<<20) {
			t.Errorf("memory.limit_in_bytes %s, want 256 MiB", got)
		}
		if got := cgroupFile(t, parent, "probe", "cpu", "cpu.cfs_quota_us"); got != "50000" {
			t.Errorf("cpu.cfs_quota_us %s, want half a CPU", got)
		}
	}
	sb := webStatus(t, n).Sandbox
	if sb.Mode != "on" || !sb.Available || !strings.HasPrefix(sb.Summary, "sandbox on: ") {
		t.Errorf("/v1/status sandbox %+v, want on and available", sb)
	}
	if resp := call(t, n, localapi.Request{Op: localapi.OpCancel, JobID: "probe"}); resp.Error != "" {
		t.Fatal(resp.Error)
	}

	// Over its own limit, a job is killed and reported out of memory.
	submit(t, n, localapi.JobRequest{Name: "hog", GPUs: 1, Memory: 64 << 20,
		Command: []string{debianPython, "-c", "a = b'x' * (512 << 20); print('allocated')"}})
	var v jobs.JobView
	wait.For(t, 90*time.Second, "job hog failed", func() bool {
		for _, jv := range n.agent.Jobs().View() {
			if jv.Job == "hog" {
				v = jv
			}
		}
		return v.State == jobs.StateFailed
	})
	if !strings.Contains(v.LastError, "out of memory") || !strings.Contains(v.LastError, "64 MiB") {
		t.Errorf("hog's error %q, want out of memory at its 64 MiB limit", v.LastError)
	}
}

// TestGuestJobsGetTheirOwnGPU: on a node with two GPUs (fake device nodes
// with NVIDIA's major number), two one-GPU jobs each see exactly one
// device node, a different one, named by NVIDIA_VISIBLE_DEVICES, with
// CUDA numbering it 0.
func TestGuestJobsGetTheirOwnGPU(t *testing.T) {
	dev := t.TempDir()
	for name, minor := range map[string]int{"nvidia0": 0, "nvidia1": 1, "nvidiactl": 255} {
		p := filepath.Join(dev, name)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(195, uint32(minor)))); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	c, n := startSolo(t, func(cfg *Config) {
		cfg.GPUs = []string{"RTX-4090:24GiB:8.9:x2"}
		cfg.GPUDevDir = dev
	})
	script := c.writeScript("gpus.sh", `#!/bin/sh
echo "gpus [$CUDA_VISIBLE_DEVICES] [$NVIDIA_VISIBLE_DEVICES] $(cd /dev && echo nvidia[0-9]*)"
touch "$RECLAIMNET_READY_FILE"
exec sleep 1000
`)
	seen := map[string]bool{}
	for _, job := range []string{"g1", "g2"} {
		submit(t, n, localapi.JobRequest{Name: job, Command: []string{"/bin/sh", script}, GPUs: 1})
		log := waitLog(t, n, job, "gpus [", 60*time.Second)
		var line string
		for _, l := range strings.Split(log, "\n") {
			if strings.HasPrefix(l, "gpus [") {
				line = l
			}
		}
		var k int
		if _, err := fmt.Sscanf(line, "gpus [0] [%d] nvidia%d", &k, new(int)); err != nil || line != fmt.Sprintf("gpus [0] [%d] nvidia%d", k, k) {
			t.Fatalf("job %s: %q, want CUDA device 0 being host GPU K, and only /dev/nvidiaK", job, line)
		}
		if seen[line] {
			t.Errorf("job %s got the GPU another job runs on: %q", job, line)
		}
		seen[line] = true
	}
}

// forgeLeftover puts a live process into job cgroup name under parent in
// every hierarchy, as the processes of a job that outlived its agent are,
// and returns a channel closed once the process is reaped.
func forgeLeftover(t *testing.T, parent, name string) (pid int, reaped <-chan struct{}) {
	t.Helper()
	var dirs []string
	switch cgroups.Mode() {
	case cgroups.Unified:
		dirs = []string{filepath.Join("/sys/fs/cgroup", parent, name)}
	case cgroups.Hybrid:
		dirs = []string{filepath.Join("/sys/fs/cgroup/unified", parent, name)}
		fallthrough
	default:
		for _, ctrl := range []string{"memory", "cpu", "pids", "devices", "freezer"} {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", ctrl, parent, name))
		}
	}
	cmd := exec.Command("/bin/sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		for _, d := range dirs {
			os.Remove(d)
			if !strings.HasSuffix(filepath.Dir(d), "/"+sandbox.DefaultCgroupParent) {
				os.Remove(filepath.Dir(d)) // a parent no agent holds
			}
		}
	})
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatalf("move the leftover into %s: %v", d, err)
		}
	}
	return cmd.Process.Pid, done
}

// TestRestartKillsLeftoverJobs restarts a real agent whose job left a
// process behind (a forged leftover job cgroup under the agent's parent):
// before the agent serves, the leftover is dead and its cgroup gone, the
// job runs again as one instance, and a leftover under another agent's
// parent on the same machine is left alone.
func TestRestartKillsLeftoverJobs(t *testing.T) {
	c, n := startSolo(t, nil)
	script := c.writeScript("sweep.sh", `#!/bin/sh
echo "start $RECLAIMNET_RESTART_COUNT" >> "$HOME/starts"
touch "$RECLAIMNET_READY_FILE"
exec sleep 1000
`)
	submit(t, n, localapi.JobRequest{Name: "sweep", Command: []string{"/bin/sh", script}, GPUs: 1})
	starts := filepath.Join(n.agent.DataDir(), jobsDirName, "sweep", "run", "home", "starts")
	wait.For(t, 60*time.Second, "the job started", func() bool {
		b, _ := os.ReadFile(starts)
		return strings.Count(string(b), "start") == 1
	})
	cfg := n.agent.cfg
	parent, err := cgroupParent(cfg.Name, cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	n.stop(t, false)

	// The agent is gone; a process of its job is not.
	leftover, reaped := forgeLeftover(t, parent, "sweep.2100000999.1")
	other, otherReaped := forgeLeftover(t, sandbox.DefaultCgroupParent+"/elsewhere-00000000", "job.2100000998.1")
	n = c.start(cfg)
	select {
	case <-reaped:
	case <-time.After(10 * time.Second):
		t.Fatalf("leftover process %d still runs after the agent restarted", leftover)
	}
	select {
	case <-otherReaped:
		t.Errorf("the restarted agent killed process %d under another agent's cgroup parent", other)
	default:
	}
	wait.For(t, 60*time.Second, "the job started again", func() bool {
		b, _ := os.ReadFile(starts)
		return strings.Count(string(b), "start") == 2
	})
	root := "/sys/fs/cgroup/pids"
	if cgroups.Mode() == cgroups.Unified {
		root = "/sys/fs/cgroup"
	}
	groups, _ := filepath.Glob(filepath.Join(root, parent, "sweep.*"))
	if len(groups) != 1 || strings.HasSuffix(groups[0], "sweep.2100000999.1") {
		t.Errorf("job cgroups after the restart: %v, want only the new instance's", groups)
	}
}

// TestSandboxUnavailableRefusesJobs: an agent whose sandbox is on but
// cannot confine jobs (its guest uid range holds system users) says so
// on /v1/status and reports no free GPU, so the leader places nothing
// there: the job goes to the node that can run it.
func TestSandboxUnavailableRefusesJobs(t *testing.T) {
	c := newTestCluster(t)
	c.load = func() float64 { return 0.25 }
	cfg := c.config("locked")
	cfg.GPUs = []string{"RTX-4090:24GiB:8.9:x4"}
	cfg.GuestUIDs = "1-1000"
	locked := c.start(cfg)
	cfg = c.config("open")
	cfg.GPUs = []string{"RTX-4090:24GiB:8.9:x1"}
	open := c.start(cfg)
	c.waitConfig(2, 1, 60*time.Second)

	if s := locked.agent.Sandbox(); s.Mode != sandbox.On || s.Available || !strings.Contains(s.Reason, "uid") {
		t.Errorf("locked node's sandbox %+v, want on, unavailable, saying why (the uid range)", s)
	}
	sb := webStatus(t, locked).Sandbox
	if sb.Mode != "on" || sb.Available || !strings.Contains(sb.Summary, "cannot be confined") {
		t.Errorf("/v1/status sandbox %+v, want on, unavailable, with the reason", sb)
	}
	wait.For(t, 30*time.Second, "the locked node's free GPUs 0 on the page", func() bool {
		for _, m := range webStatus(t, open).Cluster.Members {
			if m.ID == "locked" {
				return m.GPUs == 4 && m.FreeGPUs == 0
			}
		}
		return false
	})
	// What the leader places by (P2 rejects a node without free GPUs).
	for _, nt := range open.agent.telemetry.Nodes() {
		if nt.ID == "locked" && nt.FreeGPUs != 0 {
			t.Errorf("the leader's telemetry gives the locked node %d free GPUs, want 0", nt.FreeGPUs)
		}
	}
	submit(t, open, localapi.JobRequest{Name: "small", Command: []string{"sleep", "1000"}, GPUs: 1})
	wait.For(t, 60*time.Second, "job small placed", func() bool {
		j, ok := findJob(call(t, open, localapi.Request{Op: localapi.OpJobs}).Jobs, "small")
		return ok && j.Node != ""
	})
	if j, _ := findJob(call(t, open, localapi.Request{Op: localapi.OpJobs}).Jobs, "small"); j.Node != "open" {
		t.Errorf("job small placed on %s, want the open node", j.Node)
	}
}

// TestSandboxOff: with --sandbox off, the operator's choice, the page,
// /v1/status and the log say jobs run unconfined, and they do (as root).
func TestSandboxOff(t *testing.T) {
	c, n := startSolo(t, func(cfg *Config) { cfg.Sandbox = "off" })
	if s := n.agent.Sandbox(); s.Mode != sandbox.Off || !s.Available {
		t.Errorf("sandbox %+v, want off and available", s)
	}
	sb := webStatus(t, n).Sandbox
	if sb.Mode != "off" || !strings.Contains(sb.Summary, "unconfined") {
		t.Errorf("/v1/status sandbox %+v, want off, saying jobs run unconfined", sb)
	}
	resp, err := http.Get("http://" + n.info.HTTPAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), `<span class="badge bad">off</span> sandbox off: jobs run unconfined`) {
		t.Errorf("the page does not show the sandbox off")
	}
	script := c.writeScript("whoami.sh", "#!/bin/sh\necho \"uid $(id -u)\"\ntouch \"$RECLAIMNET_READY_FILE\"\nexec sleep 1000\n")
	submit(t, n, localapi.JobRequest{Name: "whoami", Command: []string{"/bin/sh", script}, GPUs: 1})
	if log := waitLog(t, n, "whoami", "uid ", 60*time.Second); !strings.Contains(log, "uid 0\n") {
		t.Errorf("unconfined job's log %q, want uid 0 (the agent's)", log)
	}
}

// A node's sandbox settings: defaults, the operator's flags, what is
// always hidden, and the errors.
func TestSandboxConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Name, cfg.DataDir, cfg.TLSDir, cfg.GossipKeyFile = "gpu-01", "/var/lib/reclaimnet", "/etc/reclaimnet/tls", "/etc/reclaimnet/gossip.key"
	sc, err := cfg.sandboxConfig()
	if err != nil {
		t.Fatal(err)
	}
	if sc.Mode != sandbox.On || sc.FirstUID != sandbox.DefaultFirstUID || sc.UIDCount != sandbox.DefaultUIDCount || sc.GuestMemory != 0 || sc.GuestCPUs != 0 {
		t.Errorf("defaults %+v, want on, the default range, no caps of the operator's", sc)
	}
	for _, p := range []string{"/var/lib/reclaimnet", "/var/lib/reclaimnet/agent.sock", "/etc/reclaimnet/tls", "/etc/reclaimnet/gossip.key"} {
		if !slices.Contains(sc.HiddenPaths, p) {
			t.Errorf("hidden paths %v lack %s", sc.HiddenPaths, p)
		}
	}
	if !strings.HasPrefix(sc.CgroupParent, "reclaimnet/gpu-01-") {
		t.Errorf("cgroup parent %q, want reclaimnet/gpu-01-HASH", sc.CgroupParent)
	}
	other := cfg
	other.DataDir = "/var/lib/reclaimnet-2"
	if sc2, _ := other.sandboxConfig(); sc2.CgroupParent == sc.CgroupParent {
		t.Errorf("two data dirs share the cgroup parent %q", sc.CgroupParent)
	}
	odd := cfg
	odd.Name = "lab pc/7"
	if sc3, err := odd.sandboxConfig(); err != nil || !strings.HasPrefix(sc3.CgroupParent, "reclaimnet/lab_pc_7-") {
		t.Errorf("node name with a space and a slash: parent %q, %v; want reclaimnet/lab_pc_7-HASH", sc3.CgroupParent, err)
	}
	set := cfg
	set.Sandbox, set.GuestUIDs, set.GuestMemory, set.GuestCPUs, set.GuestROPaths = "off", "3000000-3000099", 64<<30, 12, []string{"/datasets"}
	sc, err = set.sandboxConfig()
	if err != nil || sc.Mode != sandbox.Off || sc.FirstUID != 3000000 || sc.UIDCount != 100 || sc.GuestMemory != 64<<30 || sc.GuestCPUs != 12 ||
		!slices.Equal(sc.ReadOnlyPaths, []string{"/datasets"}) {
		t.Errorf("operator's settings: %+v, %v", sc, err)
	}
	for name, mod := range map[string]func(*Config){
		"mode":             func(c *Config) { c.Sandbox = "maybe" },
		"range":            func(c *Config) { c.GuestUIDs = "5" },
		"range backwards":  func(c *Config) { c.GuestUIDs = "10-5" },
		"range with root":  func(c *Config) { c.GuestUIDs = "0-100" },
		"range past 2^31":  func(c *Config) { c.GuestUIDs = "2147483000-2147484000" },
		"negative memory":  func(c *Config) { c.GuestMemory = -1 },
		"negative cpus":    func(c *Config) { c.GuestCPUs = -1 },
		"relative ro path": func(c *Config) { c.GuestROPaths = []string{"datasets"} },
		"ro path /":        func(c *Config) { c.GuestROPaths = []string{"/"} },
		"ro paths over the gossip budget": func(c *Config) {
			c.GuestROPaths = []string{"/datasets/" + strings.Repeat("x", 60), "/scratch/" + strings.Repeat("y", 60)}
		},
		"building over the gossip limit": func(c *Config) { c.Building = strings.Repeat("b", mesh.MaxBuildingLen+1) },
	} {
		c := cfg
		c.GossipKey = "AAAAAAAAAAAAAAAAAAAAAA=="
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
}

// A guest read-only path that does not exist is a start-up error, not a
// sandbox that silently shows less.
func TestMissingGuestPathFailsStart(t *testing.T) {
	c := newTestCluster(t)
	cfg := c.config("solo")
	cfg.GuestROPaths = []string{filepath.Join(t.TempDir(), "nope")}
	if _, err := New(cfg, testLogger()); err == nil || !strings.Contains(err.Error(), "--guest-ro-path") {
		t.Fatalf("New with a missing guest path: %v, want an error naming --guest-ro-path", err)
	}
}

// Jobs are given only GPUs whose device nodes exist.
func TestGPUDevicesFound(t *testing.T) {
	dev := t.TempDir()
	for _, n := range []string{"nvidia0", "nvidia2"} {
		if err := os.WriteFile(filepath.Join(dev, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := gpuDevices(dev, []int{0, 1, 2}); !slices.Equal(got, []int{0, 2}) {
		t.Errorf("devices with nodes: %v, want [0 2]", got)
	}
	if got := gpuDevices(dev, nil); got != nil {
		t.Errorf("no GPUs: %v", got)
	}
}

package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/trace"
	"github.com/reclaimnet/reclaimnet/web"
)

// processCluster runs real reclaimnet processes built from this tree.
type processCluster struct {
	t    *testing.T
	bin  string
	root string
	key  string
	proc map[string]*exec.Cmd
}

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "reclaimnet")
	// Same build settings as the test binary, so the build cache serves
	// almost everything.
	cmd := exec.Command("go", "build", "-o", bin, "github.com/reclaimnet/reclaimnet")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// run runs a short reclaimnet command and returns its stdout.
func (c *processCluster) run(args ...string) (string, error) {
	cmd := exec.Command(c.bin, args...)
	cmd.Dir = c.root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("reclaimnet %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func (c *processCluster) mustRun(args ...string) string {
	c.t.Helper()
	out, err := c.run(args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

func (c *processCluster) dataDir(name string) string { return filepath.Join(c.root, name, "data") }

// newProcessCluster builds the binary; its processes are killed when the
// test ends, and their logs' tails shown when it failed.
func newProcessCluster(t *testing.T) *processCluster {
	c := &processCluster{t: t, bin: buildBinary(t), root: t.TempDir(), proc: map[string]*exec.Cmd{}}
	t.Cleanup(func() {
		for name, p := range c.proc {
			p.Process.Kill()
			p.Wait()
			if t.Failed() {
				b, _ := os.ReadFile(filepath.Join(c.root, name+".log"))
				lines := strings.Split(string(b), "\n")
				t.Logf("--- %s log (last 30 lines) ---\n%s", name, strings.Join(lines[max(0, len(lines)-30):], "\n"))
			}
		}
	})
	return c
}

// startAgent starts one agent process and waits for its info file.
func (c *processCluster) startAgent(name string, extra ...string) localapi.Info {
	c.t.Helper()
	args := append([]string{"agent", "--name", name, "--data-dir", c.dataDir(name), "--bind", "127.0.0.1",
		"--http", "127.0.0.1:0", "--gossip-key", c.key, "--tls-dir", filepath.Join(c.root, name, "tls"),
		"--local-timings", "--log-level", "debug", "--transfer-port", "0"}, extra...)
	return c.spawn(name, args, 30*time.Second)
}

// spawn runs the binary with args as node name's agent, logging to
// name.log, and waits up to within for the info file the process writes.
func (c *processCluster) spawn(name string, args []string, within time.Duration) localapi.Info {
	c.t.Helper()
	dir := c.dataDir(name)
	os.Remove(filepath.Join(dir, localapi.InfoFile))
	cmd := exec.Command(c.bin, args...)
	logf, err := os.OpenFile(filepath.Join(c.root, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	logf.Close()
	c.proc[name] = cmd
	var info localapi.Info
	wait.For(c.t, within, name+" writes its info file", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, localapi.InfoFile))
		return err == nil && json.Unmarshal(b, &info) == nil && info.PID == cmd.Process.Pid
	})
	return info
}

// status runs 'reclaimnet status --json': the agent's /v1/status document.
func (c *processCluster) status(name string) (web.Status, error) {
	out, err := c.run("status", "--json", "--data-dir", c.dataDir(name))
	if err != nil {
		return web.Status{}, err
	}
	var st web.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return st, fmt.Errorf("status --json: %w", err)
	}
	return st, nil
}

func sortedKeys(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

// Three agent processes on loopback form a cluster; the leader is killed
// with SIGKILL; the other two elect a new leader; the killed one restarts
// from its data dir and rejoins.
func TestAgentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three processes")
	}
	start := time.Now()
	c := newProcessCluster(t)
	t.Logf("built the binary in %v", time.Since(start).Round(time.Millisecond))
	c.key = strings.TrimSpace(c.mustRun("keygen"))
	c.mustRun("tls", "ca", "create", "--dir", "ca")
	names := []string{"n0", "n1", "n2"}
	for _, n := range names {
		c.mustRun("tls", "cert", "create", "--node", n, "--ca-dir", "ca", "--out", filepath.Join(n, "tls"))
	}

	infos := map[string]localapi.Info{}
	// Declared GPUs: the trace export below lists GPU nodes only.
	gpu := []string{"--gpu", "A100-80GB:80GiB:8.0"}
	infos["n0"] = c.startAgent("n0", append(gpu, "--gossip-port", "0", "--raft-port", "0")...)
	for _, n := range names[1:] {
		infos[n] = c.startAgent(n, append(gpu, "--gossip-port", "0", "--raft-port", "0", "--join", infos["n0"].GossipAddr)...)
	}

	// members shows all three, alive, one leader and two voters.
	wait.For(t, 60*time.Second, "members table shows 3 alive nodes, a leader and 2 voters", func() bool {
		out, err := c.run("members", "--data-dir", c.dataDir("n2"))
		return err == nil && strings.Count(out, " alive ") == 3 && strings.Count(out, " leader ") == 1 && strings.Count(out, " voter ") == 2
	})

	st, err := c.status("n1")
	if err != nil {
		t.Fatal(err)
	}
	// 'status --json' is the agent's /v1/status document: the same keys,
	// node and members as a GET on its HTTP address.
	cliDoc := c.mustRun("status", "--json", "--data-dir", c.dataDir("n1"))
	resp, err := http.Get("http://" + infos["n1"].HTTPAddr + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	httpDoc, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var fromCLI, fromHTTP map[string]any
	if err := json.Unmarshal([]byte(cliDoc), &fromCLI); err != nil {
		t.Fatalf("status --json: %v", err)
	}
	if err := json.Unmarshal(httpDoc, &fromHTTP); err != nil {
		t.Fatalf("GET /v1/status: %v", err)
	}
	if got, want := sortedKeys(fromCLI), sortedKeys(fromHTTP); got != want {
		t.Errorf("status --json keys %s, /v1/status keys %s", got, want)
	}
	var httpSt web.Status
	json.Unmarshal(httpDoc, &httpSt)
	if st.Node != "n1" || httpSt.Node != "n1" || len(st.Cluster.Members) != 3 || len(httpSt.Cluster.Members) != 3 {
		t.Errorf("status --json: node %q with %d members; /v1/status: node %q with %d; want n1 with 3 in both",
			st.Node, len(st.Cluster.Members), httpSt.Node, len(httpSt.Cluster.Members))
	}
	if out := c.mustRun("status", "--data-dir", c.dataDir("n1")); !strings.Contains(out, "Page:      http://"+infos["n1"].HTTPAddr+"/") || !strings.Contains(out, "No jobs.") ||
		!strings.Contains(out, "Protocols: p1,p2,p3") || !strings.Contains(out, "Sandbox:   sandbox on: ") {
		t.Errorf("status (human) lacks the page address, the protocols, the sandbox or the jobs section:\n%s", out)
	}
	old := string(st.Cluster.Leader)
	if old == "" {
		t.Fatal("no leader in status")
	}
	if err := c.proc[old].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.proc[old].Wait()
	delete(c.proc, old)
	killed := time.Now()

	var survivor string
	for _, n := range names {
		if n != old {
			survivor = n
		}
	}
	var newLeader string
	// Polled every 100 ms: the time logged below is the CLI's view of the
	// re-election, to that resolution.
	wait.ForEvery(t, 100*time.Millisecond, 60*time.Second, "a new leader among the survivors", func() bool {
		st, err := c.status(survivor)
		if err == nil && st.Cluster.Leader != "" && string(st.Cluster.Leader) != old {
			newLeader = string(st.Cluster.Leader)
			return true
		}
		return false
	})
	t.Logf("leader %s killed; %s leads %v later (as seen by the CLI)", old, newLeader, time.Since(killed).Round(time.Millisecond))

	// Restart the killed node on the ports it had: its Raft address is in
	// the cluster's configuration.
	_, gport, _ := strings.Cut(infos[old].GossipAddr, ":")
	_, rport, _ := strings.Cut(infos[old].RaftAddr, ":")
	if _, err := strconv.Atoi(rport); err != nil {
		t.Fatalf("raft address %q", infos[old].RaftAddr)
	}
	c.startAgent(old, append(gpu, "--gossip-port", gport, "--raft-port", rport, "--join", infos[survivor].GossipAddr)...)
	wait.For(t, 60*time.Second, "restarted node rejoins: sees 3 alive members and the leader", func() bool {
		st, err := c.status(old)
		if err != nil || st.Cluster.Leader == "" {
			return false
		}
		alive := 0
		for _, m := range st.Cluster.Members {
			if m.State == "alive" {
				alive++
			}
		}
		return alive == 3
	})
	wait.For(t, 60*time.Second, "the survivors see the restarted node alive", func() bool {
		st, err := c.status(survivor)
		if err != nil {
			return false
		}
		for _, m := range st.Cluster.Members {
			if string(m.ID) == old {
				return m.State == "alive"
			}
		}
		return false
	})

	// The cluster's history as a trace, replayed by the simulator.
	traceDir := filepath.Join(c.root, "trace")
	os.MkdirAll(traceDir, 0o755)
	c.mustRun("trace", "export", "--out", traceDir, "--data-dir", c.dataDir(survivor))
	tr, err := trace.Load(traceDir)
	if err != nil || len(tr.Nodes) != 3 || len(tr.Bandwidth) == 0 {
		b, _ := os.ReadFile(filepath.Join(traceDir, trace.FileName))
		t.Fatalf("exported trace (%v): want 3 GPU nodes and bandwidth samples:\n%s", err, b)
	}
	if out := c.mustRun("sim", "--trace", traceDir, "--policies", "reclaimnet", "-q"); !strings.Contains(out, "ReclaimNet") {
		t.Errorf("sim on the exported trace printed no ReclaimNet row:\n%s", out)
	}

	// Errors the CLI must explain.
	if _, err := c.run("members", "--data-dir", filepath.Join(c.root, "nowhere")); err == nil || !strings.Contains(err.Error(), "no agent running") {
		t.Errorf("members without an agent: got %v, want 'no agent running'", err)
	}
	_, err = c.run("agent", "--name", survivor, "--data-dir", c.dataDir(survivor), "--bind", "127.0.0.1", "--gossip-port", "0",
		"--raft-port", "0", "--http", "", "--gossip-key", c.key, "--tls-dir", filepath.Join(c.root, survivor, "tls"))
	if err == nil || !strings.Contains(err.Error(), "locked by another agent") {
		t.Errorf("second agent on a data dir: got %v, want 'locked by another agent'", err)
	}
}

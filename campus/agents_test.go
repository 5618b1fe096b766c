package campus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"

	"github.com/reclaimnet/reclaimnet/internal/testbin"
	"github.com/reclaimnet/reclaimnet/web"
)

// TestMain removes the binary the agent tests build.
func TestMain(m *testing.M) { testbin.Main(m) }

// reclaimnetBinary builds the reclaimnet binary from this tree once per
// test binary run ($RECLAIMNET_BINARY names a prebuilt one instead).
func reclaimnetBinary(t *testing.T) string { return testbin.Binary(t, "RECLAIMNET_BINARY") }

// testLogger writes StartAgents' progress into the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startAgentsForTest starts agents and closes them at the end of the test;
// on failure it prints the end of every agent's log.
func startAgentsForTest(t *testing.T, cfg AgentsConfig) *Agents {
	t.Helper()
	if !cfg.Loopback {
		requireRoot(t)
		if _, err := exec.LookPath("nsenter"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("CI=true but the agents campus test cannot run: needs nsenter: %v", err)
			}
			t.Skipf("skipping: needs nsenter (util-linux): %v", err)
		}
	}
	if cfg.Binary == "" {
		cfg.Binary = reclaimnetBinary(t)
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Log == nil {
		cfg.Log = testLogger(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	a, err := StartAgents(ctx, cfg)
	if err != nil {
		t.Fatalf("StartAgents: %v", err)
	}
	t.Logf("%d agents formed a cluster in %v", len(a.Names()), time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			// The whole logs outlive the test's temp dir, for diagnosis.
			keep := filepath.Join(os.TempDir(), fmt.Sprintf("campus-logs-%s-%s", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UTC().Format("150405")))
			if err := os.MkdirAll(keep, 0o755); err != nil {
				t.Logf("keep logs: %v", err)
			}
			for _, n := range a.Names() {
				t.Logf("--- %s log (last 25 lines) ---\n%s", n, tail(a.LogPath(n), 25))
				if b, err := os.ReadFile(a.LogPath(n)); err == nil {
					_ = os.WriteFile(filepath.Join(keep, n+".log"), b, 0o644)
				}
			}
			t.Logf("whole agent logs kept in %s", keep)
		}
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return a
}

// checkCluster asserts what StartAgents promises: every node knows the
// same leader and lists every node alive, with its topology building.
func checkCluster(t *testing.T, a *Agents) string {
	t.Helper()
	ctx := context.Background()
	leader, err := a.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader: %v", err)
	}
	if !slices.Contains(a.Names(), leader) {
		t.Fatalf("Leader = %q, not one of %v", leader, a.Names())
	}
	for _, n := range a.Names() {
		st, err := a.Status(ctx, n)
		if err != nil {
			t.Fatalf("status of %s: %v", n, err)
		}
		if string(st.Node) != n {
			t.Errorf("status via %s's data dir is node %q", n, st.Node)
		}
		if len(st.Cluster.Members) != len(a.Names()) {
			t.Errorf("%s lists %d members, want %d", n, len(st.Cluster.Members), len(a.Names()))
		}
		for _, m := range st.Cluster.Members {
			if m.State != web.MemberAlive {
				t.Errorf("%s sees %s %s, want alive", n, m.ID, m.State)
			}
			if want := a.Building(string(m.ID)); m.Building != want {
				t.Errorf("%s sees %s in building %q, want %q", n, m.ID, m.Building, want)
			}
		}
	}
	return leader
}

// Loopback mode (no root): three agents on 127.0.0.1 form a cluster with
// buildings from the topology; the leader is SIGKILLed, the survivors elect
// another, and Start brings it back on the same ports and data dir.
func TestAgentsLoopback(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary and runs three agent processes")
	}
	topo := DefaultTopology()
	topo.Buildings = []Building{{Name: "a", Nodes: 2}, {Name: "b", Nodes: 1}}
	a := startAgentsForTest(t, AgentsConfig{Loopback: true, Topology: topo})
	ctx := context.Background()

	if a.Campus() != nil {
		t.Errorf("Campus() in loopback mode = %v, want nil", a.Campus())
	}
	if got, want := a.Names(), []string{"a1", "a2", "b1"}; !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	leader := checkCluster(t, a)
	for _, n := range a.Names() {
		info, ok := a.Info(n)
		if !ok {
			t.Fatalf("Info(%s): not running", n)
		}
		if ap, err := netip.ParseAddrPort(info.GossipAddr); err != nil || !ap.Addr().IsLoopback() {
			t.Errorf("%s gossips on %q, want a loopback address", n, info.GossipAddr)
		}
		// The status page answers on HTTPAddr, through Dial.
		var st web.Status
		if err := getJSONVia(a, n, "/v1/status", &st); err != nil {
			t.Errorf("GET /v1/status of %s: %v", n, err)
		} else if string(st.Node) != n {
			t.Errorf("GET /v1/status of %s says node %q", n, st.Node)
		}
	}
	// The CLI runs against the node's agent.
	out, err := a.CLI(ctx, "b1", "members")
	if err != nil {
		t.Fatalf("CLI members: %v", err)
	}
	for _, n := range a.Names() {
		if !strings.Contains(out, n) {
			t.Errorf("members via b1 lacks %s:\n%s", n, out)
		}
	}
	if _, err := a.CLI(ctx, "a1", "no-such-command"); err == nil || !strings.Contains(err.Error(), "no-such-command") {
		t.Errorf("CLI with a wrong command: got %v, want an error naming it", err)
	}
	// Enforcement is off on loopback, said by the agent itself.
	var es struct {
		Enabled bool   `json:"enabled"`
		Mode    string `json:"mode"`
	}
	if err := getJSONVia(a, "a1", "/v1/enforce", &es); err != nil || es.Enabled || es.Mode != "off" {
		t.Errorf("/v1/enforce of a1: %+v, %v; want mode off, not enabled", es, err)
	}

	killAndRestart(t, a, leader)
}

// killAndRestart SIGKILLs node, waits for a leader among the others, and
// restarts it: it rejoins with the same data dir.
func killAndRestart(t *testing.T, a *Agents, node string) {
	t.Helper()
	ctx := context.Background()
	before, _ := a.Info(node)
	if err := a.Kill(node); err != nil {
		t.Fatalf("Kill(%s): %v", node, err)
	}
	if a.Running(node) || a.HTTPAddr(node) != "" {
		t.Fatalf("after Kill(%s): Running %v, HTTPAddr %q; want false, empty", node, a.Running(node), a.HTTPAddr(node))
	}
	if err := a.Kill(node); err == nil {
		t.Errorf("Kill of a dead agent: got nil, want an error")
	}
	killed := time.Now()
	var survivor string
	for _, n := range a.Names() {
		if n != node {
			survivor = n
			break
		}
	}
	wait.ForWhy(t, 90*time.Second, "a leader other than the killed "+node, func() (bool, string) {
		st, err := a.Status(ctx, survivor)
		if err != nil {
			return false, err.Error()
		}
		return st.Cluster.Leader != "" && string(st.Cluster.Leader) != node, "leader " + string(st.Cluster.Leader)
	})
	t.Logf("%s killed; new leader after %v", node, time.Since(killed).Round(time.Millisecond))
	wait.ForWhy(t, 90*time.Second, survivor+" sees "+node+" dead", func() (bool, string) {
		st, err := a.Status(ctx, survivor)
		if err != nil {
			return false, err.Error()
		}
		for _, m := range st.Cluster.Members {
			if string(m.ID) == node {
				return m.State != web.MemberAlive, string(m.State)
			}
		}
		return false, "not listed"
	})

	start := time.Now()
	if err := a.Start(ctx, node); err != nil {
		t.Fatalf("Start(%s): %v", node, err)
	}
	t.Logf("%s restarted and rejoined in %v", node, time.Since(start).Round(time.Millisecond))
	after, _ := a.Info(node)
	if after.PID == before.PID || after.GossipAddr != before.GossipAddr || after.RaftAddr != before.RaftAddr {
		t.Errorf("restart: pid %d→%d, gossip %s→%s, raft %s→%s; want a new pid on the same addresses",
			before.PID, after.PID, before.GossipAddr, after.GossipAddr, before.RaftAddr, after.RaftAddr)
	}
	checkCluster(t, a)
	if err := a.Start(ctx, node); err == nil {
		t.Errorf("Start of a running agent: got nil, want an error")
	}
}

// getJSONVia GETs path from node's status page, connecting from inside its
// namespace.
func getJSONVia(a *Agents, node, path string, v any) error {
	addr := a.HTTPAddr(node)
	if addr == "" {
		return errors.New(node + " not running")
	}
	client := &http.Client{
		Timeout: 20 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return a.Dial(ctx, node, network, addr)
		}},
	}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return json.Unmarshal(b, v)
}

// Namespace mode (root): four agents, each in its campus node's namespace
// bound to the node's address, with kernel enforcement on; the cluster
// forms, the status page answers from inside the namespace, the
// leader is SIGKILLed and restarted, and Close removes the namespaces and
// the pinned BPF objects.
func TestAgentsNamespaces(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary and runs four agents in namespaces")
	}
	topo := DefaultTopology()
	topo.Buildings = []Building{{Name: "a", Nodes: 2}, {Name: "b", Nodes: 2}}
	a := startAgentsForTest(t, AgentsConfig{Topology: topo})
	ctx := context.Background()
	c := a.Campus()
	if c == nil {
		t.Fatal("Campus() = nil in namespace mode")
	}
	leader := checkCluster(t, a)
	// Every agent reports the fixed load (0.1 per CPU), not the host's.
	wait.ForWhy(t, 30*time.Second, "every member reporting load 0.1", func() (bool, string) {
		st, err := a.Status(ctx, "a1")
		if err != nil {
			return false, err.Error()
		}
		for _, m := range st.Cluster.Members {
			if m.Load < 0.09 || m.Load > 0.11 {
				return false, fmt.Sprintf("%s reports load %.3f", m.ID, m.Load)
			}
		}
		return true, ""
	})
	for _, n := range a.Names() {
		node, _ := c.Node(n)
		info, _ := a.Info(n)
		if ap, err := netip.ParseAddrPort(info.GossipAddr); err != nil || ap.Addr() != node.Addr {
			t.Errorf("%s gossips on %q, want %v", n, info.GossipAddr, node.Addr)
		}
		if want := netip.AddrPortFrom(node.Addr, nsHTTPPort).String(); a.HTTPAddr(n) != want {
			t.Errorf("HTTPAddr(%s) = %q, want %q", n, a.HTTPAddr(n), want)
		}
		var es struct {
			Enabled bool   `json:"enabled"`
			Iface   string `json:"iface"`
		}
		if err := getJSONVia(a, n, "/v1/enforce", &es); err != nil {
			t.Errorf("GET /v1/enforce of %s from inside its namespace: %v", n, err)
		} else if !es.Enabled || es.Iface != node.Iface {
			t.Errorf("%s: enforcement enabled %v on %q, want true on %q", n, es.Enabled, es.Iface, node.Iface)
		}
		if _, err := os.Stat(a.PinDir(n)); err != nil {
			t.Errorf("pin dir of %s: %v", n, err)
		}
	}
	// A CLI command runs in the node's namespace: the kill-switch command
	// finds the node's pinned maps through the agent.
	out, err := a.CLI(ctx, "b2", "killswitch", "status", "--pin-dir", a.PinDir("b2"))
	if err != nil {
		t.Errorf("CLI killswitch on b2: %v", err)
	} else if !strings.Contains(out, "off") {
		t.Errorf("killswitch on b2 printed %q, want it to say off", out)
	}

	killAndRestart(t, a, leader)

	pins := filepath.Dir(a.PinDir("a1"))
	names := c.NetNSNames()
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for _, ns := range names {
		if _, err := os.Stat(filepath.Join(NetNSDir, ns)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %s after Close: stat err %v, want gone", ns, err)
		}
	}
	if _, err := os.Stat(pins); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin directory %s after Close: stat err %v, want gone", pins, err)
	}
}

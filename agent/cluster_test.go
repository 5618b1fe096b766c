package agent

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/jobs"
	"github.com/reclaimnet/reclaimnet/agent/view"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"

	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/web"
)

func testLogger() *slog.Logger {
	if os.Getenv("AGENT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testNode is one in-process agent with its Run goroutine.
type testNode struct {
	agent  *Agent
	info   localapi.Info
	cancel context.CancelFunc
	done   chan error
}

// stop shuts the node down (gracefully unless abandon) and waits.
func (n *testNode) stop(t *testing.T, abandon bool) {
	t.Helper()
	if n.done == nil {
		return
	}
	if abandon {
		n.agent.Abandon()
	}
	n.cancel()
	select {
	case err := <-n.done:
		if err != nil {
			t.Errorf("%s: Run: %v", n.info.Node, err)
		}
	case <-time.After(60 * time.Second):
		t.Errorf("%s: shutdown did not finish", n.info.Node)
	}
	n.done = nil
}

type testCluster struct {
	t     *testing.T
	ca    *pki.CA
	key   string
	nodes []*testNode
	// load, when set, replaces the host's load in every agent's telemetry
	// (the test machine's real load may exceed P2's θ and block placement).
	load func() float64
	// raftConfig, when set, adjusts every agent's coordinator config.
	raftConfig func(*raft.Config)
	// jobsConfig, when set, adjusts every agent's job manager config.
	jobsConfig func(*jobs.Config)
	// logger, when set, gives each agent its logger (by node name).
	logger func(name string) *slog.Logger
	// scripts holds the tests' job scripts; every agent lets its guest
	// jobs read it (--guest-ro-path), as an owner lets them read a
	// dataset, and the repository's examples.
	scripts  string
	examples string
}

func newTestCluster(t *testing.T) *testCluster {
	// The first TempDir registers the removal of every temporary dir;
	// taken first, it runs after the agents below stopped (their jobs and
	// checkpoint stores write into their data dirs until then).
	t.TempDir()
	dev, err := pki.NewDev()
	if err != nil {
		t.Fatal(err)
	}
	k := make([]byte, 32)
	rand.Read(k)
	c := &testCluster{t: t, ca: dev.CA, key: base64.StdEncoding.EncodeToString(k), scripts: t.TempDir()}
	if err := os.Chmod(c.scripts, 0o755); err != nil { // guests are other users
		t.Fatal(err)
	}
	if c.examples, err = filepath.Abs("../examples"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, n := range c.nodes {
			wg.Go(func() { n.stop(t, true) })
		}
		wg.Wait()
	})
	return c
}

// config returns a loopback configuration with its own data and TLS dirs.
func (c *testCluster) config(name string) Config {
	c.t.Helper()
	root := c.t.TempDir()
	tlsDir := filepath.Join(root, "tls")
	nc, err := c.ca.Issue(name, nil, time.Hour, time.Now())
	if err != nil {
		c.t.Fatal(err)
	}
	if err := nc.Write(tlsDir); err != nil {
		c.t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Name = name
	cfg.DataDir = filepath.Join(root, "data")
	cfg.BindAddr = "127.0.0.1"
	cfg.GossipPort, cfg.RaftPort, cfg.TransferPort = 0, 0, 0
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.GossipKey = c.key
	cfg.TLSDir = tlsDir
	cfg.LocalTimings = true
	cfg.LeaveTimeout = Duration(2 * time.Second)
	cfg.TelemetryInterval = Duration(200 * time.Millisecond)
	cfg.GuestROPaths = []string{c.scripts, c.examples}
	return cfg
}

// writeScript writes a job script the cluster's guest jobs can run.
func (c *testCluster) writeScript(name, body string) string {
	c.t.Helper()
	p := filepath.Join(c.scripts, name)
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// jobFiles is a pattern matching file rel in job's home directory (its
// working directory, where it may write) on every node of the cluster:
// node data dirs are siblings (TempDir), and a job that moves leaves its
// earlier nodes' files behind.
func (c *testCluster) jobFiles(job, rel string) string {
	c.t.Helper()
	if len(c.nodes) == 0 {
		c.t.Fatal("jobFiles before any node started")
	}
	roots := filepath.Dir(filepath.Dir(c.nodes[0].agent.DataDir()))
	return filepath.Join(roots, "*", "data", jobsDirName, job, "run", "home", rel)
}

// start runs an agent; joins node 0 unless it is the first.
func (c *testCluster) start(cfg Config) *testNode {
	c.t.Helper()
	if len(c.nodes) > 0 && cfg.Join == nil {
		cfg.Join = []string{c.nodes[0].info.GossipAddr}
	}
	logger := testLogger().With("node", cfg.Name)
	if c.logger != nil {
		logger = c.logger(cfg.Name)
	}
	a, err := New(cfg, logger)
	if err != nil {
		c.t.Fatalf("New %s: %v", cfg.Name, err)
	}
	if c.load != nil {
		a.sampleLoad = c.load
	}
	a.raftConfig = c.raftConfig
	a.jobsConfig = c.jobsConfig
	ctx, cancel := context.WithCancel(context.Background())
	n := &testNode{agent: a, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan localapi.Info, 1)
	go func() { n.done <- a.Run(ctx, func(i localapi.Info) { ready <- i }) }()
	select {
	case n.info = <-ready:
	case err := <-n.done:
		c.t.Fatalf("%s stopped before ready: %v", cfg.Name, err)
	case <-time.After(30 * time.Second):
		c.t.Fatalf("%s not ready", cfg.Name)
	}
	c.nodes = append(c.nodes, n)
	return n
}

func (c *testCluster) startN(n int, building func(i int) string) {
	for i := range n {
		cfg := c.config(fmt.Sprintf("node-%02d", i))
		if building != nil {
			cfg.Building = building(i)
		}
		c.start(cfg)
	}
}

// leader returns the running node that leads, or nil.
func (c *testCluster) leader() *testNode {
	for _, n := range c.nodes {
		if n.done != nil && n.agent.coord != nil && n.agent.coord.IsLeader() {
			return n
		}
	}
	return nil
}

// waitConfig waits until the leader's Raft configuration has want servers
// of which voters are voters.
func (c *testCluster) waitConfig(want, voters int, within time.Duration) {
	c.t.Helper()
	wait.For(c.t, within, fmt.Sprintf("raft config with %d servers, %d voters", want, voters), func() bool {
		l := c.leader()
		if l == nil {
			return false
		}
		servers, err := l.agent.Coordinator().Servers()
		if err != nil || len(servers) != want {
			return false
		}
		v := 0
		for _, s := range servers {
			if s.Role == state.RoleVoter {
				v++
			}
		}
		return v == voters
	})
}

func TestClusterOfThree(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	c.startN(3, func(i int) string { return []string{"physics", "chemistry", "library"}[i] })
	c.waitConfig(3, 3, 60*time.Second)
	n2 := c.nodes[2]
	wait.For(t, 30*time.Second, "node-02 sees everyone's telemetry and roles", func() bool {
		st := n2.agent.Status()
		if len(st.Members) != 3 {
			return false
		}
		leaders := 0
		for _, m := range st.Members {
			if m.State != "alive" || m.ReportedAt.IsZero() {
				return false
			}
			if m.Role == "leader" {
				leaders++
			} else if m.Role != "voter" {
				return false
			}
		}
		return leaders == 1
	})
	st := n2.agent.Status()
	if st.Members[1].Building != "chemistry" {
		t.Errorf("node-01 building seen by node-02: got %q, want chemistry", st.Members[1].Building)
	}
	if !st.Raft.Running || st.Raft.Leader == "" || len(st.Raft.Voters) != 3 {
		t.Errorf("raft status: got %+v, want a leader and 3 voters", st.Raft)
	}

	// HTTP: /v1/status is the web document (members, roles, leader);
	// /metrics is Prometheus text with the agent's and web's metrics.
	resp, err := http.Get("http://" + n2.info.HTTPAddr + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	var httpStatus web.Status
	if err := json.NewDecoder(resp.Body).Decode(&httpStatus); err != nil {
		t.Fatalf("decode /v1/status: %v", err)
	}
	resp.Body.Close()
	if httpStatus.Node != "node-02" || len(httpStatus.Cluster.Members) != 3 {
		t.Errorf("/v1/status: got node %q with %d members, want node-02 with 3", httpStatus.Node, len(httpStatus.Cluster.Members))
	}
	if httpStatus.Cluster.Leader != policy.NodeID(st.Raft.Leader) {
		t.Errorf("/v1/status leader: got %q, want %q", httpStatus.Cluster.Leader, st.Raft.Leader)
	}
	roles := map[web.RaftRole]int{}
	for _, m := range httpStatus.Cluster.Members {
		roles[m.RaftRole]++
		if m.State != web.MemberAlive {
			t.Errorf("/v1/status member %s: state %q, want alive", m.ID, m.State)
		}
	}
	if roles[web.RaftLeader] != 1 || roles[web.RaftFollower] != 2 {
		t.Errorf("/v1/status raft roles: got %v, want 1 leader and 2 followers", roles)
	}
	resp, err = http.Get("http://" + n2.info.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`reclaimnet_gossip_members{node="node-02"} 3`, `reclaimnet_status_up 1`, `reclaimnet_raft_has_leader 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// Control socket: mode 0666 (callers are identified by SO_PEERCRED),
	// answers status and join.
	fi, err := os.Stat(n2.info.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o666 {
		t.Errorf("control socket mode: got %o, want 666", mode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := localapi.Call(ctx, n2.agent.DataDir(), localapi.Request{Op: localapi.OpStatus})
	if err != nil || r.Status == nil || r.Status.Node != "node-02" {
		t.Fatalf("Call status: %+v, %v", r, err)
	}
	var doc web.Status
	if err := json.Unmarshal(r.Document, &doc); err != nil || doc.Node != "node-02" || len(doc.Cluster.Members) != 3 {
		t.Errorf("Call status document: got node %q with %d members (%v), want node-02 with 3", doc.Node, len(doc.Cluster.Members), err)
	}
	r, err = localapi.Call(ctx, n2.agent.DataDir(), localapi.Request{Op: localapi.OpJoin, Peers: []string{"127.0.0.1:1"}})
	if err != nil || r.Kind != localapi.KindPeerUnreachable {
		t.Errorf("join unreachable peer: got kind %q (%s), err %v; want %q", r.Kind, r.Error, err, localapi.KindPeerUnreachable)
	}

	// A graceful stop is seen as a departure ("left"), not a failure.
	c.nodes[1].stop(t, false)
	wait.For(t, 30*time.Second, "node-01 shown as left", func() bool {
		for _, m := range n2.agent.Status().Members {
			if m.Name == "node-01" {
				return m.State == "left"
			}
		}
		return false
	})
	// ... and recorded in the reclaim history as a leave without a
	// reclaim, not as a failure.
	wait.For(t, 30*time.Second, "node-01's graceful leave in the history", func() bool {
		for _, h := range n2.agent.view.Web(time.Now()).Reclaims.History {
			if h.Reclaim.Node == "node-01" {
				return h.Graceful && h.Detected && !h.OwnerReport
			}
		}
		return false
	})
}

func TestDataDirLocked(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	cfg := c.config("node-a")
	c.start(cfg)
	cfg2 := cfg
	cfg2.HTTPAddr = "127.0.0.1:0"
	_, err := New(cfg2, testLogger())
	if !errors.Is(err, ErrDataDirLocked) {
		t.Fatalf("second agent on the same data dir: got %v, want ErrDataDirLocked", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(os.Getpid())) {
		t.Errorf("error %q does not name the holder's pid %d", err, os.Getpid())
	}
}

func TestNoAgent(t *testing.T) {
	t.Parallel()
	_, err := localapi.Call(context.Background(), t.TempDir(), localapi.Request{Op: localapi.OpStatus})
	if !errors.Is(err, localapi.ErrNoAgent) {
		t.Fatalf("Call without an agent: got %v, want ErrNoAgent", err)
	}
}

func TestWrongGossipKeyCannotJoin(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	c.startN(1, nil)
	cfg := c.config("intruder")
	other := make([]byte, 32)
	rand.Read(other)
	cfg.GossipKey = base64.StdEncoding.EncodeToString(other)
	cfg.Join = []string{} // join by hand below
	n := c.start(cfg)
	_, err := n.agent.Join([]string{c.nodes[0].info.GossipAddr})
	if err == nil || !strings.Contains(err.Error(), "gossip key") {
		t.Fatalf("join with another gossip key: got %v, want an error naming the gossip key", err)
	}
	if got := len(c.nodes[0].agent.Status().Members); got != 1 {
		t.Errorf("members of node-00 after the attempt: got %d, want 1", got)
	}
}

func TestConfigFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "agent.json")
	os.WriteFile(path, []byte(`{"name":"from-file","building":"physics","join":["10.0.0.1"],"leave_timeout":"7s"}`), 0o600)
	cfg, err := LoadConfigFile(path, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "from-file" || cfg.Building != "physics" || len(cfg.Join) != 1 ||
		time.Duration(cfg.LeaveTimeout) != 7*time.Second || cfg.GossipPort != localapi.DefaultGossipPort {
		t.Errorf("loaded config: got %+v", cfg)
	}
	os.WriteFile(path, []byte(`{"nmae":"typo"}`), 0o600)
	if _, err := LoadConfigFile(path, DefaultConfig()); err == nil || !strings.Contains(err.Error(), "nmae") {
		t.Errorf("unknown field: got %v, want an error naming it", err)
	}
	bad := DefaultConfig()
	bad.GossipKey = "short"
	bad.TLSDir = "x"
	if err := bad.Validate(); err == nil {
		t.Errorf("Validate with a bad gossip key: no error")
	}
	noKey := DefaultConfig()
	noKey.TLSDir = "x"
	if err := noKey.Validate(); err == nil || !strings.Contains(err.Error(), "keygen") {
		t.Errorf("Validate without a gossip key: got %v, want a hint to keygen", err)
	}
}

// After 7 non-voters leave at once without notice, the cluster still has
// a leader, the leader keeps ticking, and a new command commits within 2 s.
func TestSevenEmergencyDeparturesOfNonVoters(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: a 10-node in-process cluster takes tens of seconds (runs in the full suite and CI)")
	}
	c := newTestCluster(t)
	c.startN(10, func(i int) string { return fmt.Sprintf("b%d", i%3) })
	c.waitConfig(10, 3, 120*time.Second)
	servers, _ := c.leader().agent.Coordinator().Servers()
	role := map[string]state.Role{}
	for _, s := range servers {
		role[string(s.ID)] = s.Role
	}
	var victims []*testNode
	for _, n := range c.nodes {
		if role[n.info.Node] == state.RoleNonvoter {
			victims = append(victims, n)
		}
	}
	if len(victims) != 7 {
		t.Fatalf("non-voters: got %d, want 7", len(victims))
	}
	var wg sync.WaitGroup
	for _, n := range victims {
		wg.Go(func() { n.stop(t, true) })
	}
	wg.Wait()
	departed := time.Now()

	l := c.leader()
	if l == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, n := range c.nodes {
			if n.done != nil {
				if _, err := n.agent.Coordinator().WaitLeader(ctx); err != nil {
					t.Fatalf("no leader after the departures: %v", err)
				}
				break
			}
		}
		// WaitLeader knows the leader's ID a moment before that node's own
		// state says it leads: poll for it.
		wait.For(t, 10*time.Second, "a leader among the survivors", func() bool {
			l = c.leader()
			return l != nil
		})
	}
	ticks := l.agent.Coordinator().Ticks()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	job := state.JobRecord{Job: policy.Job{ID: "after-departures", CheckpointBytes: 1 << 20, GPUs: 1}, Spec: state.JobSpec{Command: []string{"true"}}}
	// Submit from a surviving voter that may not lead: forwarding included.
	var from *testNode
	for _, n := range c.nodes {
		if n.done != nil && n != l {
			from = n
		}
	}
	job.Owner = "root@" + from.info.Node
	if _, err := from.agent.Coordinator().Submit(ctx, state.SubmitJob{Job: job}); err != nil {
		t.Fatalf("submit %v after the departures: %v", time.Since(departed), err)
	}
	t.Logf("command committed %v after submit, %v after the 7 departures", time.Since(start), time.Since(departed))
	wait.For(t, 10*time.Second, "leader keeps ticking", func() bool {
		l := c.leader()
		return l != nil && l.agent.Coordinator().Ticks() > ticks+2
	})
}

// A TLS dir whose node certificate was signed by another CA, or names
// another node, is refused at start with an error that says so.
func TestBadCertificates(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	cfg := c.config("node-a")
	other, err := pki.NewDev()
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.CA.Issue("node-a", nil, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Keep our ca.pem, replace node.pem and node-key.pem.
	os.WriteFile(filepath.Join(cfg.TLSDir, pki.NodeFile), foreign.CertPEM, 0o600)
	os.WriteFile(filepath.Join(cfg.TLSDir, pki.NodeKeyFile), foreign.KeyPEM, 0o600)
	if _, err := New(cfg, testLogger()); !errors.Is(err, pki.ErrForeignCA) {
		t.Errorf("foreign certificate: got %v, want pki.ErrForeignCA", err)
	}

	cfg = c.config("node-b")
	cfg.Name = "node-c"
	if _, err := New(cfg, testLogger()); err == nil || !strings.Contains(err.Error(), `for node "node-b", not "node-c"`) {
		t.Errorf("certificate for another node: got %v", err)
	}
	// A failed New leaves nothing behind: the data dir is free again.
	cfg.Name = "node-b"
	n := c.start(cfg)
	if n.info.Node != "node-b" {
		t.Errorf("started %q, want node-b", n.info.Node)
	}
}

// Clusters of 5 and 20 agents with real memberlist on loopback and real
// Raft: every node sees every other node's telemetry, and the voter set
// grows to 5 once 20 nodes are eligible.
func TestClusterConverges(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ nodes, voters int }{{5, 3}, {20, 5}} {
		t.Run(fmt.Sprintf("%d nodes", tc.nodes), func(t *testing.T) {
			if testing.Short() && tc.nodes > 5 {
				t.Skip("-short: a 20-node in-process cluster takes tens of seconds (runs in the full suite and CI)")
			}
			c := newTestCluster(t)
			c.startN(tc.nodes, func(i int) string { return fmt.Sprintf("b%d", i%4) })
			c.waitConfig(tc.nodes, tc.voters, 120*time.Second)
			// Every node holds a report from every node, sent after this point.
			mark := time.Now()
			wait.For(t, 60*time.Second, "fresh telemetry from every node everywhere", func() bool {
				for _, n := range c.nodes {
					st := n.agent.Status()
					if len(st.Members) != tc.nodes {
						return false
					}
					for _, m := range st.Members {
						if m.State != "alive" || m.ReportedAt.Before(mark) {
							return false
						}
					}
				}
				return true
			})
			// The building of the last node, as the first one sees it.
			last := c.nodes[0].agent.Status().Members[tc.nodes-1]
			if want := fmt.Sprintf("b%d", (tc.nodes-1)%4); last.Building != want {
				t.Errorf("%s building: got %q, want %q", last.Name, last.Building, want)
			}
		})
	}
}

// The leader's view built from gossip (raft.Telemetry): declared GPUs in
// the member list, the campus graph with default capacities, and
// measured bandwidth replacing them.
func TestTelemetryForLeader(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	cfg := c.config("gpu-a")
	cfg.Building = "physics"
	cfg.GPUs = []string{"RTX-4090:24GiB:8.9:x2"}
	cfg.TelemetryInterval = Duration(time.Hour) // one report at start; ours below is not overwritten
	n := c.start(cfg)
	tel := view.Gossip{Mesh: n.agent.Mesh()}
	members := tel.Members()
	if len(members) != 1 {
		t.Fatalf("members: got %d, want 1", len(members))
	}
	m := members[0]
	if m.GPUs != 2 || m.GPU.Model != "RTX-4090" || m.GPU.VRAM != 24<<30 || m.GPU.Capability != 8.9 || m.Building != "physics" || m.Status != raft.MemberAlive {
		t.Errorf("member: got %+v, want 2 × RTX-4090 24 GiB cap 8.9 in physics, alive", m)
	}
	if m.RaftAddr != n.agent.Coordinator().Addr() {
		t.Errorf("raft address from gossip: got %s, want %s", m.RaftAddr, n.agent.Coordinator().Addr())
	}
	wait.For(t, 10*time.Second, "own telemetry", func() bool {
		// Nodes falls back to the declared GPUs without a report: wait
		// for the report itself, or the one at start could land after
		// (and replace) the reports published below.
		_, reported := n.agent.Mesh().Report("gpu-a")
		nodes := tel.Nodes()
		return reported && len(nodes) == 1 && nodes[0].FreeGPUs == 2 && nodes[0].AccessLink == "access/gpu-a"
	})
	links := tel.Links()
	if len(links) != 2 || links[0].ID != "access/gpu-a" || links[0].Available != view.DefaultAccessCapacity || links[1].ID != "uplink/physics" || links[1].B != "core" {
		t.Fatalf("links: got %+v, want access/gpu-a at the default capacity and uplink/physics to core", links)
	}
	err := n.agent.Mesh().PublishTelemetry(meshTelemetryReport(50e6, 20e6), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	links = tel.Links()
	// Every report describes the node's access link (the enforcement
	// subsystem's default accounting): the smallest sets it; the uplink
	// keeps its default.
	if links[0].Available != 20e6 || links[0].AvailableLow != 10e6 || links[0].Capacity != view.DefaultAccessCapacity ||
		links[1].Available != view.DefaultUplinkCapacity {
		t.Errorf("links after a measurement: access %v (low %v, capacity %v), uplink %v; want 20e6 (10e6, %v) and %v",
			links[0].Available, links[0].AvailableLow, links[0].Capacity, links[1].Available, float64(view.DefaultAccessCapacity), float64(view.DefaultUplinkCapacity))
	}
	err = n.agent.Mesh().PublishTelemetry(meshTelemetryReport(4e9, 3e9), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// A node whose link is faster than the default (--link-capacity)
	// raises its access link's capacity to what it measured.
	if links = tel.Links(); links[0].Available != 3e9 || links[0].Capacity != 3e9 {
		t.Errorf("links after a 10 Gbit/s node's report: access %v, capacity %v; want 3e9 both", links[0].Available, links[0].Capacity)
	}
}

// Every node's transfer progress reaches the leader's telemetry through
// gossip, beside the leader's own (a leader that knew only its own flows
// would judge another node's hand-off nearly done as not started).
func TestTelemetryFlowsFromPeers(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	cfgA, cfgB := c.config("gpu-a"), c.config("gpu-b")
	cfgB.TelemetryInterval = Duration(time.Hour) // one report at start; ours below is not overwritten
	a := c.start(cfgA)
	b := c.start(cfgB)
	own := []state.FlowProgress{{ID: "ckpt/local", Remaining: 7}}
	tel := view.Gossip{Mesh: a.agent.Mesh(), Outgoing: func() []state.FlowProgress { return own }}
	wait.For(t, 20*time.Second, "gpu-b alive at gpu-a, with its report at start", func() bool {
		_, reported := b.agent.Mesh().Report("gpu-b")
		return reported && len(tel.Members()) == 2
	})
	report := mesh.Telemetry{FreeGPUs: 1, Flows: gossipFlows([]state.FlowProgress{
		{ID: "ckpt/train", Remaining: 9 << 20},
		{ID: "mig/train", Remaining: 3 << 20},
		{ID: "restore/eval", Done: true},
	})}
	if err := b.agent.Mesh().PublishTelemetry(report, time.Now()); err != nil {
		t.Fatal(err)
	}
	var got []state.FlowProgress
	wait.For(t, 20*time.Second, "gpu-b's flows at gpu-a", func() bool {
		got = tel.Flows()
		return len(got) == 4
	})
	want := []state.FlowProgress{own[0], {ID: "mig/train", Remaining: 3 << 20}, {ID: "restore/eval", Done: true}, {ID: "ckpt/train", Remaining: 9 << 20}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("flows at gpu-a: got %+v, want %+v (own first, then gpu-b's: migrations, finished, checkpoints)", got, want)
	}
	// A node that left sends nothing any more.
	b.stop(t, false)
	wait.For(t, 20*time.Second, "gpu-b's flows gone at gpu-a", func() bool { return len(tel.Flows()) == 1 })
}

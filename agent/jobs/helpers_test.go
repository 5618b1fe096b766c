package jobs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/sandbox"
	"github.com/reclaimnet/reclaimnet/agent/supervisor"
	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/transfer"
)

// testInterval is the checkpoint interval the tests decide: P1 is switched
// off (policy.Switches) so the leader's real tick uses FixedInterval, which
// keeps the suite short; with P1 on the interval would be minutes.
const testInterval = time.Second

// stepJob is a POSIX sh job that counts steps, writes its step into the
// checkpoint directory on SIGUSR1, and logs what it does (pid, event, step)
// to $STEPLOG. After a checkpoint taken while a reclaim deadline is pending it
// stops stepping (what a well-behaved job does: later steps could not be
// kept). With HANG set it ignores checkpoint requests. CKSIG names the
// checkpoint signal it traps (default USR1; any other leaves USR1's default
// action, which kills it). With IGNTERM set it logs SIGTERM and keeps going
// (only SIGKILL after the grace ends it). With FAILFINAL set every checkpoint
// requested while a reclaim deadline is pending fails (.failed).
const stepJob = `#!/bin/sh
step=0
if [ -n "$RECLAIMNET_RESTORE_DIR" ]; then step=$(cat "$RECLAIMNET_RESTORE_DIR/step"); fi
echo "$$ start $step $RECLAIMNET_RESTART_COUNT" >> "$STEPLOG"
ck=0
paused=
trap 'ck=1' "${CKSIG:-USR1}"
if [ -n "$IGNTERM" ]; then
  trap 'echo "$$ term $step" >> "$STEPLOG"' TERM
else
  trap 'echo "$$ term $step" >> "$STEPLOG"; exit 0' TERM
fi
touch "$RECLAIMNET_READY_FILE"
while :; do
  if [ "$ck" = 1 ]; then
    ck=0
    if [ -n "$FAILFINAL" ] && [ -s "$RECLAIMNET_DEADLINE_FILE" ]; then
      echo "the test fails the final checkpoint" > "$RECLAIMNET_CKPT_DIR/.failed"
      echo "$$ ckptfail $step" >> "$STEPLOG"
    elif [ -z "$HANG" ]; then
      echo "$step" > "$RECLAIMNET_CKPT_DIR/step"
      touch "$RECLAIMNET_CKPT_DIR/.complete"
      echo "$$ ckpt $step" >> "$STEPLOG"
      if [ -s "$RECLAIMNET_DEADLINE_FILE" ]; then paused=1; fi
    fi
  fi
  if [ -z "$paused" ]; then step=$((step+1)); echo "$$ step $step" >> "$STEPLOG"; fi
  sleep 0.05
done
`

// gossipView stands in for the mesh: members with their addresses, a
// three-tier campus of links, per-node free GPUs the test may change, and
// every live member's transfer progress (the agent gossips it).
type gossipView struct {
	mu      sync.Mutex
	members map[policy.NodeID]raft.Member
	free    map[policy.NodeID]int
	mgrs    map[policy.NodeID]*Manager
	// access, when set, is every access link's capacity (bytes/s; 125e6
	// otherwise), 80 % of it available.
	access float64
}

func (g *gossipView) setManager(id policy.NodeID, m *Manager) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mgrs == nil {
		g.mgrs = map[policy.NodeID]*Manager{}
	}
	g.mgrs[id] = m
}

func (g *gossipView) set(m raft.Member) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.members[m.ID] = m
}

func (g *gossipView) fail(id policy.NodeID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.members[id]
	m.Status = raft.MemberFailed
	g.members[id] = m
}

func (g *gossipView) setFree(id policy.NodeID, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.free[id] = n
}

func (g *gossipView) ids() []policy.NodeID {
	var ids []policy.NodeID
	for id := range g.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (g *gossipView) Members() []raft.Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []raft.Member
	for _, id := range g.ids() {
		out = append(out, g.members[id])
	}
	return out
}

func (g *gossipView) Nodes() []raft.NodeTelemetry {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []raft.NodeTelemetry
	for _, id := range g.ids() {
		m := g.members[id]
		free := m.GPUs
		if f, ok := g.free[id]; ok {
			free = f
		}
		out = append(out, raft.NodeTelemetry{ID: id, FreeGPUs: free, AccessLink: "acc-" + string(id)})
	}
	return out
}

func (g *gossipView) Links() []policy.Link {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []policy.Link
	seen := map[string]bool{}
	for _, id := range g.ids() {
		m := g.members[id]
		if m.Status != raft.MemberAlive {
			continue
		}
		sw := "sw-" + m.Building
		access := 125e6
		if g.access > 0 {
			access = g.access
		}
		out = append(out, policy.Link{ID: "acc-" + string(id), A: string(id), B: sw, Capacity: access, Available: 0.8 * access, AvailableLow: 0.64 * access})
		if !seen[m.Building] {
			seen[m.Building] = true
			out = append(out, policy.Link{ID: "up-" + m.Building, A: sw, B: "core", Capacity: 1.25e9, Available: 1e9, AvailableLow: 8e8})
		}
	}
	return out
}

func (g *gossipView) Flows() []state.FlowProgress {
	g.mu.Lock()
	var mgrs []*Manager
	for _, id := range g.ids() {
		if m, ok := g.mgrs[id]; ok && g.members[id].Status == raft.MemberAlive {
			mgrs = append(mgrs, m)
		}
	}
	g.mu.Unlock()
	var out []state.FlowProgress
	for _, m := range mgrs {
		out = append(out, m.FlowProgress()...)
	}
	return out
}

type testNode struct {
	id     policy.NodeID
	coord  *raft.Coordinator
	store  *ckpt.Store
	root   string
	work   string // the manager's WorkDir
	srv    *transfer.Server
	client *transfer.Client
	mgr    *Manager
	cancel context.CancelFunc
	done   chan error
}

type testCluster struct {
	t       *testing.T
	dev     *pki.Dev
	gossip  *gossipView
	nodes   map[policy.NodeID]*testNode
	stepLog string
	script  string
	since   time.Time
	supCfg  supervisor.Config
	// switches are every coordinator's protocol switches (P1 off by
	// default: the fixed testInterval keeps the suite short).
	switches policy.Switches
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newCluster starts one node per entry of gpus (its GPU count): n00
// bootstraps and leads at first, the others join through the leader's
// reconcile of the gossip view. A node with 0 GPUs never hosts a job.
func newCluster(t *testing.T, gpus []int, supCfg supervisor.Config) *testCluster {
	t.Helper()
	return newClusterSwitches(t, gpus, supCfg, policy.Switches{P1: false, P2: true, P3: true})
}

// newClusterSwitches is newCluster with the leaders' protocol switches.
func newClusterSwitches(t *testing.T, gpus []int, supCfg supervisor.Config, sw policy.Switches) *testCluster {
	t.Helper()
	dev, err := pki.NewDev()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tc := &testCluster{t: t, dev: dev, gossip: &gossipView{members: map[policy.NodeID]raft.Member{}, free: map[policy.NodeID]int{}},
		nodes: map[policy.NodeID]*testNode{}, stepLog: filepath.Join(dir, "steps.log"), script: filepath.Join(dir, "job.sh"),
		since: time.Now().Add(-time.Hour), supCfg: supCfg, switches: sw}
	if err := os.WriteFile(tc.script, []byte(stepJob), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.stopAll)
	for i, g := range gpus {
		tc.start(policy.NodeID(fmt.Sprintf("n%02d", i)), i == 0, g)
	}
	return tc
}

// newClusterWithJob is the usual start of a test: three nodes (n00 the
// GPU-less bootstrap voter, n01 and n02 with one GPU each), three voters,
// the test job "train" submitted; it returns once the job runs, with its
// host.
func newClusterWithJob(t *testing.T) (*testCluster, policy.NodeID) {
	tc := newCluster(t, []int{0, 1, 1}, fastSupervisor())
	tc.waitVoters(3)
	tc.submitJob("train")
	return tc, tc.waitRunning("train", "")
}

func (tc *testCluster) start(id policy.NodeID, bootstrap bool, gpus int) *testNode {
	tc.t.Helper()
	n := tc.open(id, bootstrap, "", time.Time{})
	idx := len(tc.nodes)
	tc.gossip.set(raft.Member{ID: id, RaftAddr: n.coord.Addr(), TransferAddr: n.srv.Addr().String(), Building: "b0",
		GPUs: gpus, GPU: policy.GPU{Model: "A100", VRAM: 80 << 30, Capability: 8}, Status: raft.MemberAlive,
		Since: tc.since.Add(time.Duration(idx) * time.Minute)})
	return n
}

// open starts a node's coordinator, store, transfer server and manager
// without telling gossip. With dir set, its Raft state, store and work
// directory live there (a restart on the same dir finds them) and Raft
// snapshots often; since is the manager's Since.
func (tc *testCluster) open(id policy.NodeID, bootstrap bool, dir string, since time.Time) *testNode {
	t := tc.t
	t.Helper()
	b, err := tc.dev.Node(string(id))
	if err != nil {
		t.Fatal(err)
	}
	root, work := t.TempDir(), t.TempDir()
	if dir != "" {
		root, work = filepath.Join(dir, "ckpt"), filepath.Join(dir, "work")
	}
	store, err := ckpt.Open(ckpt.Config{Root: root, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	rc := raft.DefaultLocalConfig()
	// Loopback TLS on a loaded machine: keep elections calm.
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 200*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond
	rc.NodeID, rc.TLS, rc.Bootstrap, rc.Telemetry = id, b, bootstrap, tc.gossip
	if dir != "" {
		rc.DataDir = filepath.Join(dir, "raft")
		rc.SnapshotThreshold, rc.SnapshotInterval = 1, 100*time.Millisecond
	}
	rc.Params.Switches = tc.switches
	rc.Params.FixedInterval = testInterval
	rc.Logger = testLogger(t)
	rc.RaftLogLevel = slog.LevelError
	coord, err := raft.Open(rc)
	if err != nil {
		t.Fatalf("open coordinator %s: %v", id, err)
	}
	tcfg := transfer.DefaultLocalConfig()
	tcfg.TLS, tcfg.Store, tcfg.Logger = b, store, testLogger(t)
	client, err := transfer.NewClient(tcfg)
	if err != nil {
		t.Fatal(err)
	}
	sc := tc.supCfg
	sc.Logger = testLogger(t)
	sup, err := supervisor.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := New(Config{Node: id, Coord: coord, Store: store, Client: client, Supervisor: sup,
		WorkDir: work, FetchTimeout: 20 * time.Second, PurgeEvery: 200 * time.Millisecond, Logger: testLogger(t), Since: since})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := transfer.Listen("127.0.0.1:0", tcfg, mgr.TransferHooks())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &testNode{id: id, coord: coord, store: store, root: root, work: work, srv: srv, client: client, mgr: mgr, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- mgr.Run(ctx) }()
	tc.nodes[id] = n
	tc.gossip.setManager(id, mgr)
	return n
}

// stop ends a node's manager (its jobs are stopped), transfer server,
// client and coordinator.
func (n *testNode) stop(t *testing.T) {
	n.cancel()
	select {
	case err := <-n.done:
		if err != nil {
			t.Errorf("manager %s: %v", n.id, err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("manager %s did not stop within 30s", n.id)
	}
	_ = n.srv.Close()
	_ = n.client.Close()
	_ = n.coord.Shutdown()
	_ = n.store.Close()
}

// crash takes a node away without a word: manager, transfer and
// coordinator stop, and gossip declares it failed.
func (tc *testCluster) crash(id policy.NodeID) {
	tc.t.Helper()
	tc.nodes[id].stop(tc.t)
	delete(tc.nodes, id)
	tc.gossip.fail(id)
}

func (tc *testCluster) stopAll() {
	var wg sync.WaitGroup
	for _, n := range tc.nodes {
		wg.Go(func() { n.stop(tc.t) })
	}
	wg.Wait()
	clear(tc.nodes)
}

// any returns some running node (for reads and submits).
func (tc *testCluster) any() *testNode {
	for _, id := range tc.gossip.ids() {
		if n, ok := tc.nodes[id]; ok {
			return n
		}
	}
	tc.t.Fatal("no node running")
	return nil
}

func (tc *testCluster) state() *state.State { return tc.any().coord.State() }

// outcome returns what the reclaim history records for job displaced from
// node (zero if nothing).
func (tc *testCluster) outcome(node policy.NodeID, job policy.JobID) state.JobOutcome {
	var out state.JobOutcome
	for _, e := range tc.state().ReclaimReports {
		for _, o := range e.Jobs {
			if e.Node == node && o.Job == job {
				out = o
			}
		}
	}
	return out
}

func (tc *testCluster) submit(cmd state.Command) {
	tc.t.Helper()
	via := tc.any().id
	for id, n := range tc.nodes {
		if n.coord.IsLeader() {
			via = id
		}
	}
	// A user's request names its requester, a user of the node it goes
	// through (the leader checks a forwarded one): root there, an admin
	// (the leader, or a voter when leadership just moved).
	switch c := cmd.(type) {
	case state.SubmitJob:
		if c.Job.Owner == "" {
			c.Job.Owner = "root@" + string(via)
		}
		cmd = c
	case state.CancelJob:
		if c.Requester.User == "" {
			c.Requester = state.Requester{User: "root@" + string(via), Admin: true}
		}
		cmd = c
	}
	tc.submitVia(via, cmd)
}

// submitVia submits cmd through node's coordinator (a command about a
// node, such as its reclaim, must come from that node).
func (tc *testCluster) submitVia(node policy.NodeID, cmd state.Command) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := tc.nodes[node].coord.Submit(ctx, cmd); err != nil {
		tc.t.Fatalf("submit %s via %s: %v", cmd.Kind(), node, err)
	}
}

// waitVoters waits until the configuration has want voters known to every
// running node.
func (tc *testCluster) waitVoters(want int) {
	tc.t.Helper()
	wait.For(tc.t, 30*time.Second, fmt.Sprintf("%d voters", want), func() bool {
		for _, n := range tc.nodes {
			servers, err := n.coord.Servers()
			if err != nil {
				return false
			}
			v := 0
			for _, s := range servers {
				if s.Role == state.RoleVoter {
					v++
				}
			}
			if v != want || len(servers) != len(tc.nodes) {
				return false
			}
		}
		return true
	})
}

func (tc *testCluster) submitJob(id policy.JobID, env ...string) {
	tc.t.Helper()
	tc.submitCommand(id, []string{"/bin/sh", tc.script}, append([]string{"STEPLOG=" + tc.stepLog}, env...))
}

func (tc *testCluster) submitCommand(id policy.JobID, cmd, env []string) {
	tc.t.Helper()
	tc.submitSpec(id, state.JobSpec{Command: cmd, Env: env})
}

func (tc *testCluster) submitSpec(id policy.JobID, spec state.JobSpec) {
	tc.t.Helper()
	tc.submit(state.SubmitJob{Job: state.JobRecord{
		Job:  policy.Job{ID: id, GPUs: 1, CheckpointBytes: 1 << 10, LossBudget: time.Hour},
		Spec: spec,
	}})
}

// waitRunning waits until the job runs on a node other than not and
// returns that node.
func (tc *testCluster) waitRunning(id policy.JobID, not policy.NodeID) policy.NodeID {
	tc.t.Helper()
	var on policy.NodeID
	why, ok := wait.Until(30*time.Second, func() (bool, string) {
		st := tc.state()
		j, ok := st.Jobs[id]
		on = j.Node
		if ok && j.State == policy.JobRunning && on != "" && on != not {
			return true, ""
		}
		var leader policy.NodeID
		for _, n := range tc.nodes {
			if n.coord.IsLeader() {
				leader = n.id
			}
		}
		return false, fmt.Sprintf("record %+v; leader %q; decisions at %v: placements %+v jobs %+v; nodes %+v",
			j, leader, st.Decisions.At, st.Decisions.Placements, st.Decisions.Jobs, st.Nodes)
	})
	if !ok {
		tc.t.Fatalf("job %s not running (off %q) within 30s: %s", id, not, why)
	}
	return on
}

// waitCommitted waits until the catalogue has a committed version of the
// job at least min, and returns the freshest.
func (tc *testCluster) waitCommitted(id policy.JobID, min uint64) state.Checkpoint {
	tc.t.Helper()
	var cp state.Checkpoint
	wait.For(tc.t, 30*time.Second, fmt.Sprintf("committed version >= %d of %s", min, id), func() bool {
		c, ok := tc.state().FreshestCommitted(id)
		cp = c
		return ok && c.Version >= min
	})
	return cp
}

// stepOf restores version v from a store and returns the step it holds.
func stepOf(t *testing.T, s *ckpt.Store, job policy.JobID, v uint64) int {
	t.Helper()
	dir := t.TempDir()
	if err := s.Restore(string(job), v, dir); err != nil {
		t.Fatalf("restore %s v%d: %v", job, v, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "step"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("step file of v%d: %v", v, err)
	}
	return n
}

// stepEvent is one line of the step log.
type stepEvent struct {
	pid   string
	kind  string // start, step, ckpt, term
	step  int
	extra string
}

func readSteps(t *testing.T, path string) []stepEvent {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // the job has not written its first line yet
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []stepEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 {
			continue // a line being written
		}
		n, err := strconv.Atoi(fs[2])
		if err != nil {
			continue
		}
		ev := stepEvent{pid: fs[0], kind: fs[1], step: n}
		if len(fs) > 3 {
			ev.extra = fs[3]
		}
		out = append(out, ev)
	}
	return out
}

// starts returns the start events in order.
func starts(evs []stepEvent) []stepEvent {
	var out []stepEvent
	for _, e := range evs {
		if e.kind == "start" {
			out = append(out, e)
		}
	}
	return out
}

// fastSupervisor runs jobs unconfined: these tests' jobs share step logs
// and scripts with the test through its temporary directories, which a
// confined job does not see. Confinement is tested in agent/supervisor
// and agent/sandbox.
func fastSupervisor() supervisor.Config {
	c := supervisor.DefaultLocalConfig()
	c.CheckpointTimeout = 5 * time.Second
	c.Sandbox.Mode = sandbox.Off
	return c
}

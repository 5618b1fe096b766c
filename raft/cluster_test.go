package raft

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/state"

	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/policy"
)

// gossipView is the test's stand-in for the mesh: the member list the
// leader reconciles against, changed by the test as gossip would change it.
type gossipView struct {
	mu      sync.Mutex
	members map[policy.NodeID]Member
}

func newGossipView() *gossipView { return &gossipView{members: map[policy.NodeID]Member{}} }

func (g *gossipView) set(m Member) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.members[m.ID] = m
}

func (g *gossipView) setStatus(id policy.NodeID, s MemberStatus) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.members[id]
	m.Status = s
	g.members[id] = m
}

func (g *gossipView) Members() []Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Member, 0, len(g.members))
	for _, id := range sortedIDs(g.members) {
		out = append(out, g.members[id])
	}
	return out
}

func (g *gossipView) Nodes() []NodeTelemetry { return nil }

// Links is a three-tier campus: each member's 1 Gbit/s access link to its
// building switch, 10 Gbit/s uplinks to the core.
func (g *gossipView) Links() []policy.Link {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []policy.Link
	buildings := map[string]bool{}
	for _, id := range sortedIDs(g.members) {
		m := g.members[id]
		if m.Status != MemberAlive {
			continue
		}
		sw := "sw-" + m.Building
		out = append(out, policy.Link{ID: "acc-" + string(id), A: string(id), B: sw, Capacity: 125e6, Available: 100e6, AvailableLow: 80e6})
		if !buildings[m.Building] {
			buildings[m.Building] = true
			out = append(out, policy.Link{ID: "up-" + m.Building, A: sw, B: "core", Capacity: 1.25e9, Available: 1e9, AvailableLow: 8e8})
		}
	}
	return out
}
func (g *gossipView) Flows() []state.FlowProgress { return nil }

type testCluster struct {
	t      testing.TB
	dev    *pki.Dev
	gossip *gossipView
	base   Config
	nodes  map[policy.NodeID]*Coordinator
	dirs   map[policy.NodeID]string
	since  time.Time
}

// newTestCluster starts n coordinators on loopback TCP with mutual TLS; the
// first bootstraps, the others are added by the leader's reconcile.
func newTestCluster(t testing.TB, n int, base Config, persistent bool) *testCluster {
	t.Helper()
	dev, err := pki.NewDev()
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCluster{t: t, dev: dev, gossip: newGossipView(), base: base,
		nodes: map[policy.NodeID]*Coordinator{}, dirs: map[policy.NodeID]string{}, since: time.Now().Add(-time.Hour)}
	for i := range n {
		id := policy.NodeID(fmt.Sprintf("n%02d", i))
		if persistent {
			tc.dirs[id] = t.TempDir()
		}
		tc.start(id, i == 0)
	}
	t.Cleanup(tc.shutdownAll)
	return tc
}

func (tc *testCluster) config(id policy.NodeID, bootstrap bool) Config {
	tc.t.Helper()
	b, err := tc.dev.Node(string(id))
	if err != nil {
		tc.t.Fatal(err)
	}
	cfg := tc.base
	cfg.NodeID, cfg.TLS, cfg.Bootstrap, cfg.DataDir = id, b, bootstrap, tc.dirs[id]
	cfg.Telemetry = tc.gossip
	return cfg
}

func (tc *testCluster) start(id policy.NodeID, bootstrap bool) *Coordinator {
	tc.t.Helper()
	c, err := Open(tc.config(id, bootstrap))
	if err != nil {
		tc.t.Fatalf("open %s: %v", id, err)
	}
	tc.nodes[id] = c
	// Buildings b0..b2 round-robin; uptime decreasing with the index so the
	// stability order is deterministic.
	idx := len(tc.nodes)
	tc.gossip.set(Member{ID: id, RaftAddr: c.Addr(), Building: fmt.Sprintf("b%d", idx%3), GPUs: 1,
		GPU: policy.GPU{Model: "A100", VRAM: 80 << 30, Capability: 8}, Status: MemberAlive, Since: tc.since.Add(time.Duration(idx) * time.Minute)})
	return c
}

// crash stops a node without leaving and tells gossip it failed.
func (tc *testCluster) crash(id policy.NodeID) {
	tc.t.Helper()
	if err := tc.nodes[id].Shutdown(); err != nil {
		tc.t.Errorf("shutdown %s: %v", id, err)
	}
	delete(tc.nodes, id)
	tc.gossip.setStatus(id, MemberFailed)
}

func (tc *testCluster) shutdownAll() {
	var wg sync.WaitGroup
	for _, c := range tc.nodes {
		wg.Go(func() { _ = c.Shutdown() })
	}
	wg.Wait()
	clear(tc.nodes)
}

// leader waits for one running node to lead (with its loop started) and
// returns it.
func (tc *testCluster) leader(within time.Duration) *Coordinator {
	tc.t.Helper()
	var got *Coordinator
	wait.For(tc.t, within, "a leader", func() bool {
		got = nil
		for _, c := range tc.nodes {
			if c.IsLeader() && c.leading.Load() {
				got = c
			}
		}
		return got != nil
	})
	return got
}

func (tc *testCluster) voters(c *Coordinator) []policy.NodeID {
	servers, err := c.Servers()
	if err != nil {
		return nil
	}
	var out []policy.NodeID
	for _, s := range servers {
		if s.Role == state.RoleVoter {
			out = append(out, s.ID)
		}
	}
	slices.Sort(out)
	return out
}

// waitConfigured waits until every running node is in the configuration and
// there are want voters.
func (tc *testCluster) waitConfigured(want int, within time.Duration) *Coordinator {
	tc.t.Helper()
	var l *Coordinator
	wait.For(tc.t, within, fmt.Sprintf("configuration with %d servers and %d voters", len(tc.nodes), want), func() bool {
		l = tc.leader(within)
		servers, err := l.Servers()
		if err != nil || len(servers) != len(tc.nodes) || len(tc.voters(l)) != want {
			return false
		}
		// Every node must know the configuration, or a follower that was
		// just promoted would not stand for election after a crash.
		for _, c := range tc.nodes {
			if !slices.Equal(tc.voters(c), tc.voters(l)) {
				return false
			}
		}
		return true
	})
	return l
}

func testJob(id string) state.SubmitJob {
	return state.SubmitJob{Job: state.JobRecord{Job: policy.Job{ID: policy.JobID(id), GPUs: 1, CheckpointBytes: 1 << 30, LossBudget: time.Hour},
		Spec: state.JobSpec{Command: []string{"python3", "train.py"}}, Owner: "alice"}}
}

// testJobOn is testJob submitted by alice on node: the owner a follower
// must name to forward it.
func testJobOn(id string, node policy.NodeID) state.SubmitJob {
	j := testJob(id)
	j.Job.Owner = "alice@" + string(node)
	return j
}

// waitJob waits until every running node's FSM has the job.
func (tc *testCluster) waitJob(id policy.JobID, within time.Duration) {
	tc.t.Helper()
	wait.For(tc.t, within, "job "+string(id)+" on every node", func() bool {
		for _, c := range tc.nodes {
			if _, ok := c.Store().Job(id); !ok {
				return false
			}
		}
		return true
	})
}

func localConfig() Config {
	cfg := DefaultLocalConfig()
	// Loopback TLS on a loaded 2-core machine: keep elections calm.
	cfg.HeartbeatTimeout = 200 * time.Millisecond
	cfg.ElectionTimeout = 200 * time.Millisecond
	cfg.LeaderLeaseTimeout = 100 * time.Millisecond
	return cfg
}

func TestClusterLeaderCrashTicksResume(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			tc := newTestCluster(t, n, localConfig(), true)
			old := tc.waitConfigured(3, 20*time.Second)
			oldAddr := old.Addr()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := old.Submit(ctx, testJob("before")); err != nil {
				t.Fatal(err)
			}
			tc.waitJob("before", 10*time.Second)
			oldID := old.ID()
			start := time.Now()
			tc.crash(oldID)
			l := tc.leader(15 * time.Second)
			t.Logf("%d nodes: new leader %s after %v", n, l.ID(), time.Since(start))
			if l.ID() == oldID {
				t.Fatalf("leader is still the crashed node %s", oldID)
			}
			ticks := l.Ticks()
			wait.For(tc.t, 10*time.Second, "ticks on the new leader", func() bool { return l.Ticks() >= ticks+3 })
			// A follower's command commits through the new leader.
			var follower *Coordinator
			for _, c := range tc.nodes {
				if c != l {
					follower = c
				}
			}
			if _, err := follower.Submit(ctx, testJobOn("after", follower.ID())); err != nil {
				t.Fatalf("submit after crash: %v", err)
			}
			tc.waitJob("after", 10*time.Second)
			// The crashed voter is replaced (3 voters among the living when
			// there are enough of them).
			want := 3
			if n-1 < 3 {
				want = 1
			}
			wait.For(tc.t, 15*time.Second, fmt.Sprintf("%d live voters", want), func() bool {
				v := tc.voters(l)
				return len(v) == want && !slices.Contains(v, oldID)
			})
			// After DeadServerTimeout the dead server leaves the configuration.
			wait.For(tc.t, 15*time.Second, "the crashed server removed", func() bool {
				servers, err := l.Servers()
				if err != nil {
					return false
				}
				return !slices.ContainsFunc(servers, func(s Server) bool { return s.ID == oldID })
			})
			// The crashed node restarts on its data dir and address and
			// rejoins: it catches up and, as the third eligible member of
			// the 3-node cluster, votes again.
			cfg := tc.config(oldID, false)
			cfg.BindAddr = oldAddr
			back, err := Open(cfg)
			if err != nil {
				t.Fatalf("restart %s: %v", oldID, err)
			}
			tc.nodes[oldID] = back
			tc.gossip.set(Member{ID: oldID, RaftAddr: back.Addr(), Building: "b1", GPUs: 1, Status: MemberAlive, Since: time.Now()})
			tc.waitJob("after", 15*time.Second)
			wait.For(tc.t, 15*time.Second, "3 voters after the rejoin", func() bool { return len(tc.voters(l)) == 3 })
			wait.For(tc.t, 10*time.Second, "the rejoined node active in the registry with 2 membership stretches", func() bool {
				rec, _ := l.Store().Node(oldID)
				return rec.State == state.NodeActive && len(rec.Stretches) == 2 && rec.Role != state.RoleNone
			})
		})
	}
}

func TestForwardedCommandsCommitAndErrorsTravel(t *testing.T) {
	tc := newTestCluster(t, 3, localConfig(), false)
	l := tc.waitConfigured(3, 20*time.Second)
	var f *Coordinator
	for _, c := range tc.nodes {
		if c != l {
			f = c
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	idx, err := f.Submit(ctx, testJobOn("fwd", f.ID()))
	if err != nil {
		t.Fatalf("forwarded submit: %v", err)
	}
	if idx == 0 {
		t.Fatal("forwarded submit returned index 0")
	}
	tc.waitJob("fwd", 10*time.Second)
	// The same submission again is a no-op, a different one under the same
	// ID is refused, and the sentinel survives the trip.
	if _, err := f.Submit(ctx, testJobOn("fwd", f.ID())); err != nil {
		t.Fatalf("repeated submit: %v", err)
	}
	changed := testJobOn("fwd", f.ID())
	changed.Job.Owner = "mallory@" + string(f.ID())
	if _, err := f.Submit(ctx, changed); !errors.Is(err, state.ErrJobExists) {
		t.Fatalf("conflicting submit got %v, want ErrJobExists", err)
	}
	if _, err := f.Submit(ctx, state.CancelJob{Job: "nope", Requester: state.Requester{User: "alice@" + string(f.ID())}}); !errors.Is(err, state.ErrUnknownJob) {
		t.Fatalf("cancel of an unknown job got %v, want ErrUnknownJob", err)
	}
	// At-most-once completion through Raft: the same replica twice leaves
	// one holder entry and one committed version.
	rc := state.ReplicaComplete{Job: "fwd", Version: 1, ManifestHash: "sha256:x", Size: 10, Source: "n01", Holder: "n02", At: time.Now()}
	for range 2 {
		if _, err := f.Submit(ctx, rc); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(tc.t, 5*time.Second, "replica on every node", func() bool {
		for _, c := range tc.nodes {
			cps := c.Store().Checkpoints("fwd")
			if len(cps) != 1 || !slices.Equal(cps[0].Holders, []policy.NodeID{"n02"}) || !cps[0].Committed {
				return false
			}
		}
		return true
	})
}

func TestLeaderPlacesSubmittedJob(t *testing.T) {
	tc := newTestCluster(t, 3, localConfig(), false)
	l := tc.waitConfigured(3, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Submit(ctx, testJob("place-me")); err != nil {
		t.Fatal(err)
	}
	wait.For(tc.t, 10*time.Second, "placement of the job", func() bool {
		j, _ := l.Store().Job("place-me")
		return j.State == policy.JobRunning && j.Node != ""
	})
	j, _ := l.Store().Job("place-me")
	d := l.Store().Decisions()
	t.Logf("job on %s; decisions %+v", j.Node, d)
}

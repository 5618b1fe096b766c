package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/owner"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// fakeOwner is a fake activity source: the owner's GPU processes as the
// test sets them (no GPU here).
type fakeOwner struct {
	mu  sync.Mutex
	gpu []owner.GPUProcess
}

func (f *fakeOwner) set(ps ...owner.GPUProcess) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gpu = ps
}

func (f *fakeOwner) Observe(context.Context) owner.Observations {
	f.mu.Lock()
	defer f.mu.Unlock()
	return owner.Observations{GPU: append([]owner.GPUProcess(nil), f.gpu...), GPUKnown: true}
}

// servedNode is an agent run by Serve, as 'reclaimnet agent' runs it.
type servedNode struct {
	cfg    Config
	cancel context.CancelFunc
	done   chan error
	ready  chan *Agent
}

func (c *testCluster) serve(cfg Config) *servedNode {
	c.t.Helper()
	if cfg.Join == nil {
		cfg.Join = []string{c.nodes[0].info.GossipAddr}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &servedNode{cfg: cfg, cancel: cancel, done: make(chan error, 1), ready: make(chan *Agent, 4)}
	go func() {
		s.done <- Serve(ctx, cfg, testLogger().With("node", cfg.Name), func(a *Agent, _ localapi.Info) { s.ready <- a })
	}()
	c.t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(60 * time.Second):
			c.t.Errorf("%s: Serve did not return", cfg.Name)
		}
	})
	return s
}

// incarnation waits for the next incarnation of s to serve.
func (s *servedNode) incarnation(t *testing.T, within time.Duration) *Agent {
	t.Helper()
	select {
	case a := <-s.ready:
		return a
	case err := <-s.done:
		t.Fatalf("%s: Serve returned: %v", s.cfg.Name, err)
	case <-time.After(within):
		t.Fatalf("%s: no incarnation within %v", s.cfg.Name, within)
	}
	return nil
}

func (s *servedNode) call(t *testing.T, req localapi.Request) localapi.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := localapi.Call(ctx, s.cfg.DataDir, req)
	if err != nil {
		t.Fatalf("%s %s: %v", s.cfg.Name, req.Op, err)
	}
	return resp
}

func (s *servedNode) lendStatus(t *testing.T, req localapi.Request) owner.Status {
	t.Helper()
	st, err := lendStatusOf(s.call(t, req))
	if err != nil {
		t.Fatalf("%s %s: %v", s.cfg.Name, req.Op, err)
	}
	return st
}

func (s *servedNode) lendState(t *testing.T) owner.NodeState {
	t.Helper()
	return s.lendStatus(t, localapi.Request{Op: localapi.OpLendStatus}).State
}

func lendStatusOf(resp localapi.Response) (owner.Status, error) {
	var st owner.Status
	if resp.Error != "" {
		return st, errors.New(resp.Error)
	}
	err := json.Unmarshal(resp.Lend, &st)
	return st, err
}

// alive reports whether node's gossip member is alive as c's first node
// sees it.
func (c *testCluster) alive(node string) bool {
	for _, m := range c.nodes[0].agent.mesh.Members() {
		if m.Name == node {
			return m.State == mesh.StateAlive
		}
	}
	return false
}

// TestLendAfterReclaim: an owner's reclaim --now makes the node leave, but
// its agent stays up, reclaimed: it answers lend --status, refuses cluster
// operations, and nothing (no window opening: there are none) lends it
// again until the owner's lend, after which it rejoins as a new
// incarnation.
func TestLendAfterReclaim(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	c.startN(1, nil)
	cfg := c.config("owned")
	cfg.OwnerCheck = Duration(100 * time.Millisecond)
	cfg.OwnerSource = &fakeOwner{}
	s := c.serve(cfg)
	s.incarnation(t, 30*time.Second)
	if st := s.lendState(t); st != owner.StateLent {
		t.Fatalf("state %q at start, want lent", st)
	}
	wait.For(t, 30*time.Second, "owned alive in the cluster", func() bool { return c.alive("owned") })

	if resp := s.call(t, localapi.Request{Op: localapi.OpReclaimNow}); resp.Error != "" {
		t.Fatalf("reclaim now: %s", resp.Error)
	}
	wait.For(t, 30*time.Second, "owned reclaimed and out of the cluster", func() bool {
		resp, err := localapi.Call(context.Background(), cfg.DataDir, localapi.Request{Op: localapi.OpLendStatus})
		st, serr := lendStatusOf(resp)
		return err == nil && serr == nil && st.State == owner.StateReclaimed && !c.alive("owned")
	})
	select {
	case err := <-s.done:
		t.Fatalf("Serve returned after the reclaim (%v); the agent must stay up", err)
	default:
	}
	resp, err := localapi.Call(context.Background(), cfg.DataDir, localapi.Request{Op: localapi.OpMembers})
	if err != nil || resp.Kind != localapi.KindReclaimed {
		t.Errorf("members on a reclaimed node: %+v, %v; want a %q error", resp, err, localapi.KindReclaimed)
	}
	rs := s.call(t, localapi.Request{Op: localapi.OpReclaimStatus}).Reclaim
	if rs == nil || !rs.Reclaimed || rs.Report == nil || !rs.Report.Emergency || rs.Report.Reason == "" {
		t.Errorf("reclaim status while reclaimed: %+v", rs)
	}
	// Several checks later it is still out: only the owner lends it.
	time.Sleep(time.Second)
	if st := s.lendState(t); st != owner.StateReclaimed {
		t.Fatalf("state %q a second after the reclaim, want reclaimed", st)
	}

	if lent := s.lendStatus(t, localapi.Request{Op: localapi.OpLend}); !lent.Lent {
		t.Fatalf("lend: %+v", lent)
	}
	a := s.incarnation(t, 60*time.Second)
	// The peers still hold the last incarnation as left: they see the new
	// one alive after a gossip exchange, 18–28 s with the test timings on
	// a loaded two-core machine.
	wait.For(t, 60*time.Second, "owned back in the cluster", func() bool { return c.alive("owned") })
	if st := s.lendState(t); st != owner.StateLent {
		t.Errorf("state %q after lend, want lent", st)
	}
	if a.Reclaimed() {
		t.Error("the new incarnation reports itself reclaimed")
	}
}

// TestOwnerGPUProcessReclaims: an owner process on a lent GPU triggers the
// mapped reclaim (a notice) through the reclaim path, with the reason in
// the owner's report and the cluster's history; the node stays out while
// the owner works and is lent again by itself once the owner has been idle
// for the set time.
func TestOwnerGPUProcessReclaims(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	c.startN(1, nil)
	cfg := c.config("owned")
	cfg.OwnerCheck = Duration(100 * time.Millisecond)
	cfg.Owner.GPU = "notice 2s"
	cfg.Owner.Idle = owner.Duration(2 * time.Second)
	src := &fakeOwner{}
	cfg.OwnerSource = src
	s := c.serve(cfg)
	s.incarnation(t, 30*time.Second)
	wait.For(t, 30*time.Second, "owned alive in the cluster", func() bool { return c.alive("owned") })

	src.set(owner.GPUProcess{PID: 4242, GPU: 0, Name: "python3"})
	const why = "owner process 4242 (python3) on GPU 0"
	wait.For(t, 10*time.Second, "the reclaim announced", func() bool {
		rs := s.call(t, localapi.Request{Op: localapi.OpReclaimStatus}).Reclaim
		return rs != nil && rs.Active && !rs.Emergency
	})
	wait.For(t, 30*time.Second, "owned out of the cluster", func() bool {
		resp, err := localapi.Call(context.Background(), cfg.DataDir, localapi.Request{Op: localapi.OpReclaimStatus})
		return err == nil && resp.Reclaim != nil && resp.Reclaim.Reclaimed
	})
	rep, err := localapi.ReadReport(cfg.DataDir)
	if err != nil || rep == nil || rep.Reason != why || rep.Emergency {
		t.Errorf("owner's report %+v (%v); want a scheduled reclaim for %q", rep, err, why)
	}
	wait.For(t, 10*time.Second, "the reason in the cluster's history", func() bool {
		for _, r := range c.nodes[0].agent.Coordinator().State().ReclaimReports {
			if r.Node == "owned" && r.Reason == why {
				return true
			}
		}
		return false
	})
	// The leader logs it as a scheduled departure: the hazard estimator
	// counts it in the node's departure hazard (P2's survival), not in its
	// emergency hazard.
	wait.For(t, 10*time.Second, "a scheduled departure of owned in the leader's log", func() bool {
		for _, d := range c.nodes[0].agent.Coordinator().State().Departures {
			if d.Node == "owned" && d.Kind == state.DepartureScheduled {
				return true
			}
		}
		return false
	})
	// The owner still works: the node stays out, and says why.
	time.Sleep(3 * time.Second)
	st := s.lendStatus(t, localapi.Request{Op: localapi.OpLendStatus})
	if st.State != owner.StateOwnerActive || !strings.Contains(st.Why, "4242") {
		t.Errorf("while the owner works: %s: %s; want owner active naming the process", st.State, st.Why)
	}
	// The owner stops; after the idle time the policy lends it again.
	src.set()
	s.incarnation(t, 60*time.Second)
	wait.For(t, 30*time.Second, "owned back in the cluster", func() bool { return c.alive("owned") })
}

// TestOnReclaimExit: with on_reclaim exit, Serve ends with ErrReclaimed
// once a reclaim made the node leave.
func TestOnReclaimExit(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	c.startN(1, nil)
	cfg := c.config("owned")
	cfg.OnReclaim = OnReclaimExit
	cfg.OwnerSource = &fakeOwner{}
	s := c.serve(cfg)
	s.incarnation(t, 30*time.Second)
	s.call(t, localapi.Request{Op: localapi.OpReclaimNow})
	select {
	case err := <-s.done:
		if !errors.Is(err, ErrReclaimed) {
			t.Errorf("Serve: %v, want ErrReclaimed", err)
		}
		s.done <- err // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after the reclaim")
	}
}

// TestLendUntilPlannedReclaim: a node outside its lending windows stays
// out of the cluster; lend --until lends it, its outlook (lent until that
// time) reaches the leader's policy input and the members list, the
// planned reclaim is announced the lead time before the end through the
// reclaim path, with its reason, and the node leaves at the end and stays
// out.
func TestLendUntilPlannedReclaim(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	c.startN(1, nil)
	cfg := c.config("owned")
	cfg.OwnerCheck = Duration(100 * time.Millisecond)
	cfg.OwnerSource = &fakeOwner{}
	far := time.Now().UTC().AddDate(0, 0, 3).Weekday().String()[:3]
	cfg.Owner.LendWindows = []string{far + " 03:00-04:00"}
	cfg.Owner.LendTZ = "UTC"
	const lead = 4 * time.Second
	cfg.Owner.LendLead = owner.Duration(lead)
	s := c.serve(cfg)
	wait.For(t, 30*time.Second, "the lending status of a node outside its windows", func() bool {
		resp, err := localapi.Call(context.Background(), cfg.DataDir, localapi.Request{Op: localapi.OpLendStatus})
		st, serr := lendStatusOf(resp)
		return err == nil && serr == nil && st.State == owner.StateOutside
	})
	select {
	case <-s.ready:
		t.Fatal("a node outside its lending windows joined the cluster")
	case <-time.After(time.Second):
	}

	until := time.Now().Add(lead + 6*time.Second).Truncate(time.Second)
	if st := s.lendStatus(t, localapi.Request{Op: localapi.OpLend, Until: until.Format(time.RFC3339)}); !st.Lent {
		t.Fatalf("lend --until: %+v", st)
	}
	s.incarnation(t, 30*time.Second)
	leader := c.nodes[0]
	wait.For(t, 10*time.Second, "the outlook at the leader", func() bool {
		for _, n := range leader.agent.telemetry.Nodes() {
			if n.ID == "owned" {
				return n.LentUntil.Equal(until)
			}
		}
		return false
	})
	members := call(t, leader, localapi.Request{Op: localapi.OpMembers}).Status.Members
	for _, m := range members {
		if m.Name == "owned" && (m.Lending == nil || m.Lending.State != string(owner.StateLent) || !m.Lending.Until.Equal(until) || !strings.Contains(m.Lending.Windows, far+" 03:00-04:00")) {
			t.Errorf("members: owned's lending %+v, want lent until %v with its window", m.Lending, until)
		}
	}

	var rs *localapi.ReclaimStatus
	wait.For(t, 30*time.Second, "the planned reclaim announced", func() bool {
		rs = s.call(t, localapi.Request{Op: localapi.OpReclaimStatus}).Reclaim
		return rs != nil && rs.Active
	})
	if !rs.Deadline.Equal(until) || rs.Emergency {
		t.Errorf("planned reclaim: deadline %v (emergency %v), want %v with notice", rs.Deadline, rs.Emergency, until)
	}
	if notice := rs.Deadline.Sub(rs.Announced); notice > lead || notice < lead-time.Second {
		t.Errorf("notice %v, want the lead %v less at most a check or two", notice, lead)
	}
	wait.For(t, 30*time.Second, "owned out of the cluster after its lend", func() bool {
		resp, err := localapi.Call(context.Background(), cfg.DataDir, localapi.Request{Op: localapi.OpReclaimStatus})
		return err == nil && resp.Reclaim != nil && resp.Reclaim.Reclaimed
	})
	if left := time.Now(); left.Before(until) {
		t.Errorf("left at %v, before the end %v", left, until)
	}
	rep, _ := localapi.ReadReport(cfg.DataDir)
	if rep == nil || !strings.HasPrefix(rep.Reason, "lending ends ") || !strings.Contains(rep.Reason, "(reclaimnet lend --until)") {
		t.Errorf("owner's report %+v: want the reason 'lending ends ... (reclaimnet lend --until)'", rep)
	}
	after := s.lendStatus(t, localapi.Request{Op: localapi.OpLendStatus})
	if after.State != owner.StateOutside || after.NextLend == nil {
		t.Fatalf("state %q (next lend %+v) after the lend ended, want %q with the next window", after.State, after.NextLend, owner.StateOutside)
	}
	if rep.LendingAfter != string(owner.StateOutside) || !rep.LendableFrom.Equal(after.NextLend.At) {
		t.Errorf("owner's report: lending after %q from %v; want %q from %v", rep.LendingAfter, rep.LendableFrom, owner.StateOutside, after.NextLend.At)
	}
	// The cluster's history keeps it after gossip forgets the member.
	wait.For(t, 10*time.Second, "the lending after the reclaim in the cluster's history", func() bool {
		for _, r := range leader.agent.Coordinator().State().ReclaimReports {
			if r.Node == "owned" && r.LendingAfter == string(owner.StateOutside) && r.LendableFrom.Equal(after.NextLend.At) {
				return true
			}
		}
		return false
	})
}

// TestOwnerActivityRaisesHazard: owner activity mapped to `now` is an
// emergency reclaim the leader logs as a departure of that node, and the
// leader's hazard estimator (docs/design.md P1.7) counts it for that node
// at that hour of the day: once the owner is idle again and the node is
// lent, its published emergency hazard λ̂⁺, the members list's HAZARD, is
// above what it was and above the leader's, which never left; the rise is
// the node's own (its factor f_v) and largest in the departure's hour.
func TestOwnerActivityRaisesHazard(t *testing.T) {
	c := newTestCluster(t)
	c.startN(1, nil)
	leader := c.nodes[0]
	coord := leader.agent.Coordinator()
	cfg := c.config("owned")
	cfg.OwnerCheck = Duration(100 * time.Millisecond)
	cfg.Owner.GPU = "now"
	cfg.Owner.Idle = owner.Duration(time.Second)
	src := &fakeOwner{}
	cfg.OwnerSource = src
	s := c.serve(cfg)
	s.incarnation(t, 30*time.Second)
	var before policy.HazardEstimate
	wait.For(t, 30*time.Second, "owned's hazard published", func() bool {
		h, ok := coord.State().Hazards["owned"]
		before = h
		return ok && len(h.Emergency.Rates) > 0
	})

	src.set(owner.GPUProcess{PID: 4242, GPU: 0, Name: "python3"})
	var dep state.Departure
	wait.For(t, 30*time.Second, "owned's departure in the leader's log", func() bool {
		for _, d := range coord.State().Departures {
			if d.Node == "owned" {
				dep = d
				return true
			}
		}
		return false
	})
	if dep.Kind != state.DepartureEmergency {
		t.Fatalf("departure %+v: owner activity mapped to now is an emergency", dep)
	}
	src.set()
	s.incarnation(t, 60*time.Second)
	var after, other policy.HazardEstimate
	wait.ForWhy(t, 60*time.Second, "owned's hazard published after its return", func() (bool, string) {
		st := coord.State()
		h, ok := st.Hazards["owned"]
		after, other = h, st.Hazards[policy.NodeID(leader.info.Node)]
		return ok && st.HazardsAt.After(dep.At) && len(other.Emergency.Rates) > 0,
			fmt.Sprintf("owned %s, published for it %v, at %v (departure %v)", st.Nodes["owned"].State, ok, st.HazardsAt, dep.At)
	})
	t.Logf("owned before: factor %.3f, λ̂⁺ %.3g/h; after: factor %.3f, λ̂⁺ %.3g/h; leader: factor %.3f, λ̂⁺ %.3g/h",
		before.NodeFactor, 3600*before.EmergencyUpper.At(dep.At), after.NodeFactor, 3600*after.EmergencyUpper.At(dep.At),
		other.NodeFactor, 3600*other.EmergencyUpper.At(dep.At))
	// One emergency event against almost no expected ones: f_v =
	// (1 + NodePrior)/(≈0 + NodePrior) ≈ 1.2; the leader's stays at most 1.
	if after.NodeFactor < 1.1 || other.NodeFactor > 1 {
		t.Errorf("node factors: owned %.3f (want ≥ 1.1 after its departure), leader %.3f (want ≤ 1)", after.NodeFactor, other.NodeFactor)
	}
	if a, b := after.EmergencyUpper.At(dep.At), before.EmergencyUpper.At(dep.At); !(a > b) {
		t.Errorf("owned's λ̂⁺ at the departure's hour %.3g/h, before %.3g/h: want a rise", 3600*a, 3600*b)
	}
	// The event counts in its own hour: the bucket it fell in rises by more
	// than the bucket twelve hours away.
	k := int(dep.At.UTC().Hour() * len(after.Emergency.Rates) / 24)
	j := (k + len(after.Emergency.Rates)/2) % len(after.Emergency.Rates)
	riseK := after.Emergency.Rates[k] / before.Emergency.Rates[k]
	riseJ := after.Emergency.Rates[j] / before.Emergency.Rates[j]
	if !(riseK > riseJ) {
		t.Errorf("owned's λ̂e rose ×%.3f in the departure's bucket %d, ×%.3f in bucket %d: want the larger rise in its own hour", riseK, k, riseJ, j)
	}
	// The members list shows the same figure, for the node that left above
	// the node that did not.
	var mine, theirs float64
	for _, m := range call(t, leader, localapi.Request{Op: localapi.OpMembers}).Status.Members {
		switch m.Name {
		case "owned":
			mine = m.Hazard
		case leader.info.Node:
			theirs = m.Hazard
		}
	}
	if !(mine > theirs*1.05) || theirs <= 0 {
		t.Errorf("members: owned's hazard %.3g/h, the leader's %.3g/h; want owned's above", 3600*mine, 3600*theirs)
	}
}

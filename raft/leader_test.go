package raft

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/state"

	"github.com/reclaimnet/reclaimnet/policy"
)

// TestDecisionsCommittedOnlyWhenChanged runs a one-node cluster with a
// placed job for many ticks: the decisions are committed when they change
// (placement, then P1 for the running job) and not on every tick.
func TestDecisionsCommittedOnlyWhenChanged(t *testing.T) {
	tc := newTestCluster(t, 1, localConfig(), false)
	l := tc.leader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Submit(ctx, testJob("steady")); err != nil {
		t.Fatal(err)
	}
	wait.For(tc.t, 10*time.Second, "the job placed", func() bool {
		j, _ := l.Store().Job("steady")
		return j.State == policy.JobRunning
	})
	ticks, commits, start := l.Ticks(), l.DecisionCommits(), time.Now()
	wait.For(tc.t, 20*time.Second, "30 more ticks", func() bool { return l.Ticks() >= ticks+30 })
	// Allowed: the P1 decision for the newly running job, one refresh per
	// refresh period that passed, and one spare.
	allowed := 2 + uint64(time.Since(start)/refreshPeriod(l.cfg.ControlPeriod))
	if extra := l.DecisionCommits() - commits; extra > allowed {
		t.Fatalf("%d decision commits in 30 unchanged ticks, want ≤ %d", extra, allowed)
	}
	if l.DecisionCommits() == 0 {
		t.Fatal("no decisions ever committed")
	}
}

// TestHazardRebuildMatchesIncremental checks that a new leader, rebuilding
// the estimator from the replicated log, gets the same estimates as the old
// leader that fed it tick by tick: a new leader picks up where the old one
// stopped.
func TestHazardRebuildMatchesIncremental(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	st := state.New()
	start := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	ids := []policy.NodeID{"a", "b", "c", "d"}
	for _, id := range ids {
		if _, err := st.Apply(state.UpsertNode{Node: state.NodeRecord{ID: id, Admitted: true, Joined: start}}); err != nil {
			t.Fatal(err)
		}
	}
	c := &Coordinator{store: state.NewStore()}
	index := uint64(0)
	old := &leaderTicker{}
	now := start
	for step := range 48 * 6 { // two days in 10-minute ticks
		now = start.Add(time.Duration(step) * 10 * time.Minute)
		if rng.IntN(10) == 0 {
			id := ids[rng.IntN(len(ids))]
			kind := state.DepartureScheduled
			if rng.IntN(2) == 0 {
				kind = state.DepartureEmergency
			}
			// The coordinator's store counts the departure; st, the
			// state the estimator reads, gets it too.
			index++
			dep := state.RecordDeparture{Departure: state.Departure{Node: id, At: now, Kind: kind}}
			if err := c.store.ApplyCommand(index, dep); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Apply(dep); err != nil {
				t.Fatal(err)
			}
			// Back ten minutes later.
			if _, err := st.Apply(state.UpsertNode{Node: state.NodeRecord{ID: id, Admitted: true, Joined: now.Add(10 * time.Minute)}}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.estimateHazards(old, st, now); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.estimateHazards(old, st, now)
	if err != nil {
		t.Fatal(err)
	}
	want, err := c.estimateHazards(&leaderTicker{}, st, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Departures) == 0 {
		t.Fatal("the random run produced no departures")
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("incremental and rebuilt estimates differ:\n got %+v\nwant %+v", got["a"], want["a"])
	}
}

type fixedTelemetry struct {
	nodes []NodeTelemetry
	links []policy.Link
	flows []state.FlowProgress
}

func (f fixedTelemetry) Members() []Member           { return nil }
func (f fixedTelemetry) Nodes() []NodeTelemetry      { return f.nodes }
func (f fixedTelemetry) Links() []policy.Link        { return f.links }
func (f fixedTelemetry) Flows() []state.FlowProgress { return f.flows }

func TestBuildSnapshot(t *testing.T) {
	st := state.New()
	at := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	must := func(cmd state.Command) {
		t.Helper()
		if _, err := st.Apply(cmd); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []state.NodeRecord{{ID: "a", GPUs: 4, Joined: at, Admitted: true}, {ID: "b", GPUs: 2, Joined: at, Admitted: true}, {ID: "c", GPUs: 1, Joined: at, Admitted: true}} {
		must(state.UpsertNode{Node: n})
	}
	must(state.SubmitJob{Job: state.JobRecord{Job: policy.Job{ID: "j", GPUs: 3, CheckpointBytes: 1000}, Spec: state.JobSpec{Command: []string{"x"}}}})
	must(state.SubmitJob{Job: state.JobRecord{Job: policy.Job{ID: "k", GPUs: 1, CheckpointBytes: 500}, Spec: state.JobSpec{Command: []string{"x"}}}})
	must(state.SetDecisions{Decisions: state.DecisionRecord{At: at, Decisions: policy.Decisions{
		Placements: []policy.Placement{{Job: "j", To: "a"}, {Job: "k", To: "a"}},
		Flows: []policy.FlowDecision{
			{ID: "f-done", Job: "j", From: "a", To: "b", Rate: 10},
			{ID: "f-part", Job: "j", From: "a", To: "c", Rate: 20},
			{ID: "f-new", Job: "k", From: "a", To: "b", Rate: 30},
		},
	}}})
	// j's version 2 is held by its host a, by b, and by c which then left.
	for _, h := range []policy.NodeID{"a", "b", "c"} {
		must(state.ReplicaComplete{Job: "j", Version: 2, ManifestHash: "h", Source: "a", Holder: h, At: at})
	}
	must(state.RecordDeparture{Departure: state.Departure{Node: "c", At: at.Add(time.Minute), Kind: state.DepartureEmergency}})
	must(state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: "b", Announced: at, Deadline: at.Add(time.Minute)}})

	tel := fixedTelemetry{
		nodes: []NodeTelemetry{{ID: "a", FreeGPUs: 4, Load: 0.5, AccessLink: "acc-a"}, {ID: "b", FreeGPUs: 1, LentUntil: at.Add(time.Hour)}},
		links: []policy.Link{{ID: "acc-a", A: "a", B: "sw"}},
		flows: []state.FlowProgress{{ID: "f-done", Done: true}, {ID: "f-part", Remaining: 123}},
	}
	hz := map[policy.NodeID]policy.HazardEstimate{"a": {EmergencyUpper: policy.HazardProfile{Rates: []float64{1e-4}}, Departure: policy.HazardProfile{Rates: []float64{2e-4}}}}
	s := buildSnapshot(st, hz, tel, policy.DefaultParams(), time.Now())

	if len(s.Nodes) != 2 || s.Nodes[0].ID != "a" || s.Nodes[1].ID != "b" {
		t.Fatalf("nodes got %+v, want a and b (c left)", s.Nodes)
	}
	if a := s.Nodes[0]; a.FreeGPUs != 0 || a.Load != 0.5 || a.AccessLink != "acc-a" || a.Emergency.Rates[0] != 1e-4 || a.Departure.Rates[0] != 2e-4 || a.Leaving {
		t.Fatalf("node a got %+v, want 0 free GPUs (4 − 3 − 1), load 0.5, its link and hazards", a)
	}
	if b := s.Nodes[1]; b.FreeGPUs != 1 || !b.Leaving || !b.LentUntil.Equal(at.Add(time.Hour)) {
		t.Fatalf("node b got %+v, want 1 free GPU (telemetry), leaving, lent until its outlook's end", b)
	}
	if !s.Nodes[0].LentUntil.IsZero() {
		t.Errorf("node a lent until %v; its telemetry names no end", s.Nodes[0].LentUntil)
	}
	if len(s.Jobs) != 2 || !slices.Equal(s.Jobs[0].Replicas, []policy.NodeID{"b"}) {
		t.Fatalf("job j replicas got %+v, want [b] (not the host a, not the departed c)", s.Jobs)
	}
	var flows []string
	for _, f := range s.Flows {
		flows = append(flows, f.ID)
		switch f.ID {
		case "f-part":
			if f.Remaining != 123 || f.Rate != 20 {
				t.Errorf("f-part got %+v, want remaining 123 at rate 20", f)
			}
		case "f-new":
			if f.Remaining != 500 {
				t.Errorf("f-new got remaining %d, want the job's checkpoint size 500", f.Remaining)
			}
		}
	}
	if !slices.Equal(flows, []string{"f-part", "f-new"}) {
		t.Fatalf("carried flows got %v, want f-part and f-new (f-done finished)", flows)
	}
	if len(s.Reclaims) != 1 || s.Reclaims[0].Node != "b" {
		t.Fatalf("reclaims got %+v, want b's", s.Reclaims)
	}
}

// TestEventsTriggerImmediateTick sets a control period of an hour: only a
// new job, a reclaim or a departure (or Kick) can make the leader tick.
func TestEventsTriggerImmediateTick(t *testing.T) {
	cfg := localConfig()
	cfg.ControlPeriod = time.Hour
	tc := newTestCluster(t, 2, cfg, false)
	l := tc.waitConfigured(1, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	step := func(what string, act func()) {
		t.Helper()
		before := l.Ticks()
		act()
		wait.For(tc.t, 5*time.Second, "a tick after "+what, func() bool { return l.Ticks() > before })
	}
	step("a new job", func() {
		if _, err := l.Submit(ctx, testJob("now")); err != nil {
			t.Fatal(err)
		}
	})
	wait.For(tc.t, 5*time.Second, "the job placed by that tick", func() bool {
		j, _ := l.Store().Job("now")
		return j.State == policy.JobRunning
	})
	var other policy.NodeID
	for id := range tc.nodes {
		if id != l.ID() {
			other = id
		}
	}
	step("a reclaim", func() {
		now := time.Now()
		if _, err := l.Submit(ctx, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: other, Announced: now, Deadline: now.Add(time.Minute)}}); err != nil {
			t.Fatal(err)
		}
	})
	step("a departure", func() {
		if _, err := l.Submit(ctx, state.RecordDeparture{Departure: state.Departure{Node: other, At: time.Now(), Kind: state.DepartureScheduled}}); err != nil {
			t.Fatal(err)
		}
	})
	step("Kick", l.Kick)
	// A command that is not an event does not tick.
	before := l.Ticks()
	if _, err := l.Submit(ctx, state.JobReport{Job: "now", Node: l.Store().Jobs()[0].Node, Remaining: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Submit(ctx, state.CancelReclaim{Node: "nobody"}); err != nil {
		t.Fatal(err)
	}
	if got := l.Ticks(); got != before {
		t.Fatalf("ticks went from %d to %d on a job report", before, got)
	}
}

// TestLeaderKeepsAdmittedHandoff runs the leader's decision step (decide)
// over a scheduled hand-off a → b: once admitted and under way, the
// decision stays admitted to b even when a fresh Tick, counting the whole
// checkpoint as unsent close to the deadline, calls it infeasible; it is
// released when b fails or the deadline passes.
func TestLeaderKeepsAdmittedHandoff(t *testing.T) {
	at := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	deadline := at.Add(60 * time.Second)
	const mbps = 10e6 // bytes/s on every access link
	build := func(t *testing.T) *state.State {
		st := state.New()
		must := func(cmd state.Command) {
			t.Helper()
			if _, err := st.Apply(cmd); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range []policy.NodeID{"a", "b"} {
			must(state.UpsertNode{Node: state.NodeRecord{ID: id, Admitted: true, GPUs: 2, Joined: at.Add(-time.Hour)}})
		}
		// 200 MB at 10 MB/s: 20 s of the 60 s notice.
		must(state.SubmitJob{Job: state.JobRecord{Job: policy.Job{ID: "j", GPUs: 1, CheckpointBytes: 200e6}, Spec: state.JobSpec{Command: []string{"x"}}}})
		must(state.SetDecisions{Decisions: state.DecisionRecord{At: at.Add(-time.Minute), Decisions: policy.Decisions{Placements: []policy.Placement{{Job: "j", To: "a"}}}}})
		must(state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: "a", Announced: at, Deadline: deadline}})
		return st
	}
	tel := fixedTelemetry{
		nodes: []NodeTelemetry{{ID: "a", FreeGPUs: 1, AccessLink: "acc-a"}, {ID: "b", FreeGPUs: 2, AccessLink: "acc-b"}},
		links: []policy.Link{
			{ID: "acc-a", A: "a", B: "sw", Capacity: mbps, Available: mbps, AvailableLow: mbps},
			{ID: "acc-b", A: "b", B: "sw", Capacity: mbps, Available: mbps, AvailableLow: mbps},
		},
	}
	params := policy.DefaultParams()
	handoff := func(d policy.Decisions) policy.HandoffDecision {
		t.Helper()
		if len(d.Handoffs) != 1 {
			t.Fatalf("hand-offs got %+v, want one for j", d.Handoffs)
		}
		return d.Handoffs[0]
	}
	migRate := func(d policy.Decisions) float64 {
		for _, f := range d.Flows {
			if f.Job == "j" && f.Class == policy.ClassMigration && f.To == "b" {
				return f.Rate
			}
		}
		return 0
	}
	// admit commits the first decision (as runTick does), so j is migrating.
	admit := func(t *testing.T) (*state.State, policy.Decisions) {
		st := build(t)
		first := decide(st, nil, nil, tel, nil, params, at)
		if h := handoff(first); h.To != "b" || !h.FinalCheckpoint || h.Degraded {
			t.Fatalf("first decision got %+v, want admitted to b with a final checkpoint", h)
		}
		if migRate(first) <= 0 {
			t.Fatalf("first decision has no migration flow to b: %+v", first.Flows)
		}
		if _, err := st.Apply(state.SetDecisions{Decisions: state.DecisionRecord{At: at, Decisions: first}}); err != nil {
			t.Fatal(err)
		}
		if j := st.Jobs["j"]; j.State != policy.JobMigrating {
			t.Fatalf("job after the admitted decision got %v, want migrating", j.State)
		}
		return st, first
	}
	late := deadline.Add(-5 * time.Second) // 200 MB cannot fit in 5 s at 10 MB/s

	t.Run("kept", func(t *testing.T) {
		st, first := admit(t)
		fresh := policy.Tick(buildSnapshot(st, nil, tel, params, late), late)
		if h := handoff(fresh); !h.Degraded || h.To != "" {
			t.Fatalf("a fresh Tick 5 s before the deadline got %+v, want degraded (the test's premise)", h)
		}
		got := decide(st, nil, nil, tel, nil, params, late)
		if h := handoff(got); h.To != "b" || !h.FinalCheckpoint || h.Degraded {
			t.Fatalf("leader's decision 5 s before the deadline got %+v, want still admitted to b", h)
		}
		if r, r0 := migRate(got), migRate(first); r < r0 {
			t.Fatalf("kept flow rate got %g, want ≥ the admitted %g", r, r0)
		}
		for _, jd := range got.Jobs {
			if jd.Job == "j" {
				t.Fatalf("kept hand-off still carries a job decision %+v (last-chance checkpoint)", jd)
			}
		}
	})
	t.Run("released when the destination fails", func(t *testing.T) {
		st, _ := admit(t)
		if _, err := st.Apply(state.RecordDeparture{Departure: state.Departure{Node: "b", At: late.Add(-time.Second), Kind: state.DepartureEmergency}}); err != nil {
			t.Fatal(err)
		}
		if h := handoff(decide(st, nil, nil, tel, nil, params, late)); h.To == "b" || !h.Degraded {
			t.Fatalf("decision after b failed got %+v, want degraded, not to b", h)
		}
	})
	t.Run("released when the destination becomes ineligible", func(t *testing.T) {
		st, _ := admit(t)
		unverified := map[policy.NodeID]string{"b": "certificate not verified"}
		got := decide(st, nil, nil, tel, unverified, params, late)
		if h := handoff(got); h.To == "b" || !h.Degraded {
			t.Fatalf("decision after b turned ineligible got %+v, want degraded, not to b", h)
		}
		if r := migRate(got); r != 0 {
			t.Fatalf("a migration flow to the ineligible b is still planned at %g bytes/s", r)
		}
		// With b eligible again (the admitted decision still the committed
		// one) the hand-off to b is kept: only the ineligibility released it.
		if h := handoff(decide(st, nil, nil, tel, nil, params, late)); h.To != "b" || h.Degraded {
			t.Fatalf("decision with b eligible again got %+v, want kept to b", h)
		}
	})
	t.Run("released after the deadline", func(t *testing.T) {
		st, _ := admit(t)
		after := deadline.Add(time.Second)
		got := decide(st, nil, nil, tel, nil, params, after)
		want := policy.Tick(eligibleSnapshot(st, nil, tel, nil, params, after), after)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decision after the deadline got %+v, want the fresh Tick's %+v", handoff(got), handoff(want))
		}
		if h := handoff(got); !h.Degraded {
			t.Fatalf("decision after the deadline got %+v, want degraded", h)
		}
	})
}

// TestUnplaceableJobDoesNotStopDecisions: a job asking for more GPUs than
// any node has stays pending with its reason, while jobs submitted before
// and after it are placed and get checkpoint intervals, and no decision is
// refused.
func TestUnplaceableJobDoesNotStopDecisions(t *testing.T) {
	tc := newTestCluster(t, 2, localConfig(), false) // one GPU each
	l := tc.waitConfigured(1, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	huge := testJob("huge")
	huge.Job.GPUs = 1000
	for _, cmd := range []state.SubmitJob{testJob("before"), huge} {
		if _, err := l.Submit(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(tc.t, 10*time.Second, "the first job placed", func() bool {
		j, _ := l.Store().Job("before")
		return j.State == policy.JobRunning
	})
	firstAt := l.Store().State().Decisions.At
	if _, err := l.Submit(ctx, testJob("after")); err != nil {
		t.Fatal(err)
	}
	wait.For(tc.t, 10*time.Second, "the later job placed and both running jobs given an interval", func() bool {
		st := l.Store().State()
		if st.Jobs["after"].State != policy.JobRunning {
			return false
		}
		n := 0
		for _, jd := range st.Decisions.Jobs {
			if (jd.Job == "before" || jd.Job == "after") && jd.Interval > 0 {
				n++
			}
		}
		return n == 2
	})
	st := l.Store().State()
	if !st.Decisions.At.After(firstAt) {
		t.Fatalf("decisions not committed again: at %v, first %v", st.Decisions.At, firstAt)
	}
	if j := st.Jobs["huge"]; j.State != policy.JobPending || j.Node != "" {
		t.Fatalf("huge job %v on %q, want pending", j.State, j.Node)
	}
	if got, want := st.PendingReason("huge"), "needs 1000 GPUs; the largest node has "; len(got) < len(want) || got[:len(want)] != want {
		t.Fatalf("pending reason %q, want it to start %q", got, want)
	}
	if r := l.Status().RefusedDecision; r != "" {
		t.Fatalf("a decision was refused: %s", r)
	}
}

// TestIneligibleNodesGetNoJob: the three nodes of the issue (kill-switch
// still hard after a reclaim, data disk full, certificate the leader
// cannot verify), a loaded one and a draining one get no job; the job goes
// to the one eligible node, and the decisions say why each other node was
// kept out.
func TestIneligibleNodesGetNoJob(t *testing.T) {
	st := state.New()
	at := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	ids := []policy.NodeID{"hard", "full", "stranger", "busy", "leaving", "good"}
	var links []policy.Link
	var nodes []NodeTelemetry
	for _, id := range ids {
		if _, err := st.Apply(state.UpsertNode{Node: state.NodeRecord{ID: id, GPUs: 1, Joined: at, Admitted: true}}); err != nil {
			t.Fatal(err)
		}
		links = append(links, policy.Link{ID: "acc-" + string(id), A: string(id), B: "sw", Capacity: 125e6, Available: 1e8, AvailableLow: 8e7})
		nodes = append(nodes, NodeTelemetry{ID: id, FreeGPUs: 1, AccessLink: "acc-" + string(id), KillSwitch: "off",
			DiskKnown: true, DataWritable: true, FreeDisk: 50 << 30})
	}
	nodes[0].KillSwitch = "hard"
	nodes[1].FreeDisk = 1 << 20
	nodes[3].Load = 0.95
	nodes[4].Draining = true
	job := state.JobRecord{Job: policy.Job{ID: "j", GPUs: 1, CheckpointBytes: 1 << 30, LossBudget: time.Hour}, Spec: state.JobSpec{Command: []string{"x"}}}
	if _, err := st.Apply(state.SubmitJob{Job: job}); err != nil {
		t.Fatal(err)
	}
	tel := fixedTelemetry{nodes: nodes, links: links}
	unverified := map[policy.NodeID]string{"stranger": "the leader cannot verify it over mutual TLS"}
	d := decide(st, nil, nil, tel, unverified, policy.DefaultParams(), at)
	if len(d.Placements) != 1 || d.Placements[0].To != "good" {
		t.Fatalf("placements %+v, want j on good", d.Placements)
	}
	want := map[policy.NodeID]string{
		"hard": "kill-switch hard", "full": "data directory full (a checkpoint needs 1.0 GiB)",
		"stranger": "the leader cannot verify it over mutual TLS", "busy": "load above θ = 0.80", "leaving": "draining",
	}
	got := map[policy.NodeID]string{}
	for _, v := range d.Ineligible {
		got[v.Node] = v.Reason
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ineligible nodes %v, want %v", got, want)
	}
	// Once the kill-switch is off again, the node takes work.
	nodes[0].KillSwitch = "off"
	d = decide(st, nil, nil, fixedTelemetry{nodes: nodes, links: links}, unverified, policy.DefaultParams(), at)
	if slices.ContainsFunc(d.Ineligible, func(v policy.NodeVerdict) bool { return v.Node == "hard" }) {
		t.Fatalf("node hard still ineligible with its kill-switch off: %+v", d.Ineligible)
	}
}

// TestRefusedDecisionLoggedOnce: a refusal the leader meets every period
// is logged once per distinct error and kept for the status page until
// decisions commit again.
func TestRefusedDecisionLoggedOnce(t *testing.T) {
	var logs strings.Builder
	c := &Coordinator{logger: slog.New(slog.NewTextHandler(&logs, nil))}
	at := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	bad := fmt.Errorf("%w: placement of j: neither a node nor a reason", state.ErrInvalidCommand)
	for i := range 10 {
		c.noteRefused(bad, at.Add(time.Duration(i)*time.Second))
	}
	if n := strings.Count(logs.String(), "decisions refused"); n != 1 {
		t.Fatalf("%d log lines for one refusal repeated 10 times, want 1:\n%s", n, logs.String())
	}
	if c.refused != bad.Error() || !c.refusedAt.Equal(at) {
		t.Fatalf("kept %q at %v, want the first refusal's error and time", c.refused, c.refusedAt)
	}
	c.noteRefused(errors.New("another"), at.Add(time.Minute))
	if n := strings.Count(logs.String(), "decisions refused"); n != 2 {
		t.Fatalf("%d log lines after a different refusal, want 2", n)
	}
	c.noteRefused(nil, at.Add(2*time.Minute))
	if c.refused != "" || !strings.Contains(logs.String(), "decisions commit again") {
		t.Fatalf("after a commit: kept %q; logs:\n%s", c.refused, logs.String())
	}
}

package view

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/web"
)

// The bandwidth matrix follows the campus graph: between buildings the
// smaller of the two uplinks, within one the smallest access link; each
// figure says whether it was measured (a node's report), declared (both
// uplinks) or assumed (a default).
func TestBuildingBandwidth(t *testing.T) {
	links := []policy.Link{
		{ID: "access/a1", A: "a1", B: "building/A", Capacity: 125e6, Available: 100e6, AvailableLow: 80e6},
		{ID: "access/a2", A: "a2", B: "building/A", Capacity: 125e6, Available: 60e6, AvailableLow: 50e6},
		{ID: "access/b1", A: "b1", B: "building/B", Capacity: 125e6, Available: 125e6, AvailableLow: 62.5e6},
		{ID: "uplink/A", A: "building/A", B: "core", Capacity: 1.25e9, Available: 900e6, AvailableLow: 700e6},
		{ID: "uplink/B", A: "building/B", B: "core", Capacity: 1e9, Available: 1e9, AvailableLow: 500e6},
	}
	reported := mesh.Telemetry{Bandwidth: []mesh.BuildingBandwidth{{Building: "A", Available: 60e6, AvailableLow: 50e6}}}
	members := []mesh.Member{
		{Name: "a1", Meta: mesh.Meta{Building: "A"}},
		{Name: "a2", Meta: mesh.Meta{Building: "A"}, HasTelemetry: true, Telemetry: reported},
		{Name: "b1", Meta: mesh.Meta{Building: "B"}},
	}
	declaredA := func(b string) (float64, bool) { return 1.25e9, b == "A" }
	got := buildingBandwidth(links, members, declaredA)
	want := []web.BuildingBandwidth{
		{From: "A", To: "A", Available: 60e6, AvailableLow: 50e6, Capacity: 125e6, Basis: web.BandwidthMeasured},
		{From: "A", To: "B", Available: 900e6, AvailableLow: 500e6, Capacity: 1e9, Basis: web.BandwidthAssumed},
		{From: "B", To: "A", Available: 900e6, AvailableLow: 500e6, Capacity: 1e9, Basis: web.BandwidthAssumed},
		{From: "B", To: "B", Available: 125e6, AvailableLow: 62.5e6, Capacity: 125e6, Basis: web.BandwidthAssumed},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	// Both uplinks declared: declared; nothing declared: assumed.
	for _, tc := range []struct {
		declared func(string) (float64, bool)
		want     string
	}{
		{func(string) (float64, bool) { return 1e9, true }, web.BandwidthDeclared},
		{nil, web.BandwidthAssumed},
	} {
		if got := buildingBandwidth(links, members, tc.declared)[1].Basis; got != tc.want {
			t.Errorf("A → B: got basis %q, want %q", got, tc.want)
		}
	}
}

// A reclaim outcome's downtime runs from the hand-off's stop, or from the
// departure (the command, for an emergency) for a recovery, to the job's
// readiness; without readiness the job is resuming.
func TestOutcomeDowntime(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	emergency := state.ReclaimReport{Kind: state.DepartureEmergency, Announced: t0, Deadline: t0, Left: t0.Add(20 * time.Millisecond)}
	scheduled := state.ReclaimReport{Kind: state.DepartureScheduled, Announced: t0, Deadline: t0.Add(time.Minute), Left: t0.Add(time.Minute)}
	cases := []struct {
		name     string
		rep      state.ReclaimReport
		o        state.JobOutcome
		want     time.Duration
		resuming bool
	}{
		{"emergency: from the command", emergency, state.JobOutcome{To: "b", At: t0.Add(25 * time.Millisecond), Resumed: t0.Add(5 * time.Second)}, 5 * time.Second, false},
		{"placed, not ready", emergency, state.JobOutcome{To: "b", At: t0.Add(25 * time.Millisecond)}, 0, true},
		{"recovery after a scheduled departure", scheduled, state.JobOutcome{To: "b", Resumed: t0.Add(70 * time.Second)}, 10 * time.Second, false},
		{"hand-off: from the stop", scheduled, state.JobOutcome{To: "b", HandedOff: true, Stopped: t0.Add(30 * time.Second), Resumed: t0.Add(33 * time.Second)}, 3 * time.Second, false},
		{"hand-off from an older node", scheduled, state.JobOutcome{To: "b", HandedOff: true, Resumed: t0.Add(33 * time.Second)}, 0, false},
		{"no destination", emergency, state.JobOutcome{}, 0, false},
		{"clocks apart", emergency, state.JobOutcome{To: "b", Resumed: t0.Add(-time.Second)}, 0, false},
	}
	for _, tc := range cases {
		if got, resuming := outcomeDowntime(tc.rep, tc.o); got != tc.want || resuming != tc.resuming {
			t.Errorf("%s: got %v resuming %v, want %v resuming %v", tc.name, got, resuming, tc.want, tc.resuming)
		}
	}
}

// The cluster profile is the bucket-wise mean of the active nodes' λ̂⁺.
func TestClusterHazard(t *testing.T) {
	st := &state.State{
		Nodes: map[policy.NodeID]state.NodeRecord{"a": {State: state.NodeActive}, "b": {State: state.NodeActive}, "gone": {State: state.NodeLeft}},
		Hazards: map[policy.NodeID]policy.HazardEstimate{
			"a":    {EmergencyUpper: policy.HazardProfile{Rates: []float64{1, 2, 3}}},
			"b":    {EmergencyUpper: policy.HazardProfile{Rates: []float64{3, 4, 5}}},
			"gone": {EmergencyUpper: policy.HazardProfile{Rates: []float64{100, 100, 100}}},
		},
	}
	got := clusterHazard(st).Rates
	want := []float64{2, 3, 4}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k := range want {
		if got[k] != want[k] {
			t.Errorf("bucket %d: got %v, want %v", k, got[k], want[k])
		}
	}
	if r := clusterHazard(&state.State{}).Rates; len(r) != 0 {
		t.Errorf("no estimates: got %v, want an empty profile", r)
	}
}

// Jobs carry P1's decision and the freshest committed checkpoint; pending
// reclaims list the live jobs on their node; decisions keep candidates.
func TestWebJobsReclaimsDecisions(t *testing.T) {
	at := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	st := &state.State{
		Jobs: map[policy.JobID]state.JobRecord{
			"j1": {Job: policy.Job{ID: "j1", State: policy.JobRunning, Node: "n1", GPUs: 1, CheckpointBytes: 1 << 30, Standby: "n2"}, Restarts: 2},
			"j2": {Job: policy.Job{ID: "j2", State: policy.JobDone, Node: "n1"}},
			"j3": {Job: policy.Job{ID: "j3", State: policy.JobPending, Copies: 4}},
		},
		Checkpoints: map[policy.JobID][]state.Checkpoint{"j1": {
			{Job: "j1", Version: 1, Size: 10, Holders: []policy.NodeID{"n1", "n2"}, Committed: true, CommittedAt: at},
			{Job: "j1", Version: 2, Size: 20, Source: "n1", Holders: []policy.NodeID{"n1"}},
		}},
		Reclaims: map[policy.NodeID]policy.Reclaim{"n1": {Node: "n1", Announced: at, Deadline: at.Add(time.Minute)}},
		Decisions: state.DecisionRecord{At: at, Decisions: policy.Decisions{
			Jobs:       []policy.JobDecision{{Job: "j1", Interval: 5 * time.Minute, LossBudgetInfeasible: true}},
			Placements: []policy.Placement{{Job: "j3", Candidates: []policy.Candidate{{Node: "n2", Rejected: policy.RejectLoad}}}},
			Handoffs:   []policy.HandoffDecision{{Job: "j1", From: "n1", To: "n2"}},
		}},
	}
	jobs := webJobs(st)
	if len(jobs) != 3 || jobs[0].ID != "j1" || jobs[2].ID != "j3" {
		t.Fatalf("jobs: got %+v, want j1, j2, j3", jobs)
	}
	j1 := jobs[0]
	if j1.State != "running" || j1.Node != "n1" || j1.Restarts != 2 || j1.Decision == nil || j1.Decision.Interval != 5*time.Minute || !j1.Decision.LossBudgetInfeasible {
		t.Errorf("j1: got %+v, want running on n1, 2 restarts, 5m interval flagged infeasible", j1)
	}
	if j1.UnderWay != state.UnderWayCheckpointing || jobs[1].UnderWay != "" || jobs[2].UnderWay != "" {
		t.Errorf("under way: j1 %q, j2 %q, j3 %q; want j1 checkpointing (v2 stored on n1, not yet on its standby n2), nothing for the others",
			j1.UnderWay, jobs[1].UnderWay, jobs[2].UnderWay)
	}
	if c := j1.LastCheckpoint; c == nil || c.Version != 1 || c.Bytes != 10 || !c.CommittedAt.Equal(at) || len(c.Holders) != 2 {
		t.Errorf("j1 checkpoint: got %+v, want committed version 1 held by 2 nodes", c)
	}
	if j1.Replicas != policy.DefaultCopies || jobs[2].Replicas != 4 {
		t.Errorf("replicas: j1 %d, j3 %d; want the default %d and j3's own 4", j1.Replicas, jobs[2].Replicas, policy.DefaultCopies)
	}
	if jobs[2].Decision != nil || jobs[2].LastCheckpoint != nil {
		t.Errorf("j3: got decision %v, checkpoint %v; want neither", jobs[2].Decision, jobs[2].LastCheckpoint)
	}
	r := webReclaims(st)
	if len(r.Pending) != 1 || len(r.Pending[0].Jobs) != 1 || r.Pending[0].Jobs[0] != "j1" {
		t.Errorf("reclaims: got %+v, want n1's reclaim with job j1 only (j2 is done)", r.Pending)
	}
	d := webDecisions(st.Decisions)
	if len(d) != 2 || d[0].Kind != web.DecisionHandoff || d[1].Kind != web.DecisionPlacement || !d[1].At.Equal(at) ||
		len(d[1].Placement.Candidates) != 1 || d[1].Placement.Candidates[0].Rejected != string(policy.RejectLoad) {
		t.Errorf("decisions: got %+v, want a hand-off then a placement with its rejected candidate", d)
	}
	want := web.Counters{AdmittedMigrations: 4, RejectedMigrations: 3, Handoffs: 2, DegradedRecoveries: 1}
	if c := webCounters(state.Counters{AdmittedHandoffs: 4, DegradedHandoffs: 3, Handoffs: 2, DegradedRecoveries: 1}); c != want {
		t.Errorf("counters: got %+v, want %+v", c, want)
	}
}

// The page's record of a reclaim says what the cluster did with each job:
// a hand-off with its final checkpoint, and one from an older version
// with the work lost.
func TestWebReclaimRecordOutcomes(t *testing.T) {
	announced := time.Now().Add(-10 * time.Second).UTC().Round(0)
	rec := webReclaimRecord(state.ReclaimReport{Node: "a1", Kind: state.DepartureScheduled,
		Announced: announced, Deadline: announced.Add(6 * time.Second),
		Jobs: []state.JobOutcome{
			{Job: "moved", To: "b1", HandedOff: true},
			{Job: "recovered", To: "c1", Replica: "b2", Version: 3},
			{Job: "lossy", To: "b2", HandedOff: true, NoFinalCheckpoint: true, Version: 2, LostWork: time.Minute},
		}})
	outcomes := map[policy.JobID]web.ReclaimOutcome{}
	for _, o := range rec.Jobs {
		outcomes[o.Job] = o
	}
	if o := outcomes["moved"]; !o.FinalCheckpoint || o.Degraded {
		t.Errorf("page outcome of moved: %+v, want final checkpoint, not degraded", o)
	}
	if o := outcomes["recovered"]; o.FinalCheckpoint || !o.Degraded || o.Replica != "b2" || o.Version != 3 {
		t.Errorf("page outcome of recovered: %+v, want degraded, from b2's v3", o)
	}
	if o := outcomes["lossy"]; o.FinalCheckpoint || !o.Degraded || o.Version != 2 || o.WorkLost != time.Minute || !strings.Contains(o.Reason, "without its final checkpoint") {
		t.Errorf("page outcome of lossy: %+v, want degraded, from v2, 1m lost, reason naming the missing final checkpoint", o)
	}
}

// The page's and the metrics' list of what can be under way is the state
// machine's.
func TestUnderWaysAreTheStateMachines(t *testing.T) {
	want := []string{state.UnderWayCheckpointing, state.UnderWayRestoring, state.UnderWayHandingOff, state.UnderWayRecovering}
	if !slices.Equal(web.UnderWays, want) {
		t.Errorf("web.UnderWays %q, want %q", web.UnderWays, want)
	}
}

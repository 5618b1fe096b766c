package raft

import (
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// TestCoDepartureFromLog: the leader learns from the replicated departure
// log and the nodes' returns which nodes leave together. a and b (building
// x) leave within seconds of each other every day, c and d (building y)
// leave alone; the figure for (a, b) rises above their building's prior
// and above every other pair's, a fresh leader replaying the same log gets
// the same table, and right after a leaves its partner b is marked as
// likely to follow.
func TestCoDepartureFromLog(t *testing.T) {
	st := state.New()
	t0 := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)
	must := func(cmd state.Command) {
		t.Helper()
		if _, err := st.Apply(cmd); err != nil {
			t.Fatal(err)
		}
	}
	up := func(id policy.NodeID, building string, at time.Time) {
		must(state.UpsertNode{Node: state.NodeRecord{ID: id, Building: building, GPUs: 1, Joined: at}})
	}
	bldg := map[policy.NodeID]string{"a": "x", "b": "x", "c": "y", "d": "y"}
	for _, id := range []policy.NodeID{"a", "b", "c", "d"} {
		up(id, bldg[id], t0)
	}
	leave := func(id policy.NodeID, at time.Time) {
		must(state.RecordDeparture{Departure: state.Departure{Node: id, At: at, Kind: state.DepartureEmergency}})
	}
	var l CoDepartureLog
	day := 24 * time.Hour
	var last time.Time // the leader's last look at a changed log
	for k := 1; k <= 12; k++ {
		at := t0.Add(time.Duration(k) * day)
		leave("a", at)
		leave("b", at.Add(8*time.Second))
		leave("c", at.Add(6*time.Hour))
		leave("d", at.Add(12*time.Hour))
		for _, id := range []policy.NodeID{"a", "b"} {
			up(id, bldg[id], at.Add(time.Hour))
		}
		up("c", "y", at.Add(7*time.Hour))
		up("d", "y", at.Add(13*time.Hour))
		last = at.Add(20 * time.Hour)
		l.Estimate(st, last) // the leader ticks through the log
	}
	now := t0.Add(14 * day)
	co := l.Estimate(st, now)
	ab := co.Pair("a", "b")
	if prior := co.Prior(policy.DomainBuilding); !(ab > 2*prior) {
		t.Errorf("p(a,b) = %.3f, want well above the building figure %.3f after 12 joint departures", ab, prior)
	}
	for _, p := range [][2]policy.NodeID{{"a", "c"}, {"a", "d"}, {"b", "c"}, {"c", "d"}} {
		if q := co.Pair(p[0], p[1]); !(q < ab/2) {
			t.Errorf("p(%s,%s) = %.3f, want well below p(a,b) = %.3f", p[0], p[1], q, ab)
		}
	}
	if top := co.Top(1); len(top) != 1 || top[0].A != "a" || top[0].B != "b" || top[0].Domain != policy.DomainBuilding {
		t.Errorf("top pair %+v, want a and b, sharing their building", top)
	}
	// (The table is the one made when the log last changed.)
	var fresh CoDepartureLog
	if got := fresh.Estimate(st, last); !reflect.DeepEqual(got.Top(6), co.Top(6)) {
		t.Errorf("a new leader's table %+v, want the old leader's %+v", got.Top(6), co.Top(6))
	}
	// a leaves again: until b follows, b is likely to.
	at := now.Add(time.Hour)
	leave("a", at)
	if f := l.Estimate(st, at.Add(5*time.Second)).Following("b"); !(f > 0.5*ab) {
		t.Errorf("b's chance to follow a seconds after a left: %.3f, want about p(a,b) = %.3f", f, ab)
	}
	if f := l.Estimate(st, at.Add(5*time.Second)).Following("d"); !(f < ab/2) {
		t.Errorf("d's chance to follow a: %.3f, want small", f)
	}
}

// TestSnapshotDurabilityInputs: the snapshot carries what P2.7's holder
// choice needs: a storage node's role, a job's k from its record, its
// start on its host and the work at risk (since the write of the newest
// version a live node other than the host holds, or since submission
// with none).
func TestSnapshotDurabilityInputs(t *testing.T) {
	st := state.New()
	t0 := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)
	must := func(cmd state.Command) {
		t.Helper()
		if _, err := st.Apply(cmd); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []state.NodeRecord{{ID: "a", GPUs: 1, Joined: t0}, {ID: "b", GPUs: 1, Joined: t0}, {ID: "s", Storage: true, Joined: t0}} {
		must(state.UpsertNode{Node: n})
	}
	for _, id := range []policy.JobID{"j", "k"} {
		must(state.SubmitJob{Job: state.JobRecord{Job: policy.Job{ID: id, GPUs: 1, Copies: 3}, Spec: state.JobSpec{Command: []string{"x"}}, Submitted: t0}})
	}
	start := t0.Add(time.Minute)
	must(state.SetDecisions{Decisions: state.DecisionRecord{At: start, Decisions: policy.Decisions{
		Placements: []policy.Placement{{Job: "j", To: "a"}, {Job: "k", To: "b"}},
	}}})
	// j's version 1 (written at +2m) is on a and b, version 2 (+5m) only on a.
	for v, h := range map[uint64][]policy.NodeID{1: {"a", "b"}, 2: {"a"}} {
		for _, n := range h {
			must(state.ReplicaComplete{Job: "j", Version: v, ManifestHash: "h", Source: "a", Holder: n, At: t0.Add(time.Duration(3*v-1) * time.Minute)})
		}
	}
	now := t0.Add(10 * time.Minute)
	s := buildSnapshot(st, nil, nil, policy.DefaultParams(), now)
	storage := map[policy.NodeID]bool{}
	for _, n := range s.Nodes {
		storage[n.ID] = n.Storage
	}
	if !storage["s"] || storage["a"] || storage["b"] {
		t.Errorf("storage roles %v, want s alone", storage)
	}
	jobs := map[policy.JobID]policy.Job{}
	for _, j := range s.Jobs {
		jobs[j.ID] = j
	}
	j, k := jobs["j"], jobs["k"]
	if j.Copies != 3 || k.Copies != 3 {
		t.Errorf("copies %d and %d, want 3 from the records", j.Copies, k.Copies)
	}
	if !j.Started.Equal(start) || !k.Started.Equal(start) {
		t.Errorf("started %v and %v, want the placement at %v", j.Started, k.Started, start)
	}
	if want := now.Sub(t0.Add(2 * time.Minute)); j.AtRisk != want {
		t.Errorf("j at risk %v, want %v (since version 1, the newest a node other than the host holds)", j.AtRisk, want)
	}
	if want := now.Sub(t0); k.AtRisk != want {
		t.Errorf("k at risk %v, want %v (no version off its host: since submission)", k.AtRisk, want)
	}
	if !slices.Equal(j.Replicas, []policy.NodeID{"b"}) {
		t.Errorf("j's replicas %v, want [b]", j.Replicas)
	}
}

// A lab or pool the registry records (from the nodes' gossip metadata) is
// the prior of two nodes that share it: before any departure, a pair in
// one lab (different buildings) and a pair in one pool get their domain's
// figure, above that of a pair sharing only a building.
func TestCoDepartureDomainsFromRegistry(t *testing.T) {
	st := state.New()
	t0 := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)
	for _, n := range []state.NodeRecord{
		{ID: "a", Building: "x", Lab: "optics", Joined: t0},
		{ID: "b", Building: "y", Lab: "optics", Joined: t0},
		{ID: "c", Building: "x", Pool: "spot", Joined: t0},
		{ID: "d", Building: "z", Pool: "spot", Joined: t0},
	} {
		if _, err := st.Apply(state.UpsertNode{Node: n}); err != nil {
			t.Fatal(err)
		}
	}
	var l CoDepartureLog
	co := l.Estimate(st, t0.Add(time.Hour))
	lab, pool, bldg := co.Pair("a", "b"), co.Pair("c", "d"), co.Pair("a", "c")
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-6 } // the table keeps float32
	if !near(lab, co.Prior(policy.DomainLab)) || !near(pool, co.Prior(policy.DomainPool)) || !near(bldg, co.Prior(policy.DomainBuilding)) || !(lab > bldg && pool > bldg) {
		t.Errorf("p(lab pair) %.4f, p(pool pair) %.4f, p(building pair) %.4f; want the lab, pool and building priors, the first two above the last", lab, pool, bldg)
	}
	s := buildSnapshot(st, nil, nil, policy.DefaultParams(), t0)
	if n := s.Nodes[0]; n.ID != "a" || n.Lab != "optics" || s.Nodes[2].Pool != "spot" {
		t.Errorf("snapshot nodes %+v, want the registry's lab and pool", s.Nodes)
	}
}

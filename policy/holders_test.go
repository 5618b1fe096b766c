package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// learnCo learns a co-departure table from a log in which each listed pair
// leaves together n times (10 s apart, three hours between rounds, back
// after 20 min), then returns the estimate at the end; recent nodes leave
// 10 s before it (a burst under way).
func learnCo(t *testing.T, nodes []Node, together [][2]NodeID, n int, recent ...NodeID) (*CoDeparture, time.Time) {
	t.Helper()
	e, err := NewCoDepartureEstimator(DefaultCoDepartureConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes {
		e.Node(nd.ID, nd.Building, nd.Lab, nd.Pool)
	}
	at := testEpoch.Add(-time.Duration(n+1) * 3 * time.Hour)
	for range n {
		for _, p := range together {
			e.Observe(Departure{Node: p[0], At: at, Emergency: true})
			e.Observe(Departure{Node: p[1], At: at.Add(10 * time.Second), Emergency: true})
		}
		for _, p := range together {
			e.Return(p[0], at.Add(20*time.Minute))
			e.Return(p[1], at.Add(20*time.Minute))
		}
		at = at.Add(3 * time.Hour)
	}
	for _, id := range recent {
		e.Observe(Departure{Node: id, At: testEpoch.Add(-10 * time.Second), Emergency: true})
	}
	return e.Estimate(testEpoch), testEpoch
}

// withStorage adds a storage node on the core with a 10 Gbit/s link.
func withStorage(nodes []Node, links []Link) ([]Node, []Link) {
	nodes = append(slices.Clone(nodes), Node{ID: "nas", Building: "machine-room", Storage: true, AccessLink: "acc-nas"})
	return nodes, append(slices.Clone(links), IdleLink("acc-nas", "nas", CoreVertex, 10*gbit))
}

// TestTickStandbyAvoidsCoDepartingNode: with independent departures the
// standby is the first of two equal peers; when the log shows that peer
// leaving with the host, P2.7 picks the other.
func TestTickStandbyAvoidsCoDepartingNode(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 3, access: gbit, uplink: gbit})
	host, x, y := nodes[0].ID, nodes[1].ID, nodes[2].ID
	j := testJob("j", host)
	j.AtRisk = 2 * time.Hour
	s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams()}
	if d := Tick(s, testEpoch); d.Jobs[0].Standby != x {
		t.Fatalf("independent departures: standby %s, want %s (the first of two equal peers)", d.Jobs[0].Standby, x)
	}
	s.CoDeparture, _ = learnCo(t, nodes, [][2]NodeID{{host, x}}, 30)
	d := Tick(s, testEpoch)
	if d.Jobs[0].Standby != y {
		t.Fatalf("%s leaves with the host (p %.2f, %s: %.2f): standby %s, want %s", x, s.CoDeparture.Pair(host, x), y,
			s.CoDeparture.Pair(host, y), d.Jobs[0].Standby, y)
	}
	// A sticky standby that leaves with the host is not kept either.
	j.Standby, j.Replicas = x, []NodeID{x}
	s.Jobs = []Job{j}
	if d := Tick(s, testEpoch); d.Jobs[0].Standby != y {
		t.Errorf("sticky standby %s leaving with the host kept: standby %s, want %s", x, d.Jobs[0].Standby, y)
	}
	checkInvariants(t, s, d, testEpoch)
}

// TestTickStorageHolder: a storage node is the standby where the peers
// leave with the host, and not on a quiet campus (a peer in the building
// restores in place); it never hosts a job.
func TestTickStorageHolder(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 3, access: gbit, uplink: gbit})
	nodes, links = withStorage(nodes, links)
	host := nodes[0].ID
	j := testJob("j", host)
	j.AtRisk = 2 * time.Hour
	s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams()}
	if d := Tick(s, testEpoch); d.Jobs[0].Standby != nodes[1].ID {
		t.Errorf("quiet campus: standby %s, want the peer %s", d.Jobs[0].Standby, nodes[1].ID)
	}
	s.CoDeparture, _ = learnCo(t, nodes, [][2]NodeID{{host, nodes[1].ID}, {host, nodes[2].ID}}, 30)
	d := Tick(s, testEpoch)
	if d.Jobs[0].Standby != "nas" {
		t.Errorf("peers leave with the host: standby %s, want the storage node", d.Jobs[0].Standby)
	}
	checkInvariants(t, s, d, testEpoch)
	// Storage never hosts: a pending job, and a recovery whose only copy
	// is on the storage node, go to GPU nodes.
	pend := testJob("p", "")
	pend.State = JobPending
	rec := testJob("r", "")
	rec.State, rec.Replicas = JobRecovering, []NodeID{"nas"}
	s.Jobs = []Job{pend, rec}
	d = Tick(s, testEpoch)
	for _, p := range d.Placements {
		if p.To == "nas" || p.To == "" {
			t.Errorf("placement %+v: want a GPU node", p)
		}
		if p.Job == "r" && p.From != "nas" {
			t.Errorf("recovery %+v: want a restore from the storage node", p)
		}
	}
}

// TestTickReplicaCopy: a job with one holder gets a holder-to-holder copy
// (k = DefaultCopies when Copies is 0), paced inside P1's budget, to a peer
// in another building than the host's and the holder's, with independent
// departures as when the holder tends to leave with its host; where there
// is a storage node the copy goes there whatever the estimate says; with
// k = 1, or with nothing for P2 to weigh (no estimate, no storage node),
// none.
func TestTickReplicaCopy(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 3, access: gbit, uplink: gbit})
	for i := range nodes {
		nodes[i].Emergency = flatProfile(1e-4) // 0.36/h: a spot pool
	}
	host, x := nodes[0].ID, nodes[1].ID
	job := func(copies int) Job {
		j := testJob("j", host)
		j.Standby, j.Replicas, j.AtRisk, j.Copies = x, []NodeID{x}, 2*time.Hour, copies
		return j
	}
	co, _ := learnCo(t, nodes, [][2]NodeID{{host, x}}, 30)
	priors, _ := learnCo(t, nodes, nil, 0) // independent departures: the domains' priors only
	replicaFlow := func(d Decisions) *FlowDecision {
		for i := range d.Flows {
			if d.Flows[i].ID == ReplicaPrefix+"j" {
				return &d.Flows[i]
			}
		}
		return nil
	}
	for _, tt := range []struct {
		name    string
		storage bool
		co      *CoDeparture
		copies  int
		to      NodeID // "" for no copy
	}{
		{"no estimate, no storage", false, nil, 0, ""},
		{"independent, no storage", false, priors, 0, "b1-n00"},
		{"independent, no storage, k = 2 named", false, priors, 2, "b1-n00"},
		{"holder leaves with host", false, co, 0, "b1-n00"},
		{"holder leaves with host, storage", true, co, 0, "nas"},
		{"independent, storage (preferred where there is one)", true, nil, 0, "nas"},
		{"k = 1", true, co, 1, ""},
	} {
		ns, ls := nodes, links
		if tt.storage {
			ns, ls = withStorage(nodes, links)
		}
		s := Snapshot{Nodes: ns, Links: ls, Jobs: []Job{job(tt.copies)}, Params: DefaultParams(), CoDeparture: tt.co}
		d := Tick(s, testEpoch)
		f := replicaFlow(d)
		jd := d.Jobs[0]
		switch {
		case tt.to == "" && f != nil:
			t.Errorf("%s: copy %+v, want none", tt.name, *f)
		case tt.to != "" && (f == nil || f.From != x || f.To != tt.to || f.Rate <= 0 || f.Class != ClassPresync):
			t.Errorf("%s: copy %+v, want %s → %s at a rate", tt.name, f, x, tt.to)
		case tt.to != "" && (len(jd.Holders) != 2 || jd.Holders[0] != x || jd.Holders[1] != tt.to):
			t.Errorf("%s: holders %v, want [%s %s]", tt.name, jd.Holders, x, tt.to)
		}
		if tt.co == co && !(jd.Risk > 0.5) {
			t.Errorf("%s: joint figure %.3f with a holder that leaves with the host, want above 0.5", tt.name, jd.Risk)
		}
		checkInvariants(t, s, d, testEpoch)
	}
}

// TestTickRestoreFromHolderThatSurvives: a job that lost its host in a
// burst restores from the holder that is not following the host out,
// though both hold the same copy.
func TestTickRestoreFromHolderThatSurvives(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 4, access: gbit, uplink: gbit})
	gone, x, y := nodes[0].ID, nodes[1].ID, nodes[2].ID
	j := testJob("j", "")
	j.State, j.Replicas, j.AtRisk = JobRecovering, []NodeID{x, y}, 2*time.Hour
	s := Snapshot{Nodes: nodes[1:], Links: links, Jobs: []Job{j}, Params: DefaultParams()}
	if d := Tick(s, testEpoch); d.Placements[0].From != x {
		t.Fatalf("independent departures: restore from %s, want %s (the first of two equal holders)", d.Placements[0].From, x)
	}
	s.CoDeparture, _ = learnCo(t, nodes, [][2]NodeID{{gone, x}}, 30, gone)
	if f := s.CoDeparture.Following(x); !(f > 0.5) {
		t.Fatalf("%s follows the departed host with %.2f, want above 0.5", x, f)
	}
	d := Tick(s, testEpoch)
	if p := d.Placements[0]; p.From != y || p.To == x {
		t.Errorf("placement %+v: want a restore from %s, not onto %s", p, y, x)
	}
	checkInvariants(t, s, d, testEpoch)
}

// TestJointRiskIndependent: without a co-departure estimate P2.7's joint
// figure is ∏ (1 − S_d(W_d)) over the holders, W_d the restore window.
func TestJointRiskIndependent(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 2, access: gbit, uplink: gbit / 4})
	for i := range nodes {
		nodes[i].Departure = flatProfile(float64(i+1) * 1e-4)
	}
	j := testJob("j", nodes[0].ID)
	s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams()}
	w := newWorld(s, testEpoch, nil)
	hs := []int{1, 2, 3}
	want := 1.0
	p := DefaultParams()
	share := func(c float64) float64 { return MigrationShare(c, c, p.BetaP3, p.Bmin) / p.CeilingFactor }
	for _, d := range hs {
		bw := share(gbit) // the building pair's figure: its access links, and the uplinks between
		if w.bldg[d] != w.bldg[0] {
			bw = share(gbit / 4)
		}
		win := float64(j.CheckpointBytes)/bw + j.RestartTime.Seconds()
		want *= 1 - math.Exp(-nodes[d].Departure.Rates[0]*win)
	}
	if got := w.jointRisk(&j, 0, hs); math.Abs(got-want) > 1e-9*want {
		t.Fatalf("joint figure %.6g, want ∏(1 − S_d(W_d)) = %.6g", got, want)
	}
}

// TestTickReplicaCopyDemanded: a job on a quiet campus (the priors only,
// a minute of work at risk: a copy avoids almost no expected loss) gets its
// second holder, whether it names k = 2 or leaves Copies 0 (the default):
// a copy from its standby (the first holder, not the host) to the fastest
// peer in another building than the host's and the standby's, at a rate
// inside P1's budget; with one building only, to a peer there; none where
// no peer is left to take it.
func TestTickReplicaCopyDemanded(t *testing.T) {
	for _, copies := range []int{0, DefaultCopies} {
		t.Run(fmt.Sprintf("copies %d", copies), func(t *testing.T) { testReplicaCopyDemanded(t, copies) })
	}
}

func testReplicaCopyDemanded(t *testing.T, copies int) {
	for _, tt := range []struct {
		name      string
		buildings int
		perB      int
		want      func(host, holder, to Node) bool
	}{
		{"three buildings", 3, 3, func(h, s, to Node) bool { return to.Building != h.Building && to.Building != s.Building }},
		{"one building", 1, 3, func(h, s, to Node) bool { return to.Building == h.Building }},
		{"no peer left", 1, 2, nil},
	} {
		nodes, links := buildCampus(campusSpec{buildings: tt.buildings, perBuilding: tt.perB, access: gbit, uplink: gbit / 4})
		// b1's uplink is slower than b0's and b2's: the copy's near-tie
		// between b1 and b2 goes by transfer time.
		for i := range links {
			if id := links[i].ID; id == "up-b0" || id == "up-b2" {
				links[i] = IdleLink(id, links[i].A, CoreVertex, gbit)
			}
		}
		co, _ := learnCo(t, nodes, nil, 0) // the priors only
		host, holder := nodes[0], nodes[1]
		j := testJob("j", host.ID)
		j.Standby, j.Replicas, j.Copies, j.AtRisk = holder.ID, []NodeID{holder.ID}, copies, time.Minute
		s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams(), CoDeparture: co}
		d := Tick(s, testEpoch)
		var f *FlowDecision
		for i := range d.Flows {
			if d.Flows[i].ID == ReplicaPrefix+"j" {
				f = &d.Flows[i]
			}
		}
		if tt.want == nil {
			if f != nil {
				t.Errorf("%s: copy %+v, want none (no peer left)", tt.name, *f)
			}
			continue
		}
		if f == nil {
			t.Fatalf("%s: no copy, want one (k = 2)", tt.name)
		}
		to := nodes[slices.IndexFunc(nodes, func(n Node) bool { return n.ID == f.To })]
		if f.From != holder.ID || f.Rate <= 0 || f.Class != ClassPresync || !tt.want(host, holder, to) {
			t.Errorf("%s: copy %s → %s (building %s) at %.3g, class %v; want from the holder %s, to another failure domain where one exists",
				tt.name, f.From, f.To, to.Building, f.Rate, f.Class, holder.ID)
		}
		if tt.buildings == 3 && to.Building != "b2" {
			t.Errorf("%s: copy to %s in %s, want b2 (as safe as b1, faster)", tt.name, to.ID, to.Building)
		}
		if jd := d.Jobs[0]; len(jd.Holders) != 2 || jd.Holders[0] != holder.ID || jd.Holders[1] != to.ID {
			t.Errorf("%s: holders %v, want [%s %s]", tt.name, jd.Holders, holder.ID, to.ID)
		}
		checkInvariants(t, s, d, testEpoch)
	}
}

// TestSafestReplica against brute force: over random options the choice
// has the smallest chance to leave with the host within the near-tie, and
// no option within that near-tie transfers faster.
func TestSafestReplica(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	if _, ok := safestReplica(nil); ok {
		t.Fatal("no options: ok")
	}
	for range 2000 {
		opts := make([]replicaOption, 1+rng.IntN(6))
		for k := range opts {
			opts[k] = replicaOption{to: k, from: 0, q: []float64{0.002, 0.0021, 0.01, 0.05, rng.Float64() / 10}[rng.IntN(5)], secs: float64(1 + rng.IntN(5))}
		}
		got, ok := safestReplica(opts)
		if !ok {
			t.Fatalf("%+v: no choice", opts)
		}
		qMin := math.Inf(1)
		for _, o := range opts {
			qMin = math.Min(qMin, o.q)
		}
		if got.q > qMin*(1+replicaRiskTie) {
			t.Fatalf("%+v: chose q %g, smallest %g", opts, got.q, qMin)
		}
		for _, o := range opts {
			if o.q <= qMin*(1+replicaRiskTie) && (o.secs < got.secs || o.secs == got.secs && o.to < got.to) {
				t.Fatalf("%+v: chose %+v, %+v is as safe and faster", opts, got, o)
			}
		}
	}
}

// TestReplicaOptionsMatchFullScan against brute force: on random campuses
// (hazards, co-departures learnt from random pairs, a burst under way,
// loaded links, leaving nodes, a storage node or none) the copy's target
// that replicaOptions leads safestReplica to is the one it picks over
// every candidate, each with its q and its fastest source's transfer time.
func TestReplicaOptionsMatchFullScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 2))
	for round := range 300 {
		nodes, links := buildCampus(campusSpec{buildings: 1 + rng.IntN(4), perBuilding: 2 + rng.IntN(5), access: gbit, uplink: gbit / 4})
		for i := range nodes {
			nodes[i].Departure = flatProfile(rng.Float64() * 1e-3)
			if rng.IntN(3) == 0 {
				nodes[i].Lab = fmt.Sprint("lab", rng.IntN(3))
			}
		}
		for i := range links {
			links[i].Available = links[i].Capacity * (0.05 + rng.Float64())
		}
		if rng.IntN(4) == 0 {
			nodes, links = withStorage(nodes, links)
		}
		var pairs [][2]NodeID
		for range rng.IntN(6) {
			a, b := nodes[rng.IntN(len(nodes))].ID, nodes[rng.IntN(len(nodes))].ID
			if a != b {
				pairs = append(pairs, [2]NodeID{a, b})
			}
		}
		var recent []NodeID
		if rng.IntN(3) == 0 {
			recent = append(recent, nodes[rng.IntN(len(nodes))].ID)
		}
		co, _ := learnCo(t, nodes, pairs, 1+rng.IntN(20), recent...)
		s := Snapshot{Nodes: nodes, Links: links, Params: DefaultParams(), CoDeparture: co}
		for range rng.IntN(3) {
			n := nodes[rng.IntN(len(nodes))].ID
			s.Reclaims = append(s.Reclaims, Reclaim{Node: n, Announced: testEpoch, Deadline: testEpoch.Add(time.Hour)})
		}
		w := newWorld(s, testEpoch, nil)
		j := testJob("j", nodes[0].ID)
		j.CheckpointBytes = int64(1+rng.IntN(40)) << 30
		host := rng.IntN(len(nodes))
		var sources, given []int
		given = append(given, host)
		for _, i := range rng.Perm(len(nodes))[:1+rng.IntN(2)] {
			if i != host {
				sources = append(sources, i)
				given = append(given, i)
			}
		}
		candidates := w.allNodes
		if len(w.storageIdx) > 0 && rng.IntN(2) == 0 {
			candidates = w.storageIdx
		}
		var all []replicaOption
		for _, i := range candidates {
			if i == host || w.leaving[i] || w.ending[i] || w.vertex[i] < 0 || slices.Contains(sources, i) {
				continue
			}
			src, rate := -1, 0.0
			for _, s := range sources {
				if est, _, ok := w.pathRate(s, i); ok && est > rate {
					src, rate = s, est
				}
			}
			if src >= 0 && rate > 0 {
				all = append(all, replicaOption{to: i, from: src, q: w.leaveGiven(&j, i, given), secs: float64(j.CheckpointBytes) / rate})
			}
		}
		want, okWant := safestReplica(all)
		got, okGot := safestReplica(w.replicaOptions(&j, candidates, sources, given))
		if okGot != okWant || got != want {
			t.Fatalf("round %d: %+v (%v) from the pruned scan, %+v (%v) from every candidate", round, got, okGot, want, okWant)
		}
	}
}

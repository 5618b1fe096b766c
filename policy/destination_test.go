package policy

import (
	"math/rand/v2"
	"testing"
	"time"
)

func snapshotOf(nodes []Node, links []Link) Snapshot {
	p := DefaultParams()
	p.MaxCandidates = 0
	return Snapshot{Nodes: nodes, Links: links, Params: p}
}

func candidateByNode(cs []Candidate, id NodeID) (Candidate, bool) {
	for _, c := range cs {
		if c.Node == id {
			return c, true
		}
	}
	return Candidate{}, false
}

func TestSelectDestinationFilters(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 8, access: gbit, uplink: 10 * gbit})
	nodes[1].GPU.VRAM = 10 * gib
	nodes[2].GPU.Capability = 6.1
	nodes[3].FreeGPUs = 0
	nodes[4].Load = 0.95
	nodes[5].Leaving = true
	s := snapshotOf(nodes, links)
	s.Reclaims = []Reclaim{{Node: nodes[7].ID, Announced: testEpoch, Deadline: testEpoch.Add(time.Minute)}}
	job := testJob("j", nodes[0].ID)
	cs := SelectDestination(s, Request{Job: job, Source: nodes[0].ID, Now: testEpoch})
	want := map[NodeID]RejectReason{
		nodes[0].ID: RejectSource, nodes[1].ID: RejectVRAM, nodes[2].ID: RejectCapability,
		nodes[3].ID: RejectGPUs, nodes[4].ID: RejectLoad, nodes[5].ID: RejectLeaving,
		nodes[6].ID: "", nodes[7].ID: RejectLeaving,
	}
	if len(cs) != len(nodes) {
		t.Fatalf("got %d candidates, want one per node (%d)", len(cs), len(nodes))
	}
	for id, reason := range want {
		c, ok := candidateByNode(cs, id)
		if !ok || c.Rejected != reason {
			t.Errorf("%s: rejected %q, want %q", id, c.Rejected, reason)
		}
	}
	if cs[0].Rejected != "" || cs[0].Node != nodes[6].ID {
		t.Errorf("choice %+v, want an accepted node first", cs[0])
	}
}

func TestSelectDestinationDeadlineFilter(t *testing.T) {
	// Access 1 Gbit/s (125 MB/s), uplinks 0.24 Gbit/s: a 10 GB checkpoint
	// takes 10e9/(0.7·125e6/1.1) ≈ 126 s locally and ≈ 524 s across
	// buildings (migration share 70 %, counted at the 1.1 ceiling).
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 3, access: gbit, uplink: 0.24 * gbit})
	s := snapshotOf(nodes, links)
	s.Params.KMin = 0 // no locality filter: the deadline alone decides
	job := testJob("j", nodes[0].ID)
	for _, tt := range []struct {
		notice     time.Duration
		wantLocal  bool
		wantRemote bool
	}{
		{100 * time.Second, false, false},
		{200 * time.Second, true, false},
		{600 * time.Second, true, true},
	} {
		cs := SelectDestination(s, Request{Job: job, Source: nodes[0].ID, Deadline: testEpoch.Add(tt.notice), Now: testEpoch})
		local, _ := candidateByNode(cs, nodes[1].ID)
		remote, _ := candidateByNode(cs, nodes[4].ID)
		if (local.Rejected == "") != tt.wantLocal || (remote.Rejected == "") != tt.wantRemote {
			t.Errorf("notice %v: local %q, remote %q; want accepted local=%v remote=%v", tt.notice, local.Rejected, remote.Rejected, tt.wantLocal, tt.wantRemote)
		}
		if !tt.wantLocal && local.Rejected != RejectDeadline {
			t.Errorf("notice %v: local rejected %q, want %q", tt.notice, local.Rejected, RejectDeadline)
		}
	}
}

// TestLocalityLemma3 checks Lemma 3 on random campuses: when every
// same-building path is at least as fast as every cross-building path, the
// best same-building candidate transfers no slower than the best remote
// one; and the locality filter keeps only local candidates when there are
// at least KMin of them.
func TestLocalityLemma3(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for k := range 50 {
		nodes, links := buildCampus(campusSpec{buildings: 3, perBuilding: 4, access: gbit, uplink: gbit})
		for i := range links {
			l := &links[i]
			if l.ID[:3] == "acc" {
				l.Available = (0.5 + 0.5*rng.Float64()) * gbit // local ≥ 0.5 Gbit/s
			} else {
				l.Available = (0.1 + 0.4*rng.Float64()) * gbit // core ≤ 0.5 Gbit/s
			}
			l.AvailableLow = l.Available
		}
		for i := range nodes {
			nodes[i].Departure = flatProfile(rng.Float64() * 1e-5)
		}
		s := snapshotOf(nodes, links)
		s.Params.KMin = 0
		src := nodes[rng.IntN(len(nodes))]
		job := testJob("j", src.ID)
		cs := SelectDestination(s, Request{Job: job, Source: src.ID, Now: testEpoch})
		bestLocal, bestRemote := time.Duration(1<<62), time.Duration(1<<62)
		for _, c := range cs {
			if c.Rejected != "" {
				continue
			}
			if nodes[indexOfNode(nodes, c.Node)].Building == src.Building {
				bestLocal = min(bestLocal, c.Transfer)
			} else {
				bestRemote = min(bestRemote, c.Transfer)
			}
		}
		if bestLocal > bestRemote {
			t.Errorf("case %d: best local transfer %v slower than best remote %v", k, bestLocal, bestRemote)
		}
		// With KMin = 2 (3 local peers), only local candidates remain.
		s.Params.KMin = 2
		cs = SelectDestination(s, Request{Job: job, Source: src.ID, Now: testEpoch})
		for _, c := range cs {
			b := nodes[indexOfNode(nodes, c.Node)].Building
			if c.Rejected == "" && b != src.Building {
				t.Fatalf("case %d: remote %s accepted with enough local candidates", k, c.Node)
			}
			if c.Rejected == RejectLocality && b == src.Building {
				t.Fatalf("case %d: local %s rejected for locality", k, c.Node)
			}
		}
		// With KMin above the local count, remote candidates come back.
		s.Params.KMin = 4
		cs = SelectDestination(s, Request{Job: job, Source: src.ID, Now: testEpoch})
		for _, c := range cs {
			if c.Rejected == RejectLocality {
				t.Fatalf("case %d: locality applied with only 3 local candidates and KMin 4", k)
			}
		}
	}
}

func indexOfNode(nodes []Node, id NodeID) int {
	for i, n := range nodes {
		if n.ID == id {
			return i
		}
	}
	return -1
}

// TestAlphaTradesSpeedForStability: a fast local node that is likely to
// leave during the job's remaining runtime wins at α = 0 and loses to a
// slower stable one once α weighs the re-migration risk.
func TestAlphaTradesSpeedForStability(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 3, access: gbit, uplink: 10 * gbit})
	fast, stable := nodes[1].ID, nodes[2].ID
	nodes[1].Departure = flatProfile(1.0 / 3600) // leaves about hourly
	nodes[2].Departure = flatProfile(1e-7)
	for i := range links {
		if links[i].ID == "acc-"+string(stable) {
			links[i].Available, links[i].AvailableLow = 0.5*gbit, 0.5*gbit
		}
	}
	s := snapshotOf(nodes, links)
	job := testJob("j", nodes[0].ID)
	choose := func(alpha float64) NodeID {
		s.Params.Alpha = alpha
		return SelectDestination(s, Request{Job: job, Source: nodes[0].ID, Now: testEpoch})[0].Node
	}
	if got := choose(0); got != fast {
		t.Errorf("α = 0: chose %s, want the fast node %s", got, fast)
	}
	if got := choose(1); got != stable {
		t.Errorf("α = 1: chose %s, want the stable node %s", got, stable)
	}
	// A job that ends in a minute barely risks anything: speed wins again.
	job.Remaining = time.Minute
	if got := choose(1); got != fast {
		t.Errorf("α = 1, 1 min left: chose %s, want the fast node %s", got, fast)
	}
}

func TestStandbyWithChunksWinsHandoff(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 4, access: gbit, uplink: 10 * gbit})
	s := snapshotOf(nodes, links)
	job := testJob("j", nodes[0].ID)
	job.Standby, job.StandbyHas = nodes[3].ID, 9e9 // 1 GB left to move
	cs := SelectDestination(s, Request{Job: job, Source: nodes[0].ID, Deadline: testEpoch.Add(60 * time.Second), Now: testEpoch})
	if cs[0].Node != nodes[3].ID {
		t.Fatalf("chose %s, want the standby %s", cs[0].Node, nodes[3].ID)
	}
	// 60 s is too short for the full 10 GB anywhere else.
	other, _ := candidateByNode(cs, nodes[1].ID)
	if other.Rejected != RejectDeadline {
		t.Errorf("non-standby %s: %q, want %q", other.Node, other.Rejected, RejectDeadline)
	}
	// Without a deadline the standby still wins on transfer time.
	cs = SelectDestination(s, Request{Job: job, Source: nodes[0].ID, Now: testEpoch})
	if cs[0].Node != nodes[3].ID || cs[0].Transfer >= cs[1].Transfer {
		t.Errorf("no deadline: chose %s (transfer %v vs %v), want the standby", cs[0].Node, cs[0].Transfer, cs[1].Transfer)
	}
}

func TestPlacementHasNoTransferTerm(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 2, access: gbit, uplink: gbit})
	nodes[3].Departure = flatProfile(1e-8)
	s := snapshotOf(nodes, links)
	job := testJob("new", "")
	job.State = JobPending
	cs := SelectDestination(s, Request{Job: job, Now: testEpoch})
	if cs[0].Node != nodes[3].ID || cs[0].Transfer != 0 {
		t.Errorf("placement chose %s with transfer %v, want the most stable node %s and no transfer", cs[0].Node, cs[0].Transfer, nodes[3].ID)
	}
}

func TestRandomDestinationWhenP2Off(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 5, access: gbit, uplink: gbit})
	s := snapshotOf(nodes, links)
	s.Params.Switches.P2 = false
	seen := map[NodeID]bool{}
	for k := range 40 {
		job := testJob("job-"+string(rune('A'+k)), nodes[0].ID)
		a := SelectDestination(s, Request{Job: job, Source: nodes[0].ID, Now: testEpoch})[0]
		b := SelectDestination(s, Request{Job: job, Source: nodes[0].ID, Now: testEpoch})[0]
		if a.Node != b.Node {
			t.Fatalf("P2 off is not deterministic: %s then %s", a.Node, b.Node)
		}
		if a.Node == nodes[0].ID {
			t.Fatalf("P2 off chose the source")
		}
		seen[a.Node] = true
	}
	if len(seen) < 4 {
		t.Errorf("P2 off chose only %d distinct nodes over 40 jobs; want a spread", len(seen))
	}
}

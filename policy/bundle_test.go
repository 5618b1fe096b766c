package policy

import (
	"testing"
	"time"
)

// TestTickPacesFirstPlacementBundle: a pending job placed on a node that
// lacks its bundle gets a bundle flow from the bundle's holder, decided
// like a restore (class migration, a rate, a ceiling) within P3's
// migration share of every link it crosses, and charged to the links: the
// running job whose checkpoints cross the same uplink gets less than with
// no bundle to move. A destination that holds the bundle needs no flow. A
// bundle flow still under way is decided again while the job stays on its
// destination and dropped once it moved or the copy landed.
func TestTickPacesFirstPlacementBundle(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 3, access: gbit, uplink: gbit})
	for i := range nodes {
		if nodes[i].Building == "b0" {
			nodes[i].FreeGPUs = 0 // the new job must cross the uplinks
		}
	}
	holder := nodeName(0, 0)
	pending := testJob("p", "")
	pending.State = JobPending
	pending.BundleBytes, pending.BundleHolders = 5e9, []NodeID{holder}
	running := testJob("r", nodeName(0, 1))
	running.Standby = nodeName(1, 2) // its checkpoints go b0 → b1, the bundle's way
	s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{pending, running}, Params: DefaultParams()}

	find := func(d Decisions, id string) *FlowDecision {
		for i := range d.Flows {
			if d.Flows[i].ID == id {
				return &d.Flows[i]
			}
		}
		return nil
	}
	bandwidth := func(d Decisions, job JobID) float64 {
		for _, jd := range d.Jobs {
			if jd.Job == job {
				return jd.Bandwidth
			}
		}
		t.Fatalf("no decision for job %s", job)
		return 0
	}
	d := Tick(s, testEpoch)
	checkInvariants(t, s, d, testEpoch)
	if len(d.Placements) != 1 || d.Placements[0].To == "" {
		t.Fatalf("placements %+v, want job p placed", d.Placements)
	}
	to := d.Placements[0].To
	f := find(d, BundlePrefix+"p")
	share := MigrationShare(gbit, gbit, s.Params.BetaP3, s.Params.Bmin)
	if f == nil || f.From != holder || f.To != to || f.Class != ClassMigration || f.Rate <= 0 || f.Ceiling < f.Rate ||
		f.Ceiling > share*(1+1e-9) || len(f.Links) != 4 {
		t.Fatalf("bundle flow %+v, want %s → %s, migration, paced with a ceiling within the share %g on its 4 links", f, holder, to, share)
	}

	// The same campus with the bundle already on every b1 node.
	has := s
	has.Jobs = []Job{pending, running}
	has.Jobs[0].BundleHolders = []NodeID{holder, nodeName(1, 0), nodeName(1, 1), nodeName(1, 2)}
	dh := Tick(has, testEpoch)
	checkInvariants(t, has, dh, testEpoch)
	if g := find(dh, BundlePrefix+"p"); g != nil {
		t.Errorf("bundle flow %+v to a node that holds the bundle", g)
	}
	if with, without := bandwidth(d, "r"), bandwidth(dh, "r"); with >= without {
		t.Errorf("job r's checkpoints get %g B/s beside the bundle and %g without it: the bundle is not charged to the uplink", with, without)
	}

	// Later periods: the job placed on to, the copy under way.
	placed := testJob("p", to)
	placed.BundleBytes, placed.BundleHolders = pending.BundleBytes, []NodeID{holder, to}
	carried := Flow{ID: BundlePrefix + "p", Job: "p", From: holder, To: to, Class: ClassMigration, Remaining: 2e9, Start: testEpoch.Add(-time.Minute)}
	later := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{placed, running}, Flows: []Flow{carried}, Params: DefaultParams()}
	dl := Tick(later, testEpoch)
	checkInvariants(t, later, dl, testEpoch)
	if g := find(dl, carried.ID); g == nil || g.From != holder || g.To != to || g.Rate <= 0 || g.Ceiling > share*(1+1e-9) {
		t.Errorf("bundle flow under way decided as %+v, want it paced again within the share", g)
	}
	for name, mod := range map[string]func(*Snapshot){
		"landed": func(s *Snapshot) { s.Flows[0].Remaining = 0 },
		"moved": func(s *Snapshot) {
			s.Jobs[0].Node = nodeName(1, 0)
			if to == nodeName(1, 0) {
				s.Jobs[0].Node = nodeName(1, 1)
			}
		},
		"holder gone": func(s *Snapshot) {
			s.Nodes = s.Nodes[1:]
		},
	} {
		s := later
		s.Jobs = []Job{placed, running}
		s.Flows = []Flow{carried}
		mod(&s)
		if g := find(Tick(s, testEpoch), carried.ID); g != nil {
			t.Errorf("%s: bundle flow still decided: %+v", name, g)
		}
	}
}

package policy

import "testing"

// TestTickSoleHolderHostsOnlyAsLastResort: a job whose only live copy is
// on one node likely to leave soon is restored from it onto another node
// (that copy stays off the job's node), and onto the holder itself only
// when no other node can take it. On a quiet node the holder may host
// (TestTickEmergencyRecoversFromReplica).
func TestTickSoleHolderHostsOnlyAsLastResort(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 3, access: gbit, uplink: gbit})
	for i := range nodes {
		nodes[i].Emergency = flatProfile(1e-3) // spot-like: 1 - e^-1.8 in 2·Lmax
	}
	j := testJob("j", "")
	j.State = JobRecovering
	j.Replicas = []NodeID{nodes[4].ID}
	s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams()}
	d := Tick(s, testEpoch)
	if len(d.Placements) != 1 || d.Placements[0].From != nodes[4].ID || d.Placements[0].To == nodes[4].ID || d.Placements[0].To == "" {
		t.Fatalf("placements %+v, want a restore from %s onto another node", d.Placements, nodes[4].ID)
	}
	restore := false
	for _, f := range d.Flows {
		restore = restore || f.Job == "j" && f.From == nodes[4].ID && f.To == d.Placements[0].To
	}
	if !restore {
		t.Errorf("no restore flow from %s in %+v", nodes[4].ID, d.Flows)
	}
	checkInvariants(t, s, d, testEpoch)

	busy := append([]Node(nil), nodes...)
	for i := range busy {
		if i != 4 {
			busy[i].FreeGPUs, busy[i].Load = 0, 1
		}
	}
	s.Nodes = busy
	d = Tick(s, testEpoch)
	if len(d.Placements) != 1 || d.Placements[0].To != nodes[4].ID || d.Placements[0].From != nodes[4].ID {
		t.Fatalf("only the holder free: placements %+v, want the job restarted on %s from its copy", d.Placements, nodes[4].ID)
	}
	checkInvariants(t, s, d, testEpoch)

	// Two live holders: either may host, the other keeps a copy.
	j.Replicas = []NodeID{nodes[4].ID, nodes[5].ID}
	s = Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams()}
	d = Tick(s, testEpoch)
	if len(d.Placements) != 1 || d.Placements[0].To == "" || d.Placements[0].From == "" {
		t.Fatalf("two holders: placements %+v, want a recovery from one", d.Placements)
	}
}

// TestTickStandbyAvoidsRiskySoleHolder: a standby that holds a job's only
// copy is kept while it is unlikely to leave within 2·Lmax; when its hazard
// makes that likely (above Params.SoleCopyRisk), the next checkpoint goes to
// another node so the last two versions are on two nodes.
func TestTickStandbyAvoidsRiskySoleHolder(t *testing.T) {
	for _, tt := range []struct {
		hazard float64 // 1/s, every node
		risk   float64
		keep   bool
	}{
		{1e-6, DefaultParams().SoleCopyRisk, true}, // 0.2 % in 30 min
		{1e-3, DefaultParams().SoleCopyRisk, false},
		{1e-3, 0, true}, // switched off
	} {
		nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 4, access: gbit, uplink: gbit})
		for i := range nodes {
			nodes[i].Emergency = flatProfile(tt.hazard)
		}
		j := testJob("j", nodes[0].ID)
		j.Standby, j.Replicas = nodes[1].ID, []NodeID{nodes[1].ID}
		p := DefaultParams()
		p.SoleCopyRisk = tt.risk
		s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: p}
		d := Tick(s, testEpoch)
		if got := d.Jobs[0].Standby; (got == nodes[1].ID) != tt.keep || got == "" || got == nodes[0].ID {
			t.Errorf("hazard %g/s, risk %g: standby %q, want kept (%s) = %v", tt.hazard, tt.risk, got, nodes[1].ID, tt.keep)
		}
		checkInvariants(t, s, d, testEpoch)
	}
}

// TestTickStandbyOfLastResort: when no node can take a job (no free GPUs
// anywhere but on its host), P1 still gets a standby that keeps the copy,
// so the job checkpoints off its node instead of not at all.
func TestTickStandbyOfLastResort(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 4, access: gbit, uplink: gbit})
	for i := 1; i < len(nodes); i++ {
		nodes[i].FreeGPUs, nodes[i].Load = 0, 1
	}
	j := testJob("j", nodes[0].ID)
	s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams()}
	d := Tick(s, testEpoch)
	if jd := d.Jobs[0]; jd.Standby == "" || jd.Standby == nodes[0].ID || jd.Bandwidth <= 0 || jd.Interval >= MaxInterval {
		t.Fatalf("decision %+v, want a standby other than the host with a rate and an interval", jd)
	}
	checkInvariants(t, s, d, testEpoch)
}

// TestTickStandbyStableAcrossVersions: with co-departure on and nothing
// changing, a job's standby stays put version after version, though the
// standby, sharing the host's building, holds each new version alone for
// a while and its figure (the building prior, with its hazard) is above
// Params.SoleCopyRisk: the other nodes of the building are no less likely
// to leave with the host. Where the log shows the standby leaving with
// the host, it moves once, to a node less likely to, and stays there.
func TestTickStandbyStableAcrossVersions(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 4, access: gbit, uplink: gbit})
	host, sb := nodes[0].ID, nodes[1].ID
	prior, _ := learnCo(t, nodes, nil, 0)
	learned, _ := learnCo(t, nodes, [][2]NodeID{{host, sb}}, 30)
	for _, tt := range []struct {
		name  string
		co    *CoDeparture
		moved bool
	}{
		{"priors only", prior, false},
		{"the standby leaves with the host", learned, true},
	} {
		j := testJob("j", host)
		j.Standby, j.Replicas = sb, []NodeID{sb}
		s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams(), CoDeparture: tt.co}
		w := newWorld(s, testEpoch, nil)
		if !w.riskyHolder(1, &j, 0) {
			t.Fatalf("%s: %s not a risky sole holder (the case is moot)", tt.name, sb)
		}
		var got []NodeID
		for range 6 {
			d := Tick(s, testEpoch)
			checkInvariants(t, s, d, testEpoch)
			next := d.Jobs[0].Standby
			got = append(got, next)
			// The next version commits on the new standby alone.
			s.Jobs[0].Standby, s.Jobs[0].Replicas = next, []NodeID{next}
		}
		first := got[0]
		for _, g := range got {
			if g != first {
				t.Errorf("%s: standbys over six versions %v, want one node throughout", tt.name, got)
				break
			}
		}
		if (first != sb) != tt.moved || first == host || first == "" {
			t.Errorf("%s: standby %s, want moved from %s = %v", tt.name, first, sb, tt.moved)
		}
	}
}

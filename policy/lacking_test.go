package policy

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// A node in a job's Lacking (it lacks a path the job reads) is never the
// job's destination, placement or hand-off, and is listed as rejected for
// that reason; the others are judged as if the lacking nodes were not
// there at all (checked against that campus, over random subsets).
func TestLackingNodesAreNeverChosen(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 4, access: gbit, uplink: gbit})
	s := snapshotOf(nodes, links)
	rng := rand.New(rand.NewPCG(20, 17))
	for round := range 200 {
		job := testJob("j", "")
		job.State = JobPending
		src := NodeID("")
		if round%2 == 1 {
			job = testJob("j", nodes[rng.IntN(len(nodes))].ID)
			src = job.Node
		}
		for _, n := range nodes {
			if rng.IntN(3) == 0 {
				job.Lacking = append(job.Lacking, n.ID)
			}
		}
		// Brute force: the same campus without the lacking nodes (the
		// source stays: it is where the checkpoint comes from).
		without := s
		without.Nodes = slices.DeleteFunc(slices.Clone(nodes), func(n Node) bool { return n.ID != src && slices.Contains(job.Lacking, n.ID) })
		unfiltered := job
		unfiltered.Lacking = nil
		base := SelectDestination(without, Request{Job: unfiltered, Source: src, Now: testEpoch})
		got := SelectDestination(s, Request{Job: job, Source: src, Now: testEpoch})
		var want []NodeID
		for _, c := range base {
			if c.Rejected == "" {
				want = append(want, c.Node)
			}
		}
		var accepted []NodeID
		for _, c := range got {
			if c.Rejected == "" {
				accepted = append(accepted, c.Node)
			}
			if slices.Contains(job.Lacking, c.Node) && c.Node != src && c.Rejected != RejectMissingPath {
				t.Fatalf("round %d: lacking node %s judged %q, want %q", round, c.Node, c.Rejected, RejectMissingPath)
			}
		}
		if !slices.Equal(accepted, want) {
			t.Fatalf("round %d: lacking %v: accepted %v, want %v (as on the campus without them)", round, job.Lacking, accepted, want)
		}
	}

	// Through Tick: a pending job every node but one lacks goes there; one
	// that every node lacks stays pending, each node rejected for it.
	job := testJob("only", "")
	job.State = JobPending
	for _, n := range nodes[1:] {
		job.Lacking = append(job.Lacking, n.ID)
	}
	s.Jobs = []Job{job}
	d := Tick(s, testEpoch)
	if len(d.Placements) != 1 || d.Placements[0].To != nodes[0].ID {
		t.Fatalf("placements %+v, want the one node that has the path, %s", d.Placements, nodes[0].ID)
	}
	s.Jobs[0].Lacking = append(s.Jobs[0].Lacking, nodes[0].ID)
	d = Tick(s, testEpoch)
	if len(d.Placements) != 1 || d.Placements[0].To != "" || len(d.Placements[0].Candidates) != len(nodes) {
		t.Fatalf("placements %+v, want the job unplaced with every node as a rejected candidate", d.Placements)
	}
	for _, c := range d.Placements[0].Candidates {
		if c.Rejected != RejectMissingPath {
			t.Errorf("candidate %s rejected %q, want %q (the job's pending reason)", c.Node, c.Rejected, RejectMissingPath)
		}
	}
}

// A hand-off to a node without the job's bundle moves the bundle too: its
// flow carries C + BundleBytes, and needs a higher rate for both; to a node
// that holds the bundle only C.
func TestBundleBytesCountWhereTheDestinationLacksThem(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 4, access: gbit, uplink: 10 * gbit})
	const c, b = 2e9, 1e9
	handoff := func(holders []NodeID) (HandoffDecision, FlowDecision) {
		t.Helper()
		s := snapshotOf(nodes, links)
		j := testJob("j", nodes[0].ID)
		j.CheckpointBytes, j.BundleBytes, j.BundleHolders = c, b, holders
		s.Jobs = []Job{j}
		s.Reclaims = []Reclaim{{Node: nodes[0].ID, Announced: testEpoch, Deadline: testEpoch.Add(10 * time.Minute)}}
		d := Tick(s, testEpoch)
		if len(d.Handoffs) != 1 || d.Handoffs[0].To == "" {
			t.Fatalf("hand-offs %+v, want one with a destination", d.Handoffs)
		}
		for _, f := range d.Flows {
			if f.ID == HandoffPrefix+"j" {
				return d.Handoffs[0], f
			}
		}
		t.Fatalf("no hand-off flow in %+v", d.Flows)
		return HandoffDecision{}, FlowDecision{}
	}
	h, f := handoff([]NodeID{nodes[0].ID})
	if h.Bytes != c+b {
		t.Errorf("hand-off to %s (no bundle): %d bytes, want C + bundle = %d", h.To, h.Bytes, int64(c+b))
	}
	h2, f2 := handoff([]NodeID{nodes[0].ID, h.To})
	if h2.To != h.To || h2.Bytes != c {
		t.Errorf("hand-off to %s holding the bundle: %d bytes to %s, want C = %d", h.To, h2.Bytes, h2.To, int64(c))
	}
	if f.MinRate <= f2.MinRate {
		t.Errorf("minimum rate with the bundle %g, without %g: want it higher (3 GB against 2 GB before the same deadline)", f.MinRate, f2.MinRate)
	}

}

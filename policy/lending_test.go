package policy

import (
	"testing"
	"time"
)

// TestLendingEndFilter: a node lent for less than LentAhead more is no
// destination (P2) nor standby, one lent for longer (or with no known end)
// is, and the boundary is exactly LentAhead.
func TestLendingEndFilter(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 5, access: gbit, uplink: 10 * gbit})
	ahead := DefaultParams().LentAhead
	nodes[1].LentUntil = testEpoch.Add(5 * time.Minute)     // ends soon
	nodes[2].LentUntil = testEpoch.Add(ahead - time.Second) // just inside
	nodes[3].LentUntil = testEpoch.Add(ahead)               // exactly LentAhead: still chosen
	nodes[4].LentUntil = testEpoch.Add(8 * time.Hour)       // a long window
	s := snapshotOf(nodes, links)
	job := testJob("j", nodes[0].ID)
	cs := SelectDestination(s, Request{Job: job, Source: nodes[0].ID, Now: testEpoch})
	want := map[NodeID]RejectReason{
		nodes[0].ID: RejectSource, nodes[1].ID: RejectLendingEnds, nodes[2].ID: RejectLendingEnds,
		nodes[3].ID: "", nodes[4].ID: "",
	}
	for id, reason := range want {
		if c, ok := candidateByNode(cs, id); !ok || c.Rejected != reason {
			t.Errorf("%s: rejected %q, want %q", id, c.Rejected, reason)
		}
	}
	// Tick on the same snapshot: the job's standby is never a node whose
	// lending ends soon, whatever the other nodes' state.
	standby := func(only int, until time.Time) NodeID {
		s := snapshotOf(nodes, links)
		s.Nodes = append([]Node(nil), nodes...)
		for i := range s.Nodes {
			if i != 0 && i != only {
				s.Nodes[i].Leaving = true
			}
		}
		s.Nodes[only].LentUntil = until
		j := testJob("j", nodes[0].ID)
		j.State = JobRunning
		s.Jobs = []Job{j}
		for _, jd := range Tick(s, testEpoch).Jobs {
			return jd.Standby
		}
		return ""
	}
	for _, only := range []int{1, 2} {
		if got := standby(only, time.Time{}); got != nodes[only].ID {
			t.Fatalf("control: standby %q with only %s usable and no lending end, want it", got, nodes[only].ID)
		}
		if got := standby(only, nodes[only].LentUntil); got == nodes[only].ID {
			t.Errorf("standby %s, whose lending ends at %v (LentAhead %v)", got, nodes[only].LentUntil, ahead)
		}
	}
}

package raft

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	hraft "github.com/hashicorp/raft"

	"github.com/reclaimnet/reclaimnet/policy"
)

// demoteAll runs the leader's demotion step on servers the way reconcile
// does (order, then the quorum check before each) and returns who was
// demoted; the leader itself is skipped (it hands over instead).
func demoteAll(servers map[policy.NodeID]hraft.Server, want map[policy.NodeID]bool, self policy.NodeID, healthy func(policy.NodeID) bool) []policy.NodeID {
	var done []policy.NodeID
	for _, id := range demotionOrder(servers, want, self, healthy) {
		if id == self || !quorumAfterDemotion(servers, id, healthy) {
			continue
		}
		s := servers[id]
		s.Suffrage = hraft.Nonvoter
		servers[id] = s
		done = append(done, id)
	}
	return done
}

func healthyQuorum(servers map[policy.NodeID]hraft.Server, healthy func(policy.NodeID) bool) bool {
	voters, well := 0, 0
	for id, s := range servers {
		if s.Suffrage == hraft.Voter {
			voters++
			if healthy(id) {
				well++
			}
		}
	}
	return well >= voters/2+1
}

// The campus scenario that lost quorum for good: voters a3 (the new leader),
// b1 (healthy, not wanted) and c2 (the old leader, gone after reclaim
// --now, gossip not yet saying so); x was just promoted. c2 must go first,
// and b1 may go only while a3 and x alone form a majority.
func TestDemotionNeverStrandsQuorumOnADeadVoter(t *testing.T) {
	servers := map[policy.NodeID]hraft.Server{
		"a3": {ID: "a3", Suffrage: hraft.Voter},
		"b1": {ID: "b1", Suffrage: hraft.Voter},
		"c2": {ID: "c2", Suffrage: hraft.Voter},
		"x":  {ID: "x", Suffrage: hraft.Voter},
	}
	healthy := func(id policy.NodeID) bool { return id != "c2" }
	want := map[policy.NodeID]bool{"a3": true, "x": true}
	if got := demotionOrder(servers, want, "a3", healthy); !slices.Equal(got, []policy.NodeID{"c2", "b1"}) {
		t.Fatalf("demotion order %v, want the dead voter first: [c2 b1]", got)
	}
	// Without x, demoting b1 first would leave {a3 c2}: a majority only
	// with the dead c2.
	noX := map[policy.NodeID]hraft.Server{"a3": servers["a3"], "b1": servers["b1"], "c2": servers["c2"]}
	if quorumAfterDemotion(noX, "b1", healthy) {
		t.Errorf("demoting b1 from {a3 b1 c2} with c2 dead allowed: {a3 c2} needs the dead c2")
	}
	if !quorumAfterDemotion(noX, "c2", healthy) {
		t.Errorf("demoting the dead c2 from {a3 b1 c2} refused, want allowed: {a3 b1} are both healthy")
	}
	if got := demoteAll(noX, map[policy.NodeID]bool{"a3": true}, "a3", healthy); !slices.Equal(got, []policy.NodeID{"c2", "b1"}) {
		t.Errorf("demoted %v, want [c2 b1] (dead first, then b1 once {a3 b1} is all healthy)", got)
	}
}

// Brute force over small configurations: whatever the health and the wanted
// set, the demotion step never turns a configuration whose healthy voters
// hold a majority into one where they do not.
func TestDemotionKeepsHealthyMajority(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := range 20000 {
		n := 1 + rng.IntN(7)
		servers := map[policy.NodeID]hraft.Server{}
		sick := map[policy.NodeID]bool{}
		want := map[policy.NodeID]bool{}
		ids := make([]policy.NodeID, n)
		for i := range n {
			id := policy.NodeID(fmt.Sprintf("n%d", i))
			ids[i] = id
			suff := hraft.Nonvoter
			if rng.IntN(3) > 0 {
				suff = hraft.Voter
			}
			servers[id] = hraft.Server{ID: hraft.ServerID(id), Suffrage: suff}
			sick[id] = rng.IntN(3) == 0
			want[id] = rng.IntN(2) == 0
		}
		self := ids[rng.IntN(n)]
		sick[self] = false
		healthy := func(id policy.NodeID) bool { return !sick[id] }
		before := healthyQuorum(servers, healthy)
		desc := fmt.Sprintf("trial %d: %v sick %v want %v self %s", trial, servers, sick, want, self)
		demoted := demoteAll(servers, want, self, healthy)
		for _, id := range demoted {
			if want[id] || id == self {
				t.Fatalf("%s: demoted %s (wanted or self)", desc, id)
			}
		}
		if before && !healthyQuorum(servers, healthy) {
			t.Fatalf("%s: demoting %v lost the healthy majority", desc, demoted)
		}
		// Every unhealthy unwanted voter goes whenever the rest still hold
		// a majority (no needless dead voter left behind).
		for _, id := range ids {
			if s := servers[id]; s.Suffrage == hraft.Voter && sick[id] && !want[id] && quorumAfterDemotion(servers, id, healthy) {
				t.Fatalf("%s: dead voter %s not demoted although the rest hold a majority", desc, id)
			}
		}
	}
}

package jobs

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/policy"
)

// startStorage adds a storage-role node (no GPUs, its gossip metadata
// says so) to the cluster.
func (tc *testCluster) startStorage(id policy.NodeID) *testNode {
	tc.t.Helper()
	n := tc.start(id, false, 0)
	tc.gossip.mu.Lock()
	m := tc.gossip.members[id]
	m.Storage = true
	tc.gossip.members[id] = m
	tc.gossip.mu.Unlock()
	return n
}

// TestReplicaOnStorageSurvivesJointDeparture: with a storage node in the
// cluster the leader's Tick makes it the job's second holder; the copy is
// made by the first holder (the standby), not by a second upload from the
// host, and is recorded in the catalogue. When the host and the standby
// fail together, the job recovers from the storage node's copy (its step
// counter continues from that version), not from the beginning.
func TestReplicaOnStorageSurvivesJointDeparture(t *testing.T) {
	t.Parallel()
	tc := newCluster(t, []int{0, 1, 1}, fastSupervisor())
	tc.waitVoters(3)
	// Nodes that join later are not voters (the voters stay): the two
	// that fail below must not take the quorum with them. n01 and n02
	// are busy, so the job runs on n03 or n04.
	tc.start("n03", false, 1)
	tc.start("n04", false, 1)
	tc.startStorage("s")
	tc.gossip.setFree("n01", 0)
	tc.gossip.setFree("n02", 0)
	wait.For(t, 30*time.Second, "the registry records s as a storage node", func() bool { return tc.state().Nodes["s"].Storage })
	tc.submitJob("train")
	host := tc.waitRunning("train", "")
	var standby policy.NodeID
	var version uint64
	wait.For(t, 40*time.Second, "a committed version held by the standby and by s", func() bool {
		st := tc.state()
		cps := st.Checkpoints["train"]
		for i := len(cps) - 1; i >= 0; i-- {
			cp := cps[i]
			if !cp.Committed || !slices.Contains(cp.Holders, "s") {
				continue
			}
			for _, h := range cp.Holders {
				if h != host && h != "s" {
					standby, version = h, cp.Version
					return true
				}
			}
		}
		return false
	})
	if st := tc.state(); st.Jobs["train"].Node != host {
		t.Fatalf("the job moved to %s while the test waited", st.Jobs["train"].Node)
	}
	// The copies to s came from a holder other than the host, as replica
	// flows.
	copies := 0
	for id, n := range tc.nodes {
		for _, tr := range n.mgr.TransfersSince(time.Time{}) {
			if tr.To != "s" {
				continue
			}
			if id == host || tr.Flow != policy.ReplicaPrefix+"train" {
				t.Errorf("%s sent %s to s (flow %s): the second copy must come from the first holder as a replica flow", id, tr.Job, tr.Flow)
			}
			copies++
		}
	}
	if copies == 0 {
		t.Errorf("s holds v%d, but no node's transfers list a copy to it", version)
	}
	var holders []policy.NodeID
	for _, jd := range tc.state().Decisions.Jobs {
		if jd.Job == "train" {
			holders = jd.Holders
		}
	}
	if !slices.Contains(holders, "s") {
		t.Errorf("decided holders %v, want s among them", holders)
	}

	// The host and the standby fail together; the other GPU node takes the
	// job from s.
	want := stepOf(t, tc.nodes["s"].store, "train", version)
	tc.crash(host)
	tc.crash(standby)
	tc.gossip.setFree("n01", 1)
	tc.gossip.setFree("n02", 1)
	dest := tc.waitRunning("train", host)
	if dest == standby || dest == "s" {
		t.Fatalf("job placed on %s", dest)
	}
	var got stepEvent
	wait.For(t, 40*time.Second, "the job's start after recovery", func() bool {
		s := starts(readSteps(t, tc.stepLog))
		got = s[len(s)-1]
		return len(s) >= 2
	})
	if want == 0 || got.step < want {
		t.Errorf("recovered job started at step %d, want at least %d (s's v%d): %s", got.step, want, version,
			fmt.Sprint(tc.state().Jobs["train"].Restore))
	}
	if o := tc.outcome(host, "train"); o.Replica != "s" || o.Version < version {
		t.Errorf("recorded outcome %+v, want a restore from s at v%d or later", o, version)
	}
}

package jobs

import (
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
)

// A reclaim with too little notice: the leader marks the hand-off degraded,
// the job stops at once and is not restarted on the leaving node; once the
// node is gone the job recovers elsewhere from its freshest committed
// replica.
func TestDegradedHandoffStopsThenRecovers(t *testing.T) {
	tc := newCluster(t, []int{0, 1, 1}, fastSupervisor())
	tc.waitVoters(3)
	tc.submitJob("train")
	host := tc.waitRunning("train", "")
	tc.waitCommitted("train", 1)
	now := time.Now()
	tc.submitVia(host, raft.AnnounceReclaim{Reclaim: policy.Reclaim{Node: host, Announced: now, Deadline: now.Add(time.Millisecond)}})
	var h policy.HandoffDecision
	eventually(t, 20*time.Second, "a hand-off decision for the job", func() bool {
		for _, d := range tc.state().Decisions.Handoffs {
			if d.Job == "train" {
				h = d
				return true
			}
		}
		return false
	})
	if !h.Degraded && h.To != "" {
		t.Fatalf("hand-off %+v: want degraded (1 ms notice)", h)
	}
	eventually(t, 20*time.Second, "the job stopped for degraded recovery", func() bool {
		for _, v := range tc.nodes[host].mgr.View() {
			if v.Job == "train" {
				return v.State == StateDegraded
			}
		}
		return false
	})
	first := starts(readSteps(t, tc.stepLog))[0]
	stoppedAt := -1
	for _, e := range readSteps(t, tc.stepLog) {
		if e.pid == first.pid && e.kind == "term" {
			stoppedAt = e.step
		}
	}
	if stoppedAt < 0 {
		t.Fatalf("the job's process did not stop")
	}
	cp, _ := tc.state().FreshestCommitted("train")
	// The node leaves (its deadline passed): recovery from the replica.
	tc.crash(host)
	dest := tc.waitRunning("train", host)
	var st stepEvent
	eventually(t, 30*time.Second, "the job's start after recovery", func() bool {
		s := starts(readSteps(t, tc.stepLog))
		st = s[len(s)-1]
		return len(s) >= 2
	})
	if s := starts(readSteps(t, tc.stepLog)); len(s) != 2 {
		t.Errorf("job started %d times, want twice (never again on the leaving node)", len(s))
	}
	want := stepOf(t, tc.nodes[dest].store, "train", cp.Version)
	if st.step != want {
		t.Errorf("recovered at step %d, want %d (freshest committed v%d)", st.step, want, cp.Version)
	}
}

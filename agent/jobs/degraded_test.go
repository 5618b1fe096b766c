package jobs

import (
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// A reclaim with too little notice: the leader marks the hand-off degraded
// and, since a replica is live, recovers the job at once elsewhere from its
// freshest committed replica while the leaving node is still up (policy
// Tick's early recovery): the job stops on the leaving node, is never
// restarted there, and resumes on another node at the replica's step.
func TestDegradedHandoffStopsThenRecovers(t *testing.T) {
	t.Parallel()
	tc, host := newClusterWithJob(t)
	tc.waitCommitted("train", 1)
	cp, _ := tc.state().FreshestCommitted("train")
	now := time.Now()
	tc.submitVia(host, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: host, Announced: now, Deadline: now.Add(time.Millisecond)}})
	dest := tc.waitRunning("train", host)
	// The outcome is in the reclaim's history entry: recovered, not handed
	// off, from the replica.
	outcome := tc.outcome(host, "train")
	if outcome.HandedOff || outcome.To != dest || outcome.Replica == "" || outcome.Replica == host {
		t.Errorf("history outcome %+v, want a recovery onto %s from a replica off %s", outcome, dest, host)
	}
	if n := tc.state().Nodes[host]; n.State != state.NodeActive {
		t.Errorf("%s is %v: the recovery should not wait for its departure", host, n.State)
	}
	var st stepEvent
	wait.For(t, 30*time.Second, "the job's start after recovery", func() bool {
		s := starts(readSteps(t, tc.stepLog))
		st = s[len(s)-1]
		return len(s) >= 2
	})
	first := starts(readSteps(t, tc.stepLog))[0]
	stopped := false
	for _, e := range readSteps(t, tc.stepLog) {
		stopped = stopped || (e.pid == first.pid && e.kind == "term")
	}
	if !stopped {
		t.Errorf("the job's process on %s did not stop", host)
	}
	if s := starts(readSteps(t, tc.stepLog)); len(s) != 2 {
		t.Errorf("job started %d times, want twice (never again on the leaving node)", len(s))
	}
	want := stepOf(t, tc.nodes[dest].store, "train", cp.Version)
	if st.step != want {
		t.Errorf("recovered at step %d, want %d (freshest committed v%d)", st.step, want, cp.Version)
	}
}

// A degraded hand-off that no node can take yet (no free GPU anywhere, so
// neither a destination, a standby for a last-chance checkpoint, nor an
// early recovery): the job keeps computing on the leaving node instead of
// idling there, and once GPUs free up it moves (the next decision admits
// the hand-off: "degraded, then admitted", which must not leave the job
// stopped on the leaving node for good) and the first process stops.
func TestDegradedHandoffWithNowhereToGoKeepsRunning(t *testing.T) {
	t.Parallel()
	tc, host := newClusterWithJob(t)
	tc.waitCommitted("train", 1)
	var others []policy.NodeID
	for id := range tc.nodes {
		if id != host {
			others = append(others, id)
			tc.gossip.setFree(id, 0)
		}
	}
	// A short notice: once admitted, the hand-off waits for its final
	// checkpoint's latest safe start, a couple of seconds before it.
	now := time.Now()
	tc.submitVia(host, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: host, Announced: now, Deadline: now.Add(25 * time.Second)}})
	var decided time.Time
	wait.For(t, 20*time.Second, "a degraded hand-off with nowhere to go", func() bool {
		st := tc.state()
		for _, h := range st.Decisions.Handoffs {
			if h.Job == "train" && h.Degraded {
				decided = time.Now()
				return true
			}
		}
		return false
	})
	st := tc.state()
	if j := st.Jobs["train"]; j.Node != host {
		t.Fatalf("job placed on %s with no free GPU anywhere: the test proves nothing", j.Node)
	}
	for _, jd := range st.Decisions.Jobs {
		if jd.Job == "train" && jd.Interval == policy.RescueInterval {
			t.Fatalf("a last-chance checkpoint was ordered (%+v): the test proves nothing", jd)
		}
	}
	first := starts(readSteps(t, tc.stepLog))[0]
	steps := func() int { // of the first process
		n := 0
		for _, e := range readSteps(t, tc.stepLog) {
			if e.pid == first.pid && e.kind == "step" {
				n++
			}
		}
		return n
	}
	before := steps()
	if _, ok := wait.Until(time.Until(decided.Add(2*time.Second)), func() (bool, string) { return steps() > before, "" }); !ok {
		t.Errorf("the job on %s took no step in the 2 s after its degraded decision (%d then %d): it idles instead of computing", host, before, steps())
	}
	for _, id := range others {
		tc.gossip.setFree(id, 1)
	}
	dest := tc.waitRunning("train", host)
	wait.For(t, 30*time.Second, "the first process's end and the start on "+string(dest), func() bool {
		stopped := false
		for _, e := range readSteps(t, tc.stepLog) {
			stopped = stopped || (e.pid == first.pid && e.kind == "term")
		}
		return stopped && len(starts(readSteps(t, tc.stepLog))) >= 2
	})
}

// TestHandoffWithoutFinalCheckpoint: when the final checkpoint fails the
// hand-off moves the freshest committed version, and the replicated
// history says so (no final checkpoint, the version, the work lost), so
// neither the owner's report nor the page counts it as a loss-free move.
func TestHandoffWithoutFinalCheckpoint(t *testing.T) {
	t.Parallel()
	tc := newCluster(t, []int{0, 1, 1}, fastSupervisor())
	tc.waitVoters(3)
	tc.submitJob("train", "FAILFINAL=1")
	host := tc.waitRunning("train", "")
	committed := tc.waitCommitted("train", 2)
	now := time.Now()
	tc.submitVia(host, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: host, Announced: now, Deadline: now.Add(20 * time.Second)}})
	dest := tc.waitRunning("train", host)
	var outcome state.JobOutcome
	wait.For(t, 10*time.Second, "the hand-off in the reclaim history", func() bool {
		for _, e := range tc.state().ReclaimReports {
			for _, o := range e.Jobs {
				if e.Node == host && o.Job == "train" {
					outcome = o
					return true
				}
			}
		}
		return false
	})
	if !outcome.HandedOff || !outcome.NoFinalCheckpoint || outcome.To != dest || outcome.Version < committed.Version {
		t.Fatalf("outcome %+v: want handed off to %s without a final checkpoint, from v%d or newer", outcome, dest, committed.Version)
	}
	failed := false
	for _, e := range readSteps(t, tc.stepLog) {
		failed = failed || e.kind == "ckptfail"
	}
	if !failed {
		t.Error("the job never failed a checkpoint: the test did not exercise the failed final checkpoint")
	}
}

package state

import (
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// TestUnderWay follows one job through what the replicated record says
// is under way: nothing while it runs between checkpoints, checkpointing
// from its node's stored version until a holder off the node has it,
// handing off while a hand-off is decided, recovering after its node
// left, restoring while its new node waits for the holder's copy.
func TestUnderWay(t *testing.T) {
	s := runningJob(t, 1)
	want := func(step, w string) {
		t.Helper()
		if got := s.UnderWay("j"); got != w {
			t.Fatalf("%s: under way %q, want %q", step, got, w)
		}
	}
	stored := func(v uint64, holder policy.NodeID, at time.Time) {
		t.Helper()
		mustApply(t, s, ReplicaComplete{Job: "j", Version: v, ManifestHash: "h", Size: 10, Source: "a", Holder: holder, At: at})
	}
	decide := func(at time.Time, d policy.Decisions) {
		t.Helper()
		mustApply(t, s, SetDecisions{Decisions: DecisionRecord{At: at, Leader: "a", Decisions: d}})
	}
	want("running, no checkpoint", "")
	if got := s.UnderWay("nope"); got != "" {
		t.Fatalf("unknown job: %q", got)
	}

	// Without a standby a stored version goes nowhere: nothing under way.
	stored(1, "a", t0.Add(time.Minute))
	want("stored without a standby", "")

	decide(t0.Add(2*time.Minute), policy.Decisions{Jobs: []policy.JobDecision{{Job: "j", Standby: "b", Interval: time.Minute}}})
	want("standby b, v1 stored on a only", UnderWayCheckpointing)
	stored(1, "b", t0.Add(3*time.Minute))
	want("v1 committed on b", "")
	stored(2, "a", t0.Add(4*time.Minute))
	want("v2 stored on a", UnderWayCheckpointing)
	stored(2, "b", t0.Add(5*time.Minute))
	want("v2 committed", "")

	decide(t0.Add(6*time.Minute), policy.Decisions{
		Jobs:     []policy.JobDecision{{Job: "j", Standby: "b", Interval: time.Minute}},
		Handoffs: []policy.HandoffDecision{{Job: "j", From: "a", To: "b", FinalCheckpoint: true}}})
	if st := s.Jobs["j"].State; st != policy.JobMigrating {
		t.Fatalf("after the hand-off decision: %s", st)
	}
	want("hand-off decided", UnderWayHandingOff)

	// The node leaves: the job recovers, then a recovery places it on c
	// from b's copy, which c waits for.
	mustApply(t, s, RecordDeparture{Departure: Departure{Node: "a", At: t0.Add(7 * time.Minute), Kind: DepartureEmergency}})
	if st := s.Jobs["j"].State; st != policy.JobRecovering {
		t.Fatalf("after the departure: %s", st)
	}
	want("node left", UnderWayRecovering)
	decide(t0.Add(8*time.Minute), policy.Decisions{Placements: []policy.Placement{{Job: "j", To: "c", From: "b", Recovery: true}}})
	if j := s.Jobs["j"]; j.State != policy.JobRunning || j.Restore.From != "b" {
		t.Fatalf("after the recovery: %s, restore %+v", j.StateName(), j.Restore)
	}
	want("placed on c, waiting for b's copy", UnderWayRestoring)
	mustApply(t, s, ReplicaComplete{Job: "j", Version: 2, ManifestHash: "h", Size: 10, Source: "a", Holder: "c", At: t0.Add(9 * time.Minute)})
	want("restored on c", "")

	// A version a wrote is no checkpoint of the job on c, committed or not.
	stored(3, "a", t0.Add(10*time.Minute))
	want("an old version from a", "")

	// c checkpoints, then the job fails and restarts on c: the version
	// c stored before the restart is a leftover, not a checkpoint under way.
	decide(t0.Add(11*time.Minute), policy.Decisions{Jobs: []policy.JobDecision{{Job: "j", Standby: "b", Interval: time.Minute}}})
	mustApply(t, s, ReplicaComplete{Job: "j", Version: 4, ManifestHash: "h", Size: 10, Source: "c", Holder: "c", At: t0.Add(12 * time.Minute)})
	want("v4 stored on c", UnderWayCheckpointing)
	mustApply(t, s, JobExited{Job: "j", Exit: JobExit{Node: "c", At: t0.Add(13 * time.Minute), ExitCode: 3, Restart: s.Jobs["j"].Restarts}})
	want("failed once, waiting for a placement", UnderWayRecovering)
	place(t, s, "j", "c", t0.Add(14*time.Minute))
	decide(t0.Add(15*time.Minute), policy.Decisions{Jobs: []policy.JobDecision{{Job: "j", Standby: "b", Interval: time.Minute}}})
	want("restarted on c after v4, standby b again", "")
	mustApply(t, s, ReplicaComplete{Job: "j", Version: 5, ManifestHash: "h", Size: 10, Source: "c", Holder: "c", At: t0.Add(16 * time.Minute)})
	want("v5 stored on c after the restart", UnderWayCheckpointing)
}

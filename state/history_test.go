package state

import (
	"errors"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// historyState is a state with nodes a, b, c and job j on a, whose
// version 3 was committed at t0+10s on b.
func historyState(t *testing.T, t0 time.Time) (*State, func(Command)) {
	t.Helper()
	st := New()
	must := func(cmd Command) {
		t.Helper()
		if _, err := st.Apply(cmd); err != nil {
			t.Fatalf("%s: %v", cmd.Kind(), err)
		}
	}
	for _, id := range []policy.NodeID{"a", "b", "c"} {
		must(UpsertNode{Node: NodeRecord{ID: id, GPUs: 1, Joined: t0}})
	}
	must(SubmitJob{Job: JobRecord{Job: policy.Job{ID: "j", GPUs: 1}, Spec: JobSpec{Command: []string{"x"}}, Submitted: t0}})
	must(SetDecisions{Decisions: DecisionRecord{At: t0, Decisions: policy.Decisions{Placements: []policy.Placement{{Job: "j", To: "a"}}}}})
	for _, h := range []policy.NodeID{"a", "b"} {
		must(ReplicaComplete{Job: "j", Version: 3, ManifestHash: "h3", Size: 10, Source: "a", Holder: h, At: t0.Add(10 * time.Second)})
	}
	return st, must
}

// TestHistoryRecordsDetectedEmergency: a node that vanishes is in the
// history (found by failure detection), with the job's destination, the
// replica it restored from and the work lost; the owner's report, arriving
// later with an earlier announcement, joins that entry and keeps the
// cluster's record.
func TestHistoryRecordsDetectedEmergency(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st, must := historyState(t, t0)
	gone := t0.Add(70 * time.Second)
	must(RecordDeparture{Departure: Departure{Node: "a", At: gone, Kind: DepartureEmergency}})
	if n := len(st.ReclaimReports); n != 1 {
		t.Fatalf("history after the departure: %d entries, want 1", n)
	}
	e := st.ReclaimReports[0]
	if !e.Detected || !e.ClusterOnly || e.Graceful || e.Kind != DepartureEmergency || !e.Announced.Equal(gone) || !e.Left.Equal(gone) {
		t.Fatalf("entry %+v: want a detected, cluster-only emergency announced and left at %v", e, gone)
	}
	if j := st.Jobs["j"]; j.Displaced.From != "a" || !j.Displaced.At.Equal(gone) {
		t.Fatalf("job displacement %+v, want from a at %v", j.Displaced, gone)
	}
	placed := gone.Add(2 * time.Second)
	must(SetDecisions{Decisions: DecisionRecord{At: placed, Decisions: policy.Decisions{
		Placements: []policy.Placement{{Job: "j", To: "c", From: "b", Recovery: true}}}}})
	e = st.ReclaimReports[0]
	want := JobOutcome{Job: "j", To: "c", Replica: "b", Version: 3, LostWork: 60 * time.Second, At: placed, Detected: gone}
	if len(e.Jobs) != 1 || e.Jobs[0] != want {
		t.Fatalf("outcomes %+v, want [%+v]", e.Jobs, want)
	}
	if j := st.Jobs["j"]; j.Displaced != (Displacement{}) || j.Node != "c" {
		t.Fatalf("job after placement: node %s, displaced %+v; want on c, displacement cleared", j.Node, j.Displaced)
	}
	// j resumes before the owner's report arrives: its limit is the
	// destination's 4 s, the departure being known only from its detection.
	must(JobReport{Job: "j", Node: "c", Ready: placed.Add(5 * time.Second), Restored: placed.Add(4 * time.Second), Limit: 4 * time.Second})
	if o := st.ReclaimReports[0].Jobs[0]; o.Limit != 4*time.Second {
		t.Fatalf("recovery limit %v before the owner's report, want the destination's 4s", o.Limit)
	}
	// The owner's announcement, 3 s before the detection, starts the
	// downtime then: the limit adds those 3 s of detection.
	want.Resumed, want.Restored, want.Limit = placed.Add(5*time.Second), placed.Add(4*time.Second), 7*time.Second
	// A second job of a waits for recovery (displaced by the same
	// departure) while the owner's report arrives.
	must(SubmitJob{Job: JobRecord{Job: policy.Job{ID: "k", GPUs: 1}, Spec: JobSpec{Command: []string{"x"}}, Submitted: t0}})
	k := st.Jobs["k"]
	k.Displaced = Displacement{From: "a", At: gone, Announced: gone}
	k.State, k.Started = policy.JobRecovering, true
	st.Jobs["k"] = k
	// The owner's --now report, announced 3 s before detection.
	owner := ReclaimReport{Node: "a", Kind: DepartureEmergency, Announced: gone.Add(-3 * time.Second), Deadline: gone.Add(-3 * time.Second),
		Isolate: time.Millisecond, Isolated: true, Degraded: []policy.JobID{"j"}, UsedFor: time.Second, Left: gone.Add(-2 * time.Second),
		Jobs: []JobOutcome{{Job: "forged"}}, ClusterOnly: true}
	must(RecordReclaimReport{Report: owner})
	if n := len(st.ReclaimReports); n != 1 {
		t.Fatalf("history after the owner's report: %d entries, want the one merged entry", n)
	}
	e = st.ReclaimReports[0]
	if e.ClusterOnly || !e.Detected || !e.Announced.Equal(owner.Announced) || !e.Isolated || len(e.Degraded) != 1 {
		t.Fatalf("merged entry %+v: want the owner's figures, detected, no longer cluster-only", e)
	}
	if len(e.Jobs) != 1 || e.Jobs[0] != want {
		t.Fatalf("merged outcomes %+v, want the cluster's [%+v] (an owner's report never sets them)", e.Jobs, want)
	}

	// k, placed after the owner's report moved the entry's key, lands in
	// the same entry.
	must(SetDecisions{Decisions: DecisionRecord{At: placed.Add(time.Second), Decisions: policy.Decisions{
		Placements: []policy.Placement{{Job: "k", To: "c", Recovery: true}}}}})
	if n := len(st.ReclaimReports); n != 1 || len(st.ReclaimReports[0].Jobs) != 2 || st.ReclaimReports[0].Jobs[1].Job != "k" {
		t.Fatalf("history after k's recovery: %+v, want one entry with j's and k's outcomes", st.ReclaimReports)
	}
	// Applying it again changes nothing.
	if changed, err := st.Apply(RecordReclaimReport{Report: owner}); err != nil || changed {
		t.Fatalf("second apply of the owner's report: changed %v, err %v", changed, err)
	}
	// An owner's report far from any detection is a new entry.
	late := owner
	late.Announced, late.Deadline = gone.Add(-time.Hour), gone.Add(-time.Hour)
	must(RecordReclaimReport{Report: late})
	if n := len(st.ReclaimReports); n != 2 {
		t.Fatalf("history: %d entries, want 2 (an unrelated report is its own entry)", n)
	}
}

// TestHistoryScheduledHandoffAndNotice: a scheduled reclaim's hand-off is
// recorded with its destination, the departure keeps the notice, and the
// owner's report keeps the cluster's outcomes.
func TestHistoryScheduledHandoffAndNotice(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st, must := historyState(t, t0)
	announced, deadline := t0.Add(20*time.Second), t0.Add(80*time.Second)
	must(AnnounceReclaim{Reclaim: policy.Reclaim{Node: "a", Announced: announced, Deadline: deadline}})
	must(MoveJob{Job: "j", From: "a", To: "b"})
	if len(st.ReclaimReports) != 1 || len(st.ReclaimReports[0].Jobs) != 1 {
		t.Fatalf("history after the hand-off: %+v, want one entry with one outcome", st.ReclaimReports)
	}
	if o := st.ReclaimReports[0].Jobs[0]; o != (JobOutcome{Job: "j", To: "b", HandedOff: true}) {
		t.Fatalf("hand-off outcome %+v, want j handed off to b", o)
	}
	must(RecordReclaimReport{Report: ReclaimReport{Node: "a", Kind: DepartureScheduled, Announced: announced, Deadline: deadline,
		Completed: t0.Add(40 * time.Second), Moved: []policy.JobID{"j"}}})
	must(RecordDeparture{Departure: Departure{Node: "a", At: deadline, Kind: DepartureScheduled}})
	if d := st.Departures[len(st.Departures)-1]; d.Notice != 60*time.Second {
		t.Fatalf("departure %+v: notice %v, want 60s from the pending reclaim", d, d.Notice)
	}
	e := st.ReclaimReports[0]
	if len(st.ReclaimReports) != 1 || e.ClusterOnly || e.Detected || !e.Left.Equal(deadline) || len(e.Jobs) != 1 || !e.Jobs[0].HandedOff {
		t.Fatalf("entry %+v: want the owner's report with the hand-off kept and left at the deadline", e)
	}
}

// TestHistoryHandoffWithoutFinalCheckpoint: a hand-off that moved an older
// committed version (its final checkpoint failed) is recorded as such, with
// the version and the work since its commit, not as a loss-free move.
func TestHistoryHandoffWithoutFinalCheckpoint(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st, must := historyState(t, t0)
	announced, deadline := t0.Add(20*time.Second), t0.Add(80*time.Second)
	must(AnnounceReclaim{Reclaim: policy.Reclaim{Node: "a", Announced: announced, Deadline: deadline}})
	must(MoveJob{Job: "j", From: "a", To: "b", At: t0.Add(50 * time.Second), Version: 3, NoFinalCheckpoint: true})
	want := JobOutcome{Job: "j", To: "b", HandedOff: true, NoFinalCheckpoint: true, Version: 3, LostWork: 40 * time.Second}
	if len(st.ReclaimReports) != 1 || len(st.ReclaimReports[0].Jobs) != 1 || st.ReclaimReports[0].Jobs[0] != want {
		t.Fatalf("history %+v, want one outcome %+v (v3 committed at +10 s, moved at +50 s)", st.ReclaimReports, want)
	}
}

// TestHistoryRecoveryWithoutReplica: a job with no surviving replica is
// recorded as restarted from the beginning, its work lost since
// submission.
func TestHistoryRecoveryWithoutReplica(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st, must := historyState(t, t0)
	gone := t0.Add(5 * time.Minute)
	must(RecordDeparture{Departure: Departure{Node: "a", At: gone, Kind: DepartureEmergency}})
	must(SetDecisions{Decisions: DecisionRecord{At: gone, Decisions: policy.Decisions{
		Placements: []policy.Placement{{Job: "j", To: "c", Recovery: true}}}}})
	o := st.ReclaimReports[0].Jobs[0]
	if o.Replica != "" || o.Version != 0 || o.LostWork != 5*time.Minute || o.To != "c" {
		t.Fatalf("outcome %+v: want to c, no replica, 5m lost (since submission)", o)
	}
}

// TestHistoryGracefulLeave: a node that left announcing it in gossip
// (agent stopped, no reclaim) is recorded as such, not as a failure.
func TestHistoryGracefulLeave(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st, must := historyState(t, t0)
	must(RecordDeparture{Departure: Departure{Node: "c", At: t0.Add(time.Minute), Kind: DepartureEmergency, Graceful: true}})
	if e := st.ReclaimReports[0]; !e.Graceful || !e.Detected || e.Node != "c" {
		t.Fatalf("entry %+v: want c's graceful leave without a reclaim", e)
	}
}

// TestCounters: the replicated counters count each hand-off decision once
// per verdict (the leader repeats it every tick), committed hand-offs with
// and without their final checkpoint, and recoveries after a departure.
func TestCounters(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st, must := historyState(t, t0)
	deadline := t0.Add(80 * time.Second)
	must(AnnounceReclaim{Reclaim: policy.Reclaim{Node: "a", Announced: t0.Add(20 * time.Second), Deadline: deadline}})
	decide := func(at time.Duration, h policy.HandoffDecision) {
		t.Helper()
		h.Job, h.From, h.Deadline = "j", "a", deadline
		must(SetDecisions{Decisions: DecisionRecord{At: t0.Add(at), Decisions: policy.Decisions{Handoffs: []policy.HandoffDecision{h}}}})
	}
	decide(21*time.Second, policy.HandoffDecision{To: "b", FinalCheckpoint: true})
	decide(22*time.Second, policy.HandoffDecision{To: "b", FinalCheckpoint: true, Bytes: 5}) // the same verdict, again
	decide(23*time.Second, policy.HandoffDecision{Degraded: true, Reason: "not admitted"})
	decide(24*time.Second, policy.HandoffDecision{To: "c", FinalCheckpoint: true})
	if c := st.Counters; c.AdmittedHandoffs != 2 || c.DegradedHandoffs != 1 {
		t.Fatalf("counters %+v after admitted, admitted again, degraded, admitted: want 2 admitted, 1 degraded", c)
	}
	must(MoveJob{Job: "j", From: "a", To: "c", At: t0.Add(30 * time.Second), Version: 4})
	must(MoveJob{Job: "j", From: "a", To: "c", At: t0.Add(30 * time.Second), Version: 4}) // repeated: no change
	must(MoveJob{Job: "j", From: "c", To: "b", At: t0.Add(40 * time.Second), Version: 3, NoFinalCheckpoint: true})
	must(RecordDeparture{Departure: Departure{Node: "b", At: t0.Add(50 * time.Second), Kind: DepartureEmergency}})
	must(SetDecisions{Decisions: DecisionRecord{At: t0.Add(52 * time.Second), Decisions: policy.Decisions{
		Placements: []policy.Placement{{Job: "j", To: "c", From: "a", Recovery: true}}}}})
	if c := st.Counters; c.Handoffs != 1 || c.DegradedRecoveries != 2 {
		t.Fatalf("counters %+v: want 1 hand-off with its final checkpoint, 2 degraded (one without it, one recovery)", c)
	}
	if c := st.clone().Counters; c != st.Counters {
		t.Fatalf("clone's counters %+v, want %+v", c, st.Counters)
	}
}

// TestHistoryRecordsResumed: the destination's readiness report ends the
// hand-off's downtime in the history (with the source's stop from the
// move); a repeated or foreign report changes nothing.
func TestHistoryRecordsResumed(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st, must := historyState(t, t0)
	announced, deadline := t0.Add(20*time.Second), t0.Add(80*time.Second)
	must(AnnounceReclaim{Reclaim: policy.Reclaim{Node: "a", Announced: announced, Deadline: deadline}})
	stopped, ready := t0.Add(30*time.Second), t0.Add(33*time.Second)
	must(MoveJob{Job: "j", From: "a", To: "b", At: t0.Add(32 * time.Second), Stopped: stopped})
	if o := st.ReclaimReports[0].Jobs[0]; !o.Stopped.Equal(stopped) || !o.Resumed.IsZero() {
		t.Fatalf("outcome after the move %+v, want the stop and no readiness", o)
	}
	if j := st.Jobs["j"]; !j.HandoffStopped.Equal(stopped) {
		t.Fatalf("job after the move: hand-off stop %v, want %v", j.HandoffStopped, stopped)
	}
	changed, err := st.Apply(JobReport{Job: "j", Node: "b", Ready: ready})
	if err != nil || !changed {
		t.Fatalf("readiness report: changed %v, err %v; want a change", changed, err)
	}
	if o := st.ReclaimReports[0].Jobs[0]; !o.Resumed.Equal(ready) {
		t.Fatalf("outcome after the readiness %+v, want resumed at %v", o, ready)
	}
	if changed, err := st.Apply(JobReport{Job: "j", Node: "b", Ready: ready.Add(time.Second)}); err != nil || changed {
		t.Errorf("a second readiness: changed %v, err %v; want nothing (the first one ends the downtime)", changed, err)
	}
	if _, err := st.Apply(JobReport{Job: "j", Node: "c", Ready: ready}); !errors.Is(err, ErrNotHost) {
		t.Errorf("readiness from a node that does not host the job: err %v, want ErrNotHost", err)
	}
	if o := st.ReclaimReports[0].Jobs[0]; !o.Resumed.Equal(ready) {
		t.Errorf("outcome %+v changed by the later reports", o)
	}
}

// TestHistoryDowntimeParts: the history's outcome of a move takes where
// the downtime went (design P3.8d): a recovery's departure (the owner's
// announcement), detection, placement, restore and first step, with its
// limit plus the detection time; a hand-off's final checkpoint start and
// limit from its MoveJob and its first step from the destination. A start
// reported by another node, or before the move, changes nothing.
func TestHistoryDowntimeParts(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st, must := historyState(t, t0)
	announced := t0.Add(60 * time.Second)
	must(AnnounceReclaim{Reclaim: policy.Reclaim{Node: "a", Announced: announced, Deadline: announced}})
	detected := announced.Add(3 * time.Second)
	must(RecordDeparture{Departure: Departure{Node: "a", At: detected, Kind: DepartureEmergency}})
	placed := detected.Add(time.Second)
	must(SetDecisions{Decisions: DecisionRecord{At: placed, Decisions: policy.Decisions{
		Placements: []policy.Placement{{Job: "j", To: "c", From: "b", Recovery: true}}}}})
	must(JobReport{Job: "j", Node: "c", Ready: placed.Add(-time.Second)}) // before the placement: ignored
	if o := st.ReclaimReports[0].Jobs[0]; !o.Resumed.IsZero() {
		t.Fatalf("a start before the placement was recorded: %+v", o)
	}
	restored, started := placed.Add(4*time.Second), placed.Add(6*time.Second)
	must(JobReport{Job: "j", Node: "c", Ready: started, Restored: restored, Limit: 5 * time.Second})
	o := st.ReclaimReports[0].Jobs[0]
	e := st.ReclaimReports[0]
	if !e.DowntimeStart(o).Equal(announced) || !o.Detected.Equal(detected) || !o.At.Equal(placed) || !o.Restored.Equal(restored) || !o.Resumed.Equal(started) {
		t.Fatalf("recovery outcome %+v (from %v): want from the announcement, detected, placed, restored and resumed", o, e.DowntimeStart(o))
	}
	if o.Limit != 8*time.Second {
		t.Fatalf("recovery limit %v, want 5s + 3s detection", o.Limit)
	}
	must(JobReport{Job: "j", Node: "c", Ready: started.Add(time.Minute)}) // a later restart: the first step stands
	if o := st.ReclaimReports[0].Jobs[0]; !o.Resumed.Equal(started) {
		t.Fatalf("a later report replaced the first step: %+v", o)
	}

	// A hand-off of j off c.
	st2, must2 := historyState(t, t0)
	must2(AnnounceReclaim{Reclaim: policy.Reclaim{Node: "a", Announced: announced, Deadline: announced.Add(time.Minute)}})
	stopped := announced.Add(50 * time.Second)
	must2(MoveJob{Job: "j", From: "a", To: "b", At: stopped.Add(2 * time.Second), Version: 4, Stopped: stopped, Limit: 3 * time.Second})
	if _, err := st2.Apply(JobReport{Job: "j", Node: "c", Ready: stopped.Add(3 * time.Second)}); err == nil {
		t.Fatal("a report from a node that does not host the job was accepted")
	}
	must2(JobReport{Job: "j", Node: "b", Ready: stopped.Add(3 * time.Second), Restored: stopped.Add(2500 * time.Millisecond), Limit: time.Second})
	o = st2.ReclaimReports[0].Jobs[0]
	if o.Resumed.Sub(o.Stopped) != 3*time.Second || o.Limit != 3*time.Second || !o.HandedOff || !o.Restored.Equal(stopped.Add(2500*time.Millisecond)) {
		t.Fatalf("hand-off outcome %+v: want down 3s, restored, against the move's limit 3s (not the destination's)", o)
	}
	for _, bad := range []Command{
		JobReport{Job: "j", Node: "b", Limit: -time.Second},
		JobReport{Job: "j", Node: "b", Ready: stopped, Restored: stopped.Add(time.Second)},
		MoveJob{Job: "j", From: "b", To: "a", At: stopped, Limit: -time.Second},
	} {
		if _, err := EncodeCommand(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

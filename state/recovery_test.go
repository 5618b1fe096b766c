package state

import (
	"slices"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// recoveryFSM is a state with nodes a, b, c, d active, job j running on a
// with version 1 committed on a and b (its standby), and a scheduled
// reclaim of a pending; it returns the FSM and the next log index.
func recoveryFSM(t *testing.T) (*Store, uint64) {
	t.Helper()
	f := NewStore()
	cmds := []Command{}
	for _, id := range []policy.NodeID{"a", "b", "c", "d"} {
		cmds = append(cmds, UpsertNode{Node: NodeRecord{ID: id, Building: "north", GPUs: 1, State: NodeActive, Joined: t0}})
	}
	cmds = append(cmds,
		SubmitJob{Job: JobRecord{Job: policy.Job{ID: "j", CheckpointBytes: 1 << 30, GPUs: 1}, Spec: JobSpec{Command: []string{"train"}}, Owner: "alice", Submitted: t0}},
		SetDecisions{Decisions: DecisionRecord{At: t0.Add(time.Second), Leader: "a", Decisions: policy.Decisions{
			Placements: []policy.Placement{{Job: "j", To: "a"}}}}},
		ReplicaComplete{Job: "j", Version: 1, ManifestHash: "sha256:01", Size: 1 << 30, Source: "a", Holder: "a", At: t0.Add(2 * time.Second)},
		ReplicaComplete{Job: "j", Version: 1, ManifestHash: "sha256:01", Size: 1 << 30, Source: "a", Holder: "b", At: t0.Add(3 * time.Second)},
		AnnounceReclaim{Reclaim: policy.Reclaim{Node: "a", Announced: t0.Add(10 * time.Second), Deadline: t0.Add(40 * time.Second)}},
	)
	for i, c := range cmds {
		if res := applyEncoded(t, f, uint64(i+1), c); res != nil {
			t.Fatalf("%s: %v", c.Kind(), res)
		}
	}
	return f, uint64(len(cmds) + 1)
}

// TestEarlyRecoveryOfDegradedHandoff: a recovery placement for a job that
// still runs on a node under reclaim applies only together with a
// degraded hand-off of that job (policy.Tick's early recovery); it moves
// the job, records the outcome in the reclaim's history entry and leaves a
// restore order that the new node's copy clears.
func TestEarlyRecoveryOfDegradedHandoff(t *testing.T) {
	at := t0.Add(12 * time.Second)
	placement := policy.Placement{Job: "j", To: "c", From: "b", Recovery: true}
	for _, tt := range []struct {
		name     string
		handoffs []policy.HandoffDecision
		want     policy.NodeID
	}{
		{"degraded hand-off", []policy.HandoffDecision{{Job: "j", From: "a", Degraded: true, Reason: policy.ReasonNoDestination}}, "c"},
		{"admitted hand-off", []policy.HandoffDecision{{Job: "j", From: "a", To: "d", FinalCheckpoint: true}}, "a"},
		{"no hand-off", nil, "a"},
	} {
		f, next := recoveryFSM(t)
		res := applyEncoded(t, f, next, SetDecisions{Decisions: DecisionRecord{At: at, Leader: "b", Decisions: policy.Decisions{
			Handoffs: tt.handoffs, Placements: []policy.Placement{placement}}}})
		if res != nil {
			t.Fatalf("%s: %v", tt.name, res)
		}
		st := f.State()
		j := st.Jobs["j"]
		if j.Node != tt.want || j.State == policy.JobRecovering {
			t.Fatalf("%s: job on %q (%v), want it on %q", tt.name, j.Node, j.State, tt.want)
		}
		if tt.want == "a" {
			if j.Restore != (RestoreOrder{}) || j.Restarts != 0 {
				t.Errorf("%s: restore order %+v, restarts %d; want none", tt.name, j.Restore, j.Restarts)
			}
			continue
		}
		if j.Restore != (RestoreOrder{From: "b", Version: 1}) || j.Restarts != 1 || !j.Displaced.At.IsZero() {
			t.Errorf("%s: restore %+v, restarts %d, displaced %+v; want b's v1, 1, none", tt.name, j.Restore, j.Restarts, j.Displaced)
		}
		var outcome *JobOutcome
		for _, e := range st.ReclaimReports {
			for k, o := range e.Jobs {
				if e.Node == "a" && e.Announced.Equal(t0.Add(10*time.Second)) && o.Job == "j" {
					outcome = &e.Jobs[k]
				}
			}
		}
		if outcome == nil || outcome.To != "c" || outcome.Replica != "b" || outcome.Version != 1 || outcome.LostWork != at.Sub(t0.Add(3*time.Second)) {
			t.Errorf("%s: history outcome %+v, want to c from b's v1 losing %v", tt.name, outcome, at.Sub(t0.Add(3*time.Second)))
		}
		// The new node's copy ends the order.
		if res := applyEncoded(t, f, next+1, ReplicaComplete{Job: "j", Version: 1, ManifestHash: "sha256:01", Size: 1 << 30, Source: "a", Holder: "c", At: at.Add(time.Second)}); res != nil {
			t.Fatal(res)
		}
		if o := f.State().Jobs["j"].Restore; o != (RestoreOrder{}) {
			t.Errorf("%s: restore order %+v after c recorded the copy, want none", tt.name, o)
		}
	}
}

// TestRestoreHolderDepartureReplacesJob: when the node that was to push a
// recovered job's copy departs before the copy arrived, the job goes back
// to recovery (nobody else would send it); a job whose copy arrived stays.
// The leader's snapshot then offers the newest version an active node
// still holds, not the freshest one that left with its holders.
func TestRestoreHolderDepartureReplacesJob(t *testing.T) {
	for _, arrived := range []bool{false, true} {
		f, next := recoveryFSM(t)
		cmds := []Command{
			// A newer version, committed only on d (a's other standby).
			ReplicaComplete{Job: "j", Version: 2, ManifestHash: "sha256:02", Size: 1 << 30, Source: "a", Holder: "a", At: t0.Add(5 * time.Second)},
			ReplicaComplete{Job: "j", Version: 2, ManifestHash: "sha256:02", Size: 1 << 30, Source: "a", Holder: "d", At: t0.Add(6 * time.Second)},
			SetDecisions{Decisions: DecisionRecord{At: t0.Add(12 * time.Second), Leader: "b", Decisions: policy.Decisions{
				Handoffs:   []policy.HandoffDecision{{Job: "j", From: "a", Degraded: true, Reason: policy.ReasonNotAdmitted}},
				Placements: []policy.Placement{{Job: "j", To: "c", From: "d", Recovery: true}}}}},
		}
		if arrived {
			cmds = append(cmds, ReplicaComplete{Job: "j", Version: 2, ManifestHash: "sha256:02", Size: 1 << 30, Source: "a", Holder: "c", At: t0.Add(14 * time.Second)})
		}
		cmds = append(cmds, RecordDeparture{Departure: Departure{Node: "d", At: t0.Add(15 * time.Second), Kind: DepartureEmergency}})
		for _, c := range cmds {
			if res := applyEncoded(t, f, next, c); res != nil {
				t.Fatalf("%s: %v", c.Kind(), res)
			}
			next++
		}
		st := f.State()
		j := st.Jobs["j"]
		if arrived {
			if j.Node != "c" || j.State != policy.JobRunning {
				t.Errorf("copy arrived: job on %q (%v), want running on c", j.Node, j.State)
			}
			continue
		}
		if j.Node != "" || j.State != policy.JobRecovering || j.Restore != (RestoreOrder{}) {
			t.Fatalf("holder left first: job on %q (%v), restore %+v; want recovering", j.Node, j.State, j.Restore)
		}
		// a (still up until its deadline) holds v2 itself; without a's
		// copy only v1 on b remains.
		if cp, holders, ok := st.Recoverable("j", ""); !ok || cp.Version != 2 || !slices.Equal(holders, []policy.NodeID{"a"}) {
			t.Errorf("recoverable %+v %v %v, want v2 on a", cp, holders, ok)
		}
		if cp, holders, ok := st.Recoverable("j", "a"); !ok || cp.Version != 1 || !slices.Equal(holders, []policy.NodeID{"b"}) {
			t.Errorf("recoverable except a: %+v %v %v, want v1 on b (v2 left with d)", cp, holders, ok)
		}
		if fresh, _ := st.FreshestCommitted("j"); fresh.Version != 2 {
			t.Errorf("freshest committed v%d, want v2 (still catalogued)", fresh.Version)
		}
	}
}

package raft

import (
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/state"

	"github.com/reclaimnet/reclaimnet/policy"
)

// TestBuildSnapshotCarriesRestoreOrders: while a job's restore order
// stands, the leader's snapshot carries its restore flow (so policy.Tick
// keeps counting the copy on its links), even after the decision that
// placed the job was replaced; once the copy arrived, a restore flow the
// previous decisions still name is not carried.
func TestBuildSnapshotCarriesRestoreOrders(t *testing.T) {
	f, next := recoveryFSM(t)
	restoreFlow := policy.FlowDecision{ID: policy.RestorePrefix + "j", Job: "j", From: "b", To: "c", Class: policy.ClassMigration, Rate: 5e6}
	apply := func(c state.Command) {
		t.Helper()
		if res := applyEncoded(t, f, next, c); res != nil {
			t.Fatalf("%s: %v", c.Kind(), res)
		}
		next++
	}
	restores := func() []policy.Flow {
		var out []policy.Flow
		for _, fl := range buildSnapshot(f.State(), nil, nil, policy.DefaultParams(), time.Now()).Flows {
			if strings.HasPrefix(fl.ID, policy.RestorePrefix) {
				out = append(out, fl)
			}
		}
		return out
	}
	apply(state.SetDecisions{Decisions: state.DecisionRecord{At: t0.Add(12 * time.Second), Leader: "b", Decisions: policy.Decisions{
		Handoffs:   []policy.HandoffDecision{{Job: "j", From: "a", Degraded: true, Reason: policy.ReasonNotAdmitted}},
		Placements: []policy.Placement{{Job: "j", To: "c", From: "b", Recovery: true}},
		Flows:      []policy.FlowDecision{restoreFlow}}}})
	if got := restores(); len(got) != 1 || got[0].From != "b" || got[0].To != "c" || got[0].Rate != 5e6 || got[0].Remaining != 1<<30 {
		t.Fatalf("placing decision in force: restore flows %+v, want b → c at 5e6 with 1 GiB to go", got)
	}
	// The next leader's decisions no longer name the restore.
	apply(state.SetDecisions{Decisions: state.DecisionRecord{At: t0.Add(13 * time.Second), Leader: "d"}})
	if got := restores(); len(got) != 1 || got[0].ID != restoreFlow.ID || got[0].From != "b" || got[0].To != "c" || got[0].Remaining != 1<<30 {
		t.Fatalf("decision replaced, order standing: restore flows %+v, want b → c from the order", got)
	}
	// The copy arrived; decisions that still name the flow do not carry it.
	apply(state.SetDecisions{Decisions: state.DecisionRecord{At: t0.Add(14 * time.Second), Leader: "d", Decisions: policy.Decisions{
		Flows: []policy.FlowDecision{restoreFlow}}}})
	apply(state.ReplicaComplete{Job: "j", Version: 1, ManifestHash: "sha256:01", Size: 1 << 30, Source: "a", Holder: "c", At: t0.Add(15 * time.Second)})
	if got := restores(); len(got) != 0 {
		t.Fatalf("copy arrived: restore flows %+v, want none", got)
	}
}

// recoveryFSM is a state with nodes a, b, c, d active, job j running on a
// with version 1 committed on a and b (its standby), and a scheduled
// reclaim of a pending; it returns the store and the next log index.
func recoveryFSM(t *testing.T) (*state.Store, uint64) {
	t.Helper()
	f := state.NewStore()
	cmds := []state.Command{}
	for _, id := range []policy.NodeID{"a", "b", "c", "d"} {
		cmds = append(cmds, state.UpsertNode{Node: state.NodeRecord{ID: id, Admitted: true, Building: "north", GPUs: 1, State: state.NodeActive, Joined: t0}})
	}
	cmds = append(cmds,
		state.SubmitJob{Job: state.JobRecord{Job: policy.Job{ID: "j", CheckpointBytes: 1 << 30, GPUs: 1}, Spec: state.JobSpec{Command: []string{"train"}}, Owner: "alice", Submitted: t0}},
		state.SetDecisions{Decisions: state.DecisionRecord{At: t0.Add(time.Second), Leader: "a", Decisions: policy.Decisions{
			Placements: []policy.Placement{{Job: "j", To: "a"}}}}},
		state.ReplicaComplete{Job: "j", Version: 1, ManifestHash: "sha256:01", Size: 1 << 30, Source: "a", Holder: "a", At: t0.Add(2 * time.Second)},
		state.ReplicaComplete{Job: "j", Version: 1, ManifestHash: "sha256:01", Size: 1 << 30, Source: "a", Holder: "b", At: t0.Add(3 * time.Second)},
		state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: "a", Announced: t0.Add(10 * time.Second), Deadline: t0.Add(40 * time.Second)}},
	)
	for i, c := range cmds {
		if res := applyEncoded(t, f, uint64(i+1), c); res != nil {
			t.Fatalf("%s: %v", c.Kind(), res)
		}
	}
	return f, uint64(len(cmds) + 1)
}

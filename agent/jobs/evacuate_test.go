package jobs

import (
	"testing"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// TestEvacuationsDue: a node sends what the leader's evacuation flows from
// it name (the job's freshest committed version, at the flow's rate), and
// nothing once the destination holds that version, for another node's
// flows, for other flow kinds, or for a finished job.
func TestHolderCopiesDue(t *testing.T) {
	t.Parallel()
	base := func() *state.State {
		st := &state.State{
			Jobs:        map[policy.JobID]state.JobRecord{},
			Checkpoints: map[policy.JobID][]state.Checkpoint{},
		}
		st.Jobs["j"] = state.JobRecord{Job: policy.Job{ID: "j", State: policy.JobRunning, Node: "a"}}
		st.Checkpoints["j"] = []state.Checkpoint{
			{Job: "j", Version: 1, Source: "a", Holders: []policy.NodeID{"a", "b", "c"}, Committed: true},
			{Job: "j", Version: 2, Source: "a", Holders: []policy.NodeID{"a", "b"}, Committed: true},
		}
		st.Decisions.Flows = []policy.FlowDecision{
			{ID: "ckpt/j", Job: "j", From: "a", To: "d", Class: policy.ClassPresync, Rate: 1e6},
			{ID: policy.EvacuationPrefix + "j", Job: "j", From: "b", To: "d", Class: policy.ClassPresync, Rate: 5e6},
		}
		return st
	}
	for _, tt := range []struct {
		name string
		edit func(st *state.State)
		self policy.NodeID
		want bool // v2 to d at 5e6
	}{
		{"the decided evacuation", func(*state.State) {}, "b", true},
		{"another node's flow", func(*state.State) {}, "c", false},
		{"the host's checkpoint flow is not one", func(*state.State) {}, "a", false},
		{"the standby holds it already", func(st *state.State) {
			st.Checkpoints["j"][1].Holders = []policy.NodeID{"a", "b", "d"}
		}, "b", false},
		{"finished job", func(st *state.State) {
			j := st.Jobs["j"]
			j.State = policy.JobDone
			st.Jobs["j"] = j
		}, "b", false},
	} {
		st := base()
		tt.edit(st)
		got := holderCopiesDue(st, tt.self)
		if !tt.want {
			if len(got) != 0 {
				t.Errorf("%s: evacuations %+v, want none", tt.name, got)
			}
			continue
		}
		if len(got) != 1 || got[0].cp.Version != 2 || got[0].to != "d" || got[0].rate != 5e6 {
			t.Errorf("%s: evacuations %+v, want v2 to d at 5e6 B/s", tt.name, got)
		}
	}
}

// TestReplicaCopiesDue: a holder of the freshest committed version sends
// it to the node the leader's replica flow from it names (the job's next
// holder, at the flow's rate), evacuations of the same node listed first;
// nothing once the target holds it or from a node the flow does not name.
func TestReplicaCopiesDue(t *testing.T) {
	t.Parallel()
	st := &state.State{
		Jobs: map[policy.JobID]state.JobRecord{"j": {Job: policy.Job{ID: "j", State: policy.JobRunning, Node: "a"}}, "k": {Job: policy.Job{ID: "k", State: policy.JobRunning, Node: "a"}}},
		Checkpoints: map[policy.JobID][]state.Checkpoint{
			"j": {{Job: "j", Version: 3, Source: "a", Holders: []policy.NodeID{"a", "b"}, Committed: true}},
			"k": {{Job: "k", Version: 1, Source: "a", Holders: []policy.NodeID{"a", "b"}, Committed: true}},
		},
	}
	st.Decisions.Flows = []policy.FlowDecision{
		{ID: policy.ReplicaPrefix + "j", Job: "j", From: "b", To: "s", Class: policy.ClassPresync, Rate: 2e6},
		{ID: policy.ReplicaPrefix + "k", Job: "k", From: "b", To: "c", Class: policy.ClassPresync, Rate: 3e6},
		{ID: policy.EvacuationPrefix + "k", Job: "k", From: "b", To: "d", Class: policy.ClassPresync, Rate: 4e6},
	}
	got := holderCopiesDue(st, "b")
	want := []holderCopy{
		{flow: policy.ReplicaPrefix + "j", to: "s", rate: 2e6},
		{flow: policy.EvacuationPrefix + "k", to: "d", rate: 4e6},
		{flow: policy.ReplicaPrefix + "k", to: "c", rate: 3e6},
	}
	if len(got) != len(want) {
		t.Fatalf("copies %+v, want %+v", got, want)
	}
	for i, w := range want {
		if g := got[i]; g.flow != w.flow || g.to != w.to || g.rate != w.rate {
			t.Errorf("copy %d: %+v, want %+v", i, g, w)
		}
	}
	if got[0].cp.Version != 3 {
		t.Errorf("copy of j: version %d, want the freshest committed, 3", got[0].cp.Version)
	}
	if got := holderCopiesDue(st, "a"); len(got) != 0 {
		t.Errorf("from the host: %+v, want none (the flows name b)", got)
	}
	st.Checkpoints["j"][0].Holders = []policy.NodeID{"a", "b", "s"}
	if got := holderCopiesDue(st, "b"); len(got) != 2 || got[0].flow == policy.ReplicaPrefix+"j" {
		t.Errorf("after s holds j's version: %+v, want only k's two", got)
	}
}

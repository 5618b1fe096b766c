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
func TestEvacuationsDue(t *testing.T) {
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
		got := evacuationsDue(st, tt.self)
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

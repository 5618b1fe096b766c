package agent

import (
	"testing"

	"github.com/reclaimnet/reclaimnet/agent/jobs"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// Each outgoing transfer gets the kernel ceiling of the decided flow it
// carries, found by the flow's ID: not another flow of the same job and
// class, not a flow the leader moved to another destination, none for a
// flow without room, and none at all with P3 off.
func TestFlowBindingsByFlowID(t *testing.T) {
	t.Parallel()
	st := state.New()
	st.Nodes["b"] = state.NodeRecord{ID: "b", TransferAddr: "10.0.0.2:7948"}
	st.Nodes["c"] = state.NodeRecord{ID: "c", TransferAddr: "10.0.0.3:7948"}
	st.Decisions.Flows = []policy.FlowDecision{
		{ID: policy.CheckpointPrefix + "j", Job: "j", From: "a", To: "b", Class: policy.ClassPresync, Rate: 1e6, Ceiling: 1.1e6},
		// The same job and class to the same node, another flow.
		{ID: policy.EvacuationPrefix + "j", Job: "j", From: "a", To: "b", Class: policy.ClassPresync, Rate: 7e6, Ceiling: 7.7e6},
		{ID: policy.HandoffPrefix + "j", Job: "j", From: "a", To: "c", Class: policy.ClassMigration, Rate: 5e6, Ceiling: 5.5e6},
		{ID: policy.RestorePrefix + "k", Job: "k", From: "a", To: "b", Class: policy.ClassMigration, Rate: 0},
	}
	transfers := []jobs.TransferView{
		{Job: "j", To: "b", Flow: policy.CheckpointPrefix + "j", Class: policy.ClassPresync, LocalPort: 4001},
		{Job: "j", To: "b", Flow: policy.HandoffPrefix + "j", Class: policy.ClassMigration, LocalPort: 4002}, // the flow now goes to c
		{Job: "k", To: "b", Flow: policy.RestorePrefix + "k", Class: policy.ClassMigration, LocalPort: 4003}, // no room
		{Job: "j", To: "b", Flow: policy.CheckpointPrefix + "j", Class: policy.ClassPresync, LocalPort: 4004, Done: true},
	}
	got := flowBindings(st, "a", transfers)
	if len(got) != 1 || got[0].LocalPort != 4001 || got[0].Decision.ID != policy.CheckpointPrefix+"j" || got[0].Decision.Rate != 1e6 ||
		got[0].Dst.String() != "10.0.0.2:7948" {
		t.Fatalf("bindings %+v: want one, port 4001 → 10.0.0.2:7948 with the pre-sync flow at 1e6", got)
	}
	off := state.DefaultProtocols()
	off.Switches.P3 = false
	st.Decisions.Protocols = &off
	if got := flowBindings(st, "a", transfers); len(got) != 0 {
		t.Fatalf("P3 off: bindings %+v, want none", got)
	}
}

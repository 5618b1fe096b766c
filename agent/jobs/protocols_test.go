package jobs

import (
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/transfer"
)

// TestP3OffTransfersUnpaced: with P3 switched off on the leader, the
// leader still shares the links among the flows (Rate > 0, no ceiling),
// but the real pre-sync transfers run unpaced (assigned rate 0), while the
// same cluster with P3 on paces them (TestPeriodicCheckpointsThenScheduled
// Handoff checks the decided rate).
func TestP3OffTransfersUnpaced(t *testing.T) {
	t.Parallel()
	tc := newClusterSwitches(t, []int{0, 1, 1}, fastSupervisor(), policy.Switches{P2: true})
	tc.waitVoters(3)
	tc.submitJob("train")
	host := tc.waitRunning("train", "")
	tc.waitCommitted("train", 2)

	st := tc.state()
	if p := st.Decisions.Protocols; p == nil || p.Switches != (policy.Switches{P2: true}) || p.FixedInterval != testInterval {
		t.Fatalf("recorded protocols %+v, want P2 only with fixed interval %v", p, testInterval)
	}
	var flow *policy.FlowDecision
	for i, f := range st.Decisions.Flows {
		if f.ID == checkpointFlow("train") {
			flow = &st.Decisions.Flows[i]
		}
	}
	if flow == nil || flow.Rate <= 0 || flow.Ceiling != 0 || flow.Burst != 0 {
		t.Fatalf("pre-sync flow %+v: want a max-min rate > 0 and no ceiling (P3 off)", flow)
	}
	var seen int
	wait.For(t, 20*time.Second, "a pre-sync transfer that started", func() bool {
		for _, v := range tc.nodes[host].mgr.View() {
			for _, tr := range v.Transfers {
				if tr.Class == policy.ClassPresync && tr.LocalPort != 0 {
					seen++
					if tr.AssignedRate != transfer.Unlimited {
						t.Fatalf("pre-sync transfer %+v: assigned rate %.0f B/s, want transfer.Unlimited (unpaced with P3 off)", tr, tr.AssignedRate)
					}
				}
			}
		}
		return seen > 0
	})
	// The rate function every transfer uses: the flow's rate with P3 on,
	// unlimited with it off, for the same decisions.
	on := st.Protocols()
	on.Switches.P3 = true
	st.Decisions.Protocols = &on
	if r, fl := flowRate(st, checkpointFlow("train"), flow.From, flow.To); fl == nil || r != flow.Rate {
		t.Errorf("P3 on: flow rate %v, want the decided %v", r, flow.Rate)
	}
	off := on
	off.Switches.P3 = false
	st.Decisions.Protocols = &off
	if r, _ := flowRate(st, checkpointFlow("train"), flow.From, flow.To); r != transfer.Unlimited {
		t.Errorf("P3 off: flow rate %v, want transfer.Unlimited", r)
	}
	if r := presyncRate(st, policy.JobDecision{Bandwidth: 5e6}, "nojob", "a", "b"); r != transfer.Unlimited {
		t.Errorf("P3 off without a flow: pre-sync rate %v, want transfer.Unlimited (not the job's b_i)", r)
	}
}

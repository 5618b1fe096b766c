package agent

import (
	"context"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/state"
)

// TestCheckpointingIsUnderWay: three real agents, a job checkpointing
// every second to its standby over QUIC. Every state the replicated log
// goes through is read: the job is "checkpointing" exactly while its
// newest version is stored on its node and on no other holder, and
// nothing is under way again once a holder off the node has it.
func TestCheckpointingIsUnderWay(t *testing.T) {
	c, _ := startJobCluster(t)
	script := c.writeScript("uw.sh", e2eStepJob)
	resp := call(t, c.nodes[0], localapi.Request{Op: localapi.OpRun, Job: &localapi.JobRequest{Name: "uw", Command: []string{"/bin/sh", script},
		GPUs: 1, LossBudget: time.Hour, SizeHint: 1 << 10}})
	if resp.Error != "" {
		t.Fatalf("run: %s (%s)", resp.Error, resp.Kind)
	}
	store := c.nodes[0].agent.Coordinator().Store()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var idx uint64
	checkpointing, committedAfter := 0, 0
	for checkpointing < 2 || committedAfter < 2 {
		var err error
		if idx, err = store.WaitAfter(ctx, idx); err != nil {
			t.Fatalf("after %d states with the job checkpointing and %d with a version committed after one: %v", checkpointing, committedAfter, err)
		}
		st := store.State()
		j, ok := st.Jobs["uw"]
		cps := st.Checkpoints["uw"]
		if !ok || len(cps) == 0 {
			continue
		}
		newest := cps[len(cps)-1]
		stored := newest.Source == j.Node && !newest.Committed && j.Standby != "" && j.Standby != j.Node &&
			!newest.Written.Before(j.RunningSince)
		switch got := st.UnderWay("uw"); {
		case got == state.UnderWayCheckpointing:
			if !stored {
				t.Fatalf("checkpointing with v%d (source %s, committed %v) on %s, standby %q", newest.Version, newest.Source, newest.Committed, j.Node, j.Standby)
			}
			checkpointing++
		case got == "" && j.StateName() == "running":
			if stored {
				t.Fatalf("nothing under way with v%d stored on %s only, standby %s", newest.Version, j.Node, j.Standby)
			}
			if checkpointing > 0 && newest.Committed {
				committedAfter++
			}
		}
	}
}

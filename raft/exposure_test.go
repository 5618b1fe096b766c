package raft

import (
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/state"

	"github.com/reclaimnet/reclaimnet/policy"
)

// TestExposure: the leader's estimate of the work a running job would lose
// if its host left now (policy.Job.Exposure), from the catalogue's write
// times, the job's last start and the gossiped progress of its push.
func TestExposure(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	version := func(v uint64, written time.Time, holders ...policy.NodeID) state.Checkpoint {
		return state.Checkpoint{Job: "j", Version: v, Source: "h", Holders: holders, Committed: len(holders) > 1, Written: written}
	}
	inFlight := map[string]state.FlowProgress{policy.CheckpointPrefix + "j": {ID: policy.CheckpointPrefix + "j", Remaining: 1 << 20}}
	landed := map[string]state.FlowProgress{policy.CheckpointPrefix + "j": {ID: policy.CheckpointPrefix + "j", Done: true}}
	for _, c := range []struct {
		name     string
		since    time.Time // the job's last start
		cps      []state.Checkpoint
		progress map[string]state.FlowProgress
		want     time.Duration
	}{
		{"copy on a live node", ago(time.Hour), []state.Checkpoint{version(4, ago(50*time.Minute), "h", "x"), version(5, ago(20*time.Minute), "h", "x")}, nil, 20 * time.Minute},
		{"freshest copy's holder left", ago(time.Hour), []state.Checkpoint{version(4, ago(50*time.Minute), "h", "x"), version(5, ago(20*time.Minute), "h", "y")}, nil, 50 * time.Minute},
		{"every other holder left", ago(time.Hour), []state.Checkpoint{version(5, ago(20*time.Minute), "h", "y")}, nil, 3 * time.Hour},
		{"only copy on the host, push in flight", ago(time.Hour), []state.Checkpoint{version(5, ago(20*time.Minute), "h", "y"), version(6, ago(30*time.Second), "h")}, inFlight, 30 * time.Second},
		{"only copy on the host, push landed (report not yet in)", ago(time.Hour), []state.Checkpoint{version(6, ago(30*time.Second), "h")}, landed, 3 * time.Hour},
		{"restarted after the copy was written", ago(2 * time.Minute), []state.Checkpoint{version(5, ago(40*time.Minute), "h", "x")}, nil, 2 * time.Minute},
		{"never checkpointed", ago(time.Hour), nil, nil, time.Hour},
		{"nothing known", time.Time{}, []state.Checkpoint{version(5, time.Time{}, "h", "x")}, nil, 0},
	} {
		st := state.New()
		st.Nodes["h"] = state.NodeRecord{State: state.NodeActive}
		st.Nodes["x"] = state.NodeRecord{State: state.NodeActive}
		st.Nodes["y"] = state.NodeRecord{State: state.NodeLeft}
		j := state.JobRecord{Job: policy.Job{ID: "j", State: policy.JobRunning, Node: "h"}, Submitted: ago(3 * time.Hour), RunningSince: c.since}
		st.Jobs["j"] = j
		st.Checkpoints["j"] = c.cps
		if got := exposure(st, j, c.progress, now); got != c.want {
			t.Errorf("%s: exposure %v, want %v", c.name, got, c.want)
		}
	}
}

// TestLeaderOrdersCheckpointWhenCopyIsGone: the leader's decision for a
// running job whose only copy off its host was on a node that left orders
// a checkpoint now (policy.RescueInterval); with that holder still up, or
// with the host's push of a newer version in flight, the job keeps P1's
// interval. Applied through the state machine, so the write and start
// times are the ones the commands record.
func TestLeaderOrdersCheckpointWhenCopyIsGone(t *testing.T) {
	at := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name     string
		left     bool
		pushing  bool
		checkNow bool
	}{
		{"holder up", false, false, false},
		{"holder left", true, false, true},
		{"holder left, newer version on its way", true, true, false},
	} {
		st := state.New()
		must := func(cmd state.Command) {
			t.Helper()
			if _, err := st.Apply(cmd); err != nil {
				t.Fatal(err)
			}
		}
		var tel fixedTelemetry
		for _, id := range []policy.NodeID{"h", "x", "y"} {
			acc := "acc-" + string(id)
			tel.nodes = append(tel.nodes, NodeTelemetry{ID: id, FreeGPUs: 4, AccessLink: acc})
			tel.links = append(tel.links, policy.Link{ID: acc, A: string(id), B: "sw-b", Capacity: 125e6, Available: 125e6, AvailableLow: 100e6})
			must(state.UpsertNode{Node: state.NodeRecord{ID: id, Building: "b", GPUs: 4, GPU: policy.GPU{Model: "A100", VRAM: 80 << 30, Capability: 8}, Joined: at.Add(-3 * time.Hour)}})
		}
		must(state.SubmitJob{Job: state.JobRecord{Job: policy.Job{ID: "j", GPUs: 1, CheckpointBytes: 1 << 30, LossBudget: 5 * time.Minute, Remaining: 10 * time.Hour},
			Spec: state.JobSpec{Command: []string{"x"}}, Submitted: at.Add(-2 * time.Hour)}})
		must(state.SetDecisions{Decisions: state.DecisionRecord{At: at.Add(-2 * time.Hour), Decisions: policy.Decisions{Placements: []policy.Placement{{Job: "j", To: "h"}}}}})
		must(state.ReplicaComplete{Job: "j", Version: 1, ManifestHash: "m1", Size: 1 << 30, Source: "h", Holder: "h", At: at.Add(-3 * time.Minute)})
		must(state.ReplicaComplete{Job: "j", Version: 1, ManifestHash: "m1", Size: 1 << 30, Source: "h", Holder: "x", At: at.Add(-2 * time.Minute)})
		if c.left {
			must(state.RecordDeparture{Departure: state.Departure{Node: "x", At: at.Add(-time.Minute), Kind: state.DepartureEmergency}})
			tel.nodes = tel.nodes[:0:0]
			for _, id := range []policy.NodeID{"h", "y"} {
				tel.nodes = append(tel.nodes, NodeTelemetry{ID: id, FreeGPUs: 4, AccessLink: "acc-" + string(id)})
			}
		}
		if c.pushing {
			must(state.ReplicaComplete{Job: "j", Version: 2, ManifestHash: "m2", Size: 1 << 30, Source: "h", Holder: "h", At: at.Add(-10 * time.Second)})
			tel.flows = []state.FlowProgress{{ID: policy.CheckpointPrefix + "j", Remaining: 1 << 29}}
		}
		d := decide(st, nil, nil, tel, nil, policy.DefaultParams(), at)
		var jd *policy.JobDecision
		for i := range d.Jobs {
			if d.Jobs[i].Job == "j" {
				jd = &d.Jobs[i]
			}
		}
		if jd == nil {
			t.Fatalf("%s: no decision for the job in %+v", c.name, d.Jobs)
		}
		if now := jd.Interval == policy.RescueInterval; now != c.checkNow || jd.Standby == "" || jd.Standby == "h" {
			t.Errorf("%s: decision %+v, want checkpoint now = %v, to a standby off the host", c.name, *jd, c.checkNow)
		}
	}
}

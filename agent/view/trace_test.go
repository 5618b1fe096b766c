package view

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/sim"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/trace"
)

// TestBuildTraceFromState: a state with a scheduled departure (notice
// kept), an emergency, a return, a restart without a departure (no
// return), a CPU-only node and jobs becomes a trace
// with exactly those events, which the simulator's reader accepts.
func TestBuildTraceFromState(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	f := state.New()
	apply := func(cmd state.Command) {
		t.Helper()
		if _, err := f.Apply(cmd); err != nil {
			t.Fatalf("%s: %v", cmd.Kind(), err)
		}
	}
	gpu := policy.GPU{Model: "A100", VRAM: 80e9, Capability: 8}
	apply(state.UpsertNode{Node: state.NodeRecord{ID: "a", Building: "north", GPU: gpu, GPUs: 4, Joined: t0}})
	apply(state.UpsertNode{Node: state.NodeRecord{ID: "b", Building: "south", GPU: gpu, GPUs: 2, Joined: t0}})
	apply(state.UpsertNode{Node: state.NodeRecord{ID: "cpu", Building: "north", Joined: t0}})
	apply(state.SubmitJob{Job: state.JobRecord{Job: policy.Job{ID: "j", GPUs: 2, VRAM: 40e9, Capability: 7, CheckpointBytes: 500e6,
		RestartTime: 30 * time.Second, LossBudget: 5 * time.Minute, Remaining: 2 * time.Hour, Copies: 3}, Spec: state.JobSpec{Command: []string{"x"}}, Submitted: t0.Add(time.Minute)}})
	apply(state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: "a", Announced: t0.Add(10 * time.Minute), Deadline: t0.Add(12 * time.Minute)}})
	apply(state.RecordDeparture{Departure: state.Departure{Node: "a", At: t0.Add(12 * time.Minute), Kind: state.DepartureScheduled}})
	apply(state.UpsertNode{Node: state.NodeRecord{ID: "a", Building: "north", GPU: gpu, GPUs: 4, Joined: t0.Add(20 * time.Minute)}})
	// b restarts without failure detection noticing (no departure): no return.
	apply(state.UpsertNode{Node: state.NodeRecord{ID: "b", Building: "south", GPU: gpu, GPUs: 2, Joined: t0.Add(25 * time.Minute)}})
	apply(state.RecordDeparture{Departure: state.Departure{Node: "b", At: t0.Add(30 * time.Minute), Kind: state.DepartureEmergency}})
	apply(state.RecordDeparture{Departure: state.Departure{Node: "cpu", At: t0.Add(31 * time.Minute), Kind: state.DepartureEmergency}})
	links := map[string]policy.Link{"access/a": {ID: "access/a", Capacity: 1.25e9}}
	samples := []bandwidthSample{{At: t0.Add(5 * time.Minute), Link: "access/b", Available: 50e6}, {At: t0, Link: "access/unknown", Available: 1}}
	now := t0.Add(time.Hour)
	tr := buildTrace(f, links, samples, "a", now)

	var buf strings.Builder
	if err := trace.Write(&buf, tr); err != nil {
		t.Fatal(err)
	}
	back, err := trace.Read(strings.NewReader(buf.String()), "trace.jsonl")
	if err != nil {
		t.Fatalf("read back: %v\n%s", err, buf.String())
	}
	if !back.Header.Start.Equal(t0) || back.Header.DurationS != 3600 {
		t.Errorf("header %+v: want start %v and 3600 s", back.Header, t0)
	}
	if len(back.Nodes) != 2 || back.Nodes[0].ID != "a" || back.Nodes[0].GPUs != 4 || back.Nodes[0].VRAMGB != 80 || back.Nodes[1].Building != "south" {
		t.Errorf("nodes %+v: want a (4 GPUs, 80 GB) and b (south); the CPU-only node left out", back.Nodes)
	}
	wantDeps := []trace.DepartureRec{
		{Kind: trace.KindDeparture, T: 720, Node: "a", Type: trace.Scheduled, NoticeS: 120},
		{Kind: trace.KindDeparture, T: 1800, Node: "b", Type: trace.Emergency},
	}
	if !slices.Equal(back.Departures, wantDeps) {
		t.Errorf("departures %+v, want %+v", back.Departures, wantDeps)
	}
	if len(back.Returns) != 1 || back.Returns[0] != (trace.ReturnRec{Kind: trace.KindReturn, T: 1200, Node: "a"}) {
		t.Errorf("returns %+v, want a back at 1200 s", back.Returns)
	}
	if len(back.Bandwidth) != 1 || back.Bandwidth[0].Link != "access/b" || back.Bandwidth[0].AvailableMbs != 400 || back.Bandwidth[0].T != 300 {
		t.Errorf("bandwidth %+v, want one sample of access/b, 400 Mbit/s at 300 s (unknown links dropped)", back.Bandwidth)
	}
	capOf := map[string]float64{}
	for _, l := range back.Links {
		capOf[l.ID] = l.CapacityMbs
	}
	if capOf["access/a"] != 10000 || capOf["access/b"] != 1000 || capOf["uplink/north"] != 10000 {
		t.Errorf("link capacities %v: want access/a as measured (10 Gbit/s), access/b and the uplinks at the defaults", capOf)
	}
	wantJob := trace.JobRec{Kind: trace.KindJob, T: 60, ID: "j", GPUs: 2, VRAMGB: 40, Capability: 7,
		WorkGPUh: 2 * (59.0/60 + 2), CheckpointMB: 500, RestartS: 30, LossBudgetS: 300, Replicas: 3}
	if len(back.Jobs) != 1 || !near(back.Jobs[0].WorkGPUh, wantJob.WorkGPUh) {
		t.Fatalf("jobs %+v, want %+v", back.Jobs, wantJob)
	}
	back.Jobs[0].WorkGPUh = wantJob.WorkGPUh
	if back.Jobs[0] != wantJob {
		t.Errorf("job %+v, want %+v", back.Jobs[0], wantJob)
	}
	if _, err := sim.RunPolicy(back, "reclaimnet", sim.DefaultOptions(), 1, sim.Tuning{}); err != nil {
		t.Errorf("simulate: %v", err)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

package agent

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/sim"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/trace"
	"github.com/reclaimnet/reclaimnet/web"
)

// TestEmergencyInHistoryAndTrace: after 'reclaim --now' the emergency is
// in every node's reclaim history (page and /v1/reclaims), with the
// owner's report (sent at once, or by the agent when it starts again if
// it led) and, for the job, where the cluster re-placed it, the replica it
// restored from and the work lost. The cluster's history then exports as
// a trace the simulator reads and replays.
func TestEmergencyInHistoryAndTrace(t *testing.T) {
	c, byName := startJobCluster(t)
	host, _ := startStepJob(t, c, byName, "emerg", e2eStepJob)
	hostCfg := host.agent.cfg
	wasLeader := host.agent.Coordinator().IsLeader()
	r := call(t, host, localapi.Request{Op: localapi.OpReclaimNow})
	if r.Error != "" || r.Reclaim == nil || r.Reclaim.Report == nil {
		t.Fatalf("reclaim-now: %+v", r)
	}
	announced := r.Reclaim.Report.Announced
	waitLeft(t, host, 20*time.Second)
	var survivor *testNode
	for _, n := range c.nodes {
		if n != host {
			survivor = n
			break
		}
	}
	entry := func() (web.ReclaimRecord, bool) {
		for _, h := range survivor.agent.webStatus(time.Now()).Reclaims.History {
			if h.Reclaim.Node == policy.NodeID(hostCfg.Name) {
				return h, true
			}
		}
		return web.ReclaimRecord{}, false
	}
	var rec web.ReclaimRecord
	waitUntil(t, 90*time.Second, "the emergency in the survivor's history with the job's recovery", func() bool {
		var ok bool
		rec, ok = entry()
		return ok && len(rec.Jobs) > 0 && rec.Jobs[0].To != ""
	})
	o := rec.Jobs[0]
	if !rec.Reclaim.Emergency() || o.Job != "emerg" || o.To == policy.NodeID(hostCfg.Name) || o.Replica == "" || o.Version < 1 || !o.Degraded || o.WorkLost <= 0 {
		t.Fatalf("history entry %+v: want an emergency with emerg re-placed off %s from a replica, with the work lost", rec, hostCfg.Name)
	}
	if !rec.OwnerReport {
		if !wasLeader {
			t.Errorf("the host did not lead, yet its owner's report did not reach the history: %+v", rec)
		}
		// The report waits in the host's report file: a restart sends it.
		rep, err := localapi.ReadReport(hostCfg.DataDir)
		if err != nil || rep == nil || rep.Replicated {
			t.Fatalf("report file %+v (%v): want an unreplicated report", rep, err)
		}
		hostCfg.Join = []string{survivor.info.GossipAddr}
		c.start(hostCfg)
		waitUntil(t, 60*time.Second, "the owner's report after the host's restart", func() bool {
			rec, _ = entry()
			return rec.OwnerReport
		})
	}
	if !rec.Reclaim.Announced.Equal(announced.UTC().Round(0)) || len(rec.Jobs) != 1 {
		t.Errorf("entry %+v: want the owner's announcement %v and the one job", rec, announced)
	}
	waitUntil(t, 20*time.Second, "the report file marked replicated", func() bool {
		rep, err := localapi.ReadReport(hostCfg.DataDir)
		return err == nil && rep != nil && rep.Replicated
	})

	// The same over HTTP (/v1/reclaims), as a monitoring client reads it.
	resp, err := http.Get("http://" + survivor.info.HTTPAddr + "/v1/reclaims")
	if err != nil {
		t.Fatal(err)
	}
	var body web.ReclaimsResponse
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(body.History, func(h web.ReclaimRecord) bool { return h.Reclaim.Node == policy.NodeID(hostCfg.Name) })
	if i < 0 || len(body.History[i].Jobs) != 1 || body.History[i].Jobs[0].Replica != o.Replica || !body.History[i].OwnerReport {
		t.Fatalf("/v1/reclaims history %+v: want %s's emergency with the replica %s and the owner's report", body.History, hostCfg.Name, o.Replica)
	}

	// Trace export: the departure, the nodes, the job and bandwidth
	// samples, read back by the simulator's reader and replayed.
	tr := exportTrace(t, survivor)
	d := slices.IndexFunc(tr.Departures, func(d trace.DepartureRec) bool { return d.Node == hostCfg.Name })
	if d < 0 || tr.Departures[d].Type != trace.Emergency || tr.Departures[d].NoticeS != 0 {
		t.Fatalf("trace departures %+v: want %s's emergency", tr.Departures, hostCfg.Name)
	}
	if len(tr.Nodes) != 3 || len(tr.Bandwidth) == 0 {
		t.Fatalf("trace: %d nodes, %d bandwidth samples; want 3 GPU nodes and samples", len(tr.Nodes), len(tr.Bandwidth))
	}
	j := slices.IndexFunc(tr.Jobs, func(j trace.JobRec) bool { return j.ID == "emerg" })
	if j < 0 || tr.Jobs[j].GPUs != 1 || tr.Jobs[j].WorkGPUh <= 0 || tr.Jobs[j].LossBudgetS != 3600 {
		t.Fatalf("trace jobs %+v: want emerg with 1 GPU, its work and its 1 h loss budget", tr.Jobs)
	}
	res, err := sim.RunPolicy(tr, "reclaimnet", sim.DefaultOptions(), 1, sim.Tuning{})
	if err != nil {
		t.Fatalf("simulate the exported trace: %v", err)
	}
	t.Logf("replayed the exported trace: %+v", res)
}

// exportTrace asks n for the trace over the control socket (what
// 'reclaimnet trace export' does) and over HTTP, checks both are the same
// bytes apart from the moment, and reads it with the simulator's reader.
func exportTrace(t *testing.T, n *testNode) *trace.Trace {
	t.Helper()
	r := call(t, n, localapi.Request{Op: localapi.OpTraceExport})
	if r.Error != "" || r.Trace == "" {
		t.Fatalf("trace-export: %+v", r)
	}
	tr, err := trace.Read(strings.NewReader(r.Trace), "export")
	if err != nil {
		t.Fatalf("the exported trace does not read back: %v\n%s", err, r.Trace)
	}
	resp, err := http.Get("http://" + n.info.HTTPAddr + "/v1/trace")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/trace: %d %s", resp.StatusCode, b)
	}
	if _, err := trace.Read(strings.NewReader(string(b)), "http"); err != nil {
		t.Fatalf("GET /v1/trace does not read back: %v", err)
	}
	return tr
}

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
		RestartTime: 30 * time.Second, LossBudget: 5 * time.Minute, Remaining: 2 * time.Hour}, Spec: state.JobSpec{Command: []string{"x"}}, Submitted: t0.Add(time.Minute)}})
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
		WorkGPUh: 2 * (59.0/60 + 2), CheckpointMB: 500, RestartS: 30, LossBudgetS: 300}
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

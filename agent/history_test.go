package agent

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/sim"
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
		for _, h := range survivor.agent.view.Web(time.Now()).Reclaims.History {
			if h.Reclaim.Node == policy.NodeID(hostCfg.Name) {
				return h, true
			}
		}
		return web.ReclaimRecord{}, false
	}
	var rec web.ReclaimRecord
	wait.For(t, 90*time.Second, "the emergency in the survivor's history with the job's recovery", func() bool {
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
		wait.For(t, 60*time.Second, "the owner's report after the host's restart", func() bool {
			rec, _ = entry()
			return rec.OwnerReport
		})
	}
	if !rec.Reclaim.Announced.Equal(announced.UTC().Round(0)) || len(rec.Jobs) != 1 {
		t.Errorf("entry %+v: want the owner's announcement %v and the one job", rec, announced)
	}
	wait.For(t, 20*time.Second, "the report file marked replicated", func() bool {
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

	// The job's story ('reclaimnet jobs emerg') tells the same recovery with
	// the page's downtime, limit and breakdown once the job runs again.
	var mv localapi.JobMove
	wait.For(t, 60*time.Second, "the recovery's downtime in the job's story", func() bool {
		s := call(t, survivor, localapi.Request{Op: localapi.OpJob, JobID: "emerg"}).Story
		for _, m := range s.Moves {
			if m.From == hostCfg.Name && m.Downtime > 0 {
				mv = m
				return true
			}
		}
		return false
	})
	t.Logf("story: %s → %s down %v, limit %v (detection %v, placement %v, restore %v, start %v)",
		mv.From, mv.To, mv.Downtime, mv.Limit, mv.Detection, mv.Placement, mv.Restore, mv.Start)
	rec, _ = entry()
	row := rec.Jobs[0]
	if !mv.Emergency || mv.HandedOff || mv.To != string(row.To) || mv.Replica != string(row.Replica) || mv.Version != row.Version ||
		mv.Downtime != row.Downtime || mv.Limit != row.DowntimeLimit || mv.Detection != row.Detection || mv.Placement != row.Placement ||
		mv.Restore != row.Restore || mv.Start != row.Start || mv.Start <= 0 || mv.Detection+mv.Placement+mv.Restore+mv.Start > mv.Downtime {
		t.Errorf("story's move %+v; the page's row %+v: want the same emergency recovery, downtime and breakdown", mv, row)
	}
	// A recovery's limit counts its failure-detection time (design P3.8d),
	// whenever the owner's report that dates the departure arrives.
	if mv.Limit < mv.Detection {
		t.Errorf("story's move: limit %v below its detection time %v", mv.Limit, mv.Detection)
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

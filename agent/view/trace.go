package view

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/trace"
)

// Defaults for what the cluster does not know about a node or job: a node
// without a building is put in traceBuilding; a job that never reported
// its checkpoint size gets traceCheckpointMB.
const (
	traceBuilding     = "campus"
	traceCheckpointMB = 1.0
)

// Trace returns the cluster's history as a trace (trace/README.md): the
// nodes with GPUs and their links, departures (scheduled with their
// notice, emergency), returns, this node's bandwidth samples and the jobs.
func (v *View) Trace(now time.Time) *trace.Trace {
	links, samples := v.bandwidth.snapshot()
	return buildTrace(v.cfg.Coord.State(), links, samples, v.cfg.Node, now)
}

// TraceDocument is the trace in JSON Lines.
func (v *View) TraceDocument(now time.Time) ([]byte, error) {
	tr := v.Trace(now)
	var b bytes.Buffer
	if err := trace.Write(&b, tr); err != nil {
		return nil, fmt.Errorf("trace export: %w", err)
	}
	return b.Bytes(), nil
}

// buildTrace turns the replicated state and the bandwidth history into a
// trace. Where the state keeps less than the format asks, it says so:
//   - nodes without GPUs are left out (the simulator places GPU jobs
//     only), with their departures and returns;
//   - returns are the node's membership stretches after its first
//     (raft keeps the last 32 per node), departures the departure log
//     (the last 16384);
//   - a scheduled departure's notice comes from the log (Departure.Notice)
//     or the reclaim history; where neither has it (entries older than
//     this version) the departure is written as scheduled with a 1 s
//     notice;
//   - a job's work is an estimate: GPUs × (time since submission, up to
//     its last committed checkpoint once it is done, plus the remaining
//     time it last reported);
//   - bandwidth samples are what this node saw since it started (bounded,
//     see bandwidthHistory); links never sampled keep their capacity.
func buildTrace(st *state.State, links map[string]policy.Link, samples []bandwidthSample, source string, now time.Time) *trace.Trace {
	tr := &trace.Trace{}
	// t = 0 is the earliest thing known.
	start := now
	early := func(t time.Time) {
		if !t.IsZero() && t.Before(start) {
			start = t
		}
	}
	for _, n := range st.Nodes {
		early(n.Joined)
		for _, s := range n.Stretches {
			early(s.From)
		}
	}
	for _, d := range st.Departures {
		early(d.At.Add(-d.Notice))
	}
	for _, j := range st.Jobs {
		early(j.Submitted)
	}
	for _, s := range samples {
		early(s.At)
	}
	for _, r := range st.ReclaimReports {
		early(r.Announced)
	}
	at := func(t time.Time) float64 { return max(t.Sub(start).Seconds(), 0) }
	tr.Header = trace.Header{Start: start.UTC(), DurationS: max(now.Sub(start).Seconds(), 1),
		Name: "reclaimnet history", Source: "reclaimnet trace export from " + source}

	ids := make([]policy.NodeID, 0, len(st.Nodes))
	for id := range st.Nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	exported := map[policy.NodeID]bool{}
	buildings := map[string]bool{}
	for _, id := range ids {
		n := st.Nodes[id]
		if n.GPUs <= 0 || n.GPU.VRAM <= 0 {
			continue
		}
		exported[id] = true
		b := n.Building
		if b == "" {
			b = traceBuilding
		}
		buildings[b] = true
		model := n.GPU.Model
		if model == "" {
			model = "unknown"
		}
		first := time.Time{}
		if len(n.Stretches) > 0 {
			first = n.Stretches[0].From
		}
		tr.Nodes = append(tr.Nodes, trace.NodeRec{ID: string(id), Building: b, GPUModel: model, GPUs: n.GPUs,
			VRAMGB: float64(n.GPU.VRAM) / 1e9, Capability: n.GPU.Capability, AccessLink: accessLinkID(string(id)),
			Absent: !first.IsZero() && first.After(start)})
		link := links[accessLinkID(string(id))]
		tr.Links = append(tr.Links, trace.LinkRec{ID: accessLinkID(string(id)), A: string(id), B: "sw-" + b,
			CapacityMbs: mbps(orDefault(link.Capacity, DefaultAccessCapacity))})
		for k, s := range n.Stretches {
			// A return follows a departure in the log (a restart that
			// failure detection never saw is no return), or brings in a
			// node absent at t = 0.
			if (k == 0 && tr.Nodes[len(tr.Nodes)-1].Absent) || (k > 0 && departedBetween(st, id, n.Stretches[k-1].From, s.From)) {
				tr.Returns = append(tr.Returns, trace.ReturnRec{T: at(s.From), Node: string(id)})
			}
		}
	}
	for _, b := range sortedKeys(buildings) {
		link := links["uplink/"+b]
		tr.Links = append(tr.Links, trace.LinkRec{ID: "uplink/" + b, A: "sw-" + b, B: "core",
			CapacityMbs: mbps(orDefault(link.Capacity, DefaultUplinkCapacity))})
	}
	declared := map[string]bool{}
	for _, l := range tr.Links {
		declared[l.ID] = true
	}

	for _, d := range st.Departures {
		if !exported[d.Node] {
			continue
		}
		rec := trace.DepartureRec{T: at(d.At), Node: string(d.Node), Type: trace.Emergency}
		if d.Kind == state.DepartureScheduled {
			rec.Type = trace.Scheduled
			notice := d.Notice
			if notice <= 0 {
				notice = historyNotice(st, d)
			}
			rec.NoticeS = max(notice.Seconds(), 1)
		}
		tr.Departures = append(tr.Departures, rec)
	}
	for _, s := range samples {
		if declared[s.Link] {
			tr.Bandwidth = append(tr.Bandwidth, trace.BandwidthRec{T: at(s.At), Link: s.Link, AvailableMbs: max(mbps(s.Available), 0)})
		}
	}

	jobs := make([]state.JobRecord, 0, len(st.Jobs))
	for _, j := range st.Jobs {
		jobs = append(jobs, j)
	}
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].ID < jobs[b].ID })
	for _, j := range jobs {
		if j.GPUs <= 0 {
			continue
		}
		end := now
		if j.State == policy.JobDone {
			end = j.Submitted
			if cp, ok := st.FreshestCommitted(j.ID); ok && cp.CommittedAt.After(end) {
				end = cp.CommittedAt
			}
		}
		work := max(end.Sub(j.Submitted), 0) + j.Remaining
		ckptMB := float64(j.CheckpointBytes) / 1e6
		if ckptMB <= 0 {
			ckptMB = traceCheckpointMB
		}
		tr.Jobs = append(tr.Jobs, trace.JobRec{T: at(j.Submitted), ID: string(j.ID), GPUs: j.GPUs,
			VRAMGB: float64(j.VRAM) / 1e9, Capability: j.Capability,
			WorkGPUh:     max(float64(j.GPUs)*work.Hours(), 1.0/3600),
			CheckpointMB: ckptMB, RestartS: j.RestartTime.Seconds(), LossBudgetS: j.LossBudget.Seconds(), Replicas: j.Copies})
	}
	return tr
}

// departedBetween reports whether the log holds a departure of node in
// (from, to].
func departedBetween(st *state.State, node policy.NodeID, from, to time.Time) bool {
	for _, d := range st.Departures {
		if d.Node == node && d.At.After(from) && !d.At.After(to) {
			return true
		}
	}
	return false
}

// historyNotice is a scheduled departure's notice from the reclaim
// history (0 when the history has no entry for it).
func historyNotice(st *state.State, d state.Departure) time.Duration {
	for _, r := range st.ReclaimReports {
		if r.Node == d.Node && r.Kind == state.DepartureScheduled && !r.Deadline.Before(d.At.Add(-time.Second)) &&
			!r.Announced.After(d.At) {
			return r.Deadline.Sub(r.Announced)
		}
	}
	return 0
}

func mbps(bytesPerSecond float64) float64 { return bytesPerSecond * 8 / 1e6 }

func orDefault(v, def float64) float64 {
	if v > 0 {
		return v
	}
	return def
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ServeTrace is GET /v1/trace: the trace export over HTTP (read-only,
// JSON Lines).
func (v *View) ServeTrace(w http.ResponseWriter, r *http.Request) {
	doc, err := v.TraceDocument(time.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/jsonl")
	w.Header().Set("Content-Disposition", `attachment; filename="trace.jsonl"`)
	_, _ = w.Write(doc)
}

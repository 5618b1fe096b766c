package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/trace"
)

// unratedRestore is a test controller with enforcement on that
// checkpoints its job to b, and after the emergency restores it from b to
// c without assigning the restore a rate.
type unratedRestore struct{}

func (unratedRestore) Name() string   { return "unrated restore" }
func (unratedRestore) Enforced() bool { return true }
func (unratedRestore) Control(w *World, now time.Time) Plan {
	var p Plan
	for _, j := range w.jobs {
		switch {
		case !j.started || j.state == policy.JobDone:
		case j.node >= 0:
			p.Jobs = append(p.Jobs, policy.JobDecision{Job: j.id, Interval: 10 * time.Minute, Standby: "b", Bandwidth: 10e6})
		case j.state == policy.JobPending:
			p.Placements = append(p.Placements, policy.Placement{Job: j.id, To: "a"})
		default:
			p.Placements = append(p.Placements, policy.Placement{Job: j.id, To: "c", From: "b", Recovery: true})
		}
	}
	return p
}

// TestEnforcedTransferWithoutRateIsPaced: under enforcement a transfer the
// plan gave no rate runs within what its path leaves to migration, so the
// research traffic (800 of each 1000 Mbit/s access link) is not squeezed:
// the restore goes at 200 Mbit/s, not 1 Gbit/s. A greedy restore (the old
// engine) squeezes research traffic while it runs and the test reads a
// degradation above 0 (0.47 % over the run).
func TestEnforcedTransferWithoutRateIsPaced(t *testing.T) {
	trace := `{"kind":"header","format":"reclaimnet-trace","version":1,"start":"2026-01-05T00:00:00Z","duration_s":14400,"name":"pacing"}
` + oneBuilding("a", "b", "c") + `{"kind":"bandwidth","t":0,"link":"acc-a","available_mbps":200}
{"kind":"bandwidth","t":0,"link":"acc-b","available_mbps":200}
{"kind":"bandwidth","t":0,"link":"acc-c","available_mbps":200}
{"kind":"job","t":0,"id":"j1","gpus":1,"vram_gb":16,"capability":7,"work_gpu_h":3,"checkpoint_mb":3200,"restart_s":60,"loss_budget_s":900}
{"kind":"departure","t":3000,"node":"a","type":"emergency","notice_s":0}
`
	e, err := NewEngine(parseTrace(t, trace, "pacing.jsonl"), unratedRestore{}, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	r := e.Run()
	if r.Breakdown.Emergencies != 1 || r.WorkLossGPUh <= 0 || r.WorkLossGPUh > 0.2 {
		t.Fatalf("emergencies %d, loss %.3f GPU-h: want one emergency recovered from b's copy (≤ 10 min lost)", r.Breakdown.Emergencies, r.WorkLossGPUh)
	}
	if r.DegradationPct > 1e-6 {
		t.Errorf("research degradation %.2f %%, want 0: the unrated restore was not paced within the migration room", r.DegradationPct)
	}
}

// TestLinksAreFullDuplex: a link's capacity is per direction (trace/README.md),
// as the policy budgets it: two transfers in opposite directions over the
// same links each get their assigned rate, while two in the same
// direction share it.
func TestLinksAreFullDuplex(t *testing.T) {
	e := twoNodeEngine(t)
	j := e.w.jobs[0]
	ab := e.newFlow(flowCheckpoint, j, 0, 1, 1e9)
	ba := e.newFlow(flowCheckpoint, j, 1, 0, 1e9)
	ab2 := e.newFlow(flowCheckpoint, j, 0, 1, 1e9)
	ab.rateCap, ba.rateCap, ab2.rateCap = 100e6, 100e6, 100e6
	e.allocate()
	const link = 1000e6 / 8
	if ba.rate < 100e6*(1-1e-9) {
		t.Errorf("b→a got %.0f B/s, want its 100e6: the opposite direction is not shared", ba.rate)
	}
	if sum := ab.rate + ab2.rate; sum > link*(1+1e-9) || sum < link*(1-1e-9) {
		t.Errorf("a→b flows got %.0f B/s together, want the link's %.0f", sum, link)
	}
}

// TestPacedFlowsYieldToResearch: a paced transfer is a congestion-
// controlled QUIC stream under a rate cap (the agent's pacer and BPF
// ceiling bound it from above; quic-go's congestion control still backs
// off), so on a link whose research traffic outgrew the last sample it
// gets no more than its TCP-fair share against the research aggregate,
// while a rate below that share is kept whole. A pacer that held its rate
// regardless would give the first flow all 400
// Mbit/s and research only 600 of its 900.
func TestPacedFlowsYieldToResearch(t *testing.T) {
	e := twoNodeEngine(t)
	const mbps = 1e6 / 8 // bytes/s
	for _, l := range e.w.links {
		l.avail = 100 * mbps // research wants 900 of 1000 Mbit/s
	}
	j := e.w.jobs[0]
	for _, tt := range []struct{ paced, want float64 }{
		{400 * mbps, 1000 * mbps / (1 + researchWeight)}, // capped by the fair share
		{100 * mbps, 100 * mbps},                         // below it: kept
	} {
		f := e.newFlow(flowCheckpoint, j, 0, 1, 1e9)
		f.rateCap = tt.paced
		e.allocate()
		if f.rate > tt.want*(1+1e-9) || f.rate < tt.want*(1-1e-9) {
			t.Errorf("paced at %.0f Mbit/s: got %.1f Mbit/s, want %.1f", tt.paced/mbps, f.rate/mbps, tt.want/mbps)
		}
		l := e.w.links[0]
		if got, want := l.research[0], 1000*mbps-f.rate; got < want*(1-1e-9) {
			t.Errorf("paced at %.0f Mbit/s: research got %.1f Mbit/s, want the other %.1f", tt.paced/mbps, got/mbps, want/mbps)
		}
		e.dropFlow(f, false)
	}
}

// parseTrace reads a trace written out in a test, failing the test on
// any error.
func parseTrace(t *testing.T, text, name string) *trace.Trace {
	t.Helper()
	tr, err := trace.Read(strings.NewReader(text), name)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// newTestEngine returns an engine replaying tr under the named policy
// with the default options and seed 1, failing the test on any error.
func newTestEngine(t *testing.T, policyName string, tr *trace.Trace) *Engine {
	t.Helper()
	ctrl, err := NewController(policyName, tr, DefaultOptions(), 1, Tuning{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(tr, ctrl, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// oneBuilding returns trace lines for one 1-GPU RTX 3090 node per id in
// building b1, each behind its own 1 Gbit/s access link acc-<id>: nodes
// first, then links.
func oneBuilding(ids ...string) string {
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, `{"kind":"node","id":%q,"building":"b1","gpu_model":"RTX3090","gpus":1,"vram_gb":24,"capability":8.6,"access_link":"acc-%s"}`+"\n", id, id)
	}
	for _, id := range ids {
		fmt.Fprintf(&b, `{"kind":"link","id":"acc-%s","a":%q,"b":"sw-b1","capacity_mbps":1000}`+"\n", id, id)
	}
	return b.String()
}

// twoNodeEngine is an engine (enforced, unratedRestore) on a one-hour
// trace of two nodes a and b behind 1 Gbit/s access links and one job,
// for tests that place flows by hand.
func twoNodeEngine(t *testing.T) *Engine {
	t.Helper()
	trace := `{"kind":"header","format":"reclaimnet-trace","version":1,"start":"2026-01-05T00:00:00Z","duration_s":3600,"name":"two-nodes"}
` + oneBuilding("a", "b") + `{"kind":"job","t":0,"id":"j1","gpus":1,"vram_gb":16,"capability":7,"work_gpu_h":1,"checkpoint_mb":3200,"restart_s":60,"loss_budget_s":300}
`
	e, err := NewEngine(parseTrace(t, trace, "two-nodes.jsonl"), unratedRestore{}, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

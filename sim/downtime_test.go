package sim

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// downtimeTrace: job j1 (400 MB checkpoint, Tr 10 s) runs on a and
// checkpoints to b; a leaves at 3000 s with a 120 s notice. The path leaves
// migration 700 Mbit/s (820 available, 30 % of 1000 reserved), so the
// final checkpoint needs about 5 s; at r_min = C/(τ − Tr) it would take 110.
const downtimeTrace = `{"kind":"header","format":"reclaimnet-trace","version":1,"start":"2026-01-05T03:00:00Z","duration_s":7200,"name":"downtime"}
{"kind":"node","id":"a","building":"b1","gpu_model":"A6000","gpus":2,"vram_gb":48,"capability":8.6,"access_link":"acc-a"}
{"kind":"node","id":"b","building":"b1","gpu_model":"A6000","gpus":2,"vram_gb":48,"capability":8.6,"access_link":"acc-b"}
{"kind":"link","id":"acc-a","a":"a","b":"sw-b1","capacity_mbps":1000}
{"kind":"link","id":"acc-b","a":"b","b":"sw-b1","capacity_mbps":1000}
{"kind":"bandwidth","t":0,"link":"acc-a","available_mbps":820}
{"kind":"bandwidth","t":0,"link":"acc-b","available_mbps":820}
{"kind":"job","t":0,"id":"j1","gpus":2,"vram_gb":40,"capability":8,"work_gpu_h":3,"checkpoint_mb":400,"restart_s":10,"loss_budget_s":300}
{"kind":"departure","t":3000,"node":"a","type":"scheduled","notice_s":120}
`

// TestHandoffDowntimeAtItsLimit: with P3 on, the job computes on a until
// its final checkpoint's latest safe start and the final transfer gets the
// path's migration share, so the hand-off's downtime is within 1.3× its
// limit (docs/design.md P3.8) and far under the notice, with no work lost.
func TestHandoffDowntimeAtItsLimit(t *testing.T) {
	tr := parseTrace(t, downtimeTrace, "downtime.jsonl")
	r, err := RunPolicy(tr, "reclaimnet", DefaultOptions(), 1, Tuning{})
	if err != nil {
		t.Fatal(err)
	}
	h := r.HandoffDowntime
	t.Logf("downtime %.2f s, limit %.2f s, ratio %.2f", h.MaxS, h.MedianLimitS, h.MaxRatio)
	if r.Breakdown.Handoffs != 1 || r.WorkLossGPUh != 0 || h.Count != 1 {
		t.Fatalf("%d hand-offs (%d measured), loss %.3f GPU-h: want one zero-loss hand-off", r.Breakdown.Handoffs, h.Count, r.WorkLossGPUh)
	}
	if h.MaxRatio > 1.3 || h.MaxS > 60 {
		t.Errorf("downtime %.1f s against a limit of %.1f s (ratio %.2f): want ≤ 1.3× and under half the 120-s notice", h.MaxS, h.MedianLimitS, h.MaxRatio)
	}
	if len(r.Downtimes) != 1 || r.Downtimes[0] != h.MaxS {
		t.Errorf("the run's downtimes %v, want only the hand-off's %.1f s", r.Downtimes, h.MaxS)
	}
	// P3 off: the final transfer is not paced (it shares the path
	// TCP-fair); the same ratio is reported for it.
	off, err := RunPolicy(tr, "p1p2", DefaultOptions(), 1, Tuning{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("P3 off: downtime %.2f s, limit %.2f s, ratio %.2f", off.HandoffDowntime.MaxS, off.HandoffDowntime.MedianLimitS, off.HandoffDowntime.MaxRatio)
	if off.HandoffDowntime.Count != 1 {
		t.Errorf("P3 off: %d hand-offs measured, want 1", off.HandoffDowntime.Count)
	}
}

// runDowntime replays the downtime trace, with extra lines before its
// departure, through ReclaimNet and returns the engine after the run.
func runDowntime(t *testing.T, extra string) *Engine {
	t.Helper()
	text := strings.Replace(downtimeTrace, `{"kind":"departure"`, extra+`{"kind":"departure"`, 1)
	tr := parseTrace(t, text, "downtime.jsonl")
	e := newTestEngine(t, "reclaimnet", tr)
	e.Run()
	if len(e.m.handoffDown) != 1 {
		t.Fatalf("%d hand-offs measured, want 1", len(e.m.handoffDown))
	}
	return e
}

// TestHandoffLimitFollowsPathRoom: when b's access link loses bandwidth
// halfway through the final transfer (820 → 150 Mbit/s available), the
// hand-off's limit is the time its 400 MB need at the path's migration
// room as it was (700 Mbit/s, then 150), found by stepping through it,
// plus Tr and one control period, not the time at the room it started
// with (docs/design.md P3.8d).
func TestHandoffLimitFollowsPathRoom(t *testing.T) {
	const mbps = 1e6 / 8
	calm := runDowntime(t, "")
	start, tr := calm.w.jobs[0].stopAt, calm.w.jobs[0].restartS
	transfer := calm.m.handoffDown[0] - tr
	drop := start + transfer/2
	if startLimit := 400e6/(700*mbps) + tr + 1; math.Abs(calm.m.handoffLimit[0]-startLimit) > 1e-6 {
		t.Errorf("steady path: limit %.4f s, want %.4f (400 MB at 700 Mbit/s + Tr + 1 s)", calm.m.handoffLimit[0], startLimit)
	}
	e := runDowntime(t, fmt.Sprintf(`{"kind":"bandwidth","t":%.6f,"link":"acc-b","available_mbps":150}`+"\n", drop))
	if got := e.w.jobs[0].stopAt; got != start {
		t.Fatalf("the final checkpoint started at %.3f s with the drop, %.3f without: the drop must come after it", got, start)
	}
	down := e.m.handoffDown[0]
	if down-tr <= drop-start {
		t.Fatalf("the transfer took %.2f s, ended before the drop %.2f s after its start", down-tr, drop-start)
	}
	want := bruteNeed([]float64{start, drop}, []float64{700 * mbps, 150 * mbps}, start+down-tr, 400e6) + tr + 1
	got := e.m.handoffLimit[0]
	t.Logf("start %.2f s, drop after %.2f s: downtime %.2f s (%.2f on a steady path), limit %.2f s, stepped %.2f s, at the start's room %.2f s",
		start, drop-start, down, calm.m.handoffDown[0], got, want, calm.m.handoffLimit[0])
	if math.Abs(got-want) > 0.01 {
		t.Errorf("limit %.3f s, want %.3f s (the bytes at the room as it was + Tr + 1 s)", got, want)
	}
	if want < calm.m.handoffLimit[0]+1 {
		t.Errorf("the drop adds %.2f s to the limit: the test needs it to matter", want-calm.m.handoffLimit[0])
	}
}

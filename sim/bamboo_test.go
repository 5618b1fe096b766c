package sim

import (
	"testing"
	"time"
)

// TestBambooRefreshesWhenItsPeerLeaves: the job on a refreshes to b every
// 20 minutes; b leaves at 30 min, a at 35 min. B1 restores its redundancy
// at once when b leaves (to c), so a's departure costs the 5 minutes since
// then; waiting for the next refresh (at 40 min) would leave no copy at
// all, and the job would start over (35 minutes lost).
func TestBambooRefreshesWhenItsPeerLeaves(t *testing.T) {
	trace := `{"kind":"header","format":"reclaimnet-trace","version":1,"start":"2026-01-05T00:00:00Z","duration_s":36000,"name":"peer-leaves"}
` + oneBuilding("a", "b", "c") + `{"kind":"job","t":0,"id":"j1","gpus":1,"vram_gb":16,"capability":7,"work_gpu_h":2,"checkpoint_mb":1000,"restart_s":60,"loss_budget_s":300}
{"kind":"departure","t":1800,"node":"b","type":"emergency","notice_s":0}
{"kind":"departure","t":2100,"node":"a","type":"emergency","notice_s":0}
`
	tr := parseTrace(t, trace, "peer-leaves.jsonl")
	r, err := RunPolicy(tr, "b1", DefaultOptions(), 1, Tuning{BambooRefresh: 20 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if r.Interruptions != 1 || r.CompletedJobs != 1 {
		t.Fatalf("interruptions %d, completed %d; want the one job interrupted once and done", r.Interruptions, r.CompletedJobs)
	}
	// 300 s since the refresh at b's departure, plus its 8-s transfer and
	// the controller's reaction; starting over would lose 2,100 s.
	if lost := r.WorkLossGPUh * 3600; lost < 250 || lost > 600 {
		t.Errorf("lost %.0f GPU-s at a's departure, want about 300 (a refresh to c when b left)", lost)
	}
}

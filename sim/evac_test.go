package sim

import "testing"

// TestEvacuationSavesTheOnlyCopy: job j1 on a checkpoints 48 GB to b (its
// standby) every two hours or so; b's owner reclaims it with 20 min of
// notice, and just after b left, a fails without notice. The only copy
// off a was on b: ReclaimNet's evacuation (policy.Tick sends it to another
// standby before b leaves, the engine carries it out as the agent does,
// and the next periods keep it going although, not knowing its progress,
// they could no longer admit it from scratch) lets j1 resume from it;
// without it j1 starts over and loses the 2.7 GPU-h it had done.
func TestEvacuationSavesTheOnlyCopy(t *testing.T) {
	trace := `{"kind":"header","format":"reclaimnet-trace","version":1,"start":"2026-01-05T00:00:00Z","duration_s":36000,"name":"evacuation"}
` + oneBuilding("a", "b", "c", "d") + `{"kind":"job","t":0,"id":"j1","gpus":1,"vram_gb":16,"capability":7,"work_gpu_h":8,"checkpoint_mb":48000,"restart_s":60,"loss_budget_s":3600}
{"kind":"departure","t":9600,"node":"b","type":"scheduled","notice_s":1200}
{"kind":"departure","t":9650,"node":"a","type":"emergency","notice_s":0}
`
	tr := parseTrace(t, trace, "evacuation.jsonl")
	r, err := RunPolicy(tr, "reclaimnet", DefaultOptions(), 1, Tuning{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Breakdown.Emergencies != 1 {
		t.Fatalf("emergencies %d, want a's", r.Breakdown.Emergencies)
	}
	// Started over, j1 loses everything since its start at 60 s: 2.66
	// GPU-h. Resumed from the evacuated copy (its first checkpoint, taken
	// early, at 10 min of work, or a later one), at least 0.16 GPU-h less.
	if r.WorkLossGPUh > (9650-60-600)/3600.0 {
		t.Errorf("work loss %.2f GPU-h: j1 did not resume from the evacuated copy", r.WorkLossGPUh)
	}
}

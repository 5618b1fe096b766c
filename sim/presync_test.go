package sim

import (
	"math"
	"testing"
)

// presyncTrace: job j1 (4 GB checkpoint, Tr 30 s, loss budget 5 min) runs
// on a; b joins at 10 s and becomes its standby; a leaves at 3000 s with a
// 60 s notice. Moving the whole 4 GB within 60 − 30 s needs > 1 Gbit/s,
// more than the 820 Mbit/s available, so only a hand-off that moves the
// delta a pre-synced standby lacks can succeed.
const presyncTrace = `{"kind":"header","format":"reclaimnet-trace","version":1,"start":"2026-01-05T03:00:00Z","duration_s":7200,"name":"presync"}
{"kind":"node","id":"a","building":"b1","gpu_model":"A6000","gpus":2,"vram_gb":48,"capability":8.6,"access_link":"acc-a"}
{"kind":"node","id":"b","building":"b1","gpu_model":"A6000","gpus":2,"vram_gb":48,"capability":8.6,"access_link":"acc-b","absent":true}
{"kind":"link","id":"acc-a","a":"a","b":"sw-b1","capacity_mbps":1000}
{"kind":"link","id":"acc-b","a":"b","b":"sw-b1","capacity_mbps":1000}
{"kind":"bandwidth","t":0,"link":"acc-a","available_mbps":820}
{"kind":"bandwidth","t":0,"link":"acc-b","available_mbps":820}
{"kind":"job","t":0,"id":"j1","gpus":2,"vram_gb":40,"capability":8,"work_gpu_h":3,"checkpoint_mb":4000,"restart_s":30,"loss_budget_s":300}
{"kind":"return","t":10,"node":"b"}
{"kind":"departure","t":3000,"node":"a","type":"scheduled","notice_s":60}
`

func TestPresyncHandoffMovesOnlyTheDelta(t *testing.T) {
	tr := parseTrace(t, presyncTrace, "presync.jsonl")
	run := func(changed float64) Result {
		opts := DefaultOptions()
		opts.ChangedFraction = changed
		r, err := RunPolicy(tr, "reclaimnet", opts, 1, Tuning{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	full := run(1)
	if full.Breakdown.Handoffs != 0 || full.WorkLossGPUh <= 0 {
		t.Fatalf("changed fraction 1: %d hand-offs, loss %.3f GPU-h; want no hand-off (4 GB cannot move in 30 s) and some loss",
			full.Breakdown.Handoffs, full.WorkLossGPUh)
	}
	delta := run(0.2)
	if delta.Breakdown.Handoffs != 1 || delta.WorkLossGPUh != 0 {
		t.Fatalf("changed fraction 0.2: %d hand-offs, loss %.3f GPU-h; want 1 zero-loss hand-off of the 0.8 GB delta",
			delta.Breakdown.Handoffs, delta.WorkLossGPUh)
	}
}

func TestStandbyHasModel(t *testing.T) {
	j := &simJob{bytes: 1000, standby: 1, held: map[int]float64{}, speed: 1, work: 1e6}
	if got := j.standbyHas(100, 0.3); got != 0 {
		t.Fatalf("standby with no version: got %d, want 0", got)
	}
	j.held[1] = 50
	j.progress, j.since, j.computing = 50, 0, false
	if got := j.standbyHas(100, 0.3); got != 1000 {
		t.Fatalf("standby holding the current state: got %d, want 1000", got)
	}
	j.computing, j.since = true, 90 // 10 s of progress since the version
	if got := j.standbyHas(100, 0.3); got != 700 {
		t.Fatalf("standby holding an older version, 30 %% changed: got %d, want 700", got)
	}
	if got := j.standbyHas(100, 1); got != 0 {
		t.Fatalf("older version, everything changed: got %d, want 0", got)
	}
}

// TestLossBreakdownAddsUp: the causes add up to the work loss and the
// interruption count; the Bamboo-like model pays its redundant computation
// in GPU time (utilisation), not in work loss.
func TestLossBreakdownAddsUp(t *testing.T) {
	tr, err := Generate(shortConfig(2))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"b1p", "b1", "reclaimnet"} {
		r, err := RunPolicy(tr, k, DefaultOptions(), 2, Tuning{})
		if err != nil {
			t.Fatal(err)
		}
		b := r.Breakdown
		if sum := b.EmergencyGPUh + b.ScheduledGPUh + b.HandoffFailedGPUh; math.Abs(sum-r.WorkLossGPUh) > 1e-9 {
			t.Errorf("%s: causes sum to %.6f GPU-h, work loss %.6f", k, sum, r.WorkLossGPUh)
		}
		if n := b.Emergencies + b.Scheduled + b.Handoffs + b.HandoffsFailed; n != r.Interruptions {
			t.Errorf("%s: causes count %d interruptions, want %d", k, n, r.Interruptions)
		}
		if r.Interruptions == 0 {
			t.Errorf("%s: no interruptions on the 10-day trace; the test proves nothing", k)
		}
		if k != "b1" {
			if b.RedundancyGPUh != 0 {
				t.Errorf("%s: redundancy %.2f GPU-h, want 0", k, b.RedundancyGPUh)
			}
			continue
		}
		// Speed 0.85: redundant time = 0.15/0.85 of the useful time
		// computed, which is the final progress plus what was redone.
		lo := r.UsefulGPUh * 0.15 / 0.85
		hi := (r.UsefulGPUh + r.WorkLossGPUh) * 0.15 / 0.85
		if b.RedundancyGPUh < lo-1e-6 || b.RedundancyGPUh > hi+1e-6 {
			t.Errorf("b1: redundancy %.3f GPU-h, want in [%.3f, %.3f]", b.RedundancyGPUh, lo, hi)
		}
		if r.GPUUtilPct > 85+1e-9 {
			t.Errorf("b1: GPU util %.2f %%, want ≤ 85 %% (15 %% redundant computation)", r.GPUUtilPct)
		}
	}
}

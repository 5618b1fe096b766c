package sim

import (
	"testing"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/trace"
)

// TestJobsKeepTheirReplicas: on a quiet four-node campus (no departure in
// four hours) a job without `replicas` in its trace record keeps its
// freshest checkpoint on policy.DefaultCopies = 2 nodes other than its
// host, the second copy sent holder-to-holder; a job whose record says
// replicas 1 keeps it on one; B4 (no P2) keeps one copy of both, its own
// model.
func TestJobsKeepTheirReplicas(t *testing.T) {
	text := `{"kind":"header","format":"reclaimnet-trace","version":3,"start":"2026-01-05T00:00:00Z","duration_s":14400,"name":"replicas"}
` + oneBuilding("a", "b", "c", "d") + `{"kind":"job","t":0,"id":"dflt","gpus":1,"vram_gb":16,"capability":7,"work_gpu_h":8,"checkpoint_mb":4800,"restart_s":60,"loss_budget_s":1800}
{"kind":"job","t":0,"id":"one","gpus":1,"vram_gb":16,"capability":7,"work_gpu_h":8,"checkpoint_mb":4800,"restart_s":60,"loss_budget_s":1800,"replicas":1}
`
	if trace.MaxReplicas != state.MaxReplicas {
		t.Fatalf("a trace's replicas go up to %d, an agent's job's to %d", trace.MaxReplicas, state.MaxReplicas)
	}
	tr := parseTrace(t, text, "replicas.jsonl")
	for _, tt := range []struct {
		policy    string
		dflt, one int
	}{
		{"reclaimnet", policy.DefaultCopies, 1},
		{"b4", 1, 1},
	} {
		e := newTestEngine(t, tt.policy, tr)
		e.Run()
		if e.stopped != nil {
			t.Fatal(e.stopped)
		}
		snap := e.w.Snapshot(policy.DefaultParams(), make([][2]policy.HazardProfile, len(e.w.nodes)), func(int) (float64, float64) { return 0, 0 })
		for _, j := range snap.Jobs {
			if want := map[policy.JobID]int{"dflt": 0, "one": 1}[j.ID]; j.Copies != want {
				t.Errorf("%s: job %s reaches the policy with Copies %d, want %d", tt.policy, j.ID, j.Copies, want)
			}
		}
		for _, j := range e.w.jobs {
			// The nodes other than the host that hold its freshest version.
			fresh, holders := 0.0, 0
			for n, p := range j.held {
				switch {
				case n == j.node:
				case p > fresh:
					fresh, holders = p, 1
				case p == fresh:
					holders++
				}
			}
			want := map[policy.JobID]int{"dflt": tt.dflt, "one": tt.one}[j.id]
			if holders != want {
				t.Errorf("%s: job %s has its freshest version on %d nodes other than its host after four quiet hours, want %d", tt.policy, j.id, holders, want)
			}
		}
	}
}

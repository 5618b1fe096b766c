package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"
)

// processCPU returns the user+system CPU time the test process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchSnapshot is a busy steady-state control period: buildings of 18
// nodes (54 nodes = 3 buildings, 500 = 28) or 1 % of the nodes (5000 =
// 100 buildings of 50), every running job with a valid standby (warm: the
// standby is kept), one scheduled reclaim per 500 nodes (at least one) plus
// one emergency, 0.2 % of jobs pending and 0.2 % recovering. Every
// hand-off is new (no carried flow), so each one runs a full P2 scan.
// cold drops every standby so P2 chooses them all (a leader's first tick).
func benchSnapshot(nodes, jobs int, cold bool) Snapshot {
	return benchSnapshotOf(nodes, jobs, cold, false)
}

// benchSnapshotOf is benchSnapshot; varied gives every job its own
// remaining time (up to 24 h) and one of 16 requirement classes (VRAM,
// capability, GPUs), so Tick's per-period memos (survival per remaining
// time, candidate counts per requirement) mostly miss.
func benchSnapshotOf(nodes, jobs int, cold, varied bool) Snapshot {
	rng := rand.New(rand.NewPCG(uint64(nodes), uint64(jobs)))
	per := max(18, nodes/100)
	s := scenario(rng, (nodes+per-1)/per, per, 0)
	s.Nodes = s.Nodes[:nodes]
	s.Reclaims = nil
	for k := range jobs {
		host := rng.IntN(nodes)
		j := testJob(fmt.Sprintf("job-%05d", k), s.Nodes[host].ID)
		j.CheckpointBytes = int64(1e8 + rng.Float64()*2e10)
		if varied {
			j.Remaining = time.Duration(1+rng.Int64N(int64(24*time.Hour))) * time.Nanosecond
			j.VRAM = []int64{16 * gib, 24 * gib, 40 * gib, 80 * gib}[rng.IntN(4)]
			j.Capability = []float64{7.0, 8.0}[rng.IntN(2)]
			j.GPUs = 1 + rng.IntN(2)
		}
		if !cold {
			sb := (host/per)*per + (host%per+1+rng.IntN(per-1))%per
			if sb >= nodes || sb == host {
				sb = (host + 1) % nodes
			}
			j.Standby, j.StandbyHas = s.Nodes[sb].ID, j.CheckpointBytes/2
		}
		switch rng.IntN(500) {
		case 0:
			j.State, j.Node, j.Standby = JobPending, "", ""
		case 1:
			j.State, j.Node = JobRecovering, ""
			j.Replicas = []NodeID{s.Nodes[rng.IntN(nodes)].ID}
		}
		s.Jobs = append(s.Jobs, j)
	}
	for k := 0; k < max(1, nodes/500); k++ {
		s.Reclaims = append(s.Reclaims, Reclaim{Node: s.Nodes[rng.IntN(nodes)].ID, Announced: testEpoch, Deadline: testEpoch.Add(time.Duration(60+rng.IntN(240)) * time.Second)})
	}
	s.Reclaims = append(s.Reclaims, Reclaim{Node: s.Nodes[rng.IntN(nodes)].ID, Announced: testEpoch, Deadline: testEpoch})
	return s
}

// BenchmarkTick measures the leader's control step. The paper's
// coordinator takes 3 ms at 54 nodes and 18 ms at 500.
func BenchmarkTick(b *testing.B) {
	for _, size := range []struct{ nodes, jobs int }{{54, 50}, {500, 500}, {5000, 5000}} {
		for _, variant := range []string{"", "cold", "varied"} {
			cold, varied := variant == "cold", variant == "varied"
			if cold && size.nodes > 500 || varied && size.nodes < 500 {
				continue
			}
			name := fmt.Sprintf("nodes=%d/jobs=%d", size.nodes, size.jobs)
			if variant != "" {
				name += "/" + variant
			}
			s := benchSnapshotOf(size.nodes, size.jobs, cold, varied)
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				start := processCPU()
				n := 0
				for b.Loop() {
					Tick(s, testEpoch)
					n++
				}
				// CPU time per op (all threads, GC included): on a shared,
				// loaded machine wall time per op mostly measures the
				// neighbours, CPU time measures Tick.
				b.ReportMetric(float64(processCPU()-start)/float64(n), "cpu-ns/op")
			})
		}
	}
}

// BenchmarkHazardReconvergence reports how long the estimator takes to
// re-converge after a 1.7× shift (paper criterion, docs/design.md P1.7: |λ̂−λ|/λ <
// 0.10 sustained for two fast windows, judged every 5 min) against the
// cluster's emergency rate after the shift. Five seeds per rate: the metric
// median-min is the median time in minutes (1440 when most runs did not
// re-converge within 24 h) and converged the number of runs that did.
func BenchmarkHazardReconvergence(b *testing.B) {
	for _, perHour := range []float64{25, 100, 400, 1600} {
		b.Run(fmt.Sprintf("events_per_h=%.0f", perHour*1.7), func(b *testing.B) {
			var times []float64
			converged := 0
			for b.Loop() {
				times, converged = times[:0], 0
				for seed := range uint64(5) {
					// 100 nodes; per-node rate at the off-peak unit so
					// the cluster sees perHour events/h before the shift.
					perNode := perHour / 100 / 3600 / meanDiurnal()
					got, _, ok := reconvergence(b, 200+seed, 100, perNode)
					if !ok {
						got = 24 * time.Hour
					} else {
						converged++
					}
					times = append(times, got.Minutes())
				}
			}
			slices.Sort(times)
			b.ReportMetric(times[len(times)/2], "median-min")
			b.ReportMetric(float64(converged), "converged")
		})
	}
}

func meanDiurnal() float64 {
	var m float64
	for _, v := range hourlyTruth() {
		m += v / 24
	}
	return m
}

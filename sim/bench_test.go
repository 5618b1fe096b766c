package sim

import (
	"syscall"
	"testing"
	"time"
)

// processCPU returns the CPU time (user + system) this process has used,
// every thread included (GC workers too).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds cpu-s/op: on a shared, loaded machine the wall time
// (ns/op) measures the neighbours as much as the code.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric((processCPU(b)-start).Seconds()/float64(b.N), "cpu-s/op")
}

// BenchmarkAllPolicies60Days runs every policy of the table on the
// calibrated two-month 54-node trace (the target: under 10 s).
func BenchmarkAllPolicies60Days(b *testing.B) {
	tr, err := Generate(DefaultGenConfig())
	if err != nil {
		b.Fatal(err)
	}
	cpu := processCPU(b)
	defer func() { reportCPU(b, cpu) }()
	for b.Loop() {
		for _, k := range PolicyKeys {
			st := time.Now()
			r, err := RunPolicy(tr, k, DefaultOptions(), 1, Tuning{})
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("%-32s %6.2fs loss %.2f", r.Policy, time.Since(st).Seconds(), r.WorkLossGPUh)
		}
	}
}

// BenchmarkReclaimNet500Nodes runs ReclaimNet alone on a 500-node,
// two-month trace with the paper's densities (target: under 30 s).
func BenchmarkReclaimNet500Nodes(b *testing.B) { benchmarkReclaimNet500(b, 60) }

// BenchmarkReclaimNet500Nodes15Days is a short profile target for what
// grows with the campus (snapshots, estimators, link samples).
func BenchmarkReclaimNet500Nodes15Days(b *testing.B) { benchmarkReclaimNet500(b, 15) }

// benchmarkReclaimNet500 scales the calibrated trace to 500 nodes and the
// given days as 'reclaimnet sim --nodes 500 --days D' does.
func benchmarkReclaimNet500(b *testing.B, days float64) {
	c := DefaultGenConfig()
	scale := 500.0 / 54 * days / 60
	c.Nodes = 500
	c.Duration = time.Duration(days * 24 * float64(time.Hour))
	c.Departures *= scale
	c.Jobs = int(float64(c.Jobs) * scale)
	c.GPUHours *= scale
	tr, err := Generate(c)
	if err != nil {
		b.Fatal(err)
	}
	cpu := processCPU(b)
	defer func() { reportCPU(b, cpu) }()
	for b.Loop() {
		if _, err := RunPolicy(tr, "reclaimnet", DefaultOptions(), 1, Tuning{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReclaimNet10Days is a short profile target.
func BenchmarkReclaimNet10Days(b *testing.B) {
	tr, err := Generate(shortConfig(1))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := RunPolicy(tr, "reclaimnet", DefaultOptions(), 1, Tuning{}); err != nil {
			b.Fatal(err)
		}
	}
}

package mesh

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
)

// TestTelemetrySpreadFigures measures, in synctest's fake time on the
// in-memory network, how long one telemetry update takes to reach every
// node of a 20- and a 50-node cluster under memberlist's LAN and Local
// presets. It prints the figures for BENCHMARKS.md; run it with
//
//	RECLAIMNET_FIGURES=1 go test ./mesh -run TestTelemetrySpreadFigures -v
//
// Fake time counts protocol time only (gossip intervals, fan-out,
// retransmit limits); CPU and network latency are zero.
func TestTelemetrySpreadFigures(t *testing.T) {
	if os.Getenv("RECLAIMNET_FIGURES") == "" {
		t.Skip("set RECLAIMNET_FIGURES=1 to measure gossip spread times")
	}
	for _, n := range []int{20, 50} {
		for _, p := range []struct {
			name    string
			profile Profile
		}{{"LAN", ProfileLAN}, {"Local", ProfileLocal}} {
			t.Run(fmt.Sprintf("%d nodes %s", n, p.name), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					measureSpread(t, n, p.name, p.profile, 30)
				})
			})
		}
	}
}

// measureSpread publishes trials updates, one at a time, and records when
// the last node got each. The trial timing is part of the method: waits
// poll every 10 ms of fake time and trials are 2 s apart, which fixes
// where each publish falls between gossip rounds (and so the figures).
func measureSpread(t *testing.T, n int, profileName string, profile Profile, trials int) {
	var mu sync.Mutex
	want := uint64(0)
	var source string
	arrived := map[int]time.Time{}
	nodes, network := memCluster(t, n, profile, func(node int, tel Telemetry) {
		mu.Lock()
		defer mu.Unlock()
		if tel.Node == source && tel.Seq == want {
			if _, ok := arrived[node]; !ok {
				arrived[node] = time.Now()
			}
		}
	})
	wait.ForEvery(t, 10*time.Millisecond, 5*time.Minute, "all alive", func() bool {
		for _, m := range nodes {
			if aliveCount(m) != n {
				return false
			}
		}
		return true
	})
	var spreads []time.Duration
	for trial := range trials {
		src := nodes[(trial*7)%n]
		mu.Lock()
		source = src.Name()
		arrived = map[int]time.Time{}
		mu.Unlock()
		start := time.Now()
		// Publish; the sequence number is the one publish assigns next.
		src.mu.Lock()
		next := src.seq + 1
		src.mu.Unlock()
		mu.Lock()
		want = next
		mu.Unlock()
		if err := src.PublishTelemetry(Telemetry{Load: float64(trial)}, start); err != nil {
			t.Fatal(err)
		}
		wait.ForEvery(t, 10*time.Millisecond, 5*time.Minute, "update reaches all", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(arrived) == n-1
		})
		var last time.Time
		mu.Lock()
		for _, at := range arrived {
			if at.After(last) {
				last = at
			}
		}
		mu.Unlock()
		spreads = append(spreads, last.Sub(start))
		// The fixed spacing is the point (see above); retransmissions of
		// this update have drained by then.
		time.Sleep(2 * time.Second)
	}
	sort.Slice(spreads, func(i, j int) bool { return spreads[i] < spreads[j] })
	slow := 0
	for _, s := range spreads {
		if s > 5*time.Second {
			slow++
		}
	}
	t.Logf("FIGURE n=%d %s: update reaches all nodes: median %v, p90 %v, max %v over %d updates; %d needed push/pull (> 5 s); network drops %d",
		n, profileName, spreads[len(spreads)/2], spreads[len(spreads)*9/10], spreads[len(spreads)-1], len(spreads), slow, network.Drops())
}

package policy

import (
	"fmt"
	"time"
)

// Test campus: buildings b0..bN with switches sw-bK, each uplinked to the
// core; nodes bK-nMM with an access link to their building switch.

const (
	gbit = 125e6 // 1 Gbit/s in bytes/s
	gib  = int64(1) << 30
)

var testEpoch = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

type campusSpec struct {
	buildings, perBuilding int
	access, uplink         float64 // bytes/s
}

func nodeName(b, n int) NodeID { return NodeID(fmt.Sprintf("b%d-n%02d", b, n)) }

// flatProfile returns a 24-bucket profile of rate r (1/s).
func flatProfile(r float64) HazardProfile {
	p := HazardProfile{Rates: make([]float64, 24)}
	for i := range p.Rates {
		p.Rates[i] = r
	}
	return p
}

func buildCampus(s campusSpec) ([]Node, []Link) {
	var nodes []Node
	var links []Link
	for b := range s.buildings {
		sw := fmt.Sprintf("sw-b%d", b)
		links = append(links, IdleLink("up-b"+fmt.Sprint(b), sw, CoreVertex, s.uplink))
		for n := range s.perBuilding {
			id := nodeName(b, n)
			acc := "acc-" + string(id)
			links = append(links, IdleLink(acc, string(id), sw, s.access))
			nodes = append(nodes, Node{
				ID: id, Building: fmt.Sprintf("b%d", b),
				GPU:  GPU{Model: "A100-80GB", VRAM: 80 * gib, Capability: 8.0},
				GPUs: 4, FreeGPUs: 4, Load: 0.1,
				Emergency: flatProfile(1e-6), Departure: flatProfile(2e-6),
				AccessLink: acc,
			})
		}
	}
	return nodes, links
}

// testJob is a 1-GPU job on host with a 10 GB checkpoint.
func testJob(id string, host NodeID) Job {
	return Job{
		ID: JobID(id), State: JobRunning, Node: host,
		CheckpointBytes: 10e9, LossBudget: 15 * time.Minute,
		GPUs: 1, VRAM: 20 * gib, Capability: 7.0,
		RestartTime: 30 * time.Second, Remaining: 6 * time.Hour,
	}
}

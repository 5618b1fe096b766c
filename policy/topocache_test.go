package policy

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// TestTopologyCacheMatchesFresh checks that the cached forest is exactly
// what newTopology builds, across link lists that change shape (a link
// added, a cycle, a duplicate ID, reordered links), with more shapes than
// the cache holds so entries are evicted and rebuilt, and that a cache hit
// carries the caller's own bandwidth figures.
func TestTopologyCacheMatchesFresh(t *testing.T) {
	_, campus := buildCampus(campusSpec{buildings: 3, perBuilding: 3, access: gbit, uplink: 10 * gbit})
	withIsland := append(append([]Link(nil), campus...), IdleLink("island", "x", "y", gbit))
	withCycle := append(append([]Link(nil), campus...), IdleLink("direct-b0-b1", "sw-b0", "sw-b1", gbit))
	withDup := append(append([]Link(nil), campus...), IdleLink("up-b1", "sw-b1", "elsewhere", gbit))
	rng := rand.New(rand.NewPCG(7, 8))
	reordered := shuffled(rng, campus)
	shapes := [][]Link{campus, withIsland, withCycle, withDup, reordered, campus[:len(campus)-1]}
	for round := range 3 {
		for si, links := range shapes {
			links = append([]Link(nil), links...)
			for i := range links {
				links[i].Available = float64(round+1) * float64(i+1) * 1e6
			}
			got := cachedTopology(links)
			want := newTopology(append([]Link(nil), links...), false)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d shape %d: cached topology differs from a fresh one", round, si)
			}
			if len(got.links) > 0 && got.links[0].Available != links[0].Available {
				t.Fatalf("round %d shape %d: cache hit kept stale bandwidth %g, want %g", round, si, got.links[0].Available, links[0].Available)
			}
		}
	}
}

// TestTickSameWithWarmTopologyCache runs the same snapshots through Tick
// with the cache cold (a fresh shape every call) and warm, and compares the
// decisions.
func TestTickSameWithWarmTopologyCache(t *testing.T) {
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 99))
		s := scenario(rng, 3, 5, 12)
		flushTopologyCache()
		cold := decisionsText(Tick(s, now))
		for range 3 {
			if warm := decisionsText(Tick(s, now)); warm != cold {
				t.Fatalf("seed %d: decisions differ with a warm topology cache:\n%s\nvs\n%s", seed, warm, cold)
			}
		}
	}
}

func flushTopologyCache() {
	topoShapes.mu.Lock()
	topoShapes.slots = [topoShapeSlots]*topoShape{}
	topoShapes.mu.Unlock()
}

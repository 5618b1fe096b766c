package policy

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func feasibleSet(d []FlowDemand, in []bool, capacity []float64, cf float64) bool {
	load := make([]float64, len(capacity))
	for i, ok := range in {
		if !ok {
			continue
		}
		for _, l := range d[i].Links {
			load[l] += cf * d[i].MinRate
		}
	}
	for l := range load {
		if load[l] > capacity[l]*(1+1e-9) {
			return false
		}
	}
	return true
}

func randomFlowInstance(rng *rand.Rand) ([]FlowDemand, []float64) {
	nl := 2 + rng.IntN(4)
	capacity := make([]float64, nl)
	for l := range capacity {
		capacity[l] = 50e6 + rng.Float64()*100e6
	}
	n := 1 + rng.IntN(8)
	d := make([]FlowDemand, n)
	for i := range d {
		var links []int
		for l := range nl {
			if rng.IntN(2) == 0 {
				links = append(links, l)
			}
		}
		if len(links) == 0 {
			links = []int{rng.IntN(nl)}
		}
		d[i] = FlowDemand{
			ID:       string(rune('a' + i)),
			Deadline: testEpoch.Add(time.Duration(10+rng.IntN(5)*10) * time.Second),
			MinRate:  5e6 + rng.Float64()*60e6,
			Links:    links,
		}
	}
	return d, capacity
}

func TestAdmitAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	const cf = 1.1
	allFitSeen, skipSeen := 0, 0
	for k := range 400 {
		d, capacity := randomFlowInstance(rng)
		got := Admit(d, slices.Clone(capacity), cf)
		if !feasibleSet(d, got, capacity, cf) {
			t.Fatalf("case %d: admitted set breaks a link at ceilings", k)
		}
		all := make([]bool, len(d))
		for i := range all {
			all[i] = true
		}
		if feasibleSet(d, all, capacity, cf) {
			allFitSeen++
			if !slices.Equal(got, all) {
				t.Errorf("case %d: every flow fits but admitted %v", k, got)
			}
		}
		// EDF order, ties by ID.
		order := make([]int, len(d))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int {
			if c := d[a].Deadline.Compare(d[b].Deadline); c != 0 {
				return c
			}
			if d[a].ID < d[b].ID {
				return -1
			}
			return 1
		})
		// No skipped flow could have been admitted without breaking a link
		// given the flows with earlier deadlines that were admitted.
		for pos, i := range order {
			if got[i] {
				continue
			}
			skipSeen++
			prefix := make([]bool, len(d))
			for _, j := range order[:pos] {
				prefix[j] = got[j]
			}
			prefix[i] = true
			if feasibleSet(d, prefix, capacity, cf) {
				t.Errorf("case %d: flow %s skipped although it fits with the earlier admitted flows", k, d[i].ID)
			}
		}
		// Brute force: among all feasible subsets, the lexicographically
		// greatest in EDF order (earlier deadlines first) is the answer.
		var best []bool
		for mask := 0; mask < 1<<len(d); mask++ {
			in := make([]bool, len(d))
			for i := range d {
				in[i] = mask&(1<<i) != 0
			}
			if !feasibleSet(d, in, capacity, cf) {
				continue
			}
			if best == nil || lexGreater(in, best, order) {
				best = in
			}
		}
		if !slices.Equal(got, best) {
			t.Errorf("case %d: admitted %v, brute force %v", k, got, best)
		}
	}
	if allFitSeen == 0 || skipSeen == 0 {
		t.Fatalf("instances did not cover both branches: all-fit %d, skipped %d", allFitSeen, skipSeen)
	}
}

func lexGreater(a, b []bool, order []int) bool {
	for _, i := range order {
		if a[i] != b[i] {
			return a[i]
		}
	}
	return false
}

func TestMaxMinShareIsMaxMinFair(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	const cf = 1.1
	for k := range 300 {
		d, capacity := randomFlowInstance(rng)
		// Bases: admit first, then share the rest.
		room := slices.Clone(capacity)
		adm := Admit(d, room, cf)
		var base []float64
		var links [][]int
		for i, ok := range adm {
			if ok {
				base = append(base, d[i].MinRate)
				links = append(links, d[i].Links)
			}
		}
		got := MaxMinShare(base, links, slices.Clone(room), cf)
		load := make([]float64, len(capacity))
		for i, r := range got {
			if r < base[i]*(1-1e-12) {
				t.Fatalf("case %d: flow %d rate %g below its base %g", k, i, r, base[i])
			}
			for _, l := range links[i] {
				load[l] += cf * r
			}
		}
		for l := range load {
			if load[l] > capacity[l]*(1+1e-9) {
				t.Fatalf("case %d: link %d carries %g at ceilings, share %g", k, l, load[l], capacity[l])
			}
		}
		// Max-min: every flow crosses a full link on which no other flow
		// got a larger increment.
		for i := range got {
			ok := false
			for _, l := range links[i] {
				if load[l] < capacity[l]*(1-1e-9) {
					continue
				}
				top := true
				for j := range got {
					if slices.Contains(links[j], l) && got[j]-base[j] > got[i]-base[i]+1e-6 {
						top = false
					}
				}
				ok = ok || top
			}
			if !ok {
				t.Errorf("case %d: flow %d (+%g) has no saturated link where it is the largest", k, i, got[i]-base[i])
			}
		}
	}
}

func TestMinRateAndStagger(t *testing.T) {
	start := testEpoch
	r, ok := MinRate(6e9, start, start.Add(90*time.Second), 30*time.Second)
	if !ok || math.Abs(r-1e8) > 1e-6 {
		t.Errorf("MinRate = %g, %v; want 1e8, true", r, ok)
	}
	if _, ok := MinRate(1, start, start.Add(30*time.Second), 30*time.Second); ok {
		t.Errorf("MinRate with window = restart reported ok")
	}
	// Offsets grow by notice/count and never exceed half the slack.
	notice, slack := 60*time.Second, 16*time.Second
	for rank := range 4 {
		got := StaggerOffset(rank, 4, notice, slack)
		want := min(time.Duration(rank)*15*time.Second, slack/2)
		if got != want {
			t.Errorf("rank %d: offset %v, want %v", rank, got, want)
		}
	}
	if got := StaggerOffset(3, 4, notice, -time.Second); got != 0 {
		t.Errorf("negative slack: offset %v, want 0", got)
	}
}

func TestMigrationShareNeverNegative(t *testing.T) {
	tests := []struct {
		capacity, available, beta3, bmin, want float64
	}{
		{100, 100, 0.3, 0, 70},
		{100, 50, 0.3, 0, 50},   // research traffic already there
		{100, 100, 0.3, 40, 60}, // Bmin above β3·B
		{100, 100, 0.3, 150, 0}, // Bmin above capacity
		{100, -5, 0.3, 0, 0},    // bogus measurement
	}
	for _, tt := range tests {
		if got := MigrationShare(tt.capacity, tt.available, tt.beta3, tt.bmin); got != tt.want {
			t.Errorf("MigrationShare(%v, %v, %v, %v) = %v, want %v", tt.capacity, tt.available, tt.beta3, tt.bmin, got, tt.want)
		}
	}
}

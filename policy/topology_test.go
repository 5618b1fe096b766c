package policy

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestTopologyPathsOnCampus(t *testing.T) {
	_, links := buildCampus(campusSpec{buildings: 3, perBuilding: 3, access: gbit, uplink: 10 * gbit})
	topo := NewTopology(links)
	tests := []struct {
		from, to string
		want     []Hop
	}{
		{"b0-n00", "b0-n01", []Hop{{"acc-b0-n00", true}, {"acc-b0-n01", false}}},
		{"b0-n00", "b2-n01", []Hop{{"acc-b0-n00", true}, {"up-b0", true}, {"up-b2", false}, {"acc-b2-n01", false}}},
		{"b2-n01", "b0-n00", []Hop{{"acc-b2-n01", true}, {"up-b2", true}, {"up-b0", false}, {"acc-b0-n00", false}}},
		{"b1-n02", "b1-n02", []Hop{}},
		{"core", "b1-n00", []Hop{{"up-b1", false}, {"acc-b1-n00", false}}},
	}
	for _, tt := range tests {
		got, ok := topo.Path(tt.from, tt.to)
		if !ok || !slices.Equal(got, tt.want) {
			t.Errorf("Path(%s, %s) = %v, %v; want %v", tt.from, tt.to, got, ok, tt.want)
		}
	}
	if _, ok := topo.Path("b0-n00", "nowhere"); ok {
		t.Errorf("path to an unknown vertex reported ok")
	}
}

func TestTopologyBottleneck(t *testing.T) {
	_, links := buildCampus(campusSpec{buildings: 2, perBuilding: 2, access: gbit, uplink: 10 * gbit})
	for i := range links {
		if links[i].ID == "up-b1" {
			links[i].Available = 0.3 * gbit
		}
	}
	// An island not connected to the campus.
	links = append(links, IdleLink("island", "x", "y", gbit))
	topo := NewTopology(links)
	if got := topo.Bottleneck("b0-n00", "b1-n01"); got != 0.3*gbit {
		t.Errorf("cross-building bottleneck %g, want %g", got, 0.3*gbit)
	}
	if got := topo.Bottleneck("b0-n00", "b0-n01"); got != gbit {
		t.Errorf("same-building bottleneck %g, want %g", got, gbit)
	}
	if got := topo.Bottleneck("b0-n00", "x"); got != 0 {
		t.Errorf("disconnected bottleneck %g, want 0", got)
	}
	if got := topo.Bottleneck("x", "x"); !math.IsInf(got, 1) {
		t.Errorf("self bottleneck %g, want +Inf", got)
	}
}

func TestTopologyWithCycleIsOrderIndependent(t *testing.T) {
	_, links := buildCampus(campusSpec{buildings: 3, perBuilding: 2, access: gbit, uplink: gbit})
	// A redundant direct link between two building switches, and a second
	// access link for one node: both close cycles.
	links = append(links, IdleLink("direct-b0-b1", "sw-b0", "sw-b1", 10*gbit), IdleLink("acc2-b2-n00", "b2-n00", "sw-b2", gbit))
	want := NewTopology(links)
	rng := rand.New(rand.NewPCG(41, 42))
	for range 20 {
		got := NewTopology(shuffled(rng, links))
		for _, a := range want.names {
			for _, b := range want.names {
				p1, ok1 := want.Path(a, b)
				p2, ok2 := got.Path(a, b)
				if ok1 != ok2 || !slices.Equal(p1, p2) {
					t.Fatalf("Path(%s, %s) depends on link order: %v vs %v", a, b, p1, p2)
				}
			}
		}
	}
}

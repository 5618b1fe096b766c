package view

import (
	"math"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
)

func member(name, building string) mesh.Member {
	return mesh.Member{Name: name, State: mesh.StateAlive, Meta: mesh.Meta{ID: name, Building: building, GPUs: 1}}
}

// uplinkOf returns the uplink of building b in links.
func uplinkOf(t *testing.T, links []policy.Link, b string) policy.Link {
	t.Helper()
	for _, l := range links {
		if l.ID == "uplink/"+b {
			return l
		}
	}
	t.Fatalf("no uplink/%s in %+v", b, links)
	return policy.Link{}
}

// The leader's graph gives a building's uplink the declared capacity, and
// P3 then keeps β3 of it (or Bmin) away from migrations: with the 10 Gbit/s
// default a migration may take a 60 Mbit/s uplink whole.
func TestDeclaredUplinkIsReservedByAdmission(t *testing.T) {
	members := []mesh.Member{member("a1", "a"), member("b1", "b")}
	const uplink = 60e6 / 8 // 60 Mbit/s
	declared := func(b string) (float64, bool) { return uplink, b == "a" }
	links := linksOf(members, declared)
	if l := uplinkOf(t, links, "a"); l.Capacity != uplink || l.Available != uplink || l.AvailableLow != uplink/2 {
		t.Errorf("uplink/a = %+v, want capacity and available %v, lower bound %v", l, uplink, uplink/2)
	}
	if l := uplinkOf(t, links, "b"); l.Capacity != DefaultUplinkCapacity {
		t.Errorf("undeclared uplink/b capacity %v, want the default %v", l.Capacity, float64(DefaultUplinkCapacity))
	}

	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tick := func(links []policy.Link, bmin float64) (policy.HandoffDecision, float64) {
		p := policy.DefaultParams()
		p.Bmin = bmin
		d := policy.Tick(policy.Snapshot{
			Nodes: []policy.Node{
				{ID: "a1", Building: "a", GPUs: 1, FreeGPUs: 0, AccessLink: accessLinkID("a1")},
				{ID: "b1", Building: "b", GPUs: 1, FreeGPUs: 1, AccessLink: accessLinkID("b1")},
			},
			Links: links,
			Jobs: []policy.Job{{ID: "j", State: policy.JobRunning, Node: "a1", GPUs: 1, CheckpointBytes: 20e6,
				LossBudget: time.Hour, RestartTime: time.Second}},
			Reclaims: []policy.Reclaim{{Node: "a1", Announced: now, Deadline: now.Add(time.Minute)}},
			Params:   p,
		}, now)
		var h policy.HandoffDecision
		for _, x := range d.Handoffs {
			if x.Job == "j" {
				h = x
			}
		}
		onUplink := 0.0 // the kernel ceilings of the flows crossing uplink/a
		for _, f := range d.Flows {
			for _, l := range f.Links {
				if l == "uplink/a" {
					onUplink += f.Ceiling
				}
			}
		}
		return h, onUplink
	}
	beta := policy.DefaultParams().BetaP3
	for _, c := range []struct {
		name string
		bmin float64
	}{{"beta3", 0}, {"bmin", 40e6 / 8}} {
		h, used := tick(links, c.bmin)
		if h.Degraded || h.To != "b1" {
			t.Fatalf("%s: hand-off %+v, want one to b1", c.name, h)
		}
		reserve := math.Max(beta*uplink, c.bmin)
		t.Logf("%s: migration ceilings on uplink/a %.0f B/s of %.0f (reservation %.0f)", c.name, used, uplink, reserve)
		if used <= 0 || used > uplink-reserve+1 {
			t.Errorf("%s: migration ceilings on the declared uplink sum to %.0f B/s, want in (0, %.0f] (capacity %.0f minus the reservation %.0f)",
				c.name, used, uplink-reserve, uplink, reserve)
		}
	}
	// Without the declaration the same hand-off takes more than the
	// uplink can leave to research: what the campus run saw.
	_, used := tick(linksOf(members, nil), 0)
	t.Logf("undeclared: migration ceilings on uplink/a %.0f B/s", used)
	if used <= uplink-beta*uplink {
		t.Errorf("with the default uplink the migration is held to %.0f B/s: the test shows nothing", used)
	}
}

package agent

import (
	"encoding/json"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
)

func TestUplinkCapacityFlag(t *testing.T) {
	var u UplinkCapacities
	if err := u.Set("60Mbit"); err != nil {
		t.Fatal(err)
	}
	if err := u.Set("b=1Gbit, c = 100MB"); err != nil {
		t.Fatal(err)
	}
	for b, want := range map[string]float64{"a": 60e6 / 8, "b": 1e9 / 8, "c": 100e6, "zz": 60e6 / 8} {
		if got, ok := u.Of(b); !ok || got != want {
			t.Errorf("uplink of %s = %v (declared %v), want %v", b, got, ok, want)
		}
	}
	if got, want := u.String(), "60Mbit,b=1Gbit,c=800Mbit"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	for _, bad := range []string{"", "a=", "=1Gbit", "a=-1Gbit", "fast", "a=1Gbit,b"} {
		var v UplinkCapacities
		if err := v.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted %v", bad, v)
		}
	}
	// JSON config: a map, rates with units.
	var cfg Config
	if err := json.Unmarshal([]byte(`{"uplink_capacity":{"*":"10Gbit","a":"60Mbit"},"bmin":"40Mbit"}`), &cfg); err != nil {
		t.Fatal(err)
	}
	if got, _ := cfg.UplinkCapacity.Of("a"); got != 60e6/8 {
		t.Errorf("json uplink a = %v, want %v", got, 60e6/8)
	}
	if float64(cfg.Bmin) != 40e6/8 {
		t.Errorf("json bmin = %v, want %v", float64(cfg.Bmin), 40e6/8)
	}
	var none UplinkCapacities
	if _, ok := none.Of("a"); ok {
		t.Error("an empty declaration declared building a")
	}
}

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
	declared := UplinkCapacities{"a": Rate(uplink)}
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
	// uplink can leave to research, as on the campus.
	_, used := tick(linksOf(members, nil), 0)
	t.Logf("undeclared: migration ceilings on uplink/a %.0f B/s", used)
	if used <= uplink-beta*uplink {
		t.Errorf("with the default uplink the migration is held to %.0f B/s: the test shows nothing", used)
	}
}

// --uplink-capacity and --bmin reach the leader's coordinator: its
// Params.Bmin and the graph its telemetry builds from live gossip.
func TestUplinkCapacityAndBminReachTheLeader(t *testing.T) {
	c := newTestCluster(t)
	var mu sync.Mutex
	var got raft.Config
	c.raftConfig = func(rc *raft.Config) {
		mu.Lock()
		defer mu.Unlock()
		got = *rc
	}
	cfg := c.config("node-00")
	cfg.Building = "a"
	cfg.UplinkCapacity = UplinkCapacities{"a": Rate(60e6 / 8)}
	cfg.Bmin = Rate(40e6 / 8)
	c.start(cfg)
	mu.Lock()
	rc := got
	mu.Unlock()
	if rc.Params.Bmin != 40e6/8 {
		t.Errorf("coordinator Params.Bmin = %v, want %v", rc.Params.Bmin, 40e6/8)
	}
	if rc.Telemetry == nil {
		t.Fatal("coordinator has no telemetry")
	}
	var l policy.Link
	waitUntil(t, 20*time.Second, "uplink/a in the leader's graph", func() bool {
		for _, x := range rc.Telemetry.Links() {
			if x.ID == "uplink/a" {
				l = x
				return true
			}
		}
		return false
	})
	if l.Capacity != 60e6/8 {
		t.Errorf("leader's uplink/a capacity %v, want the declared %v", l.Capacity, 60e6/8)
	}
}

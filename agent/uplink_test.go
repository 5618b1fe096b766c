package agent

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
)

func TestUplinkCapacityFlag(t *testing.T) {
	t.Parallel()
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

// --uplink-capacity and --bmin reach the leader's coordinator: its
// Params.Bmin and the graph its telemetry builds from live gossip.
func TestUplinkCapacityAndBminReachTheLeader(t *testing.T) {
	t.Parallel()
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
	wait.For(t, 20*time.Second, "uplink/a in the leader's graph", func() bool {
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

package mesh

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
)

var testKey = bytes.Repeat([]byte{7}, 32)

// memCluster starts n nodes on one MemNetwork, all joined through node 0.
// It must run inside a synctest bubble or with real time.
// Each configure function is applied to every node's configuration.
func memCluster(t *testing.T, n int, profile Profile, onTelemetry func(node int, tel Telemetry), configure ...func(*Config)) ([]*Mesh, *MemNetwork) {
	t.Helper()
	network := &MemNetwork{}
	nodes := make([]*Mesh, n)
	for i := range nodes {
		cfg := DefaultLocalConfig()
		cfg.Profile = profile
		cfg.Name = fmt.Sprintf("node-%02d", i)
		cfg.GossipKeys = [][]byte{testKey}
		cfg.Meta = Meta{Building: fmt.Sprintf("b%d", i%3), RaftPort: 7947, GPUs: uint16(i % 4)}
		cfg.Transport = network.NewTransport()
		cfg.Logger = discardLogger()
		for _, f := range configure {
			f(&cfg)
		}
		if onTelemetry != nil {
			idx := i
			cfg.OnTelemetry = func(tel Telemetry) { onTelemetry(idx, tel) }
		}
		m, err := Create(cfg)
		if err != nil {
			t.Fatalf("Create %s: %v", cfg.Name, err)
		}
		nodes[i] = m
		if i > 0 {
			addr, port := nodes[0].LocalAddr()
			if _, err := m.Join([]string{fmt.Sprintf("%s:%d", addr, port)}); err != nil {
				t.Fatalf("%s joins: %v", cfg.Name, err)
			}
		}
	}
	t.Cleanup(func() {
		for _, m := range nodes {
			m.Shutdown()
		}
		// memberlist's Shutdown does not wait for a probe in flight; let
		// it time out (free in fake time) so the bubble ends clean.
		time.Sleep(10 * time.Second)
	})
	return nodes, network
}

func aliveCount(m *Mesh) int {
	n := 0
	for _, mem := range m.Members() {
		if mem.State == StateAlive {
			n++
		}
	}
	return n
}

// Every node publishes a report; every node ends up holding every other
// node's latest report, with metadata decoded, in fake time.
func TestTelemetryConverges(t *testing.T) {
	for _, n := range []int{3, 5, 20} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nodes, _ := memCluster(t, n, ProfileLocal, nil)
				wait.For(t, 30*time.Second, "all members alive everywhere", func() bool {
					for _, m := range nodes {
						if aliveCount(m) != n {
							return false
						}
					}
					return true
				})
				for round := 1; round <= 2; round++ {
					for i, m := range nodes {
						err := m.PublishTelemetry(Telemetry{Load: float64(round) / 10, FreeGPUs: uint16(i),
							Bandwidth: []BuildingBandwidth{{Building: "b0", Available: float64(i) * 1e6}}}, time.Now())
						if err != nil {
							t.Fatal(err)
						}
					}
					want := float64(round) / 10
					wait.For(t, 2*time.Minute, fmt.Sprintf("round %d reports everywhere", round), func() bool {
						for _, m := range nodes {
							for j, mem := range m.Members() {
								if !mem.HasTelemetry || mem.Telemetry.Load != want || int(mem.Telemetry.FreeGPUs) != j {
									return false
								}
							}
						}
						return true
					})
				}
				mem := nodes[n-1].Members()[1]
				if mem.Meta.Building != "b1" || mem.Meta.GPUs != 1 || mem.MetaErr != nil {
					t.Errorf("metadata of node-01 seen by node-%02d: got %+v (err %v), want building b1, 1 GPU", n-1, mem.Meta, mem.MetaErr)
				}
			})
		})
	}
}

// A node that joins late learns existing reports through push/pull state,
// without anyone publishing again.
func TestLateJoinerGetsState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, network := memCluster(t, 3, ProfileLocal, nil)
		for _, m := range nodes {
			m.PublishTelemetry(Telemetry{FreeGPUs: 3}, time.Now())
		}
		wait.For(t, 30*time.Second, "reports spread among the first 3", func() bool {
			_, ok0 := nodes[2].Report("node-00")
			_, ok1 := nodes[2].Report("node-01")
			return ok0 && ok1
		})
		cfg := DefaultLocalConfig()
		cfg.Name, cfg.GossipKeys, cfg.Transport, cfg.Logger = "late", [][]byte{testKey}, network.NewTransport(), discardLogger()
		late, err := Create(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { late.Shutdown(); time.Sleep(10 * time.Second) }()
		addr, port := nodes[2].LocalAddr()
		if _, err := late.Join([]string{fmt.Sprintf("%s:%d", addr, port)}); err != nil {
			t.Fatal(err)
		}
		// Push/pull happens during Join itself.
		for _, m := range nodes {
			if tel, ok := late.Report(m.Name()); !ok || tel.FreeGPUs != 3 {
				t.Errorf("late joiner's report of %s: got %+v (found %v), want 3 free GPUs", m.Name(), tel, ok)
			}
		}
	})
}

// Leave and failure reach the agent as events; a slow reader never blocks
// memberlist (events beyond the buffer are counted as dropped).
func TestEventsLeaveAndFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, _ := memCluster(t, 4, ProfileLocal, nil)
		wait.For(t, 30*time.Second, "4 alive", func() bool { return aliveCount(nodes[0]) == 4 })
		drain(nodes[0])
		if err := nodes[1].Leave(time.Second); err != nil {
			t.Fatal(err)
		}
		nodes[1].Shutdown()
		nodes[2].Shutdown() // crash: no leave message
		got := map[string]EventKind{}
		deadline := time.After(60 * time.Second)
		for len(got) < 2 {
			select {
			case ev := <-nodes[0].Events():
				if ev.Kind == EventLeave || ev.Kind == EventFailed {
					got[ev.Member.Name] = ev.Kind
				}
			case <-deadline:
				t.Fatalf("departure events: got %v, want node-01 leave and node-02 failed", got)
			}
		}
		if got["node-01"] != EventLeave || got["node-02"] != EventFailed {
			t.Errorf("departure events: got %v, want node-01 leave, node-02 failed", got)
		}
		states := map[string]MemberState{}
		for _, mem := range nodes[0].Members() {
			states[mem.Name] = mem.State
		}
		want := map[string]MemberState{"node-00": StateAlive, "node-01": StateLeft, "node-02": StateDead, "node-03": StateAlive}
		if fmt.Sprint(states) != fmt.Sprint(want) {
			t.Errorf("member states: got %v, want %v", states, want)
		}
	})
}

// A node cut off long enough that it and the others declare each other
// dead (and memberlist stops gossiping to the dead) is back in every view
// soon after the network heals, by the reconnect loop. With the loop off
// the cluster stays split, which is why it exists.
func TestPartitionHeals(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reconnect time.Duration
		heals     bool
	}{
		{"reconnect", 5 * time.Second, true},
		{"no reconnect", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nodes, network := memCluster(t, 4, ProfileLocal, nil, func(c *Config) { c.ReconnectInterval = tc.reconnect })
				wait.For(t, 30*time.Second, "4 alive", func() bool { return aliveCount(nodes[0]) == 4 })
				cut := nodes[3]
				addr, port := cut.LocalAddr()
				network.Isolate(fmt.Sprintf("%s:%d", addr, port), true)
				wait.For(t, 2*time.Minute, "both sides declare the other dead", func() bool {
					return stateOf(nodes[0], "node-03") == StateDead && stateOf(cut, "node-00") == StateDead && aliveCount(cut) == 1
				})
				// Past memberlist's gossip-to-the-dead time (15 s here): no
				// message crosses the partition by itself any more.
				time.Sleep(time.Minute)
				network.Isolate(fmt.Sprintf("%s:%d", addr, port), false)
				healed := func() bool {
					for _, m := range nodes {
						if aliveCount(m) != 4 {
							return false
						}
					}
					return true
				}
				if tc.heals {
					wait.For(t, time.Minute, "every node sees 4 alive after the partition heals", healed)
					return
				}
				// Nothing may heal it: two quiet minutes are the point.
				time.Sleep(2 * time.Minute)
				if healed() {
					t.Fatal("the partition healed with reconnect off: the test no longer shows why the loop is needed")
				}
			})
		})
	}
}

func stateOf(m *Mesh, name string) MemberState {
	for _, mem := range m.Members() {
		if mem.Name == name {
			return mem.State
		}
	}
	return ""
}

func drain(m *Mesh) {
	for {
		select {
		case <-m.Events():
		default:
			return
		}
	}
}

func TestEventsNeverBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		network := &MemNetwork{}
		var nodes []*Mesh
		for i := range 6 {
			cfg := DefaultLocalConfig()
			cfg.Name, cfg.GossipKeys, cfg.Transport, cfg.Logger = fmt.Sprintf("n%d", i), [][]byte{testKey}, network.NewTransport(), discardLogger()
			cfg.EventBuffer = 2 // nobody reads: the third event must be dropped, not block
			m, err := Create(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { m.Shutdown(); time.Sleep(10 * time.Second) }()
			nodes = append(nodes, m)
			if i > 0 {
				a, p := nodes[0].LocalAddr()
				if _, err := m.Join([]string{fmt.Sprintf("%s:%d", a, p)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		wait.For(t, 30*time.Second, "6 alive at node 0", func() bool { return aliveCount(nodes[0]) == 6 })
		if d := nodes[0].Stats().EventsDropped; d < 4 {
			t.Errorf("events dropped with a buffer of 2 and 6 joins: got %d, want ≥ 4", d)
		}
	})
}

// Nodes with another gossip key cannot join, nor can a node without one.
func TestWrongGossipKeyCannotJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, network := memCluster(t, 2, ProfileLocal, nil)
		for name, keys := range map[string][][]byte{
			"other key": {bytes.Repeat([]byte{8}, 32)},
			"no key":    nil,
		} {
			cfg := DefaultLocalConfig()
			cfg.Name, cfg.GossipKeys, cfg.Transport, cfg.Logger = "intruder-"+name, keys, network.NewTransport(), discardLogger()
			cfg.AllowPlaintext = keys == nil
			m, err := Create(cfg)
			if err != nil {
				t.Fatal(err)
			}
			addr, port := nodes[0].LocalAddr()
			_, err = m.Join([]string{fmt.Sprintf("%s:%d", addr, port)})
			if !errors.Is(err, ErrWrongGossipKey) {
				t.Errorf("%s: Join error %v, want ErrWrongGossipKey", name, err)
			}
			m.Shutdown()
		}
		time.Sleep(5 * time.Second) // fake time: let memberlist notice anything that got in
		for _, mem := range nodes[0].Members() {
			if mem.Name != "node-00" && mem.Name != "node-01" {
				t.Errorf("member %q got in with a wrong key", mem.Name)
			}
		}
	})
}

// Transfer progress rides on telemetry to every peer (the leader reads
// other nodes' flows from it); a node with more flows than a report holds
// publishes its first MaxFlowEntries, and with IDs too long to fit the
// packet together, as many as fit, instead of failing to publish at all.
func TestTelemetryCarriesFlows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, _ := memCluster(t, 3, ProfileLocal, nil)
		var flows []FlowProgress
		for i := range MaxFlowEntries + 4 {
			flows = append(flows, FlowProgress{ID: fmt.Sprintf("mig/job-%02d-%s", i, strings.Repeat("x", 140)), Remaining: uint64(i) << 20})
		}
		if err := nodes[0].PublishTelemetry(Telemetry{FreeGPUs: 1, Flows: flows}, time.Now()); err != nil {
			t.Fatalf("publish with %d long flows: %v", len(flows), err)
		}
		var got Telemetry
		wait.For(t, 30*time.Second, "node-00's report at node-02", func() bool {
			var ok bool
			got, ok = nodes[2].Report("node-00")
			return ok
		})
		if n := len(got.Flows); n == 0 || n >= MaxFlowEntries {
			t.Fatalf("node-02 holds %d flows of node-00, want some but fewer than %d (the packet limit)", n, MaxFlowEntries)
		}
		for i, f := range got.Flows {
			if f != flows[i] {
				t.Errorf("flow %d: got %+v, want %+v (the first ones kept, in order)", i, f, flows[i])
			}
		}
		short := flows[:MaxFlowEntries+2]
		for i := range short {
			short[i].ID = fmt.Sprintf("ckpt/j%d", i)
		}
		if err := nodes[0].PublishTelemetry(Telemetry{FreeGPUs: 2, Flows: short}, time.Now()); err != nil {
			t.Fatal(err)
		}
		wait.For(t, 30*time.Second, "node-00's second report at node-02", func() bool {
			got, _ = nodes[2].Report("node-00")
			return got.FreeGPUs == 2
		})
		if len(got.Flows) != MaxFlowEntries || got.Flows[MaxFlowEntries-1].ID != short[MaxFlowEntries-1].ID {
			t.Errorf("short IDs: node-02 holds %+v, want the first %d", got.Flows, MaxFlowEntries)
		}
	})
}

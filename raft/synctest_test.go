package raft

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/state"

	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/policy"
)

// TestSynctestTwentyNodesDefaultTimings runs the 20-node scenario in fake
// time with the production (Consul/Nomad-style) Raft timings over an
// in-memory network with real TLS: 7 non-voters depart at once, the leader
// keeps leading, ticks continue and a command commits within 2 s; then the
// leader crashes and a new one takes over and ticks.
func TestSynctestTwentyNodesDefaultTimings(t *testing.T) {
	if testing.Short() {
		t.Skip("20-node cluster: skipped in -short mode")
	}
	synctest.Test(t, func(t *testing.T) {
		dev, err := pki.NewDev()
		if err != nil {
			t.Fatal(err)
		}
		mn := newMemNet()
		gossip := newGossipView()
		nodes := map[policy.NodeID]*Coordinator{}
		defer func() {
			var wg sync.WaitGroup
			for _, c := range nodes {
				wg.Go(func() { _ = c.Shutdown() })
			}
			wg.Wait()
		}()
		for i := range 20 {
			id := policy.NodeID(fmt.Sprintf("n%02d", i))
			b, err := dev.Node(string(id))
			if err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			cfg.NodeID, cfg.TLS, cfg.Bootstrap, cfg.Telemetry = id, b, i == 0, gossip
			cfg.Listener, cfg.Dial = mn.listen(""), mn.dial
			c, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			nodes[id] = c
			gossip.set(Member{ID: id, RaftAddr: c.Addr(), Building: fmt.Sprintf("b%d", i%3), GPUs: 1, Status: MemberAlive,
				Since: time.Now().Add(-time.Duration(100-i) * time.Minute)})
		}
		leader := func() *Coordinator {
			for _, c := range nodes {
				if c.IsLeader() && c.leading.Load() {
					return c
				}
			}
			return nil
		}
		// waitFor polls cond in fake time and returns how long it took.
		waitFor := func(within time.Duration, what string, cond func() bool) time.Duration {
			t.Helper()
			start := time.Now()
			wait.For(t, within, what+" (fake time)", cond)
			return time.Since(start)
		}
		var l *Coordinator
		waitFor(2*time.Minute, "20 servers with 5 voters known everywhere", func() bool {
			l = leader()
			if l == nil {
				return false
			}
			servers, err := l.Servers()
			if err != nil || len(servers) != 20 {
				return false
			}
			var want []policy.NodeID
			for _, s := range servers {
				if s.Role == state.RoleVoter {
					want = append(want, s.ID)
				}
			}
			if len(want) != 5 {
				return false
			}
			for _, c := range nodes {
				ss, _ := c.Servers()
				var got []policy.NodeID
				for _, s := range ss {
					if s.Role == state.RoleVoter {
						got = append(got, s.ID)
					}
				}
				if !slices.Equal(got, want) {
					return false
				}
			}
			return true
		})
		servers, _ := l.Servers()
		var victims []policy.NodeID
		for _, s := range servers {
			if s.Role == state.RoleNonvoter && len(victims) < 7 {
				victims = append(victims, s.ID)
			}
		}
		ticks := l.Ticks()
		var wg sync.WaitGroup
		for _, id := range victims {
			c := nodes[id]
			wg.Go(func() { _ = c.Shutdown() })
		}
		wg.Wait()
		for _, id := range victims {
			delete(nodes, id)
			gossip.setStatus(id, MemberFailed)
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := l.Submit(ctx, testJob("after-7")); err != nil {
			t.Fatalf("command after 7 departures: %v", err)
		}
		t.Logf("command committed %v (fake time) after 7 departures", time.Since(start))
		if !l.IsLeader() {
			t.Fatal("leader lost leadership after non-voter departures")
		}
		waitFor(10*time.Second, "ticks after the departures", func() bool { return l.Ticks() >= ticks+5 })

		// Leader crash: a new leader within the default timeouts.
		old := l.ID()
		_ = l.Shutdown()
		delete(nodes, old)
		gossip.setStatus(old, MemberFailed)
		took := waitFor(30*time.Second, "a new leader", func() bool { l = leader(); return l != nil })
		t.Logf("new leader %s %v (fake time) after the leader crashed", l.ID(), took)
		waitFor(10*time.Second, "ticks on the new leader", func() bool { return l.Ticks() >= 3 })
		if _, err := l.Submit(context.Background(), testJob("after-crash")); err != nil {
			t.Fatal(err)
		}
	})
}

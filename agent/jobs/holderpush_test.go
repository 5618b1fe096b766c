package jobs

import (
	"context"
	"crypto/rand"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/supervisor"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// TestHolderPushesFollowTheLeader: a replica holder's pushes in flight —
// a recovery's restore, an evacuation and a replica copy — take the rate the leader
// decides for them period after period (a lower one, a higher one, and for
// a rate of 0 with P3 on a pause, never "unpaced"), and a push the leader
// no longer decides (the job placed again, the evacuation dropped) is
// cancelled. The holder's manager is driven with states built by the test
// (a real transfer to a real receiver, 8 MiB at 100–200 kB/s: it cannot
// finish on its own while the test runs).
func TestHolderPushesFollowTheLeader(t *testing.T) {
	t.Parallel()
	tc, host := newClusterWithJob(t) // "train": a job the receiver knows
	var holder, dest *testNode
	for _, id := range slices.Sorted(maps.Keys(tc.nodes)) {
		switch {
		case id == host:
		case holder == nil:
			holder = tc.nodes[id]
		default:
			dest = tc.nodes[id]
		}
	}
	// A large version of the job, on the holder only.
	dir := t.TempDir()
	big := make([]byte, 8<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	const version = 1000
	mf, err := holder.store.AddDir("train", version, dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cp := state.Checkpoint{Job: "train", Version: version, ManifestHash: mf.Hash().String(), Size: mf.TotalSize(),
		Source: host, Holders: []policy.NodeID{host, holder.id}, Committed: true}

	// A manager of the holder's store and client that no leader drives.
	sup, err := supervisor.New(fastSupervisor())
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Node: holder.id, Coord: holder.coord, Store: holder.store, Client: holder.client,
		Supervisor: sup, WorkDir: t.TempDir(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	// stateWith is the cluster's state with the version catalogued, the given
	// flow decided (none when its ID is empty) and, for a restore, the job
	// placed on dest with the holder's restore order.
	stateWith := func(flow policy.FlowDecision, restoring bool) *state.State {
		st := tc.state()
		if restoring {
			j := st.Jobs["train"]
			j.Node, j.Restore = dest.id, state.RestoreOrder{From: holder.id, Version: version}
			st.Jobs["train"] = j
		}
		st.Checkpoints["train"] = append(st.Checkpoints["train"], cp)
		st.Decisions.Flows = nil
		if flow.ID != "" {
			st.Decisions.Flows = []policy.FlowDecision{flow}
		}
		return st
	}
	key := pushKey{"train", version, dest.id}
	locked := func(f func()) {
		m.mu.Lock()
		defer m.mu.Unlock()
		f()
	}
	started := func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		p := m.pushes[key]
		return p != nil && p.tr != nil && !p.done
	}
	assigned := func(class policy.TrafficClass) float64 {
		for _, tr := range m.Transfers() {
			if tr.To == dest.id && tr.Class == class && !tr.Done {
				return tr.AssignedRate
			}
		}
		return -1
	}
	ended := func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		p := m.pushes[key]
		return p == nil || p.done
	}

	for _, tt := range []struct {
		name    string
		flow    policy.FlowDecision
		restore bool
		class   policy.TrafficClass
		run     func(context.Context, *state.State, *sync.WaitGroup)
	}{
		{"restore", policy.FlowDecision{ID: policy.RestorePrefix + "train", Job: "train", From: holder.id, To: dest.id,
			Class: policy.ClassMigration, Rate: 100e3}, true, policy.ClassMigration, m.recoveryPushes},
		{"evacuation", policy.FlowDecision{ID: policy.EvacuationPrefix + "train", Job: "train", From: holder.id, To: dest.id,
			Class: policy.ClassPresync, Rate: 100e3}, false, policy.ClassPresync, m.holderCopies},
		{"replica copy", policy.FlowDecision{ID: policy.ReplicaPrefix + "train", Job: "train", From: holder.id, To: dest.id,
			Class: policy.ClassPresync, Rate: 100e3}, false, policy.ClassPresync, m.holderCopies},
	} {
		locked(func() { tt.run(ctx, stateWith(tt.flow, tt.restore), &wg) })
		wait.For(t, 10*time.Second, tt.name+" push under way", started)
		if got := assigned(tt.class); got != tt.flow.Rate {
			t.Fatalf("%s: assigned %.0f B/s at the start, want the decided %.0f", tt.name, got, tt.flow.Rate)
		}
		for _, rate := range []float64{50e3, 200e3, 0} {
			f := tt.flow
			f.Rate = rate
			locked(func() { tt.run(ctx, stateWith(f, tt.restore), &wg) })
			// A decided 0 (no room) reaches the transfer as 0, which holds
			// it at transfer.PausedRate, never unpaced.
			if got := assigned(tt.class); got != rate {
				t.Errorf("%s: decided %.0f B/s, the push in flight goes at %.0f, want %.0f", tt.name, rate, got, rate)
			}
		}
		if !started() {
			t.Fatalf("%s: the push ended before the leader dropped it: the test proves nothing", tt.name)
		}
		// No longer decided: the job placed again elsewhere (no restore
		// order), the evacuation gone from the decisions.
		locked(func() { tt.run(ctx, stateWith(policy.FlowDecision{}, false), &wg) })
		wait.For(t, 10*time.Second, tt.name+" push cancelled once the leader no longer decides it", ended)
		locked(func() { delete(m.pushes, key) }) // the next case starts afresh
	}

	// A replica copy under way when a newer version is committed keeps
	// going (the newer one follows it) while the leader still decides a
	// copy to the same node, at the rate decided now.
	replica := policy.FlowDecision{ID: policy.ReplicaPrefix + "train", Job: "train", From: holder.id, To: dest.id,
		Class: policy.ClassPresync, Rate: 100e3}
	locked(func() { m.holderCopies(ctx, stateWith(replica, false), &wg) })
	wait.For(t, 10*time.Second, "replica copy under way", started)
	newer := cp
	newer.Version = version + 1
	withNewer := func(rate float64) *state.State {
		f := replica
		f.Rate = rate
		st := stateWith(f, false)
		st.Checkpoints["train"] = append(st.Checkpoints["train"], newer)
		return st
	}
	locked(func() { m.holderCopies(ctx, withNewer(150e3), &wg) })
	if !started() {
		t.Fatalf("the copy of v%d was stopped when v%d was committed", version, newer.Version)
	}
	if got := assigned(policy.ClassPresync); got != 150e3 {
		t.Errorf("older copy goes at %.0f B/s, want the rate decided now, 150000", got)
	}
	locked(func() {
		if _, ok := m.pushes[pushKey{"train", newer.Version, dest.id}]; ok {
			t.Errorf("a copy of v%d started beside the one of v%d still under way", newer.Version, version)
		}
	})
	locked(func() { m.holderCopies(ctx, stateWith(policy.FlowDecision{}, false), &wg) })
	wait.For(t, 10*time.Second, "the older copy cancelled once the leader decides no copy", ended)
}

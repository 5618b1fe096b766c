package jobs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
)

// startPersistent starts a node like testCluster.start, but with its Raft
// state, checkpoint store and work directory under dir (so a restart with
// the same dir finds them, as an agent restarted on its data dir does),
// snapshots taken often (a restart restores a recent, stale state at once)
// and the manager's Since set to since. Gossip hears of the node only when
// the caller calls announce.
func (tc *testCluster) startPersistent(id policy.NodeID, dir string, since time.Time) (*testNode, func(gpus int)) {
	tc.t.Helper()
	n := tc.open(id, false, dir, since)
	announce := func(gpus int) {
		tc.gossip.set(raft.Member{ID: id, RaftAddr: n.coord.Addr(), TransferAddr: n.srv.Addr().String(), Building: "b0",
			GPUs: gpus, GPU: policy.GPU{Model: "A100", VRAM: 80 << 30, Capability: 8}, Status: raft.MemberAlive,
			Since: since.Truncate(time.Second)})
	}
	return n, announce
}

// A node whose agent restarts on its data dir after its job recovered
// elsewhere must not run the job again from the Raft state it replays
// locally: its manager waits until the replicated state
// records its new membership, by which time the job is placed elsewhere.
func TestRestartedNodeDoesNotRestartMovedJob(t *testing.T) {
	t.Parallel()
	tc := newCluster(t, []int{0}, fastSupervisor())
	dirs := map[policy.NodeID]string{"n01": t.TempDir(), "n02": t.TempDir()}
	for _, id := range []policy.NodeID{"n01", "n02"} {
		_, announce := tc.startPersistent(id, dirs[id], time.Now().Add(-time.Hour))
		announce(1)
	}
	tc.waitVoters(3)
	tc.submitJob("train")
	host := tc.waitRunning("train", "")
	tc.waitCommitted("train", 2)
	// The host snapshots a state that places the job on it.
	placed := tc.nodes[host].coord.Store().Index()
	wait.For(t, 20*time.Second, "a snapshot on the host of the state that places the job there", func() bool {
		return snapshotIndex(t, dirs[host]) >= placed
	})
	tc.crash(host)
	dest := tc.waitRunning("train", host)
	wait.For(t, 40*time.Second, "the job's start after recovery", func() bool {
		return len(starts(readSteps(t, tc.stepLog))) >= 2
	})
	before := len(starts(readSteps(t, tc.stepLog)))

	// The owner restarts the agent on the same data dir. For two seconds
	// nobody hears of it (gossip has not caught up): its coordinator has
	// only the state it restored, which still places the job here.
	since := time.Now()
	n, announce := tc.startPersistent(host, dirs[host], since)
	stale := n.coord.State().Jobs["train"]
	if stale.Node != host {
		t.Fatalf("the state restored at restart places the job on %q, not on %s: the test proves nothing", stale.Node, host)
	}
	// watch checks for d that the restarted node never runs the job (an
	// absence: there is no condition to wait for).
	watch := func(d time.Duration) {
		running := func() (bool, string) {
			for _, v := range n.mgr.View() {
				if v.Job == "train" && v.State != StateStopped {
					return true, v.State
				}
			}
			return false, ""
		}
		if st, ran := wait.Until(d, running); ran {
			t.Fatalf("restarted %s has the job in state %q (placed on %s now)", host, st, dest)
		}
	}
	watch(2 * time.Second)
	announce(1)
	wait.For(t, 30*time.Second, "the restarted node's membership in its own state", func() bool {
		rec, ok := n.coord.State().Nodes[host]
		return ok && rec.State == state.NodeActive && !rec.Joined.Before(since.Truncate(time.Second))
	})
	watch(3 * time.Second)
	if after := len(starts(readSteps(t, tc.stepLog))); after != before {
		t.Errorf("job started %d times after the restart of %s, want 0 (it runs on %s)", after-before, host, dest)
	}
	if j := n.coord.State().Jobs["train"]; j.Node != dest {
		t.Errorf("restarted node's state places the job on %s, want %s", j.Node, dest)
	}
	t.Logf("state restored at restart placed the job on %q (%s); the leader's on %s", stale.Node, stale.State, dest)
}

// snapshotIndex is the index of the newest Raft snapshot a node with data
// dir dir took (0 if none): hashicorp/raft's file snapshot store keeps
// each one's metadata in snapshots/ID/meta.json.
func snapshotIndex(t *testing.T, dir string) uint64 {
	t.Helper()
	metas, err := filepath.Glob(filepath.Join(dir, "raft", "raft", "snapshots", "*", "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	var newest uint64
	for _, m := range metas {
		b, err := os.ReadFile(m)
		if err != nil {
			continue // being written or replaced
		}
		var meta struct{ Index uint64 }
		if json.Unmarshal(b, &meta) == nil {
			newest = max(newest, meta.Index)
		}
	}
	return newest
}

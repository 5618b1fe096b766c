package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/web"
)

// A scheduled reclaim whose hand-off moves a fresh final checkpoint of a
// known size reports at least those bytes sent, although the job's
// transfers are no longer listed once it moved.
func TestScheduledReclaimReportsBytesSent(t *testing.T) {
	t.Parallel()
	const blob = 2 << 20
	// The step job, writing blob fresh random bytes into every checkpoint:
	// the destination never holds the final checkpoint's chunks.
	job := fmt.Sprintf(`#!/bin/sh
id=$(cat /proc/sys/kernel/random/uuid)
log="$HOME/steps.log"
step=0
if [ -n "$RECLAIMNET_RESTORE_DIR" ]; then step=$(cat "$RECLAIMNET_RESTORE_DIR/step"); fi
echo "$id start $step $RECLAIMNET_RESTART_COUNT" >> "$log"
ck=0
trap 'ck=1' USR1
trap 'echo "$id term $step" >> "$log"; exit 0' TERM
touch "$RECLAIMNET_READY_FILE"
while :; do
  if [ "$ck" = 1 ]; then
    ck=0
    head -c %d /dev/urandom > "$RECLAIMNET_CKPT_DIR/blob"
    echo "$step" > "$RECLAIMNET_CKPT_DIR/step"
    touch "$RECLAIMNET_CKPT_DIR/.complete"
    echo "$id ckpt $step" >> "$log"
  fi
  step=$((step+1)); echo "$id step $step" >> "$log"
  sleep 0.05
done
`, blob)
	c, byName := startJobCluster(t)
	host, _ := startStepJob(t, c, byName, "bytes", job)
	notice := 25 * time.Second
	r := call(t, host, localapi.Request{Op: localapi.OpReclaim, Notice: notice})
	if r.Error != "" || r.Reclaim == nil {
		t.Fatalf("reclaim: %+v", r)
	}
	var rep *localapi.ReclaimReport
	wait.For(t, notice, "reclaim complete with the owner's report", func() bool {
		st := call(t, host, localapi.Request{Op: localapi.OpReclaimStatus}).Reclaim
		if st == nil || !st.Complete || st.Report == nil {
			return false
		}
		rep = st.Report
		return true
	})
	hist := host.agent.Coordinator().State().ReclaimReports
	handedOff := false
	for _, e := range hist {
		for _, o := range e.Jobs {
			if e.Node == policy.NodeID(host.info.Node) && o.Job == "bytes" && o.HandedOff {
				handedOff = true
			}
		}
	}
	if len(rep.Moved) != 1 || !handedOff {
		t.Fatalf("report %+v, history %+v: want the job handed off", rep, hist)
	}
	if rep.BytesSent < blob {
		t.Errorf("report bytes sent = %d, want ≥ %d (the final checkpoint's fresh blob)", rep.BytesSent, blob)
	}
	t.Logf("report: moved %v, bytes sent %d", rep.Moved, rep.BytesSent)
	waitLeft(t, host, time.Until(r.Reclaim.Deadline)+30*time.Second)
}

// A node that left at its reclaim's deadline and comes back (its agent
// restarted on the same data dir) is alive, not leaving, in the cluster
// view, and the replicated state holds no pending reclaim for it (the
// racy orders are raft's TestReclaimEndsWithDepartureAndRejoin).
func TestReclaimedNodeComesBackNotLeaving(t *testing.T) {
	t.Parallel()
	c, _ := startJobCluster(t)
	leader := c.leader()
	var host *testNode
	for _, n := range c.nodes {
		if n != leader {
			host = n
			break
		}
	}
	hostCfg := host.agent.cfg
	id := policy.NodeID(hostCfg.Name)
	r := call(t, host, localapi.Request{Op: localapi.OpReclaim, Notice: 3 * time.Second})
	if r.Error != "" || r.Reclaim == nil {
		t.Fatalf("reclaim: %+v", r)
	}
	waitLeft(t, host, 40*time.Second)
	hostCfg.Join = []string{leader.info.GossipAddr}
	c.start(hostCfg)
	wait.For(t, 90*time.Second, "the returning node alive, active and without a pending reclaim in the leader's view", func() bool {
		st := leader.agent.Coordinator().State()
		if _, pending := st.Reclaims[id]; pending || st.Nodes[id].State != state.NodeActive {
			return false
		}
		for _, m := range leader.agent.view.Web(time.Now()).Cluster.Members {
			if m.ID == id {
				return m.State == web.MemberAlive
			}
		}
		return false
	})
	st := leader.agent.Coordinator().State()
	left := false
	for _, d := range st.Departures {
		left = left || d.Node == id
	}
	if !left {
		t.Errorf("no departure of %s in the log: %+v", id, st.Departures)
	}
}

package jobs

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

func TestPaceForDeadline(t *testing.T) {
	t.Parallel()
	const assigned, ceiling = 1e6, 1.1e6
	for _, c := range []struct {
		name      string
		remaining int64
		assigned  float64
		ceiling   float64
		left      time.Duration
		want      float64
	}{
		{"on time", 1e6, assigned, ceiling, 10 * time.Second, assigned},
		{"a little late", 1e6, assigned, ceiling, deadlineMargin + 950*time.Millisecond, 1e6 / 0.95},
		{"too late for the ceiling", 1e6, assigned, ceiling, deadlineMargin + 500*time.Millisecond, ceiling},
		{"past the deadline", 1e6, assigned, ceiling, 0, ceiling},
		{"done", 0, assigned, ceiling, time.Second, assigned},
		{"unpaced", 1e6, 0, 0, time.Second, 0},
		{"no ceiling above the rate", 1e6, assigned, assigned, time.Second, assigned},
	} {
		got := paceForDeadline(c.remaining, c.assigned, c.ceiling, c.left)
		if math.Abs(got-c.want) > 1e-6*math.Max(1, c.want) {
			t.Errorf("%s: pace %v, want %v", c.name, got, c.want)
		}
	}
	if got := reportedRestart(2*time.Second, []time.Duration{time.Second, 3 * time.Second, 2 * time.Second}); got != 5*time.Second {
		t.Errorf("reported Tr %v, want 5s (restart 2s + slowest checkpoint 3s)", got)
	}
}

// slowCkptJob is stepJob with a checkpoint that takes $CKSLOW seconds to
// write, like a real trainer writing gigabytes.
var slowCkptJob = strings.Replace(stepJob, `      echo "$step" > "$RECLAIMNET_CKPT_DIR/step"`,
	`      sleep "${CKSLOW:-0}"
      echo "$step" > "$RECLAIMNET_CKPT_DIR/step"`, 1)

// The leader's Tr includes the host's measured checkpoint write + commit
// time: a notice that leaves no room for the final
// checkpoint is degraded up front instead of admitted and missed, and a
// tight notice that does leave room is handed off before its deadline.
func TestHandoffAccountsForCheckpointTime(t *testing.T) {
	t.Parallel()
	const slow = 1500 * time.Millisecond
	if !strings.Contains(slowCkptJob, "CKSLOW") {
		t.Fatal("the slow-checkpoint job script was not built")
	}
	setup := func(t *testing.T) (*testCluster, policy.NodeID, time.Duration) {
		tc := newCluster(t, []int{0, 1, 1}, fastSupervisor())
		script := filepath.Join(t.TempDir(), "slow.sh")
		if err := os.WriteFile(script, []byte(slowCkptJob), 0o755); err != nil {
			t.Fatal(err)
		}
		tc.waitVoters(3)
		tc.submitCommand("train", []string{"/bin/sh", script}, []string{"STEPLOG=" + tc.stepLog, "CKSLOW=1.5"})
		host := tc.waitRunning("train", "")
		tc.waitCommitted("train", 1)
		var tr time.Duration
		wait.For(t, 30*time.Second, "Tr including the checkpoint time", func() bool {
			tr = tc.state().Jobs["train"].RestartTime
			return tr >= slow
		})
		return tc, host, tr
	}
	handoff := func(t *testing.T, tc *testCluster) policy.HandoffDecision {
		var h policy.HandoffDecision
		wait.For(t, 20*time.Second, "a hand-off decision", func() bool {
			for _, d := range tc.state().Decisions.Handoffs {
				if d.Job == "train" {
					h = d
					return true
				}
			}
			return false
		})
		return h
	}
	t.Run("no room", func(t *testing.T) {
		tc, host, tr := setup(t)
		var jv JobView
		for _, v := range tc.nodes[host].mgr.View() {
			if v.Job == "train" {
				jv = v
			}
		}
		if jv.CheckpointTime < slow {
			t.Fatalf("host's view: checkpoint time %v, want at least %v", jv.CheckpointTime, slow)
		}
		// Longer than the restart alone (what Tr was before), shorter than
		// restart + final checkpoint.
		notice := jv.RestartTime + jv.CheckpointTime/2
		t.Logf("restart %v, checkpoint %v, Tr %v, notice %v", jv.RestartTime, jv.CheckpointTime, tr, notice)
		now := time.Now()
		tc.submitVia(host, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: host, Announced: now, Deadline: now.Add(notice)}})
		// Degraded up front, the job is recovered at once from its replica
		// (the decision itself may be replaced by the next period before
		// a poll sees it): the reclaim's history says so.
		dest := tc.waitRunning("train", host)
		outcome := tc.outcome(host, "train")
		if outcome.HandedOff || outcome.To != dest || outcome.Replica == "" {
			t.Errorf("outcome %+v with a %v notice and Tr %v: want a degraded recovery onto %s from a replica, not a hand-off", outcome, notice, tr, dest)
		}
	})
	t.Run("tight", func(t *testing.T) {
		tc, host, tr := setup(t)
		notice := max(5*time.Second, tr+3*time.Second)
		now := time.Now()
		deadline := now.Add(notice)
		tc.submitVia(host, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: host, Announced: now, Deadline: deadline}})
		h := handoff(t, tc)
		if h.Degraded || h.To == "" {
			t.Fatalf("hand-off %+v with a %v notice and Tr %v: want admitted", h, notice, tr)
		}
		var movedAt time.Time
		wait.For(t, notice+20*time.Second, "the move committed", func() bool {
			if j := tc.state().Jobs["train"]; j.Node == h.To {
				movedAt = time.Now()
				return true
			}
			return false
		})
		if movedAt.After(deadline) {
			t.Errorf("moved at %v, %v after the deadline (notice %v, Tr %v)", movedAt.Format(time.StampMilli), movedAt.Sub(deadline), notice, tr)
		}
		t.Logf("notice %v, Tr %v: moved %v before the deadline", notice, tr, deadline.Sub(movedAt))
	})
}

// TestNextCheckpoint: the checkpoint timer runs on an interval unless a
// request is in flight; an order to checkpoint now waits for the push in
// flight (it is the rescue), and one already taken under the same
// decisions waits nowOrderHold for newer ones; a periodic interval does
// neither (its version queues).
func TestNextCheckpoint(t *testing.T) {
	t.Parallel()
	last := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	periodic := policy.JobDecision{Interval: 10 * time.Minute}
	now := policy.JobDecision{Interval: policy.RescueInterval}
	for _, c := range []struct {
		name          string
		jd            policy.JobDecision
		busy, pushing bool
		takenAt       time.Time
		due           time.Time // zero: the timer does not run
	}{
		{"periodic", periodic, false, false, time.Time{}, last.Add(10 * time.Minute)},
		{"periodic, push in flight", periodic, false, true, time.Time{}, last.Add(10 * time.Minute)},
		{"periodic, request in flight", periodic, true, false, time.Time{}, time.Time{}},
		{"now", now, false, false, time.Time{}, last.Add(time.Second)},
		{"now, push in flight", now, false, true, time.Time{}, time.Time{}},
		{"now, already taken", now, false, false, last.Add(-5 * time.Second), last.Add(nowOrderHold - 5*time.Second)},
		{"now, taken long ago", now, false, false, last.Add(-time.Hour), last.Add(time.Second)},
		{"no interval", policy.JobDecision{}, false, false, time.Time{}, time.Time{}},
	} {
		due, ok := nextCheckpoint(c.jd, c.busy, c.pushing, last, c.takenAt)
		if ok != !c.due.IsZero() || ok && !due.Equal(c.due) {
			t.Errorf("%s: due %v (runs %v), want %v", c.name, due, ok, c.due)
		}
	}
}

package agent

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/web"
)

// startStepJob submits the e2e sh job and waits until it runs with a
// committed checkpoint held off its host; it returns the host and the
// step log's path.
func startStepJob(t *testing.T, c *testCluster, byName map[string]*testNode, name, job string) (*testNode, string) {
	t.Helper()
	script, stepLog := c.writeScript(name+".sh", job), c.jobFiles(name, "steps.log")
	resp := call(t, c.nodes[0], localapi.Request{Op: localapi.OpRun, Job: &localapi.JobRequest{Name: name, Command: []string{"/bin/sh", script},
		GPUs: 1, LossBudget: time.Hour, SizeHint: 1 << 10}})
	if resp.Error != "" {
		t.Fatalf("run: %s", resp.Error)
	}
	var host string
	wait.For(t, 90*time.Second, "job running with a committed checkpoint held off its host", func() bool {
		j, ok := findJob(call(t, c.nodes[0], localapi.Request{Op: localapi.OpJobs}).Jobs, name)
		host = j.Node
		return ok && j.State == policy.JobRunning.String() && j.Node != "" && j.LastCommitted >= 1 &&
			slices.ContainsFunc(j.Holders, func(h string) bool { return h != j.Node })
	})
	return byName[host], stepLog
}

// pidsOf returns the pids in the step log and whether each logged "term".
func pidsOf(t *testing.T, stepLog string) map[string]bool {
	out := map[string]bool{}
	for _, l := range readStepLog(t, stepLog) {
		out[l.pid] = out[l.pid] || l.event == "term"
	}
	return out
}

// waitLeft waits until n's Run returned on its own (a reclaim's leave).
func waitLeft(t *testing.T, n *testNode, within time.Duration) {
	t.Helper()
	select {
	case err := <-n.done:
		if err != nil {
			t.Errorf("%s: Run: %v", n.info.Node, err)
		}
		n.done = nil
	case <-time.After(within):
		t.Fatalf("%s did not leave within %v", n.info.Node, within)
	}
}

// TestScheduledReclaimHandsOff: a cancelled reclaim changes nothing; a
// scheduled reclaim with enough notice hands the job off (it lands on
// another node and its step counter continues), the status says
// complete only once the job's process here has stopped, and the node
// leaves at the deadline with the owner's report stored.
func TestScheduledReclaimHandsOff(t *testing.T) {
	t.Parallel()
	c, byName := startJobCluster(t)
	host, stepLog := startStepJob(t, c, byName, "sched", e2eStepJob)

	// --cancel restores: announce on another node, cancel, no reclaim left.
	var other *testNode
	for _, n := range c.nodes {
		if n != host {
			other = n
			break
		}
	}
	if r := call(t, other, localapi.Request{Op: localapi.OpReclaim, Notice: 30 * time.Second}); r.Error != "" || r.Reclaim == nil || !r.Reclaim.Active {
		t.Fatalf("reclaim on %s: %+v", other.info.Node, r)
	}
	if r := call(t, other, localapi.Request{Op: localapi.OpReclaim, Notice: 30 * time.Second}); r.Kind != localapi.KindBadRequest {
		t.Errorf("second reclaim: got kind %q (%q), want %q", r.Kind, r.Error, localapi.KindBadRequest)
	}
	if r := call(t, other, localapi.Request{Op: localapi.OpReclaimCancel}); r.Error != "" || r.Reclaim.Active {
		t.Fatalf("cancel: %+v", r)
	}
	wait.For(t, 10*time.Second, "the cancelled reclaim gone from the replicated state", func() bool {
		_, ok := other.agent.Coordinator().State().Reclaims[policy.NodeID(other.info.Node)]
		return !ok
	})

	before := pidsOf(t, stepLog)
	lastStep := 0
	for _, l := range readStepLog(t, stepLog) {
		lastStep = max(lastStep, l.step)
	}
	notice := 25 * time.Second
	r := call(t, host, localapi.Request{Op: localapi.OpReclaim, Notice: notice})
	if r.Error != "" || r.Reclaim == nil {
		t.Fatalf("reclaim: %+v", r)
	}
	if len(r.Reclaim.Jobs) != 1 || r.Reclaim.Jobs[0].Job != "sched" {
		t.Errorf("reclaim jobs %+v, want [sched]", r.Reclaim.Jobs)
	}
	deadline := r.Reclaim.Deadline
	if d := deadline.Sub(r.Reclaim.Announced); d != notice {
		t.Errorf("deadline %v after the announcement, want %v", d, notice)
	}
	// Poll the status: whenever it says complete, the old process must
	// have stopped (logged its TERM).
	var complete localapi.ReclaimStatus
	wait.For(t, notice, "reclaim status complete", func() bool {
		st := call(t, host, localapi.Request{Op: localapi.OpReclaimStatus}).Reclaim
		if st == nil || !st.Complete {
			return false
		}
		now := pidsOf(t, stepLog)
		for pid := range before {
			if !now[pid] {
				t.Fatalf("status complete (%+v) while process %s still runs (no term in the step log)", st.Jobs, pid)
			}
		}
		complete = *st
		return true
	})
	if j := complete.Jobs[0]; j.Progress != localapi.ProgressMoved || j.To == "" || j.To == host.info.Node {
		t.Errorf("complete status job %+v, want handed off to another node", j)
	}
	if complete.Report == nil || !slices.Contains(complete.Report.Moved, "sched") {
		t.Errorf("report %+v, want sched moved", complete.Report)
	}
	// The report is replicated: another node's web status lists it in the
	// reclaim history.
	historyOf := func(n *testNode) []web.ReclaimRecord {
		var out []web.ReclaimRecord
		for _, h := range n.agent.view.Web(time.Now()).Reclaims.History {
			if h.Reclaim.Node == policy.NodeID(host.info.Node) {
				out = append(out, h)
			}
		}
		return out
	}
	// The cluster records the hand-off in the history at once; the owner's
	// report joins that entry when the reclaimed node sends it.
	wait.For(t, 20*time.Second, "the owner's reclaim report in another node's web status history", func() bool {
		h := historyOf(other)
		return len(h) > 0 && h[0].OwnerReport
	})
	if h := historyOf(other); len(h) != 1 || len(h[0].Jobs) != 1 || h[0].Jobs[0].Job != "sched" || !h[0].Jobs[0].FinalCheckpoint ||
		h[0].Jobs[0].To == "" || h[0].Jobs[0].To == policy.NodeID(host.info.Node) ||
		!h[0].Reclaim.Deadline.Equal(deadline) || !h[0].OnTime {
		t.Errorf("history on %s got %+v, want one on-time record with sched handed off, deadline %v", other.info.Node, h, deadline)
	}
	// The job runs elsewhere and its step counter continues.
	wait.For(t, 60*time.Second, "the moved job's new process stepping past the old step", func() bool {
		for _, l := range readStepLog(t, stepLog) {
			if _, old := before[l.pid]; !old && l.event == "start" && l.step < lastStep {
				t.Fatalf("new process started at step %d, want ≥ %d (the step before the reclaim)", l.step, lastStep)
			}
			if _, old := before[l.pid]; !old && l.event == "step" && l.step > lastStep {
				return true
			}
		}
		return false
	})
	// The histograms saw it: the host wrote checkpoints and sent the
	// final one as a migration; the destination measured the downtime.
	if n, _ := histogramOf(t, host, "reclaimnet_checkpoint_write_duration_seconds", nil); n == 0 {
		t.Errorf("%s: no checkpoint write recorded", host.info.Node)
	}
	if n, _ := histogramOf(t, host, "reclaimnet_transfer_duration_seconds", map[string]string{"class": "migration"}); n == 0 {
		t.Errorf("%s: no migration transfer recorded", host.info.Node)
	}
	dest := byName[complete.Jobs[0].To]
	if dest == nil {
		t.Fatalf("destination %q is not a node of the cluster", complete.Jobs[0].To)
	}
	if n, sum := histogramOf(t, dest, "reclaimnet_handoff_downtime_seconds", nil); n != 1 || sum <= 0 || sum > notice.Seconds()+60 {
		t.Errorf("%s: hand-off downtime %d samples, %.3f s in all; want one, above 0 and within the notice plus a minute", dest.info.Node, n, sum)
	}
	// At the deadline the node leaves on its own.
	waitLeft(t, host, time.Until(deadline)+30*time.Second)
	if time.Now().Before(deadline) {
		t.Errorf("node left before the deadline %v", deadline)
	}
	rep, err := localapi.ReadReport(host.agent.DataDir())
	if err != nil || rep == nil || rep.Left.IsZero() || !slices.Contains(rep.Moved, "sched") {
		t.Errorf("stored report %+v (%v), want sched moved and the leave time", rep, err)
	}
	// The leave time updated the replicated report instead of adding one.
	if h := historyOf(other); len(h) != 1 {
		t.Errorf("history on %s after the leave got %d records for %s, want 1: %+v", other.info.Node, len(h), host.info.Node, h)
	}
	t.Logf("report: %+v", rep)
}

// TestEmergencyReclaim: the reclaim-now operation stops the job here,
// the node leaves at once without waiting, and the job recovers on
// another node from its replica; the history's downtime runs from the
// command to the job's readiness there (at least the 2 s the job takes
// to become ready, not the moment of its placement).
func TestEmergencyReclaim(t *testing.T) {
	t.Parallel()
	c, byName := startJobCluster(t)
	slow := strings.Replace(e2eStepJob, `touch "$RECLAIMNET_READY_FILE"`, `sleep 2; touch "$RECLAIMNET_READY_FILE"`, 1)
	host, stepLog := startStepJob(t, c, byName, "emerg", slow)
	before := pidsOf(t, stepLog)
	start := time.Now()
	r := call(t, host, localapi.Request{Op: localapi.OpReclaimNow})
	if r.Error != "" || r.Reclaim == nil || !r.Reclaim.Emergency || r.Reclaim.Report == nil {
		t.Fatalf("reclaim-now: %+v", r)
	}
	if !slices.Contains(r.Reclaim.Report.Degraded, "emerg") {
		t.Errorf("report %+v, want emerg degraded", r.Reclaim.Report)
	}
	waitLeft(t, host, 20*time.Second)
	t.Logf("left %v after the command", time.Since(start))
	now := pidsOf(t, stepLog)
	for pid := range before {
		if !now[pid] {
			t.Errorf("process %s of the job did not stop (no term in the step log) after the node left", pid)
		}
	}
	var survivor *testNode
	for _, n := range c.nodes {
		if n != host {
			survivor = n
			break
		}
	}
	wait.For(t, 90*time.Second, "job emerg running again on another node", func() bool {
		j, ok := findJob(call(t, survivor, localapi.Request{Op: localapi.OpJobs}).Jobs, "emerg")
		return ok && j.State == policy.JobRunning.String() && j.Node != host.info.Node
	})
	var out web.ReclaimOutcome
	wait.For(t, 60*time.Second, "the recovery's downtime in the history", func() bool {
		for _, h := range survivor.agent.view.Web(time.Now()).Reclaims.History {
			for _, o := range h.Jobs {
				if h.Reclaim.Node == policy.NodeID(host.info.Node) && o.Job == "emerg" {
					out = o
				}
			}
		}
		return out.Downtime > 0
	})
	if out.Downtime < 2*time.Second || out.Downtime > time.Since(start) || out.Resuming {
		t.Errorf("recovery downtime %v (resuming %v), want from the command to the readiness: at least 2 s, at most the %v since the command",
			out.Downtime, out.Resuming, time.Since(start))
	}
	t.Logf("recovery downtime %v", out.Downtime)
}

// TestScheduledReclaimDegraded: a notice shorter than the job's restart
// time cannot hand the job off; it is marked degraded, stopped here
// (status complete only then), and recovers elsewhere from its replica
// once the node left at the deadline.
func TestScheduledReclaimDegraded(t *testing.T) {
	t.Parallel()
	c, byName := startJobCluster(t)
	// The job takes 4 s to become ready: its restart time Tr.
	slow := strings.Replace(e2eStepJob, `touch "$RECLAIMNET_READY_FILE"`, `sleep 4; touch "$RECLAIMNET_READY_FILE"`, 1)
	host, stepLog := startStepJob(t, c, byName, "degr", slow)
	var tr time.Duration
	wait.For(t, 30*time.Second, "the job's measured restart time", func() bool {
		j, _ := findJob(call(t, host, localapi.Request{Op: localapi.OpJobs}).Jobs, "degr")
		tr = j.RestartTime
		return tr > 3*time.Second
	})
	before := pidsOf(t, stepLog)
	notice := tr / 2
	r := call(t, host, localapi.Request{Op: localapi.OpReclaim, Notice: notice})
	if r.Error != "" || r.Reclaim == nil {
		t.Fatalf("reclaim: %+v", r)
	}
	deadline := r.Reclaim.Deadline
	// Decided early, not at the deadline: the job is marked degraded and
	// stopped, and the status says complete, before the deadline.
	var complete localapi.ReclaimStatus
	wait.For(t, time.Until(deadline), "status complete before the deadline", func() bool {
		st := call(t, host, localapi.Request{Op: localapi.OpReclaimStatus}).Reclaim
		if st == nil || !st.Complete {
			return false
		}
		now := pidsOf(t, stepLog)
		for pid := range before {
			if !now[pid] {
				t.Fatalf("status complete (%+v) while process %s still runs", st.Jobs, pid)
			}
		}
		complete = *st
		return true
	})
	t.Logf("restart time %v, notice %v, complete status %+v", tr, notice, complete.Jobs)
	if j := complete.Jobs[0]; j.Progress != localapi.ProgressDegraded || !strings.Contains(j.Detail, "replica v") {
		t.Errorf("complete status job %+v, want degraded naming its replica", j)
	}
	waitLeft(t, host, time.Until(deadline)+30*time.Second)
	now := pidsOf(t, stepLog)
	for pid := range before {
		if !now[pid] {
			t.Errorf("process %s still running after the node left", pid)
		}
	}
	rep, err := localapi.ReadReport(host.agent.DataDir())
	if err != nil || rep == nil || !slices.Contains(rep.Degraded, "degr") || slices.Contains(rep.Moved, "degr") {
		t.Errorf("stored report %+v (%v), want degr degraded, not moved", rep, err)
	}
	var survivor *testNode
	for _, n := range c.nodes {
		if n != host {
			survivor = n
			break
		}
	}
	wait.For(t, 90*time.Second, "job degr running again on another node", func() bool {
		j, ok := findJob(call(t, survivor, localapi.Request{Op: localapi.OpJobs}).Jobs, "degr")
		return ok && j.State == policy.JobRunning.String() && j.Node != host.info.Node
	})
}

package demo

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/web"
)

func member(id, b string, s web.MemberState) web.Member {
	return web.Member{ID: policy.NodeID(id), Building: b, State: s}
}

// The differ explains each change from the agents' own state: who leads,
// who leaves, the hand-off plan with its feasibility and candidates, the
// recovery with its replica holder, the commits, the owner's report; and
// reports each thing once.
func TestDifferExplainsChanges(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	job := web.Job{ID: JobName, State: "running", Node: "a1", LossBudget: 5 * time.Second, CheckpointBytes: 8 << 20,
		Decision:       &web.JobDecision{Interval: 10 * time.Second, Hazard: 1e-5, Bandwidth: 2e7},
		LastCheckpoint: &web.Checkpoint{Version: 1, Bytes: 8 << 20, Holders: []policy.NodeID{"a1", "a2"}}, Standby: "a2"}
	first := web.Status{GeneratedAt: t0, Cluster: web.Cluster{Leader: "a1",
		Members: []web.Member{member("a1", "a", web.MemberAlive), member("a2", "a", web.MemberAlive), member("b1", "b", web.MemberAlive)}},
		Jobs: []web.Job{job}}
	second := first
	second.GeneratedAt = t0.Add(time.Second)
	second.Cluster.Leader = "a2"
	second.Cluster.Members = []web.Member{member("a1", "a", web.MemberLeaving), member("a2", "a", web.MemberAlive), member("b1", "b", web.MemberAlive)}
	rec := web.Reclaim{Node: "a1", Announced: t0, Deadline: t0.Add(40 * time.Second)}
	second.Reclaims.Pending = []web.PendingReclaim{{Reclaim: rec, Jobs: []policy.JobID{JobName}}}
	second.Decisions = []web.Decision{{Kind: web.DecisionHandoff, Handoff: web.WebHandoff(policy.HandoffDecision{Job: JobName, From: "a1", To: "a2",
		FinalCheckpoint: true, Bytes: 3 << 20, Deadline: rec.Deadline,
		Candidates: []policy.Candidate{{Node: "a2", Score: 0.5, Survival: 0.99}, {Node: "a1", Rejected: policy.RejectSource}}})}}
	j2 := job
	j2.State, j2.Node = "running", "a2"
	j2.LastCheckpoint = &web.Checkpoint{Version: 2, Bytes: 8 << 20, Holders: []policy.NodeID{"a2", "b1"}}
	second.Jobs = []web.Job{j2}
	second.Reclaims.History = []web.ReclaimRecord{{Reclaim: rec, Released: t0.Add(2 * time.Second), OnTime: true, OwnerReport: true,
		Jobs: []web.ReclaimOutcome{{Job: JobName, To: "a2", FinalCheckpoint: true}}}}

	var out bytes.Buffer
	tl := &timeline{start: t0, out: &out}
	d := newDiffer()
	d.diff(&first, tl.add)
	election := first // a moment without a leader is not reported
	election.Cluster.Leader = ""
	d.diff(&election, tl.add)
	d.diff(&first, tl.add)
	d.diff(&second, tl.add)
	n := len(tl.snapshot())
	d.diff(&second, tl.add)
	if got := len(tl.snapshot()); got != n {
		t.Errorf("the same status again added %d events, want 0:\n%s", got-n, out.String())
	}
	text := out.String()
	if strings.Count(text, "Raft leader is now") != 1 {
		t.Errorf("want exactly one leader change (a1 → a2), the election gap unreported:\n%s", text)
	}
	for _, want := range []string{
		"cluster formed: 3 members a1(a) a2(a) b1(b); Raft leader a1",
		"capped at 2·Lmax: the loss budget is 5s",
		"checkpoint v1 committed: 8.0 MiB, held by a1,a2",
		"Raft leader is now a2 (was a1)",
		"a1 is leaving (was alive): a reclaim is pending",
		"reclaim of a1 announced: it leaves at 03:00:40 (notice 40s)",
		"hand-off planned a1 → a2: a final checkpoint fits in the notice (P1.6): zero work lost; the destination lacks 3.0 MiB",
		"ranked: a2 σ=0.50s (transfer 0s, survival 0.990); rejected: a1 is the source",
		"job train running on a2 (was running on a1)",
		"checkpoint v2 committed: 8.0 MiB, held by a2,b1",
		"owner's report (replicated) for the scheduled reclaim of a1: released 2s after the announcement (on time); jobs: train moved to a2 with a final checkpoint",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("timeline lacks %q:\n%s", want, text)
		}
	}

	// An order to checkpoint now is not explained as an interval.
	now := second
	now.GeneratedAt = t0.Add(1500 * time.Millisecond)
	jNow := j2
	jNow.Decision = &web.JobDecision{Interval: policy.RescueInterval, Bandwidth: 2e7}
	now.Jobs = []web.Job{jNow}
	d.diff(&now, tl.add)
	if want := "P1: train checkpoints now: a last chance before its node leaves, or the work it would lose"; !strings.Contains(out.String(), want) ||
		strings.Contains(out.String(), "checkpoints every 1s") {
		t.Errorf("timeline lacks %q (or calls the order an interval):\n%s", want, out.String())
	}

	// An emergency: a recovery placement from the replica holder.
	third := second
	third.GeneratedAt = t0.Add(2 * time.Second)
	third.Decisions = []web.Decision{{Kind: web.DecisionPlacement, Placement: web.WebPlacement(policy.Placement{Job: JobName, To: "b1", From: "b1", Recovery: true,
		Candidates: []policy.Candidate{{Node: "b1", Score: 0.4, Survival: 0.95}, {Node: "a2", Rejected: policy.RejectLeaving}}})}}
	d.diff(&third, tl.add)
	if want := "recovery: train restarts on b1 from the freshest committed replica, pushed by b1 (P2 without a deadline). ranked: b1 σ=0.40s (transfer 0s, survival 0.950); rejected: a2 is leaving"; !strings.Contains(out.String(), want) {
		t.Errorf("timeline lacks %q:\n%s", want, out.String())
	}
}

// A recovery whose placement decision came and went between two looks is
// still explained, from the checkpoint catalogue.
func TestDifferInfersMissedRecovery(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	ckpt := &web.Checkpoint{Version: 3, Bytes: 1 << 20, Holders: []policy.NodeID{"a2", "b1"}}
	st := func(sec int, state, node string) *web.Status {
		return &web.Status{GeneratedAt: t0.Add(time.Duration(sec) * time.Second), Cluster: web.Cluster{Leader: "b2"},
			Jobs: []web.Job{{ID: JobName, State: state, Node: policy.NodeID(node), LastCheckpoint: ckpt}}}
	}
	var out bytes.Buffer
	tl := &timeline{start: t0, out: &out}
	d := newDiffer()
	for _, s := range []*web.Status{st(0, "running", "a2"), st(1, "recovering", ""), st(2, "running", "b1"), st(3, "running", "b1")} {
		d.diff(s, tl.add)
	}
	want := "recovery: train restarted on b1 from its freshest committed checkpoint (v3 or newer) after a2 was lost"
	if got := strings.Count(out.String(), "recovery: "); got != 1 || !strings.Contains(out.String(), want) {
		t.Errorf("got %d recovery lines, want 1 with %q:\n%s", got, want, out.String())
	}
	// With the decision seen, nothing is inferred.
	out.Reset()
	d = newDiffer()
	tl = &timeline{start: t0, out: &out}
	withDecision := st(2, "running", "b1")
	withDecision.Decisions = []web.Decision{{Kind: web.DecisionPlacement, Placement: &web.Placement{Job: JobName, To: "b1", From: "a2", Recovery: true}}}
	for _, s := range []*web.Status{st(0, "running", "a2"), withDecision} {
		d.diff(s, tl.add)
	}
	if got := strings.Count(out.String(), "recovery: "); got != 1 || strings.Contains(out.String(), "between two looks") {
		t.Errorf("with the decision seen: %d recovery lines, want only the decision's:\n%s", got, out.String())
	}
}

// A history record without the owner's report is called the cluster's,
// as the page calls it; a recovery's downtime is the one the record
// gives (to the job's readiness), and one not running again says so.
func TestHistoryTextAgreesWithThePage(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	rec := web.ReclaimRecord{Reclaim: web.Reclaim{Node: "b1", Announced: t0, Deadline: t0}, Released: t0.Add(20 * time.Millisecond),
		Emergency: true, Jobs: []web.ReclaimOutcome{{Job: JobName, To: "c1", Replica: "a2", Version: 3, Degraded: true,
			WorkLost: 4 * time.Second, Downtime: 5200 * time.Millisecond}}}
	got := historyText(rec)
	for _, want := range []string{"the cluster's record (the owner's report has not reached the cluster yet) for the emergency reclaim of b1", "downtime 5.2s"} {
		if !strings.Contains(got, want) {
			t.Errorf("got %q, want it to contain %q", got, want)
		}
	}
	if strings.Contains(got, "owner's report (replicated)") {
		t.Errorf("got %q: a cluster-only record called the owner's report", got)
	}
	rec.OwnerReport = true
	rec.Jobs[0].Downtime, rec.Jobs[0].Resuming = 0, true
	got = historyText(rec)
	if !strings.Contains(got, "owner's report (replicated) for the emergency reclaim of b1") || !strings.Contains(got, "not running again yet") {
		t.Errorf("got %q, want the owner's report and the job not running again yet", got)
	}
}

// The recovery line names the version the job restored, from the
// cluster's record of the recovery, not the freshest one the demo saw
// before: v4 committed between two looks that showed v3, and the job
// restored v4.
func TestRecoveryLineNamesTheRestoredVersion(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	v3 := &web.Checkpoint{Version: 3, Bytes: 1 << 20, Holders: []policy.NodeID{"a2", "b1"}}
	v4 := &web.Checkpoint{Version: 4, Bytes: 1 << 20, Holders: []policy.NodeID{"a2", "b1"}}
	before := &web.Status{GeneratedAt: t0, Cluster: web.Cluster{Leader: "b2"},
		Jobs: []web.Job{{ID: JobName, State: "running", Node: "a2", LastCheckpoint: v3}}}
	// An earlier move of the job to b1 from v1 is older history: only the
	// newest outcome counts.
	older := web.ReclaimRecord{Reclaim: web.Reclaim{Node: "c1", Announced: t0.Add(-time.Hour), Deadline: t0.Add(-time.Hour)},
		Jobs: []web.ReclaimOutcome{{Job: JobName, To: "b1", Replica: "c2", Version: 1}}}
	recovered := web.ReclaimRecord{Reclaim: web.Reclaim{Node: "a2", Announced: t0.Add(time.Second), Deadline: t0.Add(time.Second)},
		Jobs: []web.ReclaimOutcome{{Job: JobName, To: "b1", Replica: "b1", Version: 4, Degraded: true}}}
	after := func(sec int, withDecision bool) *web.Status {
		s := &web.Status{GeneratedAt: t0.Add(time.Duration(sec) * time.Second), Cluster: web.Cluster{Leader: "b2"},
			Jobs:     []web.Job{{ID: JobName, State: "running", Node: "b1", LastCheckpoint: v4}},
			Reclaims: web.Reclaims{History: []web.ReclaimRecord{recovered, older}}}
		if withDecision {
			s.Decisions = []web.Decision{{Kind: web.DecisionPlacement, Placement: &web.Placement{Job: JobName, To: "b1", From: "b1", Recovery: true}}}
		}
		return s
	}
	for _, tc := range []struct {
		name     string
		decision bool
		want     string
	}{
		{"decision seen", true, "recovery: train restarts on b1 from its committed checkpoint v4 from the replica on b1, pushed by b1"},
		{"decision missed", false, "recovery: train restarted on b1 from its committed checkpoint v4 from the replica on b1 after a2 was lost"},
	} {
		var out bytes.Buffer
		tl := &timeline{start: t0, out: &out}
		d := newDiffer()
		for _, s := range []*web.Status{before, after(2, tc.decision)} {
			d.diff(s, tl.add)
		}
		var lines []string
		for l := range strings.Lines(out.String()) {
			if strings.Contains(l, "recovery: ") {
				lines = append(lines, l)
			}
		}
		if len(lines) != 1 || !strings.Contains(lines[0], tc.want) || strings.Contains(lines[0], "v3") || strings.Contains(lines[0], "v1") {
			t.Errorf("%s: want one recovery line with %q (and neither v3 nor v1):\n%s", tc.name, tc.want, out.String())
		}
	}
}

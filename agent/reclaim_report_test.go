package agent

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/web"
)

// A hand-off still in flight when the node leaves is not a move: the
// owner's report must not count it as moved (campus bug B).
func TestReportHandingOffAtDeadlineIsNotMoved(t *testing.T) {
	a := &Agent{cfg: Config{Name: "a1", DataDir: t.TempDir()}, logger: testLogger()}
	now := time.Now()
	run := &reclaimRun{announced: now.Add(-6 * time.Second), deadline: now, jobs: []policy.JobID{"j1", "j2", "j3", "j4"}}
	st := localapi.ReclaimStatus{Jobs: []localapi.ReclaimJob{
		{Job: "j1", Progress: localapi.ProgressHandingOff},
		{Job: "j2", Progress: localapi.ProgressMoved},
		{Job: "j3", Progress: localapi.ProgressRunning},
		{Job: "j4", Progress: localapi.ProgressFinished},
	}}
	rep := a.buildReport(run, st, now)
	if want := []string{"j2"}; !slices.Equal(rep.Moved, want) {
		t.Errorf("moved = %v, want %v", rep.Moved, want)
	}
	if want := []string{"j1", "j3"}; !slices.Equal(rep.Degraded, want) {
		t.Errorf("degraded = %v, want %v", rep.Degraded, want)
	}
	if want := []string{"j4"}; !slices.Equal(rep.Finished, want) {
		t.Errorf("finished = %v, want %v", rep.Finished, want)
	}
}

// A job now placed on another node counts as moved only when the
// replicated history records its hand-off (a committed MoveJob) with its
// final checkpoint; a job that another node runs after a recovery
// placement, or that was handed off from an older version because its
// final checkpoint failed, is degraded.
func TestReclaimStatusMovedNeedsCommittedMove(t *testing.T) {
	a := &Agent{cfg: Config{Name: "a1", DataDir: t.TempDir()}, logger: testLogger()}
	announced := time.Now().Add(-10 * time.Second)
	run := &reclaimRun{announced: announced, deadline: announced.Add(6 * time.Second),
		jobs: []policy.JobID{"moved", "recovered", "gone", "lossy"}, stop: make(chan struct{})}
	a.reclaim.run = run
	st := &state.State{
		Jobs: map[policy.JobID]state.JobRecord{
			"moved":     {Job: policy.Job{ID: "moved", State: policy.JobRunning, Node: "b1"}},
			"recovered": {Job: policy.Job{ID: "recovered", State: policy.JobRunning, Node: "c1"}},
			"lossy":     {Job: policy.Job{ID: "lossy", State: policy.JobRunning, Node: "b2"}},
		},
		ReclaimReports: []state.ReclaimReport{{Node: "a1", Kind: state.DepartureScheduled,
			Announced: announced.UTC().Round(0), Deadline: announced.Add(6 * time.Second),
			Jobs: []state.JobOutcome{
				{Job: "moved", To: "b1", HandedOff: true},
				{Job: "recovered", To: "c1", Replica: "b2", Version: 3},
				{Job: "lossy", To: "b2", HandedOff: true, NoFinalCheckpoint: true, Version: 2, LostWork: time.Minute},
			}}},
	}
	got := a.reclaimStatus(st)
	progress := map[string]string{}
	for _, j := range got.Jobs {
		progress[j.Job] = j.Progress
	}
	for job, want := range map[string]string{"moved": localapi.ProgressMoved, "recovered": localapi.ProgressDegraded, "gone": localapi.ProgressFinished, "lossy": localapi.ProgressDegraded} {
		if progress[job] != want {
			t.Errorf("job %s: progress %q, want %q", job, progress[job], want)
		}
	}
	if !got.Complete || got.Report == nil {
		t.Fatalf("complete = %v, report = %v: want a complete reclaim with a report", got.Complete, got.Report)
	}
	if !slices.Equal(got.Report.Moved, []string{"moved"}) || !slices.Equal(got.Report.Degraded, []string{"recovered", "lossy"}) {
		t.Errorf("report moved %v degraded %v, want moved [moved] degraded [recovered lossy]", got.Report.Moved, got.Report.Degraded)
	}
	// The status page's record says the same, with the version and the loss.
	rec := webReclaimRecord(st.ReclaimReports[0])
	outcomes := map[policy.JobID]web.ReclaimOutcome{}
	for _, o := range rec.Jobs {
		outcomes[o.Job] = o
	}
	if o := outcomes["moved"]; !o.FinalCheckpoint || o.Degraded {
		t.Errorf("page outcome of moved: %+v, want final checkpoint, not degraded", o)
	}
	if o := outcomes["lossy"]; o.FinalCheckpoint || !o.Degraded || o.Version != 2 || o.WorkLost != time.Minute || !strings.Contains(o.Reason, "without its final checkpoint") {
		t.Errorf("page outcome of lossy: %+v, want degraded, from v2, 1m lost, reason naming the missing final checkpoint", o)
	}

	// The same job placement without the history's hand-off (a
	// recovery after another reclaim of this node): degraded.
	st.ReclaimReports[0].Announced = announced.Add(-time.Hour)
	a.reclaim.report = nil
	got = a.reclaimStatus(st)
	for _, j := range got.Jobs {
		if j.Job == "moved" && j.Progress != localapi.ProgressDegraded {
			t.Errorf("job moved under another reclaim's history: progress %q, want %q", j.Progress, localapi.ProgressDegraded)
		}
	}
}

package reclaim

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/jobs"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
)

// A hand-off still in flight when the node leaves is not a move: the
// owner's report must not count it as moved.
func TestReportHandingOffAtDeadlineIsNotMoved(t *testing.T) {
	now := time.Now()
	r := &run{announced: now.Add(-6 * time.Second), deadline: now, jobs: []policy.JobID{"j1", "j2", "j3", "j4"}}
	st := localapi.ReclaimStatus{Jobs: []localapi.ReclaimJob{
		{Job: "j1", Progress: localapi.ProgressHandingOff},
		{Job: "j2", Progress: localapi.ProgressMoved},
		{Job: "j3", Progress: localapi.ProgressRunning},
		{Job: "j4", Progress: localapi.ProgressFinished},
	}}
	rep := buildReport("a1", r, st, nil, now)
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

// The report counts what the run's transfers sent even once the job
// manager no longer lists them (a moved job's worker is gone): each
// transfer counts once, at the most it was seen to have sent; transfers of
// other jobs or started before the announcement do not.
func TestReportCountsTransfersNoLongerListed(t *testing.T) {
	announced := time.Now().Add(-10 * time.Second)
	r := &run{announced: announced, deadline: announced.Add(15 * time.Second), jobs: []policy.JobID{"j1", "j2"}}
	presync := jobs.TransferView{Job: "j1", Version: 4, To: "b1", Started: announced.Add(time.Second), BytesDone: 1000}
	handoff := jobs.TransferView{Job: "j1", Version: 5, To: "c1", Started: announced.Add(3 * time.Second), BytesDone: 24 << 20}
	other := jobs.TransferView{Job: "j2", Version: 2, To: "c1", Started: announced.Add(2 * time.Second), BytesDone: 7}
	before := jobs.TransferView{Job: "j1", Version: 3, To: "b1", Started: announced.Add(-time.Second), BytesDone: 1 << 30}
	notOurs := jobs.TransferView{Job: "x", Version: 1, To: "b1", Started: announced.Add(time.Second), BytesDone: 1 << 30}
	partial := handoff
	partial.BytesDone = 5 << 20
	// Samples as the poll sees them: the hand-off in progress, then done,
	// then (the job moved) nothing listed at all.
	noteSent(r, []jobs.TransferView{presync, partial, before, notOurs})
	noteSent(r, []jobs.TransferView{presync, handoff, other, before, notOurs})
	noteSent(r, []jobs.TransferView{partial}) // an older sample never lowers a count
	rep := buildReport("a1", r, localapi.ReclaimStatus{}, nil, time.Now())
	if want := int64(1000 + 24<<20 + 7); rep.BytesSent != want {
		t.Fatalf("bytes sent = %d, want %d (pre-sync + hand-off + other job)", rep.BytesSent, want)
	}
}

// A job now placed on another node counts as moved only when the
// replicated history records its hand-off (a committed MoveJob) with its
// final checkpoint; a job that another node runs after a recovery
// placement, or that was handed off from an older version because its
// final checkpoint failed, is degraded. The status of a complete reclaim
// shows its report, and asking for it writes nothing.
func TestReclaimStatusMovedNeedsCommittedMove(t *testing.T) {
	dir := t.TempDir()
	o := &owner{f: New(Config{Node: "a1", DataDir: dir})}
	announced := time.Now().Add(-10 * time.Second)
	o.run = &run{announced: announced, deadline: announced.Add(6 * time.Second),
		jobs: []policy.JobID{"moved", "recovered", "gone", "lossy"}}
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
	got := o.status(st)
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
	if _, err := os.Stat(filepath.Join(dir, localapi.ReportFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("report file after a status query: %v, want none", err)
	}
	if o.report != nil {
		t.Errorf("a status query recorded the report %+v", o.report)
	}

	// The same job placement without the history's hand-off (a
	// recovery after another reclaim of this node): degraded.
	st.ReclaimReports[0].Announced = announced.Add(-time.Hour)
	got = o.status(st)
	for _, j := range got.Jobs {
		if j.Job == "moved" && j.Progress != localapi.ProgressDegraded {
			t.Errorf("job moved under another reclaim's history: progress %q, want %q", j.Progress, localapi.ProgressDegraded)
		}
	}
}

// openCoordinator starts a one-node in-memory coordinator and waits until
// it leads.
func openCoordinator(t *testing.T, node policy.NodeID) *raft.Coordinator {
	t.Helper()
	dev, err := pki.NewDev()
	if err != nil {
		t.Fatal(err)
	}
	b, err := dev.Node(string(node))
	if err != nil {
		t.Fatal(err)
	}
	rc := raft.DefaultLocalConfig()
	rc.NodeID, rc.TLS, rc.Bootstrap = node, b, true
	rc.Logger, rc.RaftLogLevel = slog.New(slog.DiscardHandler), slog.LevelError
	c, err := raft.Open(rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// An emergency's report left in the report file unreplicated (its agent
// left at once) is submitted to the cluster's history when the flow runs
// again, and the file is then marked replicated.
func TestPendingReportOfferedAtStart(t *testing.T) {
	c := openCoordinator(t, "n1")
	dir := t.TempDir()
	left := time.Now().Add(-time.Minute).UTC().Round(0)
	pending := &localapi.ReclaimReport{Node: "n1", Emergency: true, Announced: left.Add(-time.Second), Deadline: left.Add(-time.Second),
		Degraded: []string{"gone"}, UsedFor: time.Second, Left: left}
	if err := localapi.WriteReport(dir, pending); err != nil {
		t.Fatal(err)
	}
	f := New(Config{Node: "n1", DataDir: dir, Coord: c, RetryPeriod: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wait.For(t, 10*time.Second, "the pending report in the replicated history", func() bool {
		for _, r := range c.State().ReclaimReports {
			if r.Node == "n1" && r.Announced.Equal(pending.Announced) && !r.ClusterOnly && r.Kind == state.DepartureEmergency {
				return true
			}
		}
		return false
	})
	wait.For(t, 5*time.Second, "the report file marked replicated", func() bool {
		rep, err := localapi.ReadReport(dir)
		return err == nil && rep != nil && rep.Replicated
	})
}

// The owner's report gives each moved job's downtime and limit from the
// cluster's record of its move (design P3.8d), and 0 while the job has not
// started on its new node; other nodes' and other reclaims' records do not
// count.
func TestReportMoveDowntimes(t *testing.T) {
	announced := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	stopped := announced.Add(50 * time.Second)
	st := state.New()
	st.ReclaimReports = []state.ReclaimReport{
		{Node: "a1", Announced: announced, Jobs: []state.JobOutcome{
			{Job: "j1", To: "b1", HandedOff: true, Stopped: stopped, Resumed: stopped.Add(2500 * time.Millisecond), Limit: 2 * time.Second},
			{Job: "j2", To: "b1", HandedOff: true, Stopped: stopped, Limit: time.Second},
		}},
		{Node: "a2", Announced: announced, Jobs: []state.JobOutcome{{Job: "j3", HandedOff: true, Stopped: stopped, Resumed: stopped.Add(time.Hour)}}},
	}
	got := moveDowntimes(st, "a1", announced, []string{"j1", "j2", "j3"})
	want := []localapi.JobDowntime{
		{Job: "j1", Downtime: 2500 * time.Millisecond, Limit: 2 * time.Second},
		{Job: "j2", Limit: time.Second},
		{Job: "j3"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("downtimes %+v, want %+v", got, want)
	}
}

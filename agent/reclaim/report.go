package reclaim

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/jobs"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
)

// sentKey identifies one outgoing transfer.
type sentKey struct {
	job     policy.JobID
	version uint64
	to      policy.NodeID
	started time.Time
}

// noteSent keeps the most each of r's transfers in ts sent.
func noteSent(r *run, ts []jobs.TransferView) {
	for _, t := range ts {
		if !containsJob(r.jobs, t.Job) || t.Started.Before(r.announced) {
			continue
		}
		if r.sent == nil {
			r.sent = map[sentKey]int64{}
		}
		k := sentKey{job: t.Job, version: t.Version, to: t.To, started: t.Started}
		r.sent[k] = max(r.sent[k], t.BytesDone)
	}
}

// buildReport makes the owner's report of r from its progress st at now,
// with the moved jobs' downtimes as the cluster's state cs records them.
func (o *owner) buildReport(r *run, cs *state.State, st localapi.ReclaimStatus, now time.Time) *localapi.ReclaimReport {
	var ts []jobs.TransferView
	if m := o.f.cfg.Jobs; m != nil {
		ts = m.TransfersSince(r.announced)
	}
	rep := buildReport(o.f.cfg.Node, r, st, ts, now)
	rep.Downtimes = moveDowntimes(cs, policy.NodeID(o.f.cfg.Node), r.announced, rep.Moved)
	return rep
}

// withDowntimes returns a copy of rep whose moved jobs' downtimes are
// read again from cs: a job starts on its new node after the report was
// made (its move completed the reclaim), so its downtime comes later.
func withDowntimes(rep *localapi.ReclaimReport, cs *state.State, node policy.NodeID) *localapi.ReclaimReport {
	if rep == nil || len(rep.Moved) == 0 || cs == nil {
		return rep
	}
	out := *rep
	out.Downtimes = moveDowntimes(cs, node, rep.Announced, rep.Moved)
	return &out
}

// moveDowntimes is each moved job's downtime and limit from the history's
// outcome of its move off node (the reclaim announced at announced).
func moveDowntimes(st *state.State, node policy.NodeID, announced time.Time, moved []string) []localapi.JobDowntime {
	var out []localapi.JobDowntime
	for _, id := range moved {
		d := localapi.JobDowntime{Job: id}
		for _, e := range st.ReclaimReports {
			if e.Node != node || !e.Announced.Equal(announced.UTC().Round(0)) {
				continue
			}
			for _, o := range e.Jobs {
				if start := e.DowntimeStart(o); o.Job == policy.JobID(id) {
					d.Limit = o.Limit
					if !start.IsZero() && !o.Resumed.IsZero() && !o.Resumed.Before(start) {
						d.Downtime = o.Resumed.Sub(start)
					}
				}
			}
		}
		out = append(out, d)
	}
	return out
}

func buildReport(node string, r *run, st localapi.ReclaimStatus, ts []jobs.TransferView, now time.Time) *localapi.ReclaimReport {
	rep := &localapi.ReclaimReport{Node: node, Emergency: r.emergency, Reason: r.reason, Announced: r.announced, Deadline: r.deadline,
		Isolate: r.isolate, Isolated: r.isolated, UsedFor: now.Sub(r.announced)}
	for _, j := range st.Jobs {
		switch j.Progress {
		case localapi.ProgressMoved:
			rep.Moved = append(rep.Moved, j.Job)
		case localapi.ProgressDegraded, localapi.ProgressRunning, localapi.ProgressHandingOff:
			// A hand-off still in flight when the node leaves has not
			// moved the job: its transfer ends at the deadline, and only
			// a committed move counts (the deadline first lets a move in
			// its last step commit, see settleHandoffs).
			rep.Degraded = append(rep.Degraded, j.Job)
		case localapi.ProgressFinished:
			rep.Finished = append(rep.Finished, j.Job)
		}
	}
	noteSent(r, ts)
	for _, b := range r.sent {
		rep.BytesSent += b
	}
	return rep
}

// replicatedReport is rep as the replicated history keeps it.
func replicatedReport(r *run, rep *localapi.ReclaimReport) state.ReclaimReport {
	kind := state.DepartureScheduled
	if r.emergency {
		kind = state.DepartureEmergency
	}
	ids := func(jobs []string) []policy.JobID {
		var out []policy.JobID
		for _, j := range jobs {
			out = append(out, policy.JobID(j))
		}
		return out
	}
	return state.ReclaimReport{Node: policy.NodeID(rep.Node), Kind: kind, Reason: rep.Reason,
		Announced: r.announced.UTC().Round(0), Deadline: r.deadline.UTC().Round(0),
		Completed: rep.Announced.Add(rep.UsedFor).UTC().Round(0),
		Isolate:   rep.Isolate, Isolated: rep.Isolated,
		Moved: ids(rep.Moved), Degraded: ids(rep.Degraded), Finished: ids(rep.Finished),
		BytesSent: rep.BytesSent, UsedFor: rep.UsedFor, Left: rep.Left.UTC().Round(0),
		LendingAfter: rep.LendingAfter, LendableFrom: rep.LendableFrom.UTC().Round(0)}
}

// replicatedFromFile is a stored owner's report as the replicated history
// keeps it.
func replicatedFromFile(rep *localapi.ReclaimReport) state.ReclaimReport {
	r := &run{announced: rep.Announced, deadline: rep.Deadline, emergency: rep.Emergency, reason: rep.Reason}
	if r.deadline.Before(r.announced) || rep.Emergency {
		r.deadline = r.announced
	}
	return replicatedReport(r, rep)
}

func equalReports(a, b state.ReclaimReport) bool { return reflect.DeepEqual(a, b) }

// save writes rep to the report file (best effort: a node that cannot
// write its data dir still leaves on time).
func (o *owner) save(rep *localapi.ReclaimReport) {
	if err := localapi.WriteReport(o.f.cfg.DataDir, rep); err != nil {
		o.f.log.Warn("write reclaim report", "err", err)
	}
}

// offerPending submits the report file's owner's report to the cluster's
// history if it never got there (an emergency reclaim leaves before it
// can, or the leader did not answer). It stops once nothing is left to do.
func (o *owner) offerPending() {
	rep, err := localapi.ReadReport(o.f.cfg.DataDir)
	if err != nil || rep == nil || rep.Replicated || rep.Left.IsZero() {
		o.pending = false // nothing, or a reclaim still under way (it records its own)
		return
	}
	if l, _ := o.f.cfg.Coord.Leader(); l == "" {
		return
	}
	o.offering = true
	cmd := state.RecordReclaimReport{Report: replicatedFromFile(rep)}
	o.submitters.Go(func() {
		ctx, cancel := context.WithTimeout(o.ctx, recordTimeout)
		defer cancel()
		_, err := o.f.cfg.Coord.Submit(ctx, cmd)
		o.f.post(o.ctx, func(o *owner) {
			o.offering = false
			if err != nil {
				if errors.Is(err, raft.ErrForbidden) || errors.Is(err, state.ErrInvalidCommand) {
					// Never accepted (another node's report, a damaged
					// file): stop trying; the file keeps it.
					o.f.log.Warn("the owner's report of the last reclaim cannot be recorded in the cluster", "err", err)
					o.pending = false
					return
				}
				o.f.log.Debug("owner's report of the last reclaim not recorded yet", "err", err)
				return
			}
			o.pending = false
			if o.report == nil { // a newer reclaim's report is not overwritten
				rep.Replicated = true
				o.save(rep)
			}
			o.f.log.Info("recorded the owner's report of the last reclaim in the cluster's history", "announced", rep.Announced, "emergency", rep.Emergency)
		})
	})
}

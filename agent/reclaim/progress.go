package reclaim

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/jobs"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// localJobs are the jobs that run here: the ones the state places here
// and the ones the job manager still runs.
func (o *owner) localJobs(st *state.State) []policy.JobID {
	var out []policy.JobID
	for id, j := range st.Jobs {
		if j.Node == policy.NodeID(o.f.cfg.Node) && j.State != policy.JobDone {
			out = append(out, id)
		}
	}
	if m := o.f.cfg.Jobs; m != nil {
		for _, v := range m.View() {
			if !slices.Contains(out, v.Job) && !jobStopped(v.State) {
				out = append(out, v.Job)
			}
		}
	}
	slices.Sort(out)
	return out
}

func mergeJobs(a, b []policy.JobID) []policy.JobID {
	out := slices.Clone(a)
	for _, j := range b {
		if !slices.Contains(out, j) {
			out = append(out, j)
		}
	}
	slices.Sort(out)
	return out
}

func containsJob(ids []policy.JobID, id policy.JobID) bool { return slices.Contains(ids, id) }

func jobStopped(state string) bool {
	switch state {
	case jobs.StateMoved, jobs.StateDegraded, jobs.StateExited, jobs.StateFailed, jobs.StateStopped:
		return true
	}
	return false
}

// status is the reclaim's honest progress from the replicated state and
// the job manager's view. It changes nothing: a complete scheduled reclaim
// whose report the flow has not made yet shows the report it would make
// now.
func (o *owner) status(st *state.State) localapi.ReclaimStatus {
	out := localapi.ReclaimStatus{Node: o.f.cfg.Node}
	if ks := o.f.cfg.Switch; ks != nil {
		out.Enforcement = ks.Enabled()
		mode, _ := ks.KillSwitch()
		out.KillSwitch = mode.String()
	}
	r := o.run
	if r == nil {
		out.Report = withDowntimes(o.report, st, policy.NodeID(o.f.cfg.Node))
		return out
	}
	var views []jobs.JobView
	if m := o.f.cfg.Jobs; m != nil {
		views = m.View()
	}
	out = progress(out, policy.NodeID(o.f.cfg.Node), r, st, views)
	out.Report = withDowntimes(o.report, st, policy.NodeID(o.f.cfg.Node))
	if out.Complete && !r.emergency && out.Report == nil {
		out.Report = o.buildReport(r, st, out, time.Now())
	}
	return out
}

// progress fills in out the progress of run r's jobs on node self.
func progress(out localapi.ReclaimStatus, self policy.NodeID, r *run, st *state.State, views []jobs.JobView) localapi.ReclaimStatus {
	out.Active = true
	out.Emergency, out.Announced, out.Deadline = r.emergency, r.announced, r.deadline
	byJob := map[policy.JobID]jobs.JobView{}
	for _, v := range views {
		byJob[v.Job] = v
	}
	out.Complete = true
	for _, id := range r.jobs {
		rj := localapi.ReclaimJob{Job: string(id)}
		j, ok := st.Jobs[id]
		v, hasView := byJob[id]
		localRunning := hasView && !jobStopped(v.State)
		replica := ""
		if cp, ok := st.FreshestCommitted(id); ok {
			replica = fmt.Sprintf("v%d", cp.Version)
		}
		var moved *state.JobOutcome
		if ok && j.Node != "" && j.Node != self {
			moved = handedOff(st, self, r.announced, id)
		}
		switch {
		case !ok:
			rj.Progress, rj.Detail = localapi.ProgressFinished, "no longer in the cluster's state"
		case j.State == policy.JobDone:
			rj.Progress, rj.Detail = localapi.ProgressFinished, endDetail(j)
		case moved != nil && (j.State != policy.JobRunning || j.Node != moved.To):
			// Handed off, but not running there (it failed to start, or
			// is being recovered): not moved.
			rj.Progress, rj.To = localapi.ProgressDegraded, string(moved.To)
			rj.Detail = fmt.Sprintf("degraded: handed off to %s, now %s", moved.To, j.StateName())
		case moved != nil && !moved.NoFinalCheckpoint:
			// Moved only by a committed MoveJob from this node (the
			// history's outcome), never by a recovery placement.
			rj.Progress, rj.To = localapi.ProgressMoved, string(j.Node)
			rj.Detail = fmt.Sprintf("handed off to %s (%s there)", j.Node, j.State)
		case moved != nil:
			// Handed off without its final checkpoint: work was lost.
			rj.Progress, rj.To = localapi.ProgressDegraded, string(j.Node)
			rj.Detail = fmt.Sprintf("degraded: handed off to %s without its final checkpoint, from v%d (%s there)", j.Node, moved.Version, j.State)
		case j.Node != "" && j.Node != self:
			rj.Progress, rj.To = localapi.ProgressDegraded, string(j.Node)
			rj.Detail = fmt.Sprintf("degraded: recovered on %s from replica %s (%s there)", j.Node, orNone(replica), j.State)
		case j.State == policy.JobRecovering || (hasView && (v.State == jobs.StateDegraded || v.State == jobs.StateFailed)):
			rj.Progress = localapi.ProgressDegraded
			rj.Detail = fmt.Sprintf("degraded: recovering from replica %s", orNone(replica))
			if j.Node == self && !r.emergency {
				rj.Detail += " once this node leaves"
			}
		case hasView && v.State == jobs.StateHandingOff:
			rj.Progress = localapi.ProgressHandingOff
			rj.Detail = "handing off: final checkpoint and transfer"
			if h, ok := handoffOf(st, id, self); ok && h.To != "" {
				rj.To = string(h.To)
				rj.Detail = fmt.Sprintf("handing off to %s (%d bytes to move)", h.To, h.Bytes)
			}
		default:
			rj.Progress, rj.Detail = localapi.ProgressRunning, "still running"
			if h, ok := handoffOf(st, id, self); ok {
				if !h.Admitted() {
					rj.Detail = fmt.Sprintf("still running; hand-off infeasible (%s): will recover from replica %s", h.Reason, orNone(replica))
				} else {
					rj.Detail = fmt.Sprintf("still running; hand-off to %s planned", h.To)
				}
			}
		}
		rj.Stopped = !localRunning && rj.Progress != localapi.ProgressRunning && rj.Progress != localapi.ProgressHandingOff
		if !rj.Stopped {
			out.Complete = false
		}
		out.Jobs = append(out.Jobs, rj)
	}
	return out
}

// endDetail says how a job that left the node ended.
func endDetail(j state.JobRecord) string {
	switch {
	case j.End.Kind == state.EndFailed && j.LastExit != nil:
		return fmt.Sprintf("failed: %s on %s", j.LastExit.Describe(), j.LastExit.Node)
	case j.End.Kind == state.EndCancelled:
		return "cancelled by " + cmp.Or(j.End.By, "a user")
	}
	return j.StateName()
}

func orNone(s string) string {
	if s == "" {
		return "(none: restarts from the beginning)"
	}
	return s
}

// handedOff returns the replicated reclaim history's outcome of job if it
// was handed off from node by the reclaim announced at announced: MoveJob
// committed while the reclaim was pending; else nil.
func handedOff(st *state.State, node policy.NodeID, announced time.Time, job policy.JobID) *state.JobOutcome {
	for i := len(st.ReclaimReports) - 1; i >= 0; i-- {
		e := st.ReclaimReports[i]
		if e.Node != node || e.Announced.Sub(announced).Abs() > time.Millisecond {
			continue
		}
		for _, o := range e.Jobs {
			if o.Job == job && o.HandedOff {
				return &o
			}
		}
	}
	return nil
}

func handoffOf(st *state.State, job policy.JobID, from policy.NodeID) (policy.HandoffDecision, bool) {
	for _, h := range st.Decisions.Handoffs {
		if h.Job == job && h.From == from {
			return h, true
		}
	}
	return policy.HandoffDecision{}, false
}

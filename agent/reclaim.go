package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"

	"github.com/reclaimnet/reclaimnet/agent/jobs"
	"github.com/reclaimnet/reclaimnet/bpf"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
)

// reclaimer is the agent's reclaim state. Its one goroutine (the deadline
// watcher) is started by a scheduled announcement and stopped by cancel,
// the deadline or the agent's shutdown.
type reclaimer struct {
	mu       sync.Mutex
	run      *reclaimRun
	report   *localapi.ReclaimReport
	leaveC   chan struct{}
	left     bool
	closed   bool
	wg       sync.WaitGroup
	isolate  time.Duration
	isolated bool
}

type reclaimRun struct {
	announced, deadline time.Time
	emergency           bool
	jobs                []policy.JobID
	stop                chan struct{}
	// sent is the most each of the run's transfers was seen to have sent
	// (guarded by reclaimer.mu), from the job manager's TransfersSince,
	// which remembers finished transfers: a hand-off's push is no longer
	// listed by Transfers() once the job moved (campus bug G).
	sent map[sentKey]int64
}

// sentKey identifies one outgoing transfer.
type sentKey struct {
	job     policy.JobID
	version uint64
	to      policy.NodeID
	started time.Time
}

// leaving is closed when a reclaim makes the node leave; Run then shuts
// down (graceful unless Abandon was called).
func (r *reclaimer) leaving() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leaveC == nil {
		r.leaveC = make(chan struct{})
	}
	return r.leaveC
}

func (r *reclaimer) triggerLeave() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leaveC == nil {
		r.leaveC = make(chan struct{})
	}
	if !r.left {
		r.left = true
		close(r.leaveC)
	}
}

// shutdown stops the deadline watcher; the agent calls it when it stops.
func (r *reclaimer) shutdown() {
	r.mu.Lock()
	r.closed = true
	if r.run != nil && r.run.stop != nil {
		select {
		case <-r.run.stop:
		default:
			close(r.run.stop)
		}
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (a *Agent) reclaimControl(req localapi.Request) localapi.Response {
	c := a.Coordinator()
	if c == nil {
		return localapi.Response{Error: "coordinator not running", Kind: localapi.KindInternal}
	}
	switch req.Op {
	case localapi.OpReclaim:
		return a.announceReclaim(c, req.Notice)
	case localapi.OpReclaimStatus:
		st := a.reclaimStatus(c.State())
		return localapi.Response{Reclaim: &st}
	case localapi.OpReclaimCancel:
		return a.cancelReclaim(c)
	case localapi.OpReclaimNow:
		return a.reclaimNow(c)
	}
	return localapi.Response{Error: fmt.Sprintf("unknown operation %q", req.Op), Kind: localapi.KindBadRequest}
}

func (a *Agent) localJobs(st *state.State) []policy.JobID {
	var out []policy.JobID
	for id, j := range st.Jobs {
		if j.Node == policy.NodeID(a.cfg.Name) && j.State != policy.JobDone {
			out = append(out, id)
		}
	}
	if m := a.Jobs(); m != nil {
		for _, v := range m.View() {
			if !slices.Contains(out, v.Job) && !jobStopped(v.State) {
				out = append(out, v.Job)
			}
		}
	}
	slices.Sort(out)
	return out
}

// setKillSwitch flips the kill-switch if enforcement is on and returns
// how long the flip took.
func (a *Agent) setKillSwitch(mode bpf.Mode) (time.Duration, bool, error) {
	e := a.Enforcer()
	if e == nil || !e.Enabled() {
		return 0, false, nil
	}
	start := time.Now()
	if err := e.SetKillSwitch(mode); err != nil {
		return 0, false, err
	}
	return time.Since(start), true, nil
}

func (a *Agent) announceReclaim(c *raft.Coordinator, notice time.Duration) localapi.Response {
	if notice <= 0 {
		return localapi.Response{Error: "reclaim: the notice must be positive (use reclaim-now for an emergency)", Kind: localapi.KindBadRequest}
	}
	r := &a.reclaim
	r.mu.Lock()
	if r.run != nil || r.left {
		r.mu.Unlock()
		return localapi.Response{Error: "reclaim: a reclaim of this node is already under way (cancel it first)", Kind: localapi.KindBadRequest}
	}
	r.mu.Unlock()
	// No new work: soft kill-switch first.
	took, on, err := a.setKillSwitch(bpf.ModeSoft)
	if err != nil {
		return localapi.Response{Error: fmt.Sprintf("reclaim: kill-switch soft: %v", err), Kind: localapi.KindInternal}
	}
	now := time.Now()
	run := &reclaimRun{announced: now, deadline: now.Add(notice), stop: make(chan struct{}),
		jobs: a.localJobs(c.State())}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Submit(ctx, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: policy.NodeID(a.cfg.Name), Announced: now, Deadline: run.deadline}}); err != nil {
		a.setKillSwitch(bpf.ModeOff)
		return submitError("reclaim", err)
	}
	r.mu.Lock()
	if r.closed || r.run != nil {
		r.mu.Unlock()
		return localapi.Response{Error: "reclaim: the agent is stopping, or another reclaim was announced meanwhile", Kind: localapi.KindInternal}
	}
	r.run, r.report, r.isolate, r.isolated = run, nil, took, on
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		a.watchDeadline(run)
	}()
	a.logger.Info("reclaim announced", "deadline", run.deadline, "jobs", len(run.jobs))
	st := a.reclaimStatus(c.State())
	return localapi.Response{Reclaim: &st}
}

// watchDeadline records the report once the reclaim is complete and makes
// the node leave at the deadline, whatever else is happening: the
// kill-switch goes hard at the deadline; the leave follows after at most
// handoffSettle for hand-offs in their last step and 2 s to record the
// report.
func (a *Agent) watchDeadline(run *reclaimRun) {
	deadline := time.NewTimer(time.Until(run.deadline))
	defer deadline.Stop()
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	var recorded *state.ReclaimReport // the last report the log accepted
	for {
		select {
		case <-run.stop:
			return
		case <-poll.C:
			if c := a.Coordinator(); c != nil {
				a.reclaimStatus(c.State()) // records completion
				recorded = a.recordReport(c, run, recorded, 5*time.Second)
			}
		case <-deadline.C:
			a.logger.Warn("reclaim deadline: leaving now")
			if _, _, err := a.setKillSwitch(bpf.ModeHard); err != nil {
				a.logger.Error("kill-switch hard at the deadline", "err", err)
			}
			a.settleHandoffs(run, handoffSettle)
			a.finishReport(time.Now())
			if c := a.Coordinator(); c != nil {
				a.recordReport(c, run, recorded, 2*time.Second)
			}
			a.reclaim.triggerLeave()
			return
		}
	}
}

// noteSent keeps the most each of run's transfers in ts sent; called with
// reclaimer.mu held.
func noteSent(run *reclaimRun, ts []jobs.TransferView) {
	for _, t := range ts {
		if !slices.Contains(run.jobs, t.Job) || t.Started.Before(run.announced) {
			continue
		}
		if run.sent == nil {
			run.sent = map[sentKey]int64{}
		}
		k := sentKey{job: t.Job, version: t.Version, to: t.To, started: t.Started}
		run.sent[k] = max(run.sent[k], t.BytesDone)
	}
}

// handoffSettle bounds how long the node waits at the deadline for its
// hand-offs still in flight to end: their transfers end at the deadline
// (the hand-off's context), so what is left is a MoveJob being committed
// or a failure being noted, a matter of milliseconds normally.
const handoffSettle = time.Second

// settleHandoffs waits, at most within, until no job of run is handing off
// here, so the owner's report records each hand-off's outcome (moved only
// if its move committed) instead of a hand-off in flight.
func (a *Agent) settleHandoffs(run *reclaimRun, within time.Duration) {
	m := a.Jobs()
	if m == nil {
		return
	}
	limit := time.NewTimer(within)
	defer limit.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		busy := false
		for _, v := range m.View() {
			if v.State == jobs.StateHandingOff && slices.Contains(run.jobs, v.Job) {
				busy = true
			}
		}
		if !busy {
			return
		}
		select {
		case <-run.stop:
			return
		case <-limit.C:
			a.logger.Warn("reclaim deadline: a hand-off is still in flight; reported as degraded")
			return
		case <-poll.C:
		}
	}
}

// recordReport submits run's owner's report to the replicated reclaim
// history when it exists and differs from the last one recorded (best
// effort: the local report file is written regardless). It returns what
// the log now holds.
func (a *Agent) recordReport(c *raft.Coordinator, run *reclaimRun, last *state.ReclaimReport, timeout time.Duration) *state.ReclaimReport {
	r := &a.reclaim
	r.mu.Lock()
	if r.report == nil || r.run != run {
		r.mu.Unlock()
		return last
	}
	rep := replicatedReport(run, r.report)
	r.mu.Unlock()
	if last != nil && reflect.DeepEqual(*last, rep) {
		return last
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := c.Submit(ctx, state.RecordReclaimReport{Report: rep}); err != nil {
		a.logger.Warn("reclaim report not recorded in the cluster (kept locally)", "err", err)
		return last
	}
	a.markReplicated(run)
	return &rep
}

// replicatedReport is rep as the replicated history keeps it.
func replicatedReport(run *reclaimRun, rep *localapi.ReclaimReport) state.ReclaimReport {
	kind := state.DepartureScheduled
	if run.emergency {
		kind = state.DepartureEmergency
	}
	ids := func(jobs []string) []policy.JobID {
		var out []policy.JobID
		for _, j := range jobs {
			out = append(out, policy.JobID(j))
		}
		return out
	}
	return state.ReclaimReport{Node: policy.NodeID(rep.Node), Kind: kind,
		Announced: run.announced.UTC().Round(0), Deadline: run.deadline.UTC().Round(0),
		Completed: rep.Announced.Add(rep.UsedFor).UTC().Round(0),
		Isolate:   rep.Isolate, Isolated: rep.Isolated,
		Moved: ids(rep.Moved), Degraded: ids(rep.Degraded), Finished: ids(rep.Finished),
		BytesSent: rep.BytesSent, UsedFor: rep.UsedFor, Left: rep.Left.UTC().Round(0)}
}

func (a *Agent) cancelReclaim(c *raft.Coordinator) localapi.Response {
	r := &a.reclaim
	r.mu.Lock()
	run := r.run
	if r.left {
		r.mu.Unlock()
		return localapi.Response{Error: "reclaim: the node is already leaving", Kind: localapi.KindBadRequest}
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Submit(ctx, state.CancelReclaim{Node: policy.NodeID(a.cfg.Name)}); err != nil {
		return submitError("reclaim cancel", err)
	}
	if run != nil {
		r.mu.Lock()
		select {
		case <-run.stop:
		default:
			close(run.stop)
		}
		r.run = nil
		r.mu.Unlock()
	}
	if _, _, err := a.setKillSwitch(bpf.ModeOff); err != nil {
		return localapi.Response{Error: fmt.Sprintf("reclaim cancel: kill-switch off: %v", err), Kind: localapi.KindInternal}
	}
	st := a.reclaimStatus(c.State())
	return localapi.Response{Reclaim: &st}
}

// reclaimNow is the emergency. The CLI flipped the pinned kill-switch
// before asking; the agent flips it again (cheap), records the emergency
// in the log if the leader answers within a second, and leaves without
// the graceful steps (Abandon): peers see a failure, the leader re-places
// the jobs from their freshest committed replicas. The jobs are stopped
// by the shutdown (SIGTERM, SIGKILL after their grace).
func (a *Agent) reclaimNow(c *raft.Coordinator) localapi.Response {
	start := time.Now()
	took, on, err := a.setKillSwitch(bpf.ModeHard)
	if err != nil {
		a.logger.Error("kill-switch hard", "err", err)
	}
	st := c.State()
	r := &a.reclaim
	r.mu.Lock()
	jobsHere := a.localJobs(st)
	if r.run != nil {
		jobsHere = mergeJobs(r.run.jobs, jobsHere)
		select {
		case <-r.run.stop:
		default:
			close(r.run.stop)
		}
	}
	r.run = &reclaimRun{announced: start, deadline: start, emergency: true, jobs: jobsHere, stop: make(chan struct{})}
	r.report, r.isolate, r.isolated = nil, took, on
	r.mu.Unlock()
	a.Abandon()
	// Recording the emergency lets the leader act before failure
	// detection. Not when this node leads: its own tick would then start
	// membership changes that its shutdown, a moment later, waits on
	// (raft.Coordinator.Shutdown waits for the leader loop, whose
	// reconcile waits on a Raft future); peers detect the failure instead.
	leader := c.IsLeader()
	if !leader {
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(time.Second))
		if _, err := c.Submit(ctx, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: policy.NodeID(a.cfg.Name), Announced: start, Deadline: start}}); err != nil {
			a.logger.Warn("emergency reclaim not recorded; peers will detect the failure", "err", err)
		}
		cancel()
	}
	status := a.reclaimStatus(st)
	rep := a.finishReport(time.Now())
	status.Report = rep
	// The owner's report goes to the cluster's history now if the leader
	// answers in time (the CLI waits 2 s for this answer); otherwise the
	// report file keeps it unreplicated and the agent submits it when it
	// runs again (historyLoop). Not when this node leads (see above).
	if !leader && rep != nil {
		a.recordEmergencyReport(c, start.Add(1500*time.Millisecond))
	}
	a.reclaim.triggerLeave()
	return localapi.Response{Reclaim: &status}
}

// recordEmergencyReport submits the emergency's report before deadline and
// marks the report file replicated when the log accepted it.
func (a *Agent) recordEmergencyReport(c *raft.Coordinator, deadline time.Time) {
	r := &a.reclaim
	r.mu.Lock()
	run, rep := r.run, r.report
	if run == nil || rep == nil {
		r.mu.Unlock()
		return
	}
	cmd := state.RecordReclaimReport{Report: replicatedReport(run, rep)}
	r.mu.Unlock()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if _, err := c.Submit(ctx, cmd); err != nil {
		a.logger.Warn("emergency report not recorded in the cluster yet: kept in the report file, submitted when the agent runs again", "err", err)
		return
	}
	a.markReplicated(run)
}

// markReplicated notes in the report file that the cluster's history holds
// run's final report.
func (a *Agent) markReplicated(run *reclaimRun) {
	r := &a.reclaim
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.run != run || r.report == nil || r.report.Left.IsZero() {
		return
	}
	r.report.Replicated = true
	a.writeReport(r.report)
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

func jobStopped(state string) bool {
	switch state {
	case jobs.StateMoved, jobs.StateDegraded, jobs.StateExited, jobs.StateFailed, jobs.StateStopped:
		return true
	}
	return false
}

// reclaimStatus computes the honest progress from the replicated state
// and the job manager's view; it records the report when complete.
func (a *Agent) reclaimStatus(st *state.State) localapi.ReclaimStatus {
	self := policy.NodeID(a.cfg.Name)
	out := localapi.ReclaimStatus{Node: a.cfg.Name}
	if e := a.Enforcer(); e != nil && e.Enabled() {
		out.Enforcement = true
	}
	if a.enforce != nil {
		ks, _ := a.enforce.KillSwitch()
		out.KillSwitch = ks.String()
	}
	r := &a.reclaim
	r.mu.Lock()
	run := r.run
	report := r.report
	r.mu.Unlock()
	if run == nil {
		out.Report = report
		return out
	}
	out.Active = true
	out.Emergency, out.Announced, out.Deadline = run.emergency, run.announced, run.deadline
	views := map[policy.JobID]jobs.JobView{}
	if m := a.Jobs(); m != nil {
		for _, v := range m.View() {
			views[v.Job] = v
		}
	}
	out.Complete = true
	for _, id := range run.jobs {
		rj := localapi.ReclaimJob{Job: string(id)}
		j, ok := st.Jobs[id]
		v, hasView := views[id]
		localRunning := hasView && !jobStopped(v.State)
		replica := ""
		if cp, ok := st.FreshestCommitted(id); ok {
			replica = fmt.Sprintf("v%d", cp.Version)
		}
		var moved *state.JobOutcome
		if ok && j.Node != "" && j.Node != self {
			moved = handedOff(st, self, run.announced, id)
		}
		switch {
		case !ok || j.State == policy.JobDone:
			rj.Progress, rj.Detail = localapi.ProgressFinished, "finished or cancelled"
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
			if j.Node == self && !run.emergency {
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
	if out.Complete && !run.emergency {
		r.mu.Lock()
		if r.report == nil && r.run == run {
			r.report = a.buildReport(run, out, time.Now())
			a.writeReport(r.report)
		}
		report = r.report
		r.mu.Unlock()
	}
	out.Report = report
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none: restarts from the beginning)"
	}
	return s
}

// handedOff returns the replicated reclaim history's outcome of job if it
// was handed off from node by the reclaim announced at announced: MoveJob
// committed while the reclaim was pending (raft's noteHandoff); else nil.
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

// buildReport makes the owner's report; called with r.mu held.
func (a *Agent) buildReport(run *reclaimRun, st localapi.ReclaimStatus, now time.Time) *localapi.ReclaimReport {
	rep := &localapi.ReclaimReport{Node: a.cfg.Name, Emergency: run.emergency, Announced: run.announced, Deadline: run.deadline,
		Isolate: a.reclaim.isolate, Isolated: a.reclaim.isolated, UsedFor: now.Sub(run.announced)}
	for _, j := range st.Jobs {
		switch j.Progress {
		case localapi.ProgressMoved:
			rep.Moved = append(rep.Moved, j.Job)
		case localapi.ProgressDegraded, localapi.ProgressRunning, localapi.ProgressHandingOff:
			// A hand-off still in flight when the node leaves has not
			// moved the job: its transfer ends at the deadline, and only
			// a committed move counts (watchDeadline first lets a move in
			// its last step commit, see settleHandoffs).
			rep.Degraded = append(rep.Degraded, j.Job)
		case localapi.ProgressFinished:
			rep.Finished = append(rep.Finished, j.Job)
		}
	}
	if m := a.Jobs(); m != nil {
		noteSent(run, m.TransfersSince(run.announced))
	}
	for _, b := range run.sent {
		rep.BytesSent += b
	}
	return rep
}

// finishReport records the report at the node's leave (the deadline or
// an emergency): jobs not yet stopped count as degraded, the machine as
// used until now.
func (a *Agent) finishReport(now time.Time) *localapi.ReclaimReport {
	c := a.Coordinator()
	if c == nil {
		return nil
	}
	st := a.reclaimStatus(c.State())
	r := &a.reclaim
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.run == nil {
		return r.report
	}
	if r.report == nil {
		r.report = a.buildReport(r.run, st, now)
	}
	r.report.Left = now
	a.writeReport(r.report)
	return r.report
}

func (a *Agent) writeReport(rep *localapi.ReclaimReport) {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return
	}
	path := filepath.Join(a.cfg.DataDir, localapi.ReportFile)
	if err := os.WriteFile(path+".tmp", b, 0o600); err == nil {
		err = os.Rename(path+".tmp", path)
		if err != nil {
			a.logger.Warn("write reclaim report", "err", err)
		}
	}
}

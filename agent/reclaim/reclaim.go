package reclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/agent/jobs"
	"github.com/reclaimnet/reclaimnet/bpf"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
)

// Coordinator is what the flow needs of the coordinator: the node parts'
// interface, and whether this node leads or any node does.
type Coordinator interface {
	state.Coordinator
	IsLeader() bool
	Leader() (policy.NodeID, string)
}

// Jobs is what the flow reads of the node's job manager (*jobs.Manager).
type Jobs interface {
	View() []jobs.JobView
	TransfersSince(since time.Time) []jobs.TransferView
}

// KillSwitch is the node's kernel kill-switch (*enforce.Subsystem).
type KillSwitch interface {
	// Enabled reports whether the kernel enforces at all.
	Enabled() bool
	SetKillSwitch(mode bpf.Mode) error
	// KillSwitch is the mode the node reports.
	KillSwitch() (mesh.KillSwitchState, uint64)
}

// Config wires a Flow to its node.
type Config struct {
	Node    string
	DataDir string // holds the report file
	Coord   Coordinator
	Jobs    Jobs       // nil: no jobs run here
	Switch  KillSwitch // nil: no kernel enforcement
	// Abandon makes the node's coming shutdown skip the graceful steps
	// (an emergency: peers see a failure).
	Abandon func()
	// Afterwards, when set, says what becomes of the node's lending once
	// it has left at a time (the owner policy's state and when it may be
	// lent again), for the owner's report.
	Afterwards func(at time.Time) (state string, from time.Time)
	// RetryPeriod is how often a report file that never reached the
	// cluster is offered to it again.
	RetryPeriod time.Duration
	Logger      *slog.Logger
}

// Timings of the flow.
const (
	// pollPeriod is how often a scheduled reclaim's progress is checked
	// (its completion recorded, its report offered to the cluster).
	pollPeriod = 200 * time.Millisecond
	// handoffSettle bounds how long the node waits at the deadline for
	// its hand-offs still in flight to end: their transfers end at the
	// deadline (the hand-off's context), so what is left is a MoveJob
	// being committed or a failure being noted, a matter of milliseconds
	// normally.
	handoffSettle = time.Second
	// submitTimeout bounds an announcement or a cancel; recordTimeout a
	// report offered while the reclaim runs, finalRecordTimeout the one
	// at the deadline.
	submitTimeout      = 10 * time.Second
	recordTimeout      = 5 * time.Second
	finalRecordTimeout = 2 * time.Second
	// emergencyAnnounce and emergencyRecord bound, from the command, how
	// long an emergency waits for the leader to record it and its report
	// (the CLI waits 2 s for the answer).
	emergencyAnnounce = time.Second
	emergencyRecord   = 1500 * time.Millisecond
)

// Flow is a node's reclaim flow. Its state belongs to the Run goroutine;
// Handle and Leaving may be called from any goroutine.
type Flow struct {
	cfg   Config
	log   *slog.Logger
	msgs  chan func(*owner)
	leave chan struct{} // closed when a reclaim makes the node leave
	done  chan struct{} // closed when Run returned
}

// New returns a flow that is not running yet.
func New(cfg Config) *Flow {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.RetryPeriod <= 0 {
		cfg.RetryPeriod = time.Second
	}
	return &Flow{cfg: cfg, log: log, msgs: make(chan func(*owner)), leave: make(chan struct{}), done: make(chan struct{})}
}

// Leaving is closed when a reclaim makes the node leave (its deadline, or
// an emergency); the agent then shuts down.
func (f *Flow) Leaving() <-chan struct{} { return f.leave }

// run is one reclaim of the node.
type run struct {
	announced, deadline time.Time
	emergency           bool
	// reason is why the machine is taken back, in the owner's words
	// ("lending window ends 08:00"); OwnerReason for the owner's command.
	reason string
	jobs   []policy.JobID
	// isolate is how long the kill-switch flip took; isolated whether it
	// was enforced at all.
	isolate  time.Duration
	isolated bool
	timer    *time.Timer // the deadline (nil for an emergency)
	// sent is the most each of the run's transfers was seen to have
	// sent, from the job manager's TransfersSince, which remembers
	// finished transfers: a hand-off's push is no longer listed once the
	// job moved.
	sent map[sentKey]int64
}

// owner is the flow's state; only the Run goroutine touches it.
type owner struct {
	f      *Flow
	ctx    context.Context
	run    *run
	report *localapi.ReclaimReport // the run's owner's report, once made
	// recorded is the last report of run the cluster's history accepted;
	// recording is set while one is being submitted.
	recorded  *state.ReclaimReport
	recording bool
	// busy is set while an announcement is being submitted.
	busy bool
	left bool
	// closing: the node is shutting down; the flow answers but starts
	// nothing (no deadline, poll or new reclaim).
	closing bool
	// pending: the report file may hold an earlier reclaim's report the
	// cluster never got; offering is set while it is being submitted.
	pending, offering bool
	// submitters are the goroutines submitting reports for the owner.
	submitters sync.WaitGroup
}

// Run owns the flow until ctx ends.
func (f *Flow) Run(ctx context.Context) {
	defer close(f.done)
	o := &owner{f: f, ctx: ctx, pending: true}
	defer o.submitters.Wait() // their submits end with ctx
	defer o.stopTimer()
	poll := time.NewTicker(pollPeriod)
	defer poll.Stop()
	retry := time.NewTicker(f.cfg.RetryPeriod)
	defer retry.Stop()
	for {
		var deadline <-chan time.Time
		if o.run != nil && o.run.timer != nil {
			deadline = o.run.timer.C
		}
		select {
		case <-ctx.Done():
			return
		case m := <-f.msgs:
			m(o)
		case <-deadline:
			o.atDeadline()
		case <-poll.C:
			if o.run != nil && !o.run.emergency && !o.closing {
				o.poll()
			}
		case <-retry.C:
			if o.pending && !o.offering && !o.closing {
				o.offerPending()
			}
		}
	}
}

// Close prepares the flow for the node's shutdown: a pending deadline no
// longer fires and nothing new starts, while requests are still answered
// (the owner may ask for the report as the node leaves). Run ends with its
// context.
func (f *Flow) Close() {
	f.do(func(o *owner) {
		o.closing = true
		o.stopTimer()
	})
}

// do runs fn on the owner goroutine and waits for it; false when the flow
// is not running (the agent is stopping).
func (f *Flow) do(fn func(*owner)) bool {
	done := make(chan struct{})
	select {
	case f.msgs <- func(o *owner) { fn(o); close(done) }:
		<-done
		return true
	case <-f.done:
		return false
	}
}

// post hands a submitter's result to the owner goroutine, unless ctx
// (the owner's) ended first.
func (f *Flow) post(ctx context.Context, fn func(*owner)) {
	select {
	case f.msgs <- fn:
	case <-ctx.Done():
	}
}

var stopping = localapi.Response{Error: "reclaim: the agent is stopping", Kind: localapi.KindInternal}

// Handle answers one of the reclaim operations of the control socket.
func (f *Flow) Handle(req localapi.Request) localapi.Response {
	switch req.Op {
	case localapi.OpReclaim:
		return f.announce(req.Notice, time.Time{}, OwnerReason)
	case localapi.OpReclaimStatus:
		var st localapi.ReclaimStatus
		if !f.do(func(o *owner) { st = o.status(f.cfg.Coord.State()) }) {
			return stopping
		}
		return localapi.Response{Reclaim: &st}
	case localapi.OpReclaimCancel:
		return f.cancel()
	case localapi.OpReclaimNow:
		return f.now(OwnerReason)
	}
	return localapi.Response{Error: fmt.Sprintf("unknown operation %q", req.Op), Kind: localapi.KindBadRequest}
}

func submitError(what string, err error) localapi.Response {
	kind := localapi.KindInternal
	if errors.Is(err, raft.ErrNoLeader) || errors.Is(err, context.DeadlineExceeded) {
		kind = localapi.KindNoLeader
	}
	return localapi.Response{Error: fmt.Sprintf("%s: %v", what, err), Kind: kind}
}

// OwnerReason is the reason of a reclaim the owner asked for by hand.
const OwnerReason = "reclaimed by the owner (reclaimnet reclaim)"

// Announce starts a scheduled reclaim with its deadline, as 'reclaimnet
// reclaim --notice' does, for the reason given (the owner policy's
// automatic reclaims: "lending window ends 08:00"); the owner's report and
// the history carry the reason.
func (f *Flow) Announce(deadline time.Time, reason string) localapi.Response {
	return f.announce(time.Until(deadline), deadline, reason)
}

// Now is the emergency, as 'reclaimnet reclaim --now' (without the CLI's
// own kill-switch flip, which the flow repeats anyway), for reason.
func (f *Flow) Now(reason string) localapi.Response { return f.now(reason) }

// Pending reports whether a reclaim of the node is under way (announced,
// not yet left) and whether the node is leaving or left.
func (f *Flow) Pending() (pending, leaving bool) {
	f.do(func(o *owner) { pending, leaving = o.run != nil || o.busy, o.left })
	return pending, leaving
}

// announce starts a scheduled reclaim: the soft kill-switch (no new
// work), the announcement in the replicated state, the deadline (at the
// given one, else the notice from now).
func (f *Flow) announce(notice time.Duration, at time.Time, reason string) localapi.Response {
	if notice <= 0 {
		return localapi.Response{Error: "reclaim: the notice must be positive (use reclaim-now for an emergency)", Kind: localapi.KindBadRequest}
	}
	if notice > localapi.MaxReclaimNotice {
		return localapi.Response{Error: fmt.Sprintf("reclaim: notice %v is over the maximum %v", notice, localapi.MaxReclaimNotice), Kind: localapi.KindBadRequest}
	}
	var resp *localapi.Response
	var r *run
	ok := f.do(func(o *owner) {
		if o.closing {
			resp = &stopping
			return
		}
		if o.run != nil || o.left || o.busy {
			resp = &localapi.Response{Error: "reclaim: a reclaim of this node is already under way (cancel it first)", Kind: localapi.KindBadRequest}
			return
		}
		took, on, err := o.setKillSwitch(bpf.ModeSoft)
		if err != nil {
			resp = &localapi.Response{Error: fmt.Sprintf("reclaim: kill-switch soft: %v", err), Kind: localapi.KindInternal}
			return
		}
		now := time.Now()
		if at.IsZero() {
			at = now.Add(notice)
		}
		r = &run{announced: now, deadline: at, reason: reason, isolate: took, isolated: on, jobs: o.localJobs(f.cfg.Coord.State())}
		o.busy = true
	})
	if !ok {
		return stopping
	}
	if resp != nil {
		return *resp
	}
	ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
	defer cancel()
	_, err := f.cfg.Coord.Submit(ctx, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: policy.NodeID(f.cfg.Node), Announced: r.announced, Deadline: r.deadline}})
	ok = f.do(func(o *owner) {
		o.busy = false
		if err != nil {
			o.setKillSwitch(bpf.ModeOff)
			e := submitError("reclaim", err)
			resp = &e
			return
		}
		if o.run != nil || o.left || o.closing {
			resp = &localapi.Response{Error: "reclaim: the agent is stopping, or another reclaim was announced meanwhile", Kind: localapi.KindInternal}
			return
		}
		o.start(r)
		f.log.Info("reclaim announced", "deadline", r.deadline, "jobs", len(r.jobs))
		st := o.status(f.cfg.Coord.State())
		resp = &localapi.Response{Reclaim: &st}
	})
	if !ok {
		return stopping
	}
	return *resp
}

// cancel withdraws the pending reclaim and turns the kill-switch off.
func (f *Flow) cancel() localapi.Response {
	var resp *localapi.Response
	var r *run
	if !f.do(func(o *owner) {
		if o.left {
			resp = &localapi.Response{Error: "reclaim: the node is already leaving", Kind: localapi.KindBadRequest}
		}
		r = o.run
	}) {
		return stopping
	}
	if resp != nil {
		return *resp
	}
	ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
	defer cancel()
	if _, err := f.cfg.Coord.Submit(ctx, state.CancelReclaim{Node: policy.NodeID(f.cfg.Node)}); err != nil {
		return submitError("reclaim cancel", err)
	}
	if !f.do(func(o *owner) {
		if r != nil && o.run == r {
			o.stopTimer()
			o.run = nil
		}
		if _, _, err := o.setKillSwitch(bpf.ModeOff); err != nil {
			resp = &localapi.Response{Error: fmt.Sprintf("reclaim cancel: kill-switch off: %v", err), Kind: localapi.KindInternal}
			return
		}
		st := o.status(f.cfg.Coord.State())
		resp = &localapi.Response{Reclaim: &st}
	}) {
		return stopping
	}
	return *resp
}

// now is the emergency. The CLI flipped the pinned kill-switch before
// asking; the flow flips it again (cheap), records the emergency in the
// log if the leader answers within a second, and leaves without the
// graceful steps (Abandon): peers see a failure, the leader re-places the
// jobs from their freshest committed replicas. The jobs are stopped by the
// shutdown (SIGTERM, SIGKILL after their grace).
func (f *Flow) now(reason string) localapi.Response {
	start := time.Now()
	var (
		r      *run
		st     *state.State
		leader bool
	)
	if !f.do(func(o *owner) {
		took, on, err := o.setKillSwitch(bpf.ModeHard)
		if err != nil {
			f.log.Error("kill-switch hard", "err", err)
		}
		st = f.cfg.Coord.State()
		jobsHere := o.localJobs(st)
		if o.run != nil {
			jobsHere = mergeJobs(o.run.jobs, jobsHere)
			o.stopTimer()
		}
		r = &run{announced: start, deadline: start, emergency: true, reason: reason, jobs: jobsHere, isolate: took, isolated: on}
		o.run, o.report, o.recorded = r, nil, nil
		if f.cfg.Abandon != nil {
			f.cfg.Abandon()
		}
		leader = f.cfg.Coord.IsLeader()
	}) {
		return stopping
	}
	// Recording the emergency lets the leader act before failure
	// detection. Not when this node leads: its own tick would then start
	// membership changes that its shutdown, a moment later, waits on
	// (raft.Coordinator.Shutdown waits for the leader loop, whose
	// reconcile waits on a Raft future); peers detect the failure instead.
	if !leader {
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(emergencyAnnounce))
		if _, err := f.cfg.Coord.Submit(ctx, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: policy.NodeID(f.cfg.Node), Announced: start, Deadline: start}}); err != nil {
			f.log.Warn("emergency reclaim not recorded; peers will detect the failure", "err", err)
		}
		cancel()
	}
	var status localapi.ReclaimStatus
	var cmd *state.RecordReclaimReport
	if !f.do(func(o *owner) {
		status = o.status(st)
		status.Report = o.finish(time.Now())
		if status.Report != nil {
			cmd = &state.RecordReclaimReport{Report: replicatedReport(r, status.Report)}
		}
	}) {
		return stopping
	}
	// The owner's report goes to the cluster's history now if the leader
	// answers in time; otherwise the report file keeps it unreplicated and
	// the agent submits it when it runs again. Not when this node leads
	// (see above).
	if !leader && cmd != nil {
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(emergencyRecord))
		_, err := f.cfg.Coord.Submit(ctx, *cmd)
		cancel()
		if err != nil {
			f.log.Warn("emergency report not recorded in the cluster yet: kept in the report file, submitted when the agent runs again", "err", err)
		}
		f.do(func(o *owner) {
			if err == nil {
				o.markReplicated(r)
			}
		})
	}
	f.do(func(o *owner) { o.triggerLeave() })
	return localapi.Response{Reclaim: &status}
}

// start makes r the running reclaim and arms its deadline.
func (o *owner) start(r *run) {
	o.run, o.report, o.recorded = r, nil, nil
	r.timer = time.NewTimer(time.Until(r.deadline))
}

func (o *owner) stopTimer() {
	if o.run != nil && o.run.timer != nil {
		o.run.timer.Stop()
		o.run.timer = nil
	}
}

func (o *owner) triggerLeave() {
	if !o.left {
		o.left = true
		close(o.f.leave)
	}
}

// setKillSwitch flips the kill-switch if enforcement is on and returns
// how long the flip took.
func (o *owner) setKillSwitch(mode bpf.Mode) (time.Duration, bool, error) {
	ks := o.f.cfg.Switch
	if ks == nil || !ks.Enabled() {
		return 0, false, nil
	}
	start := time.Now()
	if err := ks.SetKillSwitch(mode); err != nil {
		return 0, false, err
	}
	return time.Since(start), true, nil
}

// poll records a scheduled reclaim's report once it is complete and
// offers it to the cluster's history when it changed.
func (o *owner) poll() {
	r := o.run
	st := o.f.cfg.Coord.State()
	if s := o.status(st); s.Complete && o.report == nil {
		o.report = o.buildReport(r, st, s, time.Now())
		o.save(o.report)
	}
	if o.report == nil || o.recording {
		return
	}
	rep := replicatedReport(r, o.report)
	if o.recorded != nil && equalReports(*o.recorded, rep) {
		return
	}
	o.recording = true
	o.submitters.Go(func() {
		ctx, cancel := context.WithTimeout(o.ctx, recordTimeout)
		defer cancel()
		_, err := o.f.cfg.Coord.Submit(ctx, state.RecordReclaimReport{Report: rep})
		o.f.post(o.ctx, func(o *owner) {
			o.recording = false
			if err != nil {
				o.f.log.Warn("reclaim report not recorded in the cluster (kept locally)", "err", err)
				return
			}
			if o.run == r {
				o.recorded = &rep
				o.markReplicated(r)
			}
		})
	})
}

// atDeadline makes the node leave, whatever else is happening: the
// kill-switch goes hard; the leave follows after at most handoffSettle
// for hand-offs in their last step and finalRecordTimeout to record the
// report.
func (o *owner) atDeadline() {
	r := o.run
	r.timer = nil
	o.f.log.Warn("reclaim deadline: leaving now")
	if _, _, err := o.setKillSwitch(bpf.ModeHard); err != nil {
		o.f.log.Error("kill-switch hard at the deadline", "err", err)
	}
	o.settleHandoffs(r, handoffSettle)
	rep := o.finish(time.Now())
	if cmd := replicatedReport(r, rep); o.recorded == nil || !equalReports(*o.recorded, cmd) {
		ctx, cancel := context.WithTimeout(o.ctx, finalRecordTimeout)
		if _, err := o.f.cfg.Coord.Submit(ctx, state.RecordReclaimReport{Report: cmd}); err != nil {
			o.f.log.Warn("reclaim report not recorded in the cluster (kept locally)", "err", err)
		} else {
			o.recorded = &cmd
			o.markReplicated(r)
		}
		cancel()
	}
	o.triggerLeave()
}

// settleHandoffs waits, at most within, until no job of r is handing off
// here, so the owner's report records each hand-off's outcome (moved only
// if its move committed) instead of a hand-off in flight.
func (o *owner) settleHandoffs(r *run, within time.Duration) {
	m := o.f.cfg.Jobs
	if m == nil {
		return
	}
	limit := time.NewTimer(within)
	defer limit.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		busy := false
		for _, v := range m.View() {
			if v.State == jobs.StateHandingOff && containsJob(r.jobs, v.Job) {
				busy = true
			}
		}
		if !busy {
			return
		}
		select {
		case <-o.ctx.Done():
			return
		case <-limit.C:
			o.f.log.Warn("reclaim deadline: a hand-off is still in flight; reported as degraded")
			return
		case <-tick.C:
		}
	}
}

// finish records the report at the node's leave (the deadline or an
// emergency): jobs not yet stopped count as degraded, the machine as used
// until now.
func (o *owner) finish(now time.Time) *localapi.ReclaimReport {
	if o.run == nil {
		return o.report
	}
	if o.report == nil {
		cs := o.f.cfg.Coord.State()
		o.report = o.buildReport(o.run, cs, o.status(cs), now)
	}
	o.report.Left = now
	if f := o.f.cfg.Afterwards; f != nil {
		o.report.LendingAfter, o.report.LendableFrom = f(now)
	}
	o.save(o.report)
	return o.report
}

// markReplicated notes in the report file that the cluster's history
// holds r's final report.
func (o *owner) markReplicated(r *run) {
	if o.run != r || o.report == nil || o.report.Left.IsZero() {
		return
	}
	o.report.Replicated = true
	o.save(o.report)
}

package sim

import (
	"sort"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/trace"
)

// simJob is one job as the engine tracks it: where it runs, its progress,
// which nodes hold which of its versions, and its transfers under way.
type simJob struct {
	rec       trace.JobRec
	id        policy.JobID
	idx       int // position in the trace (World.jobs)
	state     policy.JobState
	node      int // host or -1
	work      float64
	progress  float64
	computing bool
	since     float64 // when progress was last brought up to date
	committed float64
	replicas  []int
	// landed is the progress captured by the last periodic checkpoint
	// that landed, even if its holder has left since (B1 refreshes at
	// once when no live peer holds it).
	landed float64
	// held is the progress of the newest version each node holds (older
	// versions on former standbys stay usable until the node leaves).
	held          map[int]float64
	ckpt          *simFlow
	handoff       *simFlow
	restore       *simFlow
	evac          *simFlow
	replica       *simFlow
	startedAt     float64 // when it last started running on its host
	handTo        int     // reserved destination of a hand-off, -1 none
	interval      float64
	ckptRate      float64
	standby       int
	lastCkpt      float64
	gen           int // invalidates stale timer events
	ckptGen       int // invalidates stale checkpoint timers
	stopAt        float64
	stopProg      float64
	stopEmergency bool
	down          bool
	started       bool
	bytes         int64
	restartS      float64
	infeasible    bool
	doneAt        float64
	stopCause     stopCause
	speed         float64 // useful progress per second of computing (Slowed)
	// finalAt is the final-checkpoint start a waiting hand-off has a
	// control run booked for (docs/design.md P3.8), -1 none.
	finalAt float64
	// handLimit is the downtime limit of the hand-off whose final
	// transfer ended last (docs/design.md P3.8d), seconds; 0 none.
	handLimit float64
}

// stopCause is why a job stopped, for the loss breakdown.
type stopCause uint8

const (
	causeEmergency     stopCause = iota // emergency departure of the host
	causeScheduled                      // announced departure, no hand-off started
	causeHandoff                        // planned hand-off (final checkpoint)
	causeHandoffFailed                  // hand-off started but did not finish
	nCauses
)

// syncProgress brings a job's progress up to now.
func (e *Engine) syncProgress(j *simJob) {
	if j.computing {
		elapsed := min(e.w.now-j.since, (j.work-j.progress)/j.speed)
		if elapsed > 0 {
			j.progress = min(j.work, j.progress+elapsed*j.speed)
			e.m.redundancy += (1 - j.speed) * elapsed * float64(j.rec.GPUs)
		}
	}
	j.since = e.w.now
}

// depart takes node ni away now.
func (e *Engine) depart(ni int, emergency bool) {
	w := e.w
	n := w.nodes[ni]
	if !n.up {
		return
	}
	n.up, n.leaving = false, false
	if e.obs != nil {
		e.obs.ObserveDeparture(n.id, w.timeAt(w.now), emergency)
	}
	// Flows touching the node die.
	for _, f := range append([]*simFlow(nil), w.flows...) {
		if f.from == ni || f.to == ni {
			e.dropFlow(f, false)
		}
	}
	for _, j := range w.jobs {
		if _, ok := j.held[ni]; ok {
			delete(j.held, ni)
			j.refreshReplicas()
		}
		if j.standby == ni {
			j.standby = -1
		}
		if j.handTo == ni {
			j.handTo = -1
		}
		if j.node == ni {
			e.interrupt(j, emergency)
		}
	}
	n.freeGPUs = 0
	e.wantCtl = true
	e.dirty = true
}

// interrupt stops a job that lost its host.
func (e *Engine) interrupt(j *simJob, emergency bool) {
	e.syncProgress(j)
	if !j.down {
		j.down, j.stopAt, j.stopProg = true, e.w.now, j.progress
		j.stopEmergency = emergency
		j.stopCause = causeScheduled
		if emergency {
			j.stopCause = causeEmergency
		}
	} else if j.stopCause == causeHandoff {
		j.stopCause = causeHandoffFailed
	}
	if j.handTo >= 0 {
		e.w.nodes[j.handTo].freeGPUs += j.rec.GPUs
		j.handTo = -1
	}
	j.computing = false
	j.node = -1
	j.state = policy.JobRecovering
	// Baselines wait a fixed delay before requeueing (Slurm 30 s, the
	// Bamboo-like fail-over 10 s): run the controller when it ends rather
	// than at the next period.
	for _, d := range e.delays {
		e.push(e.w.now+d, evControl, 0, 0)
	}
	j.gen++
	if j.ckpt != nil {
		e.dropFlow(j.ckpt, false)
	}
}

// bestReplica returns the node holding the job's freshest committed
// checkpoint, or -1.
func (j *simJob) bestReplica() int {
	if len(j.replicas) == 0 {
		return -1
	}
	return j.replicas[0]
}

// resume puts a job back to work on its node after a (re)start.
func (e *Engine) resume(j *simJob) {
	w := e.w
	if j.node < 0 {
		return
	}
	if j.down {
		loss := j.stopProg - j.progress
		if loss < 0 {
			loss = 0
		}
		e.m.lostGPUs += loss * float64(j.rec.GPUs)
		e.m.interruptions++
		e.m.downtimes = append(e.m.downtimes, w.now-j.stopAt)
		e.m.lossBy[j.stopCause] += loss * float64(j.rec.GPUs)
		e.m.downBy[j.stopCause] += (w.now - j.stopAt) * float64(j.rec.GPUs)
		e.m.countBy[j.stopCause]++
		if j.stopCause == causeHandoff && j.handLimit > 0 {
			e.m.handoffDown = append(e.m.handoffDown, w.now-j.stopAt)
			e.m.handoffLimit = append(e.m.handoffLimit, j.handLimit)
		}
		j.handLimit = 0
		// A scheduled reclaim succeeds only with a zero-loss hand-off; an
		// emergency one when the job resumed from an off-node checkpoint
		// losing at most its loss budget.
		if loss <= 1e-6 || (j.stopEmergency && j.committed > 0 && loss <= j.rec.LossBudgetS+1e-9) {
			e.m.successes++
		}
		e.m.lossSeries = append(e.m.lossSeries, SeriesPoint{T: w.now, LossGPUh: e.m.lostGPUs / 3600})
		j.down = false
	}
	j.state = policy.JobRunning
	j.computing = true
	j.since = w.now
	j.lastCkpt = w.now
	j.startedAt = w.now
	j.gen++
	e.scheduleJob(j)
	e.wantCtl = true // the new host's interval and standby
}

// scheduleJob sets the job's completion and next checkpoint timers.
func (e *Engine) scheduleJob(j *simJob) {
	w := e.w
	e.push(w.now+(j.work-j.progress)/j.speed, evJobDone, w.jobIdx[j.id], j.gen)
	e.scheduleCheckpoint(j)
}

// scheduleCheckpoint (re)arms the job's next periodic checkpoint.
func (e *Engine) scheduleCheckpoint(j *simJob) {
	j.ckptGen++
	if j.state == policy.JobRunning && j.interval > 0 && j.ckpt == nil && j.handoff == nil {
		e.push(max(e.w.now, j.lastCkpt+j.interval), evCkptDue, e.w.jobIdx[j.id], j.ckptGen)
	}
}

func (e *Engine) complete(j *simJob) {
	w := e.w
	if j.progress < j.work-1e-6 {
		e.push(w.now+(j.work-j.progress)/j.speed, evJobDone, w.jobIdx[j.id], j.gen)
		return
	}
	j.state = policy.JobDone
	w.dropLive(j)
	j.computing = false
	j.doneAt = w.now
	for _, f := range append([]*simFlow(nil), w.flows...) {
		if f.job == j {
			e.dropFlow(f, false)
		}
	}
	if j.node >= 0 {
		w.nodes[j.node].freeGPUs += j.rec.GPUs
	}
	if j.handTo >= 0 {
		w.nodes[j.handTo].freeGPUs += j.rec.GPUs
		j.handTo = -1
	}
	j.node = -1
	j.gen++
	e.wantCtl = true
}

// startCheckpoint begins a periodic checkpoint of a running job.
func (e *Engine) startCheckpoint(j *simJob) {
	w := e.w
	if j.state != policy.JobRunning || j.ckpt != nil || j.handoff != nil || j.node < 0 || j.interval <= 0 {
		return
	}
	dst := j.standby
	if dst < 0 || dst == j.node || !w.nodes[dst].up {
		dst = e.fallbackStandby(j)
	}
	if dst < 0 {
		j.lastCkpt = w.now
		e.scheduleCheckpoint(j)
		return
	}
	e.syncProgress(j)
	j.lastCkpt = w.now
	f := e.newFlow(flowCheckpoint, j, j.node, dst, float64(j.bytes))
	f.captured = j.progress
	f.rateCap = j.ckptRate
	j.ckpt = f
}

// fallbackStandby is where a checkpoint goes when the controller named no
// standby: the current replica holder if it is up, else the first other
// up node in the same building, else any up node (engine plumbing, not a
// policy: ReclaimNet always names a standby).
func (e *Engine) fallbackStandby(j *simJob) int {
	w := e.w
	if r := j.bestReplica(); r >= 0 && r != j.node && w.nodes[r].up {
		return r
	}
	host := w.nodes[j.node]
	best := -1
	for i, n := range w.nodes {
		if i == j.node || !n.up || n.storage || n.leaving {
			continue
		}
		if n.rec.Building == host.rec.Building {
			return i
		}
		if best < 0 {
			best = i
		}
	}
	return best
}

// hold records that node holds the job's version at progress.
func (j *simJob) hold(node int, progress float64) {
	if old, ok := j.held[node]; !ok || progress > old {
		j.held[node] = progress
	}
	j.refreshReplicas()
}

// refreshReplicas recomputes the freshest surviving version and its
// holders (in node order, so runs are deterministic).
func (j *simJob) refreshReplicas() {
	j.committed = 0
	for _, p := range j.held {
		j.committed = max(j.committed, p)
	}
	j.replicas = j.replicas[:0]
	var nodes []int
	for n, p := range j.held {
		if p == j.committed {
			nodes = append(nodes, n)
		}
	}
	sort.Ints(nodes)
	j.replicas = append(j.replicas, nodes...)
}

// copyFlow returns the job's copy under way of a kind (evacuation or
// holder-to-holder), nil if none.
func (j *simJob) copyFlow(kind flowKind) *simFlow {
	if kind == flowReplica {
		return j.replica
	}
	return j.evac
}

// setCopyFlow records the job's copy under way of a kind.
func (j *simJob) setCopyFlow(kind flowKind, f *simFlow) {
	if kind == flowReplica {
		j.replica = f
	} else {
		j.evac = f
	}
}

package sim

import (
	"math"
	"strings"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// control runs the controller and applies its plan.
func (e *Engine) control() {
	w := e.w
	if len(w.live) == 0 {
		return
	}
	e.m.controls++
	e.lastCtl = w.now
	plan := e.ctrl.Control(w, w.timeAt(w.now))
	enforced := e.ctrl.Enforced()
	for _, jd := range plan.Jobs {
		ji, ok := w.jobIdx[jd.Job]
		if !ok {
			continue
		}
		j := w.jobs[ji]
		old := j.interval
		j.interval = jd.Interval.Seconds()
		j.ckptRate = 0
		if enforced {
			j.ckptRate = jd.Bandwidth
		}
		if j.ckpt != nil {
			j.ckpt.rateCap = j.ckptRate
			e.dirty = true
		}
		j.standby = -1
		if si, ok := w.nodeIdx[jd.Standby]; ok && jd.Standby != "" {
			j.standby = si
		}
		if jd.LossBudgetInfeasible && !j.infeasible {
			e.m.infeasible++
		}
		j.infeasible = jd.LossBudgetInfeasible
		if old != j.interval {
			e.scheduleCheckpoint(j)
		}
	}
	for _, hd := range plan.Handoffs {
		e.applyHandoff(hd)
	}
	for _, p := range plan.Placements {
		e.applyPlacement(p)
	}
	e.applyCopies(plan.Flows, enforced, policy.EvacuationPrefix, flowEvac)
	e.applyCopies(plan.Flows, enforced, policy.ReplicaPrefix, flowReplica)
	if enforced {
		for _, fd := range plan.Flows {
			for _, f := range w.flows {
				if f.job.id == fd.Job && f.kind != flowCheckpoint && f.kind != flowEvac && f.kind != flowReplica && w.nodes[f.to].id == fd.To && fd.Rate > 0 {
					f.rateCap = fd.Rate
					e.dirty = true
				}
			}
		}
		// Under enforcement every transfer is paced. One the plan gave
		// no rate (none yet) goes at what its path leaves to migration
		// (the available bandwidth, within P3's reservation), never
		// greedy: an unpaced 1 Gbit/s restore starved research traffic.
		for _, f := range w.flows {
			if f.kind != flowCheckpoint && f.rateCap <= 0 {
				f.rateCap = e.migrationRoom(f.links)
				e.dirty = true
			}
		}
	}
	e.trackRooms() // the hand-offs' needs move with their progress
}

// applyCopies carries out the plan's flows whose ID starts with prefix
// (policy.EvacuationPrefix: a copy sent off a leaving holder;
// policy.ReplicaPrefix: a holder-to-holder copy) as the agent's job
// manager does: the holder sends the job's freshest committed copy to the
// flow's destination, at the flow's rate under enforcement; a copy the
// plan no longer decides is cancelled, and one whose holder lacks that
// copy, or whose destination has it, is not started.
func (e *Engine) applyCopies(flows []policy.FlowDecision, enforced bool, prefix string, kind flowKind) {
	w := e.w
	var wanted map[*simJob]policy.FlowDecision // nil in most periods: none
	for _, fd := range flows {
		if !strings.HasPrefix(fd.ID, prefix) {
			continue
		}
		if ji, ok := w.jobIdx[fd.Job]; ok {
			if wanted == nil {
				wanted = map[*simJob]policy.FlowDecision{}
			}
			wanted[w.jobs[ji]] = fd
		}
	}
	var undecided []*simFlow
	for _, f := range w.flows {
		if fd, ok := wanted[f.job]; f.kind == kind && (!ok || w.nodes[f.from].id != fd.From || w.nodes[f.to].id != fd.To) {
			undecided = append(undecided, f)
		}
	}
	for _, f := range undecided {
		e.dropFlow(f, false)
	}
	for _, fd := range flows { // in the plan's order: deterministic
		if !strings.HasPrefix(fd.ID, prefix) {
			continue
		}
		ji, ok := w.jobIdx[fd.Job]
		from, okFrom := w.nodeIdx[fd.From]
		to, okTo := w.nodeIdx[fd.To]
		if !ok || !okFrom || !okTo {
			continue
		}
		j := w.jobs[ji]
		rate := 0.0
		if enforced {
			rate = fd.Rate
		}
		if cur := j.copyFlow(kind); cur != nil {
			cur.rateCap = rate
			e.dirty = true
			continue
		}
		held, ok := j.held[from]
		if !ok || j.committed <= 0 || held < j.committed || !w.nodes[from].up || !w.nodes[to].up {
			continue
		}
		if h, ok := j.held[to]; ok && h >= j.committed {
			continue
		}
		f := e.newFlow(kind, j, from, to, float64(j.bytes))
		f.id = fd.ID // carried in the next snapshot as the agent's leader carries it
		f.captured = j.committed
		f.rateCap = rate
		j.setCopyFlow(kind, f)
	}
}

// migrationRoom returns what a path leaves to migration: the smallest
// over its links of min(available, capacity − β3·capacity) (docs/design.md P3.2
// with Bmin 0), at least 1 byte/s so the transfer still moves.
func (e *Engine) migrationRoom(links []int) float64 {
	room := math.Inf(1)
	for _, d := range links {
		room = min(room, e.linkRoom(d))
	}
	if math.IsInf(room, 1) {
		return 0 // no link: nothing to pace
	}
	return max(room, 1)
}

// linkRoom is what directed link d leaves to migration:
// min(available, capacity − β3·capacity).
func (e *Engine) linkRoom(d int) float64 {
	beta := policy.DefaultParams().BetaP3
	if tc, ok := e.ctrl.(*TickController); ok && tc.Params.Switches.P3 {
		beta = tc.Params.BetaP3
	}
	l := e.w.links[d/2]
	return min(l.avail, l.capacity*(1-beta))
}

// usable reports whether node ni can take job j now.
func (w *World) usable(ni int, j *simJob) bool {
	n := w.nodes[ni]
	return n.up && !n.leaving && !n.storage && n.freeGPUs >= j.rec.GPUs &&
		n.vram >= int64(j.rec.VRAMGB*1e9) && n.rec.Capability >= j.rec.Capability
}

func (e *Engine) applyHandoff(hd policy.HandoffDecision) {
	w := e.w
	ji, ok := w.jobIdx[hd.Job]
	if !ok {
		return
	}
	j := w.jobs[ji]
	if j.state != policy.JobRunning || j.node < 0 || j.handoff != nil || hd.To == "" || !hd.FinalCheckpoint {
		return
	}
	to, ok := w.nodeIdx[hd.To]
	suspend := ok && w.nodes[to].storage && w.nodes[to].up
	if !ok || to == j.node || !w.usable(to, j) && !suspend {
		return
	}
	if !hd.FinalStart.IsZero() {
		// The job computes on the source until its final checkpoint's
		// latest safe start (docs/design.md P3.8); the controller runs then, as the
		// agent's does within its 1-s period, and decides again. A start
		// less than a period away is taken now (earlier is safe).
		if at := hd.FinalStart.Sub(w.Start).Seconds(); at > w.now+policy.ControlPeriod.Seconds() {
			if j.finalAt != at {
				j.finalAt = at
				e.push(at, evControl, 0, 0)
			}
			return
		}
	}
	j.finalAt = -1
	if !suspend {
		// A hand-off to a storage node suspends the job (the oracle's
		// park): no GPUs to reserve, it is placed again later.
		w.nodes[to].freeGPUs -= j.rec.GPUs
		j.handTo = to
	}
	e.syncProgress(j)
	j.computing = false
	j.down, j.stopAt, j.stopProg = true, w.now, j.progress
	j.stopEmergency = false
	j.stopCause = causeHandoff
	j.state = policy.JobMigrating
	j.gen++
	if j.ckpt != nil {
		e.dropFlow(j.ckpt, false)
	}
	bytes := float64(hd.Bytes)
	if bytes <= 0 {
		bytes = float64(j.bytes)
	}
	f := e.newFlow(flowHandoff, j, j.node, to, bytes)
	f.captured = j.progress
	if !hd.Deadline.IsZero() {
		f.deadline = hd.Deadline.Sub(w.Start).Seconds()
	}
	// The limit counts the bytes lacked at what the path leaves to this
	// migration from now until they could have crossed it.
	f.limit = newRoomIntegral(w.now, bytes, e.handoffRoom(f))
	j.handoff = f
	e.trackRooms() // the others' room is smaller by this one's need
}

func (e *Engine) applyPlacement(p policy.Placement) {
	w := e.w
	ji, ok := w.jobIdx[p.Job]
	if !ok {
		return
	}
	j := w.jobs[ji]
	to, ok := w.nodeIdx[p.To]
	if !ok || !w.usable(to, j) {
		return
	}
	if p.Recovery && j.state == policy.JobRunning && j.node >= 0 && w.nodes[j.node].leaving && j.handoff == nil {
		// A degraded hand-off recovered before the deadline (policy.Tick
		// step 2): the job stops now, as the agent stops it, and its GPUs
		// go back to its node (which takes no new work while leaving).
		host := j.node
		e.interrupt(j, false)
		w.nodes[host].freeGPUs += j.rec.GPUs
	}
	if (j.state != policy.JobPending && j.state != policy.JobRecovering) || j.node >= 0 || !j.started {
		return
	}
	w.nodes[to].freeGPUs -= j.rec.GPUs
	j.node = to
	j.gen++
	if j.state == policy.JobPending {
		j.progress = 0
		e.push(w.now+j.restartS, evRestartDone, ji, j.gen)
		return
	}
	// Recovering: restore from the named replica, else the freshest one;
	// a placement that names none (the policy found no usable copy)
	// starts over, as the agent would: only a named holder pushes.
	src := -1
	if fi, ok := w.nodeIdx[p.From]; ok && p.From != "" && w.nodes[fi].up {
		for _, r := range j.replicas {
			if r == fi {
				src = fi
			}
		}
	}
	if src < 0 && p.From != "" {
		for _, r := range j.replicas {
			if w.nodes[r].up {
				src = r
				break
			}
		}
	}
	if src < 0 {
		// Nothing committed survives: start over.
		j.held = map[int]float64{}
		j.refreshReplicas()
		j.progress = 0
		e.push(w.now+j.restartS, evRestartDone, ji, j.gen)
		return
	}
	j.progress = j.committed
	if src == to {
		e.push(w.now+j.restartS, evRestartDone, ji, j.gen)
		return
	}
	j.restore = e.newFlow(flowRestore, j, src, to, float64(j.bytes))
}

// Snapshot returns the policy's view of the world at now. profiles gives
// each node's hazard profiles (emergency bound, departure) by node index;
// linkBW each link's estimated available bandwidth and its lower bound, by
// link index.
func (w *World) Snapshot(params policy.Params, profiles [][2]policy.HazardProfile, linkBW func(link int) (avail, low float64)) policy.Snapshot {
	// Reuse the previous snapshot's slices: a plan is applied before the
	// next snapshot is taken and policy.Tick keeps nothing.
	s := policy.Snapshot{Params: params, Nodes: w.snap.Nodes[:0], Links: w.snap.Links[:0], Jobs: w.snap.Jobs[:0],
		Reclaims: w.snap.Reclaims[:0], Flows: w.snap.Flows[:0]}
	defer func() { w.snap = s }()
	for i, n := range w.nodes {
		if !n.up || n.virtual {
			continue
		}
		pn := policy.Node{
			ID: n.id, Building: n.rec.Building, Lab: n.rec.Lab, Pool: n.rec.Pool, Storage: n.storage,
			GPU:        policy.GPU{Model: n.rec.GPUModel, VRAM: n.vram, Capability: n.rec.Capability},
			GPUs:       n.rec.GPUs,
			FreeGPUs:   n.freeGPUs,
			AccessLink: n.rec.AccessLink, Leaving: n.leaving,
		}
		if !n.storage {
			pn.Load = 1 - float64(n.freeGPUs)/float64(n.rec.GPUs)
			pn.Emergency, pn.Departure = profiles[i][0], profiles[i][1]
		}
		s.Nodes = append(s.Nodes, pn)
		if n.leaving {
			s.Reclaims = append(s.Reclaims, policy.Reclaim{Node: n.id, Announced: w.timeAt(n.announced), Deadline: w.timeAt(n.deadline)})
		}
	}
	for li, l := range w.links {
		if l.id == "acc-"+StorageNode {
			continue
		}
		avail, low := linkBW(li)
		s.Links = append(s.Links, policy.Link{ID: l.id, A: l.a, B: l.b, Capacity: l.capacity, Available: avail, AvailableLow: low})
	}
	for _, j := range w.live {
		pj := policy.Job{
			ID: j.id, State: j.state, CheckpointBytes: j.bytes,
			LossBudget: secs(j.rec.LossBudgetS), GPUs: j.rec.GPUs, VRAM: int64(j.rec.VRAMGB * 1e9),
			Capability: j.rec.Capability, RestartTime: secs(j.restartS),
			Remaining: secs(j.work - j.progressAt(w.now)),
			Copies:    j.rec.Replicas, // 0: the policy's default k, as for an agent's job
		}
		if j.node >= 0 {
			pj.Node = w.nodes[j.node].id
		}
		if pj.State == policy.JobMigrating && j.handoff == nil && j.restore == nil {
			pj.State = policy.JobRunning // restarting on its new host
		}
		if j.standby >= 0 {
			pj.Standby = w.nodes[j.standby].id
			pj.StandbyHas = j.standbyHas(w.now, w.changed)
		}
		for _, r := range j.replicas {
			if w.nodes[r].up && r != j.node {
				pj.Replicas = append(pj.Replicas, w.nodes[r].id)
			}
		}
		if j.state == policy.JobRunning && j.node >= 0 {
			pj.Exposure = secs(j.exposure(w))
			pj.Started = w.timeAt(j.startedAt)
		}
		if j.node >= 0 || j.state == policy.JobRecovering {
			pj.AtRisk = secs(j.atRisk(w))
		}
		s.Jobs = append(s.Jobs, pj)
	}
	for _, f := range w.flows {
		if f.kind == flowCheckpoint {
			// A periodic checkpoint in flight, as the agent's leader
			// carries it (the decision's flow, with the progress the
			// host gossips): a last-chance rescue may finish it.
			s.Flows = append(s.Flows, policy.Flow{ID: policy.CheckpointPrefix + string(f.job.id), Job: f.job.id,
				From: w.nodes[f.from].id, To: w.nodes[f.to].id, Class: policy.ClassPresync,
				Remaining: int64(f.remaining), Start: w.timeAt(f.start), Rate: f.rate})
			continue
		}
		cls := policy.ClassMigration
		switch f.kind {
		case flowRestore:
			cls = policy.ClassEmergency
		case flowEvac, flowReplica:
			cls = policy.ClassPresync
		}
		pf := policy.Flow{ID: f.id, Job: f.job.id, From: w.nodes[f.from].id, To: w.nodes[f.to].id, Class: cls,
			Remaining: int64(f.remaining), Start: w.timeAt(f.start), Rate: f.rate}
		if (f.kind == flowEvac || f.kind == flowReplica) && f.rateCap > 0 {
			pf.Rate = f.rateCap // the decided pace, as the leader's decisions carry it
		}
		if f.deadline > 0 {
			pf.Deadline = w.timeAt(f.deadline)
		}
		s.Flows = append(s.Flows, pf)
	}
	return s
}

// exposure is the work the job would lose if its host left now (see
// policy.Job.Exposure), in seconds of computing: its progress since the
// freshest version a live node other than the host holds or is
// receiving; all of it when none does.
func (j *simJob) exposure(w *World) float64 {
	best := max(0, j.heldOffHost(w))
	if f := j.ckpt; f != nil && f.to != j.node && w.nodes[f.to].up {
		best = max(best, f.captured)
	}
	return max(0, j.progressAt(w.now)-best) / j.speed
}

// atRisk is the work the job loses if its host and every live holder of
// its freshest version leave now (see policy.Job.AtRisk), in seconds of
// computing: its progress since the newest older version another live
// node holds; all of it when none does.
func (j *simJob) atRisk(w *World) float64 {
	fresh, next := -1.0, -1.0
	for n, p := range j.held {
		if n == j.node || !w.nodes[n].up {
			continue
		}
		switch {
		case p > fresh:
			fresh, next = p, fresh
		case p < fresh && p > next:
			next = p
		}
	}
	return max(0, j.progressAt(w.now)-max(0, next)) / j.speed
}

// heldOffHost is the progress of the freshest version a live node other
// than the host holds; -1 when none does.
func (j *simJob) heldOffHost(w *World) float64 {
	best := -1.0
	for n, p := range j.held {
		if n != j.node && w.nodes[n].up {
			best = max(best, p)
		}
	}
	return best
}

func (j *simJob) progressAt(now float64) float64 {
	if j.computing {
		return min(j.work, j.progress+(now-j.since)*j.speed)
	}
	return j.progress
}

// standbyHas is what the job's standby already holds of the job's current
// state (docs/design.md P1.6's "C is the bytes the destination still lacks"): the
// whole payload when its version is the current state, else the bytes
// unchanged since that version, (1 − changed)·C; nothing without a version.
func (j *simJob) standbyHas(now, changed float64) int64 {
	p, ok := j.held[j.standby]
	if !ok {
		return 0
	}
	if p >= j.progressAt(now)-1e-6 {
		return j.bytes
	}
	return int64((1 - changed) * float64(j.bytes))
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Now returns the virtual time.
func (w *World) Now() time.Time { return w.timeAt(w.now) }

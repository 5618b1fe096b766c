package sim

import (
	"fmt"
	"math"
	"slices"

	"github.com/reclaimnet/reclaimnet/policy"
)

// flowKind says what a transfer carries.
type flowKind uint8

const (
	flowCheckpoint flowKind = iota // periodic checkpoint / pre-sync
	flowHandoff                    // final checkpoint of a planned move
	flowRestore                    // restore of a replica to a new host
	flowEvac                       // a committed copy sent off a leaving holder (policy.EvacuationPrefix)
	flowReplica                    // a holder-to-holder copy (policy.ReplicaPrefix)
)

// simFlow is one transfer under way on the link model.
type simFlow struct {
	id        string
	kind      flowKind
	job       *simJob
	from, to  int
	total     float64
	remaining float64
	rateCap   float64 // assigned rate; 0 means none (greedy)
	rate      float64
	links     []int   // directed: 2·link + direction (0: the record's a→b)
	captured  float64 // progress the checkpoint holds
	deadline  float64 // seconds; 0 none
	start     float64
	fill      fillFlow
	limit     roomIntegral // a hand-off's: its path's migration room over its life
}

func (e *Engine) newFlow(kind flowKind, j *simJob, from, to int, bytes float64) *simFlow {
	w := e.w
	e.flowSeq++
	f := &simFlow{id: fmt.Sprintf("f%d", e.flowSeq), kind: kind, job: j, from: from, to: to, total: bytes, remaining: bytes,
		links: w.dpath(from, to), start: w.now}
	if len(f.links) == 0 && from != to {
		f.remaining = 0 // no path in the trace's graph: treat as local
	}
	w.flows = append(w.flows, f)
	e.dirty = true
	if f.remaining <= 0 || from == to {
		f.remaining = 0
		f.rate = math.Inf(1)
	}
	return f
}

// dropFlow removes a flow; completed says it finished.
func (e *Engine) dropFlow(f *simFlow, completed bool) {
	w := e.w
	for i, g := range w.flows {
		if g == f {
			w.flows = append(w.flows[:i], w.flows[i+1:]...)
			break
		}
	}
	e.dirty = true
	j := f.job
	switch f.kind {
	case flowCheckpoint:
		if j.ckpt == f {
			j.ckpt = nil
			if !completed {
				// The receiver left mid-transfer: try again at once.
				e.scheduleCheckpoint(j)
			}
		}
	case flowHandoff:
		if j.handoff == f {
			j.handoff = nil
			j.handLimit = f.handoffLimit(w.now, j.restartS)
			e.trackRooms() // the others' room grows by this one's need
			if !completed {
				e.m.handoffsFailed++
				if j.node >= 0 && w.nodes[j.node].up {
					// The destination left mid-transfer: the job, stopped
					// at its final checkpoint, restarts on its source
					// from it, and the controller decides again.
					if j.handTo >= 0 {
						w.nodes[j.handTo].freeGPUs += j.rec.GPUs
						j.handTo = -1
					}
					j.gen++
					e.push(w.now+j.restartS, evRestartDone, w.jobIdx[j.id], j.gen)
				}
			}
		}
	case flowEvac:
		if j.evac == f {
			j.evac = nil
		}
	case flowReplica:
		if j.replica == f {
			j.replica = nil
		}
	case flowRestore:
		if j.restore == f {
			j.restore = nil
			if !completed && j.node >= 0 && j.state == policy.JobRecovering {
				// The source of the restore left: give the GPUs back and
				// let the controller place the job again.
				e.w.nodes[j.node].freeGPUs += j.rec.GPUs
				j.node = -1
				j.gen++
				e.wantCtl = true
			}
		}
	}
}

// allocScratch is allocate's scratch space, kept from event to event.
type allocScratch struct {
	parts        []*fillFlow
	demand       []float64   // per link direction; 0 outside allocate
	capacity     []float64   // per link direction, fixed
	research     []*fillFlow // per link direction: its research aggregate when it competes, else nil; nil outside allocate
	researchFill []fillFlow  // per link direction, what research points into
	fill         filler
	// touched lists the link directions the flows cross, ascending (the
	// order of the links); active those with migration traffic after the
	// last allocation: only they have a nonzero mig, and only their
	// accounting accrues (a campus has thousands of links, a period's
	// flows cross a few).
	touched, active []int
}

// finishFlow handles a completed transfer.
func (e *Engine) finishFlow(f *simFlow) {
	w := e.w
	j := f.job
	e.dropFlow(f, true)
	switch f.kind {
	case flowCheckpoint:
		first := j.heldOffHost(w) < 0
		j.hold(f.to, f.captured)
		j.landed = f.captured
		// P1's cost model (docs/design.md P1.1) counts C/Beff per checkpoint as
		// overhead; the engine lets the job compute during the upload, so
		// this is reported beside the work loss, not added to it.
		e.m.ckptOverhead += (w.now - f.start) * float64(j.rec.GPUs)
		e.scheduleCheckpoint(j)
		if j.interval == policy.RescueInterval.Seconds() || first {
			// A checkpoint ordered "now", or the job's first copy off
			// its host (an early one), has landed: the controller
			// decides again at once (the agent's leader, within its
			// 1-s period), before the order would start another.
			e.wantCtl = true
		}
	case flowHandoff:
		// The destination holds the final checkpoint: move the job.
		e.m.handoffsOK++
		j.hold(f.to, f.captured)
		if j.node >= 0 {
			w.nodes[j.node].freeGPUs += j.rec.GPUs
		}
		if w.nodes[f.to].storage {
			// Suspended on a storage node: it waits there, down, to be
			// placed and restored.
			j.node, j.progress, j.state = -1, f.captured, policy.JobRecovering
			j.gen++
			break
		}
		j.node, j.handTo = f.to, -1
		j.progress = f.captured
		j.state = policy.JobMigrating
		j.gen++
		e.push(w.now+j.restartS, evRestartDone, w.jobIdx[j.id], j.gen)
	case flowRestore:
		j.hold(f.to, j.progress)
		j.gen++
		e.push(w.now+j.restartS, evRestartDone, w.jobIdx[j.id], j.gen)
	case flowEvac, flowReplica:
		j.hold(f.to, f.captured)
	}
	// A landed periodic checkpoint or holder-to-holder copy waits for the
	// next period like the agent's (nothing is late for it: the copy's
	// target holds the version, the leader sees it then); every other
	// transfer's end changes what runs where, so the controller decides
	// again at once.
	e.wantCtl = e.wantCtl || f.kind != flowCheckpoint && f.kind != flowReplica
}

// allocate recomputes every flow's rate and, on the link directions the
// flows cross, the migration and research rates (a direction no flow
// crosses has no migration traffic; its research rate is not read).
func (e *Engine) allocate() {
	w := e.w
	nd := 2 * len(w.links)
	a := &e.alloc
	if a.research == nil {
		a.research = make([]*fillFlow, nd)
		a.researchFill = make([]fillFlow, nd)
		a.capacity = make([]float64, nd)
		a.demand = make([]float64, nd)
		for k := range a.researchFill {
			a.researchFill[k].links = []int{k}
			a.capacity[k] = w.links[k/2].capacity
		}
	}
	for _, k := range a.active {
		w.links[k/2].mig[k%2] = 0
	}
	a.active = a.active[:0]
	parts, touched := a.parts[:0], a.touched[:0]
	demand, research := a.demand, a.research // of the flows on each link direction; +Inf with a greedy one
	for _, f := range w.flows {
		if math.IsInf(f.rate, 1) && f.remaining == 0 {
			continue
		}
		f.fill = fillFlow{links: f.links, weight: 1, demand: math.Inf(1)}
		if f.rateCap > 0 {
			f.fill.demand = f.rateCap
		}
		parts = append(parts, &f.fill)
		for _, d := range f.links {
			if demand[d] == 0 {
				touched = append(touched, d) // a flow's demand is > 0
			}
			demand[d] += f.fill.demand
		}
	}
	slices.Sort(touched)
	for _, k := range touched {
		// Research competes where flows run and the link cannot carry
		// every demand; elsewhere it gets its demand anyway (below), and
		// leaving it out keeps the filling small.
		if l := w.links[k/2]; demand[k]+l.capacity-l.avail > l.capacity {
			rf := &a.researchFill[k]
			rf.weight, rf.demand = researchWeight, l.capacity-l.avail
			research[k] = rf
			parts = append(parts, rf)
		}
	}
	a.fill.fill(parts, a.capacity)
	clear(parts) // the flows may be dropped: keep no pointer to them
	a.parts = parts
	for _, f := range w.flows {
		if math.IsInf(f.rate, 1) && f.remaining == 0 {
			continue
		}
		f.rate = f.fill.rate
		for _, d := range f.links {
			w.links[d/2].mig[d%2] += f.rate
		}
	}
	for _, k := range touched {
		l, d := w.links[k/2], k%2
		if research[k] != nil {
			l.research[d] = research[k].rate
		} else if l.mig[d] > 0 {
			l.research[d] = min(l.capacity-l.avail, max(0, l.capacity-l.mig[d]))
		}
		if l.mig[d] > 0 {
			a.active = append(a.active, k)
		}
		demand[k], research[k] = 0, nil
	}
	a.touched = touched
	// Zero-length transfers finish at once.
	for _, f := range append([]*simFlow(nil), w.flows...) {
		if f.remaining == 0 {
			e.finishFlow(f)
		}
	}
}

package sim

import (
	"container/heap"
	"context"
	"math"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/trace"
)

// Options are engine settings shared by every policy.
type Options struct {
	// ControlPeriod is the longest gap between two controller runs; it
	// also runs at once on every event (announcement, departure, return,
	// submission, restart, hand-off or restore completion) and every
	// bandwidth sample. The agent ticks every 1 s, but between those
	// events nothing the policy reads changes except the clock; results
	// are the same from 1 to 30 min on the calibrated trace (BENCHMARKS).
	ControlPeriod time.Duration
	// Progress, when set, is called with the fraction of the trace done.
	Progress func(frac float64)
	// Context, when set, stops a run early once it is done (Ctrl-C).
	Context context.Context
	// ChangedFraction is the share of a job's checkpoint bytes that differ
	// from the job's previous checkpoint once it has trained on (the
	// delta a hand-off to a pre-synced standby still moves). Training
	// updates every weight and optimizer moment, so the default is 1: a
	// standby that holds an older version saves nothing; only a standby
	// holding the job's current state (no progress since) saves the whole
	// payload. 0 < f < 1 models frozen layers or delta-friendly formats.
	ChangedFraction float64
}

// DefaultOptions returns the engine defaults.
func DefaultOptions() Options { return Options{ControlPeriod: 10 * time.Minute, ChangedFraction: 1} }

// Requeuer is implemented by controllers that wait fixed delays after an
// interruption before they place the job again (Slurm's scheduling cycle,
// Bamboo's fail-over): the engine runs the controller when each delay
// ends instead of at the next period.
type Requeuer interface {
	RequeueDelays() []time.Duration
}

// Slowed is implemented by controllers whose jobs compute slower than full
// speed (Bamboo's redundant computation): Speed is useful progress per
// second of GPU time, in (0, 1].
type Slowed interface {
	Speed() float64
}

// Plan is what a controller decides in one control period: the policy
// vocabulary, plus nothing else. Handoffs may be issued for any running
// job (the oracle hands jobs off before unannounced departures).
type Plan = policy.Decisions

// Controller decides for one policy. The engine owns the world and applies
// the plan; a controller never changes engine state.
type Controller interface {
	// Name is the row label, e.g. "ReclaimNet" or "B1' Slurm requeue".
	Name() string
	// Enforced says whether flows are paced at assigned rates (P3 on)
	// instead of competing TCP-fair with research traffic.
	Enforced() bool
	// Control returns the decisions for the world as it is at now.
	Control(w *World, now time.Time) Plan
}

// Observer is implemented by controllers that learn from the trace as it
// unfolds (the hazard and bandwidth estimators).
type Observer interface {
	ObserveDeparture(node policy.NodeID, at time.Time, emergency bool)
	ObserveReturn(node policy.NodeID, at time.Time)
	// ObserveBandwidth reports a link's measured non-migration traffic
	// (bytes/s) and its capacity; link indexes World's links.
	ObserveBandwidth(link int, at time.Time, capacity, nonMigration float64)
}

type evKind uint8

const (
	evAnnounce evKind = iota
	evDepart
	evReturn
	evSubmit
	evTick
	evCkptDue
	evRestartDone
	evJobDone
	evControl // a one-shot control run (baselines' requeue delays)
)

type event struct {
	t    float64
	seq  int
	kind evKind
	i    int
	gen  int
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(a, b int) bool {
	if h[a].t != h[b].t {
		return h[a].t < h[b].t
	}
	return h[a].seq < h[b].seq
}
func (h eventHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// Engine replays one trace through one controller.
type Engine struct {
	w       *World
	ctrl    Controller
	obs     Observer
	opts    Options
	events  eventHeap
	seq     int
	bwNext  int
	dirty   bool
	wantCtl bool
	flowSeq int
	stopped error
	m       metrics
	delays  []float64 // Requeuer delays, seconds
	lastCtl float64   // when the controller last ran
	alloc   allocScratch
}

// NewEngine prepares a run. The trace is not modified.
func NewEngine(tr *trace.Trace, ctrl Controller, opts Options) (*Engine, error) {
	if opts.ControlPeriod <= 0 {
		opts.ControlPeriod = 10 * time.Minute
	}
	if opts.ChangedFraction <= 0 || opts.ChangedFraction > 1 {
		opts.ChangedFraction = 1
	}
	w := &World{Trace: tr, Start: tr.Header.Start, changed: opts.ChangedFraction, speed: 1, nodeIdx: map[policy.NodeID]int{}, linkIdx: map[string]int{},
		jobIdx: map[policy.JobID]int{}, adj: map[string][]int{}, paths: map[[2]int][]int{}, dpaths: map[[2]int][]int{}}
	for _, n := range tr.Nodes {
		w.nodeIdx[policy.NodeID(n.ID)] = len(w.nodes)
		sn := &simNode{rec: n, id: policy.NodeID(n.ID), up: !n.Absent, freeGPUs: n.GPUs, vram: int64(n.VRAMGB * 1e9), storage: n.Storage()}
		if sn.storage {
			sn.freeGPUs = 0
		}
		if n.Absent {
			sn.freeGPUs = 0
		}
		w.nodes = append(w.nodes, sn)
	}
	addLink := func(l trace.LinkRec) {
		w.linkIdx[l.ID] = len(w.links)
		c := l.CapacityMbs * 1e6 / 8
		w.links = append(w.links, &simLink{id: l.ID, a: l.A, b: l.B, capacity: c, avail: c})
		w.adj[l.A] = append(w.adj[l.A], len(w.links)-1)
		w.adj[l.B] = append(w.adj[l.B], len(w.links)-1)
	}
	for _, l := range tr.Links {
		addLink(l)
	}
	w.nodeIdx[StorageNode] = len(w.nodes)
	w.nodes = append(w.nodes, &simNode{rec: trace.NodeRec{ID: StorageNode, Building: "core", AccessLink: "acc-" + StorageNode}, id: StorageNode, up: true, storage: true, virtual: true})
	addLink(trace.LinkRec{ID: "acc-" + StorageNode, A: StorageNode, B: "core", CapacityMbs: 10000})
	w.depByNode = make([][]trace.DepartureRec, len(w.nodes))
	for _, d := range tr.Departures {
		i := w.nodeIdx[policy.NodeID(d.Node)]
		w.depByNode[i] = append(w.depByNode[i], d)
	}
	for _, j := range tr.Jobs {
		w.jobIdx[policy.JobID(j.ID)] = len(w.jobs)
		w.jobs = append(w.jobs, &simJob{rec: j, id: policy.JobID(j.ID), idx: len(w.jobs), node: -1, handTo: -1, standby: -1, finalAt: -1,
			held: map[int]float64{}, work: j.WorkGPUh * 3600 / float64(j.GPUs), bytes: int64(j.CheckpointMB * 1e6), restartS: j.RestartS})
	}
	e := &Engine{w: w, ctrl: ctrl, opts: opts}
	e.obs, _ = ctrl.(Observer)
	if rq, ok := ctrl.(Requeuer); ok {
		for _, d := range rq.RequeueDelays() {
			e.delays = append(e.delays, d.Seconds())
		}
	}
	if sl, ok := ctrl.(Slowed); ok {
		if v := sl.Speed(); v > 0 && v <= 1 {
			w.speed = v
		}
	}
	for _, j := range w.jobs {
		j.speed = w.speed
	}
	for i, d := range tr.Departures {
		if d.Type == trace.Scheduled {
			e.push(d.T-d.NoticeS, evAnnounce, i, 0)
		}
		e.push(d.T, evDepart, i, 0)
	}
	for i, r := range tr.Returns {
		e.push(r.T, evReturn, i, 0)
	}
	for i, j := range tr.Jobs {
		e.push(j.T, evSubmit, i, 0)
	}
	e.push(0, evTick, 0, 0)
	return e, nil
}

func (e *Engine) push(t float64, k evKind, i, gen int) {
	e.seq++
	heap.Push(&e.events, event{t: t, seq: e.seq, kind: k, i: i, gen: gen})
}

// Run replays the whole trace and returns the result.
func (e *Engine) Run() Result {
	w := e.w
	end := w.Trace.Header.DurationS
	nextProgress := 0.0
	for iter := 0; ; iter++ {
		if e.opts.Context != nil && iter%4096 == 0 && e.opts.Context.Err() != nil {
			e.finish()
			e.stopped = e.opts.Context.Err()
			return e.result()
		}
		t := end
		if len(e.events) > 0 && e.events[0].t < t {
			t = e.events[0].t
		}
		bwT := math.Inf(1)
		if e.bwNext < len(w.Trace.Bandwidth) {
			bwT = w.Trace.Bandwidth[e.bwNext].T
		}
		t = min(t, bwT)
		var done *simFlow
		for _, f := range w.flows {
			if f.rate > 0 {
				if ft := w.now + f.remaining/f.rate; ft < t {
					t, done = ft, f
				}
			}
		}
		e.advance(t)
		if e.opts.Progress != nil && t >= nextProgress {
			e.opts.Progress(t / end)
			nextProgress = t + end/50
		}
		switch {
		case done != nil:
			done.remaining = 0
			e.finishFlow(done)
		case t == bwT && bwT < end:
			e.applyBandwidth(t)
		case len(e.events) > 0 && e.events[0].t <= t && t < end:
			ev := heap.Pop(&e.events).(event)
			e.handle(ev)
		default:
			e.finish()
			return e.result()
		}
		// Settle this instant before time moves on: a transfer that
		// finishes while the rates are recomputed (a zero-length one, or
		// one that ran out exactly at an event) changes the rates again
		// and may ask for the controller.
		for e.wantCtl || e.dirty {
			if e.wantCtl {
				e.wantCtl = false
				e.control()
			}
			if e.dirty {
				e.dirty = false
				e.allocate()
			}
		}
	}
}

// advance moves virtual time to t: flows progress, accounting accrues.
func (e *Engine) advance(t float64) {
	w := e.w
	dt := t - w.now
	if dt <= 0 {
		return
	}
	for _, f := range w.flows {
		f.remaining -= f.rate * dt
		if f.remaining < 0 {
			f.remaining = 0
		}
		if f.kind == flowCheckpoint || f.kind == flowReplica || f.kind == flowEvac {
			e.m.ckptBytes += f.rate * dt // every copy of a checkpoint
		}
	}
	for _, k := range e.alloc.active { // the directions with migration traffic, in link order
		l, d := w.links[k/2], k%2
		l.researchDemand += (l.capacity - l.avail) * dt
		l.researchGot += l.research[d] * dt
		l.migBytes += l.mig[d] * dt
	}
	for _, j := range w.live {
		if j.node >= 0 || j.handTo >= 0 {
			g := float64(j.rec.GPUs)
			if j.node >= 0 && j.handTo >= 0 {
				g *= 2
			}
			e.m.allocatedGPUs += g * dt
		}
	}
	w.now = t
}

func (e *Engine) applyBandwidth(t float64) {
	w := e.w
	li := -1
	for e.bwNext < len(w.Trace.Bandwidth) && w.Trace.Bandwidth[e.bwNext].T <= t {
		b := &w.Trace.Bandwidth[e.bwNext]
		e.bwNext++
		// Samples of one instant usually list the links in the trace's
		// order: try the link after the previous sample's link first.
		if li++; li >= len(w.links) || w.links[li].id != b.Link {
			li = w.linkIdx[b.Link]
		}
		l := w.links[li]
		l.avail = min(l.capacity, b.AvailableMbs*1e6/8)
		if e.obs != nil {
			// What the node's egress counters would show as non-migration
			// traffic: the research traffic actually delivered.
			research := l.capacity - l.avail
			for d := range 2 {
				if l.mig[d] > 0 {
					research = min(research, l.research[d])
				}
			}
			e.obs.ObserveBandwidth(li, w.timeAt(t), l.capacity, research)
		}
	}
	e.trackRooms()
	e.dirty = true
	// A new measurement changes what P1 and P3 allocate: the agent would
	// act on it at its next 1-s tick.
	e.wantCtl = true
}

func (e *Engine) handle(ev event) {
	w := e.w
	switch ev.kind {
	case evAnnounce:
		d := w.Trace.Departures[ev.i]
		n := w.nodes[w.nodeIdx[policy.NodeID(d.Node)]]
		if n.up {
			n.leaving, n.announced, n.deadline = true, w.now, d.T
			e.wantCtl = true
		}
	case evDepart:
		d := w.Trace.Departures[ev.i]
		e.depart(w.nodeIdx[policy.NodeID(d.Node)], d.Type == trace.Emergency)
	case evReturn:
		r := w.Trace.Returns[ev.i]
		ni := w.nodeIdx[policy.NodeID(r.Node)]
		n := w.nodes[ni]
		if !n.up {
			n.up, n.leaving = true, false
			n.freeGPUs = n.rec.GPUs
			if e.obs != nil {
				e.obs.ObserveReturn(n.id, w.timeAt(w.now))
			}
			e.wantCtl = true
		}
	case evSubmit:
		j := w.jobs[ev.i]
		j.state = policy.JobPending
		j.started = true
		w.addLive(j)
		e.wantCtl = true
	case evControl:
		e.wantCtl = true
	case evTick:
		// The period is the longest gap between two runs: an event or a
		// bandwidth sample that ran the controller restarts it.
		p := e.opts.ControlPeriod.Seconds()
		if e.m.controls > 0 && w.now-e.lastCtl < p-1e-9 {
			e.push(e.lastCtl+p, evTick, 0, 0)
			return
		}
		e.wantCtl = true
		e.push(w.now+p, evTick, 0, 0)
	case evCkptDue:
		j := w.jobs[ev.i]
		if ev.gen == j.ckptGen {
			e.startCheckpoint(j)
		}
	case evRestartDone:
		j := w.jobs[ev.i]
		if ev.gen == j.gen {
			e.resume(j)
		}
	case evJobDone:
		j := w.jobs[ev.i]
		if ev.gen == j.gen {
			e.syncProgress(j)
			e.complete(j)
		}
	}
}

package sim

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/trace"
)

// StorageNode is the virtual checkpoint server of the Slurm baseline: it
// hangs off the core with a 10 Gbit/s link and never leaves.
const StorageNode = "storage"

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
	// (bytes/s) and its capacity.
	ObserveBandwidth(link string, at time.Time, capacity, nonMigration float64)
}

type flowKind uint8

const (
	flowCheckpoint flowKind = iota // periodic checkpoint / pre-sync
	flowHandoff                    // final checkpoint of a planned move
	flowRestore                    // restore of a replica to a new host
	flowEvac                       // a committed copy sent off a leaving holder (policy.EvacuationPrefix)
)

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
}

type simNode struct {
	rec       trace.NodeRec
	id        policy.NodeID
	up        bool
	leaving   bool
	announced float64
	deadline  float64
	freeGPUs  int
	vram      int64
	storage   bool
}

type simJob struct {
	rec       trace.JobRec
	id        policy.JobID
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
	handTo        int // reserved destination of a hand-off, -1 none
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

// World is the simulated campus as a controller sees it (read-only).
type World struct {
	Trace   *trace.Trace
	Start   time.Time
	now     float64
	nodes   []*simNode
	nodeIdx map[policy.NodeID]int
	links   []*simLink
	linkIdx map[string]int
	jobs    []*simJob
	jobIdx  map[policy.JobID]int
	flows   []*simFlow
	// changed is Options.ChangedFraction; speed the useful progress per
	// GPU-second (Slowed).
	changed float64
	speed   float64
	adj     map[string][]int // vertex -> links
	snap    policy.Snapshot  // slices reused by Snapshot
	paths   map[[2]int][]int
	dpaths  map[[2]int][]int
	// bwByLink holds each link's samples in time order, built on first
	// use (only the oracle reads the future; at 500 nodes building it for
	// every policy cost 3 CPU-s and a copy of every sample).
	bwByLink  [][]trace.BandwidthRec
	depByNode [][]trace.DepartureRec
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
}

type metrics struct {
	lostGPUs       float64 // GPU-seconds of work lost
	downtimes      []float64
	interruptions  int
	successes      int
	allocatedGPUs  float64 // GPU-seconds held by jobs
	ckptBytes      float64
	ckptOverhead   float64
	lossSeries     []SeriesPoint
	hazardSeries   []HazardPoint
	infeasible     int
	handoffsOK     int
	handoffsFailed int
	controls       int
	// Breakdown by stop cause: work lost (GPU-s), downtime (GPU-s) and
	// how many interruptions.
	lossBy     [nCauses]float64
	downBy     [nCauses]float64
	countBy    [nCauses]int
	redundancy float64 // GPU-s spent on redundant computation (Slowed)
}

// SeriesPoint is one point of cumulative work loss.
type SeriesPoint struct {
	T        float64 `json:"t_s"`
	LossGPUh float64 `json:"loss_gpu_h"`
}

// HazardPoint is the estimated and true hazard at one time.
type HazardPoint struct {
	T         float64 `json:"t_s"`
	Estimated float64 `json:"estimated_per_h"`
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
		sn := &simNode{rec: n, id: policy.NodeID(n.ID), up: !n.Absent, freeGPUs: n.GPUs, vram: int64(n.VRAMGB * 1e9)}
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
	w.nodes = append(w.nodes, &simNode{rec: trace.NodeRec{ID: StorageNode, Building: "core", AccessLink: "acc-" + StorageNode}, id: StorageNode, up: true, storage: true})
	addLink(trace.LinkRec{ID: "acc-" + StorageNode, A: StorageNode, B: "core", CapacityMbs: 10000})
	w.depByNode = make([][]trace.DepartureRec, len(w.nodes))
	for _, d := range tr.Departures {
		i := w.nodeIdx[policy.NodeID(d.Node)]
		w.depByNode[i] = append(w.depByNode[i], d)
	}
	for _, j := range tr.Jobs {
		w.jobIdx[policy.JobID(j.ID)] = len(w.jobs)
		w.jobs = append(w.jobs, &simJob{rec: j, id: policy.JobID(j.ID), node: -1, handTo: -1, standby: -1,
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

func (w *World) timeAt(t float64) time.Time {
	return w.Start.Add(time.Duration(t * float64(time.Second)))
}

// path returns the links between two nodes (breadth-first over the link
// graph, cached).
func (w *World) path(a, b int) []int {
	if a == b {
		return nil
	}
	key := [2]int{a, b}
	if p, ok := w.paths[key]; ok {
		return p
	}
	src, dst := string(w.nodes[a].id), string(w.nodes[b].id)
	prev := map[string]int{src: -1}
	queue := []string{src}
	for len(queue) > 0 && func() bool { _, ok := prev[dst]; return !ok }() {
		v := queue[0]
		queue = queue[1:]
		for _, li := range w.adj[v] {
			l := w.links[li]
			u := l.a
			if u == v {
				u = l.b
			}
			if _, seen := prev[u]; !seen {
				prev[u] = li
				queue = append(queue, u)
			}
		}
	}
	var p []int
	if _, ok := prev[dst]; ok {
		for v := dst; v != src; {
			li := prev[v]
			p = append(p, li)
			l := w.links[li]
			if l.a == v {
				v = l.b
			} else {
				v = l.a
			}
		}
	}
	w.paths[key] = p
	return p
}

// dpath returns the directed links (2·link + direction, 0 for the link
// record's a→b) of the path from node a to node b, from a on (cached).
func (w *World) dpath(a, b int) []int {
	key := [2]int{a, b}
	if p, ok := w.dpaths[key]; ok {
		return p
	}
	p := w.path(a, b) // from b back to a
	out := make([]int, 0, len(p))
	v := string(w.nodes[a].id)
	for k := len(p) - 1; k >= 0; k-- {
		l := w.links[p[k]]
		if l.a == v {
			out = append(out, 2*p[k])
			v = l.b
		} else {
			out = append(out, 2*p[k]+1)
			v = l.a
		}
	}
	w.dpaths[key] = out
	return out
}

// pathAvail is the smallest available bandwidth on the path now.
func (w *World) pathAvail(a, b int) float64 {
	m := math.Inf(1)
	for _, li := range w.path(a, b) {
		m = math.Min(m, w.links[li].avail)
	}
	return m
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
		t = math.Min(t, bwT)
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
		if f.kind == flowCheckpoint {
			e.m.ckptBytes += f.rate * dt
		}
	}
	for _, l := range w.links {
		for d := range 2 {
			if l.mig[d] > 0 {
				l.researchDemand += (l.capacity - l.avail) * dt
				l.researchGot += l.research[d] * dt
				l.migBytes += l.mig[d] * dt
			}
		}
	}
	for _, j := range w.jobs {
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
	for e.bwNext < len(w.Trace.Bandwidth) && w.Trace.Bandwidth[e.bwNext].T <= t {
		b := w.Trace.Bandwidth[e.bwNext]
		e.bwNext++
		l := w.links[w.linkIdx[b.Link]]
		l.avail = math.Min(l.capacity, b.AvailableMbs*1e6/8)
		if e.obs != nil {
			// What the node's egress counters would show as non-migration
			// traffic: the research traffic actually delivered.
			research := l.capacity - l.avail
			for d := range 2 {
				if l.mig[d] > 0 {
					research = math.Min(research, l.research[d])
				}
			}
			e.obs.ObserveBandwidth(l.id, w.timeAt(t), l.capacity, research)
		}
	}
	e.dirty = true
	// A new measurement changes what P1 and P3 allocate: the agent would
	// act on it at its next 1-s tick.
	e.wantCtl = true
}

// syncProgress brings a job's progress up to now.
func (e *Engine) syncProgress(j *simJob) {
	if j.computing {
		elapsed := math.Min(e.w.now-j.since, (j.work-j.progress)/j.speed)
		if elapsed > 0 {
			j.progress = math.Min(j.work, j.progress+elapsed*j.speed)
			e.m.redundancy += (1 - j.speed) * elapsed * float64(j.rec.GPUs)
		}
	}
	j.since = e.w.now
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
		e.push(math.Max(e.w.now, j.lastCkpt+j.interval), evCkptDue, e.w.jobIdx[j.id], j.ckptGen)
	}
}

func (e *Engine) complete(j *simJob) {
	w := e.w
	if j.progress < j.work-1e-6 {
		e.push(w.now+(j.work-j.progress)/j.speed, evJobDone, w.jobIdx[j.id], j.gen)
		return
	}
	j.state = policy.JobDone
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
			if !completed {
				e.m.handoffsFailed++
			}
		}
	case flowEvac:
		if j.evac == f {
			j.evac = nil
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

// finishFlow handles a completed transfer.
func (e *Engine) finishFlow(f *simFlow) {
	w := e.w
	j := f.job
	e.dropFlow(f, true)
	switch f.kind {
	case flowCheckpoint:
		j.hold(f.to, f.captured)
		j.landed = f.captured
		// P1's cost model (SPEC P1.1) counts C/Beff per checkpoint as
		// overhead; the engine lets the job compute during the upload, so
		// this is reported beside the work loss, not added to it.
		e.m.ckptOverhead += (w.now - f.start) * float64(j.rec.GPUs)
		e.scheduleCheckpoint(j)
		if j.interval == policy.RescueInterval.Seconds() {
			// A checkpoint ordered "now" has landed: the controller
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
		j.node, j.handTo = f.to, -1
		j.progress = f.captured
		j.state = policy.JobMigrating
		j.gen++
		e.push(w.now+j.restartS, evRestartDone, w.jobIdx[j.id], j.gen)
	case flowRestore:
		j.hold(f.to, j.progress)
		j.gen++
		e.push(w.now+j.restartS, evRestartDone, w.jobIdx[j.id], j.gen)
	case flowEvac:
		j.hold(f.to, f.captured)
	}
	e.wantCtl = e.wantCtl || f.kind != flowCheckpoint
}

// allocate recomputes every flow's rate and each link direction's
// research rate.
func (e *Engine) allocate() {
	w := e.w
	nd := 2 * len(w.links)
	var parts []*fillFlow
	demand := make([]float64, nd) // of the flows on each link direction; +Inf with a greedy one
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
			demand[d] += f.fill.demand
		}
	}
	capacity := make([]float64, nd)
	research := make([]*fillFlow, nd)
	for i, l := range w.links {
		for d := range 2 {
			k := 2*i + d
			capacity[k] = l.capacity
			l.mig[d], l.research[d] = 0, l.capacity-l.avail
			// Research competes where flows run and the link cannot
			// carry every demand; elsewhere it gets its demand anyway
			// (below), and leaving it out keeps the filling small.
			if demand[k] > 0 && demand[k]+l.capacity-l.avail > l.capacity {
				research[k] = &fillFlow{links: []int{k}, weight: researchWeight, demand: l.capacity - l.avail}
				parts = append(parts, research[k])
			}
		}
	}
	progressiveFill(parts, capacity)
	for _, f := range w.flows {
		if math.IsInf(f.rate, 1) && f.remaining == 0 {
			continue
		}
		f.rate = f.fill.rate
		for _, d := range f.links {
			w.links[d/2].mig[d%2] += f.rate
		}
	}
	for i, l := range w.links {
		for d := range 2 {
			if k := 2*i + d; research[k] != nil {
				l.research[d] = research[k].rate
			} else if l.mig[d] > 0 {
				l.research[d] = math.Min(l.capacity-l.avail, math.Max(0, l.capacity-l.mig[d]))
			}
		}
	}
	// Zero-length transfers finish at once.
	for _, f := range append([]*simFlow(nil), w.flows...) {
		if f.remaining == 0 {
			e.finishFlow(f)
		}
	}
}

// finish closes the books at the end of the trace.
func (e *Engine) finish() {
	for _, j := range e.w.jobs {
		e.syncProgress(j)
	}
}

func (e *Engine) result() Result {
	w := e.w
	r := Result{Policy: e.ctrl.Name()}
	r.WorkLossGPUh = e.m.lostGPUs / 3600
	r.Interruptions = e.m.interruptions
	if len(e.m.downtimes) > 0 {
		d := append([]float64(nil), e.m.downtimes...)
		sort.Float64s(d)
		r.MedianDowntimeS = quantile(d, 0.5)
		r.P99DowntimeS = quantile(d, 0.99)
		r.Downtimes = d
	}
	if e.m.interruptions > 0 {
		r.MigrationSuccessPct = 100 * float64(e.m.successes) / float64(e.m.interruptions)
	}
	var dem, got float64
	for _, l := range w.links {
		dem += l.researchDemand
		got += l.researchGot
	}
	if dem > 0 {
		r.DegradationPct = 100 * math.Max(0, 1-got/dem)
	}
	useful := 0.0
	for _, j := range w.jobs {
		useful += j.progress * float64(j.rec.GPUs)
		if j.state == policy.JobDone {
			r.CompletedJobs++
		}
	}
	r.UsefulGPUh = useful / 3600
	r.AllocatedGPUh = e.m.allocatedGPUs / 3600
	if e.m.allocatedGPUs > 0 {
		r.GPUUtilPct = 100 * useful / e.m.allocatedGPUs
	}
	r.CheckpointTB = e.m.ckptBytes / 1e12
	r.CheckpointOverheadGPUh = e.m.ckptOverhead / 3600
	r.HandoffsOK, r.HandoffsFailed = e.m.handoffsOK, e.m.handoffsFailed
	r.LossSeries = e.m.lossSeries
	r.HazardSeries = e.m.hazardSeries
	r.Controls = e.m.controls
	r.LossBudgetInfeasible = e.m.infeasible
	r.Breakdown = LossBreakdown{
		EmergencyGPUh: e.m.lossBy[causeEmergency] / 3600, ScheduledGPUh: e.m.lossBy[causeScheduled] / 3600,
		HandoffFailedGPUh: e.m.lossBy[causeHandoffFailed] / 3600,
		DowntimeGPUh: (e.m.downBy[causeEmergency] + e.m.downBy[causeScheduled] + e.m.downBy[causeHandoff] +
			e.m.downBy[causeHandoffFailed]) / 3600,
		HandoffDowntimeGPUh: e.m.downBy[causeHandoff] / 3600,
		Emergencies:         e.m.countBy[causeEmergency], Scheduled: e.m.countBy[causeScheduled],
		Handoffs: e.m.countBy[causeHandoff], HandoffsFailed: e.m.countBy[causeHandoffFailed],
		RedundancyGPUh: e.m.redundancy / 3600,
	}
	return r
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	if i < 0 {
		i = 0
	}
	return sorted[min(i, len(sorted)-1)]
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
		j.committed = math.Max(j.committed, p)
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

// linkSamples returns link li's bandwidth samples in time order.
func (w *World) linkSamples(li int) []trace.BandwidthRec {
	if w.bwByLink == nil {
		count := make([]int, len(w.links))
		for _, b := range w.Trace.Bandwidth {
			count[w.linkIdx[b.Link]]++
		}
		w.bwByLink = make([][]trace.BandwidthRec, len(w.links))
		for i, n := range count {
			w.bwByLink[i] = make([]trace.BandwidthRec, 0, n)
		}
		for _, b := range w.Trace.Bandwidth {
			i := w.linkIdx[b.Link]
			w.bwByLink[i] = append(w.bwByLink[i], b)
		}
	}
	return w.bwByLink[li]
}

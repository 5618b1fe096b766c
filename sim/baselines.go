package sim

import (
	"math"
	"sort"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// firstFit places every pending or recovering job on the first usable node
// in trace order (Slurm's default first-fit with no topology knowledge).
// delay is how long a job must have waited (Slurm's scheduling cycle).
func firstFit(w *World, delay float64, from func(j *simJob) policy.NodeID) []policy.Placement {
	var out []policy.Placement
	taken := map[int]int{}
	for _, j := range w.jobs {
		if !j.started || j.node >= 0 || (j.state != policy.JobPending && j.state != policy.JobRecovering) {
			continue
		}
		if j.down && w.now-j.stopAt < delay {
			continue
		}
		for ni, n := range w.nodes {
			if !w.usable(ni, j) || n.freeGPUs-taken[ni] < j.rec.GPUs {
				continue
			}
			taken[ni] += j.rec.GPUs
			out = append(out, policy.Placement{Job: j.id, To: n.id, From: from(j)})
			break
		}
	}
	return out
}

// SlurmRequeue is baseline B1′: Slurm preempt-and-requeue with DMTCP
// checkpoints every 10 minutes to a central storage server (the virtual
// StorageNode behind the core). Slurm does not see the owner's notice: a
// departure kills the job, which is requeued, waits for the next
// scheduling cycle (30 s), lands first-fit on any free node and restores
// from storage. Checkpoint traffic is plain TCP (no enforcement).
type SlurmRequeue struct {
	Interval time.Duration // 10 min
	Delay    time.Duration // requeue delay, 30 s
}

// RequeueDelays implements Requeuer.
func (c SlurmRequeue) RequeueDelays() []time.Duration { return []time.Duration{c.Delay} }

// Name implements Controller.
func (SlurmRequeue) Name() string { return "B1' Slurm requeue" }

// Enforced implements Controller.
func (SlurmRequeue) Enforced() bool { return false }

// Control implements Controller.
func (c SlurmRequeue) Control(w *World, now time.Time) Plan {
	var p Plan
	for _, j := range w.jobs {
		if j.started && j.state != policy.JobDone {
			p.Jobs = append(p.Jobs, policy.JobDecision{Job: j.id, Interval: c.Interval, Standby: StorageNode})
		}
	}
	p.Placements = firstFit(w, c.Delay.Seconds(), func(*simJob) policy.NodeID { return StorageNode })
	return p
}

// NoMigration is baseline B2: no checkpoints, no migration. A job whose
// node leaves starts over from scratch on the first free node.
type NoMigration struct{}

// Name implements Controller.
func (NoMigration) Name() string { return "B2 no migration" }

// Enforced implements Controller.
func (NoMigration) Enforced() bool { return false }

// Control implements Controller.
func (NoMigration) Control(w *World, now time.Time) Plan {
	return Plan{Placements: firstFit(w, 0, func(*simJob) policy.NodeID { return "" })}
}

// Oracle is baseline B6, a hindsight bound (not the paper's ILP): it knows
// every future departure and bandwidth sample, and uses that everywhere.
// It takes no periodic checkpoints. Before each departure that will hit a
// job it hands the job off with one final checkpoint (the job stops at the
// capture, so nothing is redone) to the node that will stay up longest,
// when that node outlives the job's arrival with room to move on; started
// early enough to land at the worst bandwidth the path will see until the
// departure, shared with the other jobs of the same host and the oracle's
// other transfers on each link, with a margin of Safety× and two control
// periods. When no node will be free to take the job and stay, it
// suspends the job the same way onto the storage server and places it
// when a node is free. It places every job on the node that stays
// longest. The engine runs it with a 1-minute control period; its
// transfers are paced within the available bandwidth, so it never
// degrades research traffic. A job can still lose work when a departure
// comes sooner after the job's start than its checkpoint can cross.
type Oracle struct {
	Period time.Duration // the engine's control period
	// Safety is how much longer than the bare transfer time a final
	// checkpoint is given (2: the link model shares links among flows the
	// samples do not foresee, and research traffic can outgrow a sample).
	Safety float64
}

// Name implements Controller.
func (Oracle) Name() string { return "B6 oracle (hindsight)" }

// Enforced implements Controller.
func (Oracle) Enforced() bool { return true }

// nextDeparture returns when node ni next leaves at or after t (+Inf if
// never): a departure due now, not yet handled, counts.
func (w *World) nextDeparture(ni int, t float64) float64 {
	ds := w.depByNode[ni]
	lo, hi := 0, len(ds)
	for lo < hi {
		m := (lo + hi) / 2
		if ds[m].T < t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(ds) {
		return ds[lo].T
	}
	return math.Inf(1)
}

// minPathAvail is the lowest available bandwidth the path a→b will see in
// [from, to], from the trace's future samples, each link's share divided
// among the flows load says will cross it (itself included).
func (w *World) minPathAvail(a, b int, from, to float64, load map[int]int) float64 {
	m := math.Inf(1)
	for _, li := range w.path(a, b) {
		l := w.links[li]
		lm := l.avail
		samples := w.linkSamples(li)
		for k := sort.Search(len(samples), func(k int) bool { return samples[k].T >= from }); k < len(samples) && samples[k].T <= to; k++ {
			lm = min(lm, min(l.capacity, samples[k].AvailableMbs*1e6/8))
		}
		m = min(m, lm/float64(1+load[li]))
	}
	return m
}

// longestStay returns the usable node (other than not) that stays up
// longest after t, or -1.
func (w *World) longestStay(j *simJob, not int, t float64, taken map[int]int) int {
	best, bestT := -1, -1.0
	for ni, n := range w.nodes {
		if ni == not || !w.usable(ni, j) || n.freeGPUs-taken[ni] < j.rec.GPUs {
			continue
		}
		if d := w.nextDeparture(ni, t); d > bestT {
			best, bestT = ni, d
		}
	}
	return best
}

// Control implements Controller.
func (o Oracle) Control(w *World, now time.Time) Plan {
	var p Plan
	period := o.Period.Seconds()
	safety := max(o.Safety, 1)
	taken := map[int]int{}
	onNode := map[int]int{} // running jobs per host: they all leave with it
	for _, j := range w.jobs {
		if j.started && j.state != policy.JobDone && j.node >= 0 && j.handoff == nil {
			onNode[j.node]++
		}
	}
	// Flows per link: those under way and those planned this period (the
	// samples do not show the oracle's own transfers).
	load := map[int]int{}
	for _, f := range w.flows {
		for _, d := range f.links {
			load[d/2]++
		}
	}
	st := w.nodeIdx[StorageNode]
	for _, j := range w.jobs {
		if !j.started || j.state == policy.JobDone {
			continue
		}
		p.Jobs = append(p.Jobs, policy.JobDecision{Job: j.id})
		switch {
		case j.state == policy.JobRunning && j.node >= 0 && j.handoff == nil:
			td := w.nextDeparture(j.node, w.now)
			if math.IsInf(td, 1) {
				continue
			}
			share := float64(max(1, onNode[j.node]))
			// Cheap test first: no path is slower than 1 MB/s in our
			// traces.
			if td-w.now > safety*share*float64(j.bytes)/1e6+2*period {
				continue
			}
			need := func(dst int) float64 {
				if len(w.path(j.node, dst)) == 0 {
					return 2 * period
				}
				return safety*share*float64(j.bytes)/w.minPathAvail(j.node, dst, w.now, td, load) + 2*period
			}
			dst := w.longestStay(j, j.node, w.now, taken)
			if dst >= 0 && w.nextDeparture(dst, w.now) < td+need(dst) {
				dst = -1 // it would leave about when the job got there
			}
			if dst < 0 {
				dst = st // no GPU will be free to stay: suspend onto storage
			}
			bw := w.minPathAvail(j.node, dst, w.now, td, load)
			if w.now+need(dst) < td {
				continue
			}
			if dst != st {
				taken[dst] += j.rec.GPUs
			}
			for _, li := range w.path(j.node, dst) {
				load[li]++
			}
			p.Handoffs = append(p.Handoffs, policy.HandoffDecision{Job: j.id, From: w.nodes[j.node].id, To: w.nodes[dst].id,
				FinalCheckpoint: true, Bytes: j.bytes, Deadline: w.timeAt(td)})
			p.Flows = append(p.Flows, policy.FlowDecision{Job: j.id, From: w.nodes[j.node].id, To: w.nodes[dst].id,
				Class: policy.ClassMigration, Rate: bw})
		case j.node < 0:
			dst := w.longestStay(j, -1, w.now, taken)
			if dst < 0 {
				continue
			}
			taken[dst] += j.rec.GPUs
			var from policy.NodeID
			if r := j.bestReplica(); r >= 0 {
				from = w.nodes[r].id
				if bw := w.pathAvail(r, dst); bw > 0 && !math.IsInf(bw, 1) {
					p.Flows = append(p.Flows, policy.FlowDecision{Job: j.id, From: from, To: w.nodes[dst].id, Class: policy.ClassEmergency, Rate: bw})
				}
			}
			p.Placements = append(p.Placements, policy.Placement{Job: j.id, To: w.nodes[dst].id, From: from})
		}
	}
	return p
}

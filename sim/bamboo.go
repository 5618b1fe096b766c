package sim

import (
	"fmt"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// BambooLike is baseline B1, a Bamboo-like redundancy model (not Bamboo's
// code): each job keeps a redundant copy of its state on a peer in its
// building (Bamboo's pipeline redundancy), refreshed every Interval (2 min)
// over plain TCP. A departure, announced or not, is treated as a
// preemption: the job fails over to the peer copy after the requeue delay,
// losing at most one refresh interval plus the refresh's transfer time.
// When the refreshed copy is no longer on a live peer (the peer left, or
// the job failed over onto it), the job refreshes at once, as Bamboo
// restores its redundancy when it reconfigures.
// Bamboo's redundant computation (each stage also computes part of its
// neighbour's layers) is charged as a throughput cost: a job makes useful
// progress at 1 − RedundancyOverhead of full speed, so it holds its GPUs
// longer (GPU utilisation) and stays exposed to departures longer. The
// redundant GPU time is reported (LossBreakdown.RedundancyGPUh) but not
// added to work loss: the paper's work-loss column counts rollbacks.
// Bamboo fills pipeline bubbles to keep this cost low; 0.15 is an
// assumption (the paper's own utilisation gap, Bamboo 58.7 % vs ReclaimNet
// 68.7 %, is 15 % relative), not a figure from the Bamboo paper.
type BambooLike struct {
	Interval           time.Duration // 2 min
	Delay              time.Duration // failover reconfiguration before restart, 10 s
	RedundancyOverhead float64       // share of GPU time spent on redundant computation
}

// RequeueDelays implements Requeuer.
func (c BambooLike) RequeueDelays() []time.Duration { return []time.Duration{c.Delay} }

// Speed implements Slowed.
func (c BambooLike) Speed() float64 { return 1 - c.RedundancyOverhead }

// Name implements Controller. A refresh other than the table's 2 minutes
// is part of the label, so a row never passes for the baseline's.
func (c BambooLike) Name() string {
	if c.Interval != DefaultBambooRefresh {
		return fmt.Sprintf("B1 Bamboo-like (%v refresh)", c.Interval)
	}
	return "B1 Bamboo-like"
}

// Enforced implements Controller.
func (BambooLike) Enforced() bool { return false }

// Control implements Controller.
func (c BambooLike) Control(w *World, now time.Time) Plan {
	var p Plan
	for _, j := range w.jobs {
		if j.started && j.state != policy.JobDone {
			interval := c.Interval
			if c.redundancyLost(w, j) {
				interval = policy.RescueInterval
			}
			p.Jobs = append(p.Jobs, policy.JobDecision{Job: j.id, Interval: interval})
		}
	}
	// Fail over to the peer holding the copy when it can take the job,
	// else first-fit (restoring from the peer).
	taken := map[int]int{}
	for _, j := range w.jobs {
		if !j.started || j.node >= 0 || j.state != policy.JobRecovering || w.now-j.stopAt < c.Delay.Seconds() {
			continue
		}
		if r := j.bestReplica(); r >= 0 && w.usable(r, j) {
			taken[r] += j.rec.GPUs
			p.Placements = append(p.Placements, policy.Placement{Job: j.id, To: w.nodes[r].id, From: w.nodes[r].id})
		}
	}
	for _, pl := range firstFit(w, c.Delay.Seconds(), func(j *simJob) policy.NodeID {
		if r := j.bestReplica(); r >= 0 {
			return w.nodes[r].id
		}
		return ""
	}) {
		dup := false
		for _, q := range p.Placements {
			dup = dup || q.Job == pl.Job
		}
		if !dup {
			p.Placements = append(p.Placements, pl)
		}
	}
	return p
}

// redundancyLost reports whether a running job's newest refresh no longer
// sits on a live peer (the peer left, or the job failed over onto it) and
// none is on its way to one: Bamboo re-establishes redundancy when it
// reconfigures after a preemption, so the job refreshes at once rather
// than at its next interval (when some other node is up to take it).
func (BambooLike) redundancyLost(w *World, j *simJob) bool {
	if j.state != policy.JobRunning || j.node < 0 || j.landed <= 0 {
		return false // nothing refreshed yet: the first refresh is due at the interval
	}
	if f := j.ckpt; f != nil && f.to != j.node && w.nodes[f.to].up {
		return false
	}
	if j.heldOffHost(w) >= j.landed {
		return false
	}
	for n, nd := range w.nodes {
		if n != j.node && nd.up {
			return true
		}
	}
	return false
}

package sim

import (
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// BambooLike is baseline B1, a Bamboo-like redundancy model (not Bamboo's
// code): each job keeps a redundant copy of its state on a peer in its
// building (Bamboo's pipeline redundancy), refreshed every Interval (2 min)
// over plain TCP. A departure, announced or not, is treated as a
// preemption: the job fails over to the peer copy after the requeue delay,
// losing at most one refresh interval plus the refresh's transfer time.
// The redundant computation Bamboo spends on the peer is not charged here,
// which favours this baseline.
type BambooLike struct {
	Interval time.Duration // 2 min
	Delay    time.Duration // failover reconfiguration before restart, 10 s
}

// Name implements Controller.
func (BambooLike) Name() string { return "B1 Bamboo-like" }

// Enforced implements Controller.
func (BambooLike) Enforced() bool { return false }

// Control implements Controller.
func (c BambooLike) Control(w *World, now time.Time) Plan {
	var p Plan
	for _, j := range w.jobs {
		if j.started && j.state != policy.JobDone {
			p.Jobs = append(p.Jobs, policy.JobDecision{Job: j.id, Interval: c.Interval})
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

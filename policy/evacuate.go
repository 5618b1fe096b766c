package policy

import (
	"slices"
	"strings"
	"time"
)

// EvacuationPrefix starts the ID of an evacuation flow: a replica holder
// under a scheduled reclaim sends the job's freshest committed version to
// the job's standby (see evacuations).
const EvacuationPrefix = "evac/"

// evacuations is the replicas' side of a scheduled reclaim: a running job
// (on a node that stays) whose every live replica of its freshest
// committed version is on nodes under a scheduled reclaim gets that
// version sent from one of them to its standby (kept, or P2.6's choice)
// before they leave. Without it, one owner's reclaim of the usual
// same-building standby (or a whole lab's) takes the only off-node copy
// away, and a crash of the job's host afterwards loses everything since
// the start. Like a last-chance checkpoint (rescues) it is paced to land
// before the holder's deadline with some room, admitted at its ceiling on
// every link with P3, before periodic checkpoints, and keeps that pace
// (no share of step 4: nobody waits for it, research traffic does); it
// carries no deadline (class pre-sync, ID EvacuationPrefix+job).
//
// An evacuation under way (a carried flow, ID EvacuationPrefix+job) keeps
// its holder, destination, rate and start while its holder is still up
// and the destination stays: judging it again from scratch (its progress
// reaches the leader a telemetry interval late, or not at all from an
// older node) could drop it as too late just before it lands. It is
// charged to the links without a new admission (it is running traffic).
func (w *world) evacuations(jobs []*Job, hosts []int, flows []Flow) []*migration {
	var out []*migration
	var carried map[JobID]*Flow
	for i := range flows {
		if f := &flows[i]; strings.HasPrefix(f.ID, EvacuationPrefix) && f.Remaining > 0 && f.Rate > 0 {
			if carried == nil {
				carried = map[JobID]*Flow{}
			}
			carried[f.Job] = f
		}
	}
	for i, j := range jobs {
		host := hosts[i]
		if w.leaving[host] || j.CheckpointBytes <= 0 || len(j.Replicas) == 0 {
			continue
		}
		src, safe := -1, false
		var left time.Duration
		var leavingHolders []int
		for _, rep := range sortedReplicas(j.Replicas) {
			ri, ok := w.nodeIndex(rep)
			if !ok || ri == host {
				continue
			}
			if !w.leaving[ri] {
				safe = true // a copy that stays
				break
			}
			if r, ok := w.reclaims[rep]; ok && !r.Emergency() && r.Deadline.After(w.now) {
				leavingHolders = append(leavingHolders, ri)
				if src < 0 {
					src, left = ri, r.Deadline.Sub(w.now)
				}
			}
		}
		if safe || src < 0 {
			continue
		}
		if m := w.keepEvacuation(carried[j.ID], j, host, leavingHolders); m != nil {
			out = append(out, m)
			continue
		}
		sb := w.standby(j, host)
		if sb < 0 || sb == src {
			continue
		}
		_, low, ok := w.pathRate(src, sb)
		need := float64(j.CheckpointBytes) / left.Seconds()
		if !ok || need > low {
			continue // cannot land before the holder leaves
		}
		links := w.pathLinks(src, sb)
		rate, ok := w.admitLastChance(links, low, need)
		if !ok {
			continue
		}
		w.pinStandby(j.ID, sb)
		out = append(out, &migration{id: EvacuationPrefix + string(j.ID), job: j, from: src, to: sb,
			bytes: j.CheckpointBytes, start: w.now, rate: rate, links: links})
	}
	return out
}

// keepEvacuation returns the evacuation c under way for job j (on host)
// as this period's, charged to its links, or nil when there is none or it
// cannot go on: its holder is no longer among the job's leaving holders,
// or its destination is gone, leaving or the host.
func (w *world) keepEvacuation(c *Flow, j *Job, host int, holders []int) *migration {
	if c == nil {
		return nil
	}
	from, okFrom := w.nodeIndex(c.From)
	to, okTo := w.nodeIndex(c.To)
	if !okFrom || !okTo || !slices.Contains(holders, from) || w.leaving[to] || to == host {
		return nil
	}
	links := w.pathLinks(from, to)
	w.charge(links, c.Rate)
	w.pinStandby(j.ID, to)
	return &migration{id: c.ID, job: j, from: from, to: to, bytes: c.Remaining, start: c.Start, rate: c.Rate, links: links}
}

// pinStandby makes sb the job's standby for this period (P1 then sends its
// checkpoints where its evacuation goes).
func (w *world) pinStandby(job JobID, sb int) {
	if w.standbyOf == nil {
		w.standbyOf = map[JobID]int{}
	}
	w.standbyOf[job] = sb
}

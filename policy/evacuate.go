package policy

import "time"

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
func (w *world) evacuations(jobs []*Job, hosts []int) []*migration {
	var out []*migration
	for i, j := range jobs {
		host := hosts[i]
		if w.leaving[host] || j.CheckpointBytes <= 0 || len(j.Replicas) == 0 {
			continue
		}
		src, safe := -1, false
		var left time.Duration
		for _, rep := range sortedReplicas(j.Replicas) {
			ri, ok := w.nodeIndex(rep)
			if !ok || ri == host {
				continue
			}
			if !w.leaving[ri] {
				safe = true // a copy that stays
				break
			}
			if r, ok := w.reclaims[rep]; ok && !r.Emergency() && r.Deadline.After(w.now) && src < 0 {
				src, left = ri, r.Deadline.Sub(w.now)
			}
		}
		if safe || src < 0 {
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
		if w.standbyOf == nil {
			w.standbyOf = map[JobID]int{}
		}
		w.standbyOf[j.ID] = sb
		out = append(out, &migration{id: EvacuationPrefix + string(j.ID), job: j, from: src, to: sb,
			bytes: j.CheckpointBytes, start: w.now, rate: rate, links: links})
	}
	return out
}

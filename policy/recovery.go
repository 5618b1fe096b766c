package policy

import (
	"cmp"
	"slices"
	"strings"
)

// RestorePrefix starts the ID of a recovery's restore flow: the replica
// holder sends the job's freshest committed version to the job's new node
// (ID RestorePrefix+job).
const RestorePrefix = "restore/"

// restoresInFlight turns the restore flows carried over from earlier
// periods (Snapshot.Flows, ID RestorePrefix+job) of jobs already placed on
// the flow's destination into this period's migrations: the copy is still
// on its way and takes its share of every link it crosses, so P3 must
// count it (re-rated with the other restores in step 2) instead of
// admitting other flows into room it occupies. A flow whose holder is
// gone, or leaving with no scheduled deadline ahead, is dropped: the
// coordinator returns such a job to recovery.
//
// jobs is sorted by ID (Tick's order); most periods carry no restore, so
// the lookup is by binary search rather than a map built every period.
func (w *world) restoresInFlight(flows []Flow, jobs []*Job) []*migration {
	var out []*migration
	for i := range flows {
		f := &flows[i]
		if !strings.HasPrefix(f.ID, RestorePrefix) || f.Remaining <= 0 {
			continue
		}
		k, ok := slices.BinarySearchFunc(jobs, f.Job, func(j *Job, id JobID) int { return cmp.Compare(j.ID, id) })
		if !ok {
			continue
		}
		j := jobs[k]
		if j.State == JobRecovering || j.State == JobPending || j.Node != f.To {
			continue
		}
		from, okFrom := w.nodeIndex(f.From)
		to, okTo := w.nodeIndex(f.To)
		if !okFrom || !okTo || from == to {
			continue
		}
		if w.leaving[from] {
			if r, ok := w.reclaims[f.From]; !ok || r.Emergency() || !r.Deadline.After(w.now) {
				continue
			}
		}
		out = append(out, &migration{id: f.ID, job: j, from: from, to: to, bytes: f.Remaining, start: w.now,
			links: w.pathLinks(from, to)})
	}
	return out
}

// recoveries is step 2 of Tick for jobs that lost their host: each is
// placed by P2 from its best live replica (scored over every replica
// holder, which may host the job itself so that nothing moves, unless it
// holds the only live copy and riskyHolder says it may well leave soon:
// then only when no other node can take the job); with no
// live replica it is placed like a new job and starts from the beginning.
// It appends one Placement per job to d and returns the restore transfers.
// With early set the jobs still run (degraded hand-offs): one without a
// live replica is left where it is, since starting it again from the
// beginning now would gain nothing over waiting for a later decision.
func (w *world) recoveries(recover []*Job, d *Decisions, early bool) []*migration {
	var restores []*migration
	for _, j := range recover {
		pl := Placement{Job: j.ID, Recovery: true}
		best, bestSrc := scanResult{best: -1}, -1
		var late []int // leaving holders whose copy may not land in time
		live := 0
		for _, rep := range j.Replicas {
			if _, ok := w.nodeIndex(rep); ok {
				live++
			}
		}
		for _, rep := range sortedReplicas(j.Replicas) {
			ri, ok := w.nodeIndex(rep)
			if !ok {
				continue
			}
			// A risky holder of the only live copy hosts the job only
			// when no other node can take it: restored elsewhere, the
			// job keeps that copy off its node, and a departure of the
			// new host (spot preemptions come in bursts) loses only the
			// work since the restart instead of everything.
			req := scanRequest{job: j, src: ri, recovery: true, list: true, sole: live == 1 && w.riskyHolder(ri, j, -1)}
			if w.durable() {
				// P2.7's restore source: among live holders the one
				// whose copy lands first and survives; a holder that may
				// follow the departed host (or leave on its own) before
				// the restore lands costs the work at risk.
				req.srcRisk = w.p.Alpha * w.leaveGiven(j, ri, nil) * atRisk(j)
			}
			if w.leaving[ri] {
				// A node under scheduled reclaim still serves its copy
				// until its deadline (docs/design.md §0: only the departure takes
				// it away): a source when the restore can finish by then
				// at the path's lower bound. Only the transfer needs the
				// source, not the restart, hence deadline + Tr for P2.3's
				// C/B⁻ + Tr ≤ τ test.
				r, ok := w.reclaims[rep]
				if !ok || r.Emergency() || !r.Deadline.After(w.now) {
					continue
				}
				req.deadline = r.Deadline.Add(j.RestartTime)
				late = append(late, ri)
			}
			res := w.scan(req)
			if res.best < 0 && req.sole {
				req.sole = false
				res = w.scan(req)
			}
			if res.best >= 0 && (best.best < 0 || res.cand.Score < best.cand.Score) {
				best, bestSrc = res, ri
			}
		}
		if bestSrc < 0 && !early {
			// Only leaving holders, and no restore fits before they leave
			// at the paths' lower bounds: when one fits at the estimated
			// rate, try it rather than throw the copy away. If the holder
			// leaves first, the job returns to recovery and is placed
			// again from what remains (state.JobRecord.Restore).
			for _, ri := range late {
				res := w.scan(scanRequest{job: j, src: ri, recovery: true, list: true})
				left := w.reclaims[w.nodes[ri].ID].Deadline.Sub(w.now)
				if res.best >= 0 && res.cand.Transfer <= left && (best.best < 0 || res.cand.Score < best.cand.Score) {
					best, bestSrc = res, ri
				}
			}
		}
		if bestSrc < 0 {
			if early {
				continue
			}
			// No replica survives: the job starts again from the beginning.
			best = w.scan(scanRequest{job: j, src: -1, list: true})
		}
		pl.Candidates = best.list
		if best.best < 0 {
			pl.Reason = w.unplacedReason(j)
			d.Placements = append(d.Placements, pl)
			continue
		}
		pl.To = w.nodes[best.best].ID
		w.takeGPUs(best.best, j.GPUs)
		if bestSrc >= 0 {
			pl.From = w.nodes[bestSrc].ID
			if bestSrc != best.best && j.CheckpointBytes > 0 {
				// A restore carries no deadline even from a leaving
				// source (the scan checked it fits at the path's lower
				// bound): deadlines mark admitted hand-offs (P3.4).
				restores = append(restores, &migration{
					id: RestorePrefix + string(j.ID), job: j, from: bestSrc, to: best.best,
					bytes: j.CheckpointBytes + bundleLack(j, w.nodes[best.best].ID), start: w.now, links: w.pathLinks(bestSrc, best.best),
				})
			}
		}
		d.Placements = append(d.Placements, pl)
	}
	return restores
}

// placeNew places pending jobs by P2.6 (no source, no transfer term),
// taking their GPUs from the chosen nodes. It returns the bundle copies
// the placements need (bundleFlow).
func (w *world) placeNew(jobs []*Job, d *Decisions) []*migration {
	var bundles []*migration
	for _, j := range jobs {
		if j.State != JobPending {
			continue
		}
		res := w.scan(scanRequest{job: j, src: -1, list: true})
		pl := Placement{Job: j.ID, Candidates: res.list}
		if res.best >= 0 {
			pl.To = w.nodes[res.best].ID
			w.takeGPUs(res.best, j.GPUs)
			if m := w.bundleFlow(j, res.best); m != nil {
				bundles = append(bundles, m)
			}
		} else {
			pl.Reason = w.unplacedReason(j)
		}
		d.Placements = append(d.Placements, pl)
	}
	return bundles
}

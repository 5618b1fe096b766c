package policy

// recoveries is step 2 of Tick for jobs that lost their host: each is
// placed by P2 from its best live replica (scored over every replica
// holder, which may host the job itself so that nothing moves); with no
// live replica it is placed like a new job and starts from the beginning.
// It appends one Placement per job to d and returns the restore transfers.
func (w *world) recoveries(recover []*Job, d *Decisions) []*migration {
	var restores []*migration
	for _, j := range recover {
		pl := Placement{Job: j.ID, Recovery: true}
		best, bestSrc := scanResult{best: -1}, -1
		for _, rep := range sortedReplicas(j.Replicas) {
			ri, ok := w.nodeIndex(rep)
			if !ok || w.leaving[ri] {
				continue
			}
			res := w.scan(scanRequest{job: j, src: ri, recovery: true, list: true})
			if res.best >= 0 && (best.best < 0 || res.cand.Score < best.cand.Score) {
				best, bestSrc = res, ri
			}
		}
		if bestSrc < 0 {
			// No replica survives: the job starts again from the beginning.
			best = w.scan(scanRequest{job: j, src: -1, list: true})
		}
		pl.Candidates = best.list
		if best.best < 0 {
			d.Placements = append(d.Placements, pl)
			continue
		}
		pl.To = w.nodes[best.best].ID
		w.takeGPUs(best.best, j.GPUs)
		if bestSrc >= 0 {
			pl.From = w.nodes[bestSrc].ID
			if bestSrc != best.best && j.CheckpointBytes > 0 {
				restores = append(restores, &migration{
					id: "restore/" + string(j.ID), job: j, from: bestSrc, to: best.best,
					bytes: j.CheckpointBytes, start: w.now, links: w.pathLinks(bestSrc, best.best),
				})
			}
		}
		d.Placements = append(d.Placements, pl)
	}
	return restores
}

// placeNew places pending jobs by P2.6 (no source, no transfer term),
// taking their GPUs from the chosen nodes.
func (w *world) placeNew(jobs []*Job, d *Decisions) {
	for _, j := range jobs {
		if j.State != JobPending {
			continue
		}
		res := w.scan(scanRequest{job: j, src: -1, list: true})
		pl := Placement{Job: j.ID, Candidates: res.list}
		if res.best >= 0 {
			pl.To = w.nodes[res.best].ID
			w.takeGPUs(res.best, j.GPUs)
		}
		d.Placements = append(d.Placements, pl)
	}

}

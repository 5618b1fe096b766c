package policy

import (
	"cmp"
	"slices"
	"strings"
)

// BundlePrefix starts the ID of a first placement's bundle flow: a node
// that holds the job's bundle sends it to the node the job was placed on,
// which starts the job only once it has it (ID BundlePrefix+job). It is
// paced and admitted like a recovery's restore: the job is down until it
// lands.
const BundlePrefix = "bundle/"

// bundleFlow returns the migration that brings job j's bundle to node to
// for its first placement there, or nil when to holds it already or no
// holder can send it: from the holder with the shortest path (fewest
// links, then the lowest ID), counting Job.BundleBytes.
func (w *world) bundleFlow(j *Job, to int) *migration {
	bytes := bundleLack(j, w.nodes[to].ID)
	if bytes <= 0 || w.vertex[to] < 0 {
		return nil
	}
	best, bestLinks := -1, []int(nil)
	for _, h := range j.BundleHolders {
		from, ok := w.nodeIndex(h)
		if !ok || from == to || w.vertex[from] < 0 || !w.canSend(from) {
			continue
		}
		links := w.pathLinks(from, to)
		if best < 0 || len(links) < len(bestLinks) {
			best, bestLinks = from, links
		}
	}
	if best < 0 {
		return nil
	}
	return &migration{id: BundlePrefix + string(j.ID), job: j, from: best, to: to, bytes: bytes, start: w.now, links: bestLinks}
}

// canSend reports whether node i may still source a transfer this
// period: it stays, or a scheduled reclaim's deadline is still ahead.
func (w *world) canSend(i int) bool {
	if !w.nodes[i].Leaving {
		return true
	}
	r, ok := w.reclaims[w.nodes[i].ID]
	return ok && !r.Emergency() && r.Deadline.After(w.now)
}

// bundlesInFlight turns the bundle flows carried over from earlier periods
// (Snapshot.Flows, BundlePrefix) into this period's migrations while the
// job stays placed on the flow's destination and its holder can send:
// the copy is on its way and takes its share of every link it crosses.
// jobs is sorted by ID (Tick's order).
func (w *world) bundlesInFlight(flows []Flow, jobs []*Job) []*migration {
	var out []*migration
	for i := range flows {
		f := &flows[i]
		if !strings.HasPrefix(f.ID, BundlePrefix) || f.Remaining <= 0 {
			continue
		}
		k, ok := slices.BinarySearchFunc(jobs, f.Job, func(j *Job, id JobID) int { return cmp.Compare(j.ID, id) })
		if !ok {
			continue
		}
		j := jobs[k]
		if j.State != JobRunning || j.Node != f.To {
			continue
		}
		from, okFrom := w.nodeIndex(f.From)
		to, okTo := w.nodeIndex(f.To)
		if !okFrom || !okTo || from == to || !w.canSend(from) {
			continue
		}
		out = append(out, &migration{id: f.ID, job: j, from: from, to: to, bytes: f.Remaining, start: w.now,
			links: w.pathLinks(from, to)})
	}
	return out
}

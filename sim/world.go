package sim

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/trace"
)

// StorageNode is the virtual checkpoint server of the Slurm baseline: it
// hangs off the core with a 10 Gbit/s link and never leaves.
const StorageNode = "storage"

// simNode is one machine of the trace (or the virtual storage server of
// the Slurm baseline: virtual, outside every policy's snapshot). A storage
// node (the trace's role "storage", or the virtual one) keeps copies and
// hosts no jobs.
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
	virtual   bool
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
	// live holds the submitted jobs not yet done, in trace order: every
	// event's accounting and every snapshot walk it instead of all jobs
	// (most of a two-month trace's are not submitted yet or done).
	live  []*simJob
	flows []*simFlow
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

// addLive enters a submitted job in the live list at its trace position.
func (w *World) addLive(j *simJob) {
	i, _ := slices.BinarySearchFunc(w.live, j.idx, func(a *simJob, idx int) int { return cmp.Compare(a.idx, idx) })
	w.live = slices.Insert(w.live, i, j)
}

// dropLive removes a job that is done from the live list.
func (w *World) dropLive(j *simJob) {
	if i, ok := slices.BinarySearchFunc(w.live, j.idx, func(a *simJob, idx int) int { return cmp.Compare(a.idx, idx) }); ok {
		w.live = slices.Delete(w.live, i, i+1)
	}
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
		m = min(m, w.links[li].avail)
	}
	return m
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

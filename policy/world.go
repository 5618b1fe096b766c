package policy

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// world is one control period's view of the cluster, built once per Tick:
// nodes sorted by ID, the routing tree, each node's cumulative departure
// hazard, and the migration bandwidth left on every directed link.
type world struct {
	p   Params
	now time.Time
	// reclaims holds each node's pending reclaim (Tick sets it; nil for
	// a lone destination query).
	reclaims map[NodeID]Reclaim
	cf       float64 // ceiling factor (1 when P3 is off)
	topo     *Topology

	nodes []*Node // sorted by ID, pointing into the snapshot
	// Node ID → index: through the graph's vertex map (node IDs are
	// vertices), and for nodes without a link, offGraph.
	vertexNode []int // vertex → node index, -1 for a switch
	offGraph   map[NodeID]int
	vertex     []int // topology vertex of each node, -1 if absent
	leaving    []bool
	ending     []bool // lent for less than Params.LentAhead more
	// standbyOf fixes the standby of a job whose evacuation already
	// chose one this period, so that P1 sends its checkpoints there too.
	standbyOf map[JobID]int
	// storage marks storage-role nodes (storageIdx lists them); co is the
	// co-departure estimate (nil: independent), follow its Following per
	// node, computed on first use (-1: not yet).
	storage    []bool
	storageIdx []int
	co         *CoDeparture
	coIdx      []int // each node's row in co's table, built on first use
	follow     []float64
	freeGPUs   []int
	facts      []nodeFacts  // what P2.3's static filters read, packed
	hazard     []float64    // λ̂⁺ at now per node, at least MinHazard (P1)
	survival   []cumulative // per node, departure hazard, built on first use
	bldg       []int        // building index per node
	allNodes   []int        // 0, 1, …, n−1
	// Node indexes of building b, ascending: byBldg[bldgStart[b]:bldgStart[b+1]].
	byBldg, bldgStart []int
	bldgs             []string

	// Remaining migration room per directed link (index dirIndex), in
	// ceiling units (bytes/s a flow's ceiling may take): est from the
	// smoothed estimate, low from its lower bound.
	est, low []float64

	linkName []string    // link index → ID
	pairBW   [][]float64 // building → building representative bandwidth
	nowSec   float64     // now's offset into its UTC day, seconds

	// Survivals per node for the first few remaining times P2 scored
	// (see survivalMemo).
	memoRemaining []float64
	memoSurvival  [][]float64

	// Scratch space reused by every scan (scan is not reentrant).
	scratchReasons []RejectReason
	scratchCands   []Candidate
	scratchCount   []int
	scratchTmig    []float64
	scratchEval    []bool
	scratchTop     []int
	counts         []countCache // see candidateCounts
	intArena       []int
	cumArena       []float64
	cumScratch     []float64
	strArena       []string
}

// nodeFacts packs the node fields P2.3's filters read on every scan, so a
// scan over thousands of nodes reads one small array instead of every
// Node.
type nodeFacts struct {
	vram       int64
	capability float64
	load       float64
}

// newWorld builds the period's view. reclaimed marks nodes with a pending
// reclaim (they are leaving too).
func newWorld(s Snapshot, now time.Time, reclaimed map[NodeID]bool) *world {
	p := s.Params
	w := &world{p: p, now: now, cf: 1, topo: cachedTopology(s.Links), nowSec: secondOfDay(now), co: s.CoDeparture}
	if p.Switches.P3 && p.CeilingFactor > 1 {
		w.cf = p.CeilingFactor
	}
	// Sort by ID through a permutation (a Node is large to move); the
	// first of several entries with one ID wins.
	perm := make([]int, len(s.Nodes))
	for i := range perm {
		perm[i] = i
	}
	byID := func(a, b int) int { return cmp.Or(cmp.Compare(s.Nodes[a].ID, s.Nodes[b].ID), cmp.Compare(a, b)) }
	if !slices.IsSortedFunc(perm, byID) {
		slices.SortFunc(perm, byID)
	}
	w.nodes = make([]*Node, 0, len(perm))
	for k, i := range perm {
		if k > 0 && s.Nodes[perm[k-1]].ID == s.Nodes[i].ID {
			continue
		}
		w.nodes = append(w.nodes, &s.Nodes[i])
	}
	n := len(w.nodes)
	w.vertexNode = make([]int, len(w.topo.names))
	for v := range w.vertexNode {
		w.vertexNode[v] = -1
	}
	w.vertex = make([]int, n)
	w.leaving = make([]bool, n)
	w.ending = make([]bool, n)
	w.freeGPUs = make([]int, n)
	w.facts = make([]nodeFacts, n)
	w.hazard = make([]float64, n)
	w.storage = make([]bool, n)
	w.intArena = make([]int, 0, 4*len(s.Jobs)+64)
	w.bldg = make([]int, n)
	bIndex := map[string]int{}
	for i, nd := range w.nodes {
		v, ok := w.topo.vertex[string(nd.ID)]
		if ok {
			w.vertexNode[v] = i
		} else {
			v = -1
			if w.offGraph == nil {
				w.offGraph = map[NodeID]int{}
			}
			w.offGraph[nd.ID] = i
		}
		w.vertex[i] = v
		// An ineligible node is never a destination, standby or holder,
		// like a leaving one (staticReject tells the two apart).
		w.leaving[i] = nd.Leaving || nd.Ineligible != ""
		// A node whose lending ends soon takes nothing new; what it runs
		// and sends goes on until its reclaim is announced.
		w.ending[i] = !nd.LentUntil.IsZero() && nd.LentUntil.Sub(now) < p.LentAhead
		w.freeGPUs[i] = nd.FreeGPUs
		w.facts[i] = nodeFacts{vram: nd.GPU.VRAM, capability: nd.GPU.Capability, load: nd.Load}
		// Read while the node is at hand; jobs look hosts up at random.
		w.hazard[i] = max(nd.Emergency.atSecond(w.nowSec), MinHazard)
		if nd.Storage {
			// Never lent nor reclaimed (docs/design.md P2.7): hazard ≈ 0.
			w.storage[i], w.hazard[i] = true, MinHazard
			w.storageIdx = append(w.storageIdx, i)
		}
		b, ok := bIndex[nd.Building]
		if !ok {
			b = len(w.bldgs)
			bIndex[nd.Building] = b
			w.bldgs = append(w.bldgs, nd.Building)
		}
		w.bldg[i] = b
	}
	for id := range reclaimed {
		if i, ok := w.nodeIndex(id); ok {
			w.leaving[i] = true
		}
	}
	w.allNodes = make([]int, n)
	for i := range n {
		w.allNodes[i] = i
	}
	w.bldgStart = make([]int, len(w.bldgs)+1)
	for _, b := range w.bldg {
		w.bldgStart[b+1]++
	}
	for b := range w.bldgs {
		w.bldgStart[b+1] += w.bldgStart[b]
	}
	w.byBldg = make([]int, n)
	next := slices.Clone(w.bldgStart[:len(w.bldgs)])
	for i, b := range w.bldg {
		w.byBldg[next[b]] = i
		next[b]++
	}
	nl := len(w.topo.links)
	w.linkName = make([]string, nl) // dense: flows name their links in random order
	for i := range w.topo.links {
		w.linkName[i] = w.topo.links[i].ID
	}
	w.est = make([]float64, 2*nl)
	w.low = make([]float64, 2*nl)
	for i, l := range w.topo.links {
		var e, lo float64
		if p.Switches.P3 {
			e = MigrationShare(l.Capacity, l.Available, p.BetaP3, p.Bmin)
			lo = MigrationShare(l.Capacity, l.AvailableLow, p.BetaP3, p.Bmin)
		} else {
			e, lo = max(0, l.Available), max(0, l.AvailableLow)
		}
		lo = min(lo, e)
		w.est[2*i], w.est[2*i+1] = e, e
		w.low[2*i], w.low[2*i+1] = lo, lo
	}
	w.buildPairs()
	return w
}

// buildPairs computes, for every pair of buildings, the representative
// bandwidth T̄mig uses (docs/design.md P2.5: per building pair, not per node pair):
// the smaller of the two buildings' mean access rate and the bottleneck
// between their switches.
func (w *world) buildPairs() {
	nb := len(w.bldgs)
	access := make([]float64, nb)
	count := make([]int, nb)
	sw := make([]int, nb)
	for i := range sw {
		sw[i] = -1
	}
	for i := range w.nodes {
		v := w.vertex[i]
		if v < 0 || w.topo.parent[v] < 0 {
			continue
		}
		b := w.bldg[i]
		li := w.topo.parentLink[v]
		access[b] += min(w.est[2*li], w.est[2*li+1]) / w.cf
		count[b]++
		if sw[b] < 0 {
			sw[b] = w.topo.parent[v]
		}
	}
	for b := range nb {
		if count[b] > 0 {
			access[b] /= float64(count[b])
		}
	}
	w.pairBW = make([][]float64, nb)
	rows := make([]float64, nb*nb)
	for a := range nb {
		w.pairBW[a] = rows[a*nb : (a+1)*nb : (a+1)*nb]
		for b := range nb {
			if sw[a] < 0 || sw[b] < 0 {
				continue // 0
			}
			bw := min(access[a], access[b])
			if est, ok := w.vertexPathMin(sw[a], sw[b]); !ok {
				bw = 0
			} else {
				bw = min(bw, est/w.cf)
			}
			w.pairBW[a][b] = bw
		}
	}
}

// vertexPathMin returns the smallest est over the directed links of the
// path from vertex va to vb (+Inf for an empty path); ok is false when
// they are not connected. The minimum does not depend on the order the
// links are visited in.
func (w *world) vertexPathMin(va, vb int) (float64, bool) {
	t := w.topo
	if t.root[va] != t.root[vb] {
		return 0, false
	}
	est := math.Inf(1)
	for t.depth[va] > t.depth[vb] {
		est = min(est, w.est[dirIndex(t.parentLink[va], t.upForward[va])])
		va = t.parent[va]
	}
	for t.depth[vb] > t.depth[va] {
		est = min(est, w.est[dirIndex(t.parentLink[vb], !t.upForward[vb])])
		vb = t.parent[vb]
	}
	for va != vb {
		est = min(est, w.est[dirIndex(t.parentLink[va], t.upForward[va])])
		va = t.parent[va]
		est = min(est, w.est[dirIndex(t.parentLink[vb], !t.upForward[vb])])
		vb = t.parent[vb]
	}
	return est, true
}

// pathRate returns the rate a new flow could get on the path from node a to
// node b (bytes/s, the tightest link's room divided by the ceiling factor)
// from the estimate and from the lower bound; ok is false without a path.
func (w *world) pathRate(a, b int) (est, low float64, ok bool) {
	va, vb := w.vertex[a], w.vertex[b]
	if va < 0 || vb < 0 {
		return 0, 0, false
	}
	if va == vb {
		return math.Inf(1), math.Inf(1), true
	}
	t := w.topo
	if t.root[va] != t.root[vb] {
		return 0, 0, false
	}
	est, low = math.Inf(1), math.Inf(1)
	visit := func(d int) {
		est = min(est, w.est[d])
		low = min(low, w.low[d])
	}
	for t.depth[va] > t.depth[vb] {
		visit(dirIndex(t.parentLink[va], t.upForward[va]))
		va = t.parent[va]
	}
	for t.depth[vb] > t.depth[va] {
		visit(dirIndex(t.parentLink[vb], !t.upForward[vb]))
		vb = t.parent[vb]
	}
	for va != vb {
		visit(dirIndex(t.parentLink[va], t.upForward[va]))
		va = t.parent[va]
		visit(dirIndex(t.parentLink[vb], !t.upForward[vb]))
		vb = t.parent[vb]
	}
	return est / w.cf, low / w.cf, true
}

// pathLinks returns the directed links from node a to node b. The slices
// share one arena per period (capacity-limited, so an append by a caller
// never writes into a neighbour). A node off the graph (no link in the
// snapshot) has no path: no links.
func (w *world) pathLinks(a, b int) []int {
	if w.vertex[a] < 0 || w.vertex[b] < 0 {
		return nil
	}
	start := len(w.intArena)
	w.intArena, _ = w.topo.path(w.vertex[a], w.vertex[b], w.intArena)
	end := len(w.intArena)
	return w.intArena[start:end:end]
}

// linkIDs names the directed links of a path (arena-backed like pathLinks).
func (w *world) linkIDs(dirs []int) []string {
	start := len(w.strArena)
	for _, d := range dirs {
		w.strArena = append(w.strArena, w.linkName[d/2])
	}
	end := len(w.strArena)
	return w.strArena[start:end:end]
}

// nodeIndex returns the index of the node with the given ID.
func (w *world) nodeIndex(id NodeID) (int, bool) {
	if v, ok := w.topo.vertex[string(id)]; ok {
		i := w.vertexNode[v]
		return i, i >= 0
	}
	i, ok := w.offGraph[id]
	return i, ok
}

// members returns the node indexes of building b, ascending.
func (w *world) members(b int) []int { return w.byBldg[w.bldgStart[b]:w.bldgStart[b+1]] }

// charge takes rate·cf from every link of a path in both estimates.
func (w *world) charge(dirs []int, rate float64) {
	need := rate * w.cf
	for _, d := range dirs {
		w.est[d] = max(0, w.est[d]-need)
		w.low[d] = max(0, w.low[d]-need)
	}
}

// survivalOf returns node i's cumulative departure hazard, computing it
// on first use: most periods score only a few nodes.
func (w *world) survivalOf(i int) cumulative {
	if w.survival == nil {
		w.survival = make([]cumulative, len(w.nodes)) // only without a memo
	}
	if w.survival[i].cum == nil {
		w.survival[i], w.cumArena = cumulativeInto(w.nodes[i].Departure, w.cumArena)
	}
	return w.survival[i]
}

// hazardNow returns the λ̂⁺ P1 uses for a job on node i: its emergency
// bound at now, never below MinHazard.
func (w *world) hazardNow(i int) float64 { return w.hazard[i] }

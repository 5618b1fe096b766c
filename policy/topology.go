package policy

import (
	"math"
	"slices"
	"strings"
)

// CoreVertex is the name of the campus core switch vertex. When a graph has
// it, routing trees are rooted there.
const CoreVertex = "core"

// Hop is one link of a path, with its direction: Forward means traversed
// from Link.A to Link.B. Flows are accounted per direction.
type Hop struct {
	Link    string
	Forward bool
}

// Topology is the campus graph of docs/design.md P2.1: vertices are node IDs,
// building switches and the core; edges are Links. Paths follow a
// shortest-hop spanning tree rooted at the core (or, without one, at the
// best-connected vertex), the way a three-tier campus network forwards
// with spanning tree: a redundant link is kept for its bandwidth figures
// but not used for routing. Paths are unique, at most a few hops, and cost
// O(depth) to find. Links with a duplicate ID after the first are ignored.
type Topology struct {
	links      []Link
	linkIndex  map[string]int
	vertex     map[string]int
	names      []string
	parent     []int // parent vertex, -1 at a root
	parentLink []int // link to the parent
	upForward  []bool
	depth      []int
	root       []int // root of the vertex's component
}

// NewTopology builds the graph from links (copied; the caller may reuse
// the slice).
func NewTopology(links []Link) *Topology { return newTopology(links, true) }

// newTopology is NewTopology; without copyLinks the graph keeps links itself
// when no ID repeats (Tick's world: it never modifies them and does not
// outlive the call), saving a copy of every link each period.
func newTopology(links []Link, copyLinks bool) *Topology {
	t := &Topology{linkIndex: make(map[string]int, len(links)), vertex: make(map[string]int, len(links)+1)}
	if !copyLinks {
		t.links = links
	}
	for i, l := range links {
		if _, dup := t.linkIndex[l.ID]; dup {
			if !copyLinks {
				// Drop the duplicates from a copy of what came before.
				t.links, copyLinks = append(make([]Link, 0, len(links)), links[:i]...), true
			}
			continue
		}
		t.linkIndex[l.ID] = i
		if copyLinks {
			t.linkIndex[l.ID] = len(t.links)
			t.links = append(t.links, l)
		}
		for _, v := range []string{l.A, l.B} {
			if _, ok := t.vertex[v]; !ok {
				t.vertex[v] = len(t.names)
				t.names = append(t.names, v)
			}
		}
	}
	// A forest has one spanning tree whatever the order the links are
	// visited in; only a graph with cycles needs a canonical (link-ID)
	// order so that the input order never changes the routes.
	if !t.span(false) {
		t.span(true)
	}
	return t
}

// span builds the routing forest. With sorted false it visits links in
// input order and reports false, leaving a partial result, as soon as it
// meets a link that closes a cycle.
func (t *Topology) span(sorted bool) bool {
	nv, nl := len(t.names), len(t.links)
	ends := make([]int, 2*nl) // endpoint vertices of link li: ends[2li], ends[2li+1]
	deg := make([]int, nv+1)
	for li, l := range t.links {
		a, b := t.vertex[l.A], t.vertex[l.B]
		ends[2*li], ends[2*li+1] = a, b
		if a != b {
			deg[a+1]++
			deg[b+1]++
		}
	}
	// Adjacency in CSR form: adj[off[v]:off[v+1]] are v's link indexes.
	off := deg
	for v := range nv {
		off[v+1] += off[v]
	}
	adj := make([]int, off[nv])
	pos := append([]int(nil), off[:nv]...)
	order := make([]int, nl)
	for i := range order {
		order[i] = i
	}
	if sorted {
		slices.SortFunc(order, func(a, b int) int { return strings.Compare(t.links[a].ID, t.links[b].ID) })
	}
	for _, li := range order {
		a, b := ends[2*li], ends[2*li+1]
		if a == b {
			continue
		}
		adj[pos[a]] = li
		pos[a]++
		adj[pos[b]] = li
		pos[b]++
	}
	degree := func(v int) int { return off[v+1] - off[v] }
	t.parent = make([]int, nv)
	t.parentLink = make([]int, nv)
	t.upForward = make([]bool, nv)
	t.depth = make([]int, nv)
	t.root = make([]int, nv)
	for i := range nv {
		t.parent[i], t.root[i], t.parentLink[i] = -1, -1, -1
	}
	// Roots: the core first, then per remaining component its vertex of
	// highest degree (lowest name on ties).
	better := func(a, b int) int {
		ca, cb := t.names[a] == CoreVertex, t.names[b] == CoreVertex
		if ca != cb {
			if ca {
				return -1
			}
			return 1
		}
		if degree(a) != degree(b) {
			return degree(b) - degree(a)
		}
		return strings.Compare(t.names[a], t.names[b])
	}
	queue := make([]int, 0, nv)
	bfs := func(r int) bool {
		t.root[r] = r
		queue = append(queue[:0], r)
		for len(queue) > 0 {
			v := queue[0]
			queue = queue[1:]
			for _, li := range adj[off[v]:off[v+1]] {
				w, fwdUp := ends[2*li+1], false // w is the child; up is w→v
				if w == v {
					w, fwdUp = ends[2*li], true
				}
				if t.root[w] >= 0 {
					if !sorted && li != t.parentLink[v] {
						return false // a cycle: redo in canonical order
					}
					continue
				}
				t.root[w], t.parent[w], t.parentLink[w] = r, v, li
				t.upForward[w] = fwdUp // up from w is Forward when w is A
				t.depth[w] = t.depth[v] + 1
				queue = append(queue, w)
			}
		}
		return true
	}
	if nv == 0 {
		return true
	}
	first := 0
	for v := 1; v < nv; v++ {
		if better(v, first) < 0 {
			first = v
		}
	}
	if !bfs(first) {
		return false
	}
	var rest []int
	for v := range nv {
		if t.root[v] < 0 {
			rest = append(rest, v)
		}
	}
	slices.SortFunc(rest, better)
	for _, r := range rest {
		if t.root[r] < 0 && !bfs(r) {
			return false
		}
	}
	return true
}

// Links returns the graph's links (do not modify).
func (t *Topology) Links() []Link { return t.links }

// Link returns the link with the given ID.
func (t *Topology) Link(id string) (Link, bool) {
	i, ok := t.linkIndex[id]
	if !ok {
		return Link{}, false
	}
	return t.links[i], true
}

// dirIndex is a directed link index: 2·link + 0 for A→B, +1 for B→A.
func dirIndex(link int, forward bool) int {
	if forward {
		return 2 * link
	}
	return 2*link + 1
}

// path appends the directed link indexes of the path from vertex a to b
// to buf; ok is false when they are not connected.
func (t *Topology) path(a, b int, buf []int) ([]int, bool) {
	if t.root[a] != t.root[b] {
		return buf, false
	}
	var down [16]int
	tail := down[:0]
	for t.depth[a] > t.depth[b] {
		buf = append(buf, dirIndex(t.parentLink[a], t.upForward[a]))
		a = t.parent[a]
	}
	for t.depth[b] > t.depth[a] {
		tail = append(tail, dirIndex(t.parentLink[b], !t.upForward[b]))
		b = t.parent[b]
	}
	for a != b {
		buf = append(buf, dirIndex(t.parentLink[a], t.upForward[a]))
		a = t.parent[a]
		tail = append(tail, dirIndex(t.parentLink[b], !t.upForward[b]))
		b = t.parent[b]
	}
	for i := len(tail) - 1; i >= 0; i-- {
		buf = append(buf, tail[i])
	}
	return buf, true
}

// Path returns the hops from vertex from to vertex to; ok is false when
// either is unknown or they are not connected. A vertex to itself is an
// empty path.
func (t *Topology) Path(from, to string) (hops []Hop, ok bool) {
	a, okA := t.vertex[from]
	b, okB := t.vertex[to]
	if !okA || !okB {
		return nil, false
	}
	dirs, ok := t.path(a, b, nil)
	if !ok {
		return nil, false
	}
	hops = make([]Hop, len(dirs))
	for i, d := range dirs {
		hops[i] = Hop{Link: t.links[d/2].ID, Forward: d%2 == 0}
	}
	return hops, true
}

// Bottleneck returns bw(s,d) = min over the path's links of Available
// (docs/design.md P2.1), bytes/s: 0 when there is no path, +Inf from a vertex to
// itself.
func (t *Topology) Bottleneck(from, to string) float64 {
	hops, ok := t.Path(from, to)
	if !ok {
		return 0
	}
	bw := math.Inf(1)
	for _, h := range hops {
		bw = min(bw, t.links[t.linkIndex[h.Link]].Available)
	}
	return bw
}

// IdleLink returns a link of the given capacity (bytes/s) that a static
// configuration declares idle: Available and AvailableLow equal to the
// capacity. Measured links come from a BandwidthEstimator instead.
func IdleLink(id, a, b string, capacity float64) Link {
	return Link{ID: id, A: a, B: b, Capacity: capacity, Available: capacity, AvailableLow: capacity}
}

package policy

import (
	"math"
	"slices"
)

// fillFlow is one flow of a progressive filling: its rate grows as
// base + weight·t with the common level t until a link it crosses is full
// or it reaches cap.
type fillFlow struct {
	weight float64 // growth per unit of level; 0 keeps the flow at base
	base   float64 // rate it already has (not charged to capacity here)
	cap    float64 // highest rate; +Inf for none
	links  []int   // indexes into the capacity slice
}

// progressiveFill is weighted max-min water-filling with caps: every flow
// grows in proportion to its weight until one of its links is full or it
// hits its cap, then it freezes and the rest keep growing. capacity holds
// the room left on each link for growth above the bases (rate units); it is
// reduced by what the fill uses. It returns each flow's rate.
//
// With one link and weights (λ_i·C_i)^(1/3) this is exactly docs/design.md P1.3 with
// the box constraints of P1.4 (Lemma 2's water-filling): jobs that reach
// their cap freeze there and the rest share the residual in proportion to
// their weights. With weights 1 and floors as bases it is the max-min
// sharing of P3.4a step 3. Events are processed from a heap, so the cost is
// O((F + Σ|links|)·log) rather than a round per saturated link.
func progressiveFill(flows []fillFlow, capacity []float64) []float64 {
	if sparse, ok := compactLinks(flows, len(capacity)); ok {
		// Few flows on a large graph: fill over the links they use only.
		room := make([]float64, len(sparse.used))
		for i, l := range sparse.used {
			room[i] = capacity[l]
		}
		rates := progressiveFill(sparse.flows, room)
		for i, l := range sparse.used {
			capacity[l] = room[i]
		}
		return rates
	}
	rates := make([]float64, len(flows))
	frozen := make([]bool, len(flows))
	nl := len(capacity)
	wsum := make([]float64, nl)
	live := make([]int, nl)      // unfrozen flows with weight > 0 per link
	spent := make([]float64, nl) // growth already frozen on the link
	// Link → flows adjacency in CSR form.
	start := make([]int, nl+1)
	for _, f := range flows {
		for _, l := range f.links {
			start[l+1]++
		}
	}
	for l := range nl {
		start[l+1] += start[l]
	}
	adj := make([]int, start[nl])
	fillPos := append([]int(nil), start[:nl]...)
	for i, f := range flows {
		for _, l := range f.links {
			adj[fillPos[l]] = i
			fillPos[l]++
		}
	}

	// The initial events are collected, then heapified in O(n): the order
	// events pop in depends only on their keys, never on the heap's shape.
	h := &fillHeap{}
	version := make([]int, nl)
	for i, f := range flows {
		rates[i] = f.base
		if f.weight <= 0 || (len(f.links) == 0 && math.IsInf(f.cap, 1)) || f.cap <= f.base {
			frozen[i] = true
			if f.cap < f.base {
				rates[i] = max(f.cap, 0)
			}
			continue
		}
		for _, l := range f.links {
			wsum[l] += f.weight
			live[l]++
		}
		if !math.IsInf(f.cap, 1) {
			h.ev = append(h.ev, fillEvent{level: (f.cap - f.base) / f.weight, flow: i, link: -1})
		}
	}
	for l := range nl {
		if live[l] > 0 {
			h.ev = append(h.ev, fillEvent{level: max(0, capacity[l]) / wsum[l], link: l})
		}
	}
	h.init()

	freeze := func(i int, level float64) {
		f := flows[i]
		frozen[i] = true
		grow := f.weight * level
		rates[i] = f.base + grow
		for _, l := range f.links {
			spent[l] += grow
			wsum[l] -= f.weight
			live[l]--
			version[l]++
			if live[l] > 0 {
				room := max(0, capacity[l]-spent[l])
				h.push(fillEvent{level: max(level, room/wsum[l]), link: l, version: version[l]})
			}
		}
	}
	for h.Len() > 0 {
		ev := h.pop()
		if ev.link < 0 {
			if !frozen[ev.flow] {
				freeze(ev.flow, ev.level)
			}
			continue
		}
		if ev.version != version[ev.link] || live[ev.link] == 0 {
			continue
		}
		for _, i := range adj[start[ev.link]:start[ev.link+1]] {
			if !frozen[i] {
				freeze(i, ev.level)
			}
		}
	}
	for l := range nl {
		capacity[l] -= spent[l]
	}
	return rates
}

// compacted is a fill problem renumbered onto the links its flows use.
type compacted struct {
	flows []fillFlow
	used  []int // compact index → original link index
}

// compactLinks renumbers the flows' links when they touch far fewer links
// than the graph has (a handful of migrations on a campus of thousands of
// links), so a fill costs what its flows cost, not what the graph costs.
func compactLinks(flows []fillFlow, nl int) (compacted, bool) {
	total := 0
	for _, f := range flows {
		total += len(f.links)
	}
	if total == 0 || total*8 > nl {
		return compacted{}, false
	}
	used := make([]int, 0, total)
	for _, f := range flows {
		used = append(used, f.links...)
	}
	slices.Sort(used)
	used = slices.Compact(used)
	out := compacted{flows: make([]fillFlow, len(flows)), used: used}
	idx := make([]int, total)
	k := 0
	for i, f := range flows {
		out.flows[i] = f
		links := idx[k : k+len(f.links) : k+len(f.links)]
		for j, l := range f.links {
			links[j], _ = slices.BinarySearch(used, l)
		}
		out.flows[i].links = links
		k += len(f.links)
	}
	return out, true
}

// fillEvent is the level at which a link fills (link ≥ 0) or a flow reaches
// its cap (link < 0).
type fillEvent struct {
	level   float64
	link    int
	flow    int
	version int
}

// fillHeap is a binary min-heap of events, typed so that pushing does not
// box every event in an interface.
type fillHeap struct{ ev []fillEvent }

func (h *fillHeap) Len() int { return len(h.ev) }

func (a fillEvent) before(b fillEvent) bool {
	if a.level != b.level {
		return a.level < b.level
	}
	// Deterministic order for equal levels: caps first, then links by index.
	if a.link != b.link {
		return a.link < b.link
	}
	return a.flow < b.flow
}

// init establishes the heap order over the events already in h.ev.
func (h *fillHeap) init() {
	for i := len(h.ev)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *fillHeap) push(e fillEvent) {
	h.ev = append(h.ev, e)
	i := len(h.ev) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.ev[i].before(h.ev[p]) {
			break
		}
		h.ev[i], h.ev[p] = h.ev[p], h.ev[i]
		i = p
	}
}

func (h *fillHeap) pop() fillEvent {
	top := h.ev[0]
	last := len(h.ev) - 1
	h.ev[0] = h.ev[last]
	h.ev = h.ev[:last]
	h.down(0)
	return top
}

// down sifts the event at i down to its place.
func (h *fillHeap) down(i int) {
	n := len(h.ev)
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.ev[l].before(h.ev[m]) {
			m = l
		}
		if r < n && h.ev[r].before(h.ev[m]) {
			m = r
		}
		if m == i {
			return
		}
		h.ev[i], h.ev[m] = h.ev[m], h.ev[i]
		i = m
	}
}

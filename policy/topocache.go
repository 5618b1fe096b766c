package policy

import "sync"

// Tick rebuilds nothing of the routing forest while the links keep their
// IDs and endpoints: only their bandwidth figures change between control
// periods. The forest (vertex map, parents, depths, link index) depends on
// the links' (ID, A, B) in order and on nothing else, so it is cached,
// keyed on that list, and shared read-only by every Tick that presents the
// same list; each call gets its own Topology value carrying its own links.
// A cached shape gives exactly what newTopology would build from the same
// links (TestTopologyCacheMatchesFresh), so Tick's output does not depend
// on the cache.

// topoShapeSlots is how many different link lists the cache remembers: a
// leader sees one; the simulator runs several traces at once at most.
const topoShapeSlots = 4

// topoShape is one cached forest with the key it was built from.
type topoShape struct {
	ids, as, bs []string
	// keep lists the input indexes of the links kept (nil when no ID
	// repeats and every link is kept).
	keep []int
	t    *Topology // links unset: each caller supplies its own
}

var topoShapes struct {
	mu    sync.Mutex
	slots [topoShapeSlots]*topoShape
	next  int
}

// matches reports whether links have exactly the shape's IDs and
// endpoints, in order. Strings that share their bytes compare by pointer,
// so for a caller that rebuilds its links from the same strings each
// period this is a few word compares per link.
func (sh *topoShape) matches(links []Link) bool {
	if len(links) != len(sh.ids) {
		return false
	}
	for i := range links {
		l := &links[i]
		if l.ID != sh.ids[i] || l.A != sh.as[i] || l.B != sh.bs[i] {
			return false
		}
	}
	return true
}

// cachedTopology returns the Topology newTopology(links, false) would
// build, reusing a cached forest when the links' shape is known. The
// result keeps links (or, with duplicate IDs, a copy of the kept ones) and
// must not be modified, like newTopology's.
func cachedTopology(links []Link) *Topology {
	topoShapes.mu.Lock()
	slots := topoShapes.slots
	topoShapes.mu.Unlock()
	for _, sh := range slots {
		if sh != nil && sh.matches(links) {
			t := *sh.t
			if sh.keep == nil {
				t.links = links
			} else {
				t.links = make([]Link, len(sh.keep))
				for i, k := range sh.keep {
					t.links[i] = links[k]
				}
			}
			return &t
		}
	}
	t := newTopology(links, false)
	sh := &topoShape{ids: make([]string, len(links)), as: make([]string, len(links)), bs: make([]string, len(links))}
	for i, l := range links {
		sh.ids[i], sh.as[i], sh.bs[i] = l.ID, l.A, l.B
	}
	if len(t.links) != len(links) {
		seen := make(map[string]bool, len(links))
		for i, l := range links {
			if !seen[l.ID] {
				seen[l.ID] = true
				sh.keep = append(sh.keep, i)
			}
		}
	}
	shape := *t
	shape.links = nil
	sh.t = &shape
	topoShapes.mu.Lock()
	topoShapes.slots[topoShapes.next] = sh
	topoShapes.next = (topoShapes.next + 1) % topoShapeSlots
	topoShapes.mu.Unlock()
	return t
}

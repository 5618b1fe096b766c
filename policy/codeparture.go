package policy

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// Domain is the most specific failure domain two nodes share (docs/design.md P2.7's
// priors): the same pool, else the same lab, else the same building, else
// none.
type Domain uint8

const (
	DomainNone Domain = iota
	DomainBuilding
	DomainLab
	DomainPool
	domains
)

func (d Domain) String() string {
	switch d {
	case DomainBuilding:
		return "building"
	case DomainLab:
		return "lab"
	case DomainPool:
		return "pool"
	}
	return "none"
}

// sharedDomain returns the most specific domain of two nodes (empty names
// are no domain).
func sharedDomain(a, b nodeDomains) Domain {
	switch {
	case a.pool != "" && a.pool == b.pool:
		return DomainPool
	case a.lab != "" && a.lab == b.lab:
		return DomainLab
	case a.building != "" && a.building == b.building:
		return DomainBuilding
	}
	return DomainNone
}

type nodeDomains struct{ building, lab, pool string }

// CoDepartureConfig tunes the co-departure estimator. DefaultCoDepartureConfig
// gives the coordinator's values.
type CoDepartureConfig struct {
	// Window: two departures at most this far apart count as leaving
	// together (60 s: a building's power, a lab switching its room off, a
	// spot pool dropping capacity).
	Window time.Duration
	// HalfLife is how fast old evidence fades (14 days, the hazard
	// estimator's window).
	HalfLife time.Duration
	// Refresh is how often the pairs' table is rebuilt at most (1 h, as
	// the hazard profiles are republished; a rebuild is O(nodes²)); the
	// departures of the last Window are always current.
	Refresh time.Duration
	// PairWeight is κ, the pseudo-opportunities that pull a pair's figure
	// toward its domain's (5: a pair needs about five departures of its
	// own, with the other up, to be judged mostly on its own record).
	PairWeight float64
	// DomainWeight is κ₀, the pseudo-opportunities that pull a domain's
	// figure toward Prior (50).
	DomainWeight float64
	// Prior is each domain's figure before any evidence, indexed by
	// Domain: how likely a node leaves within Window of another's
	// departure when they share that domain.
	Prior [domains]float64
}

// DefaultCoDepartureConfig returns the coordinator's settings. The priors
// are small (a campus of independent owners, docs/design.md §0) and rise with what
// the nodes share; the log moves them within tens of departures.
func DefaultCoDepartureConfig() CoDepartureConfig {
	return CoDepartureConfig{
		Window:       time.Minute,
		HalfLife:     14 * 24 * time.Hour,
		Refresh:      time.Hour,
		PairWeight:   5,
		DomainWeight: 50,
		Prior:        [domains]float64{DomainNone: 0.002, DomainBuilding: 0.01, DomainLab: 0.05, DomainPool: 0.05},
	}
}

// Validate reports the first setting that cannot work.
func (c CoDepartureConfig) Validate() error {
	switch {
	case c.Window <= 0:
		return fmt.Errorf("co-departure config: window %v must be positive", c.Window)
	case c.HalfLife <= 0:
		return fmt.Errorf("co-departure config: half-life %v must be positive", c.HalfLife)
	case c.Refresh < 0:
		return fmt.Errorf("co-departure config: refresh %v negative", c.Refresh)
	case !(c.PairWeight > 0) || math.IsInf(c.PairWeight, 1):
		return fmt.Errorf("co-departure config: pair weight %v must be positive and finite", c.PairWeight)
	case !(c.DomainWeight > 0) || math.IsInf(c.DomainWeight, 1):
		return fmt.Errorf("co-departure config: domain weight %v must be positive and finite", c.DomainWeight)
	}
	for d, p := range c.Prior {
		if !(p >= 0 && p <= 1) {
			return fmt.Errorf("co-departure config: %v prior %v outside [0,1]", Domain(d), p)
		}
	}
	return nil
}

// CoDepartureEstimator learns from the departure log which nodes leave
// together (docs/design.md P2.7). For a pair (a, b) it estimates
//
//	p_ab = P(b leaves within Window of a's departure | a departs, b is up)
//
// pooled over both directions: co-departures counted from each side over
// the departures of either while the other was up,
//
//	p̂_ab = (2·c_ab + κ·π_D) / (o_ab + κ)
//
// with c_ab the pair's departures within Window of each other, o_ab the
// departures of a with b up plus those of b with a up, D the most specific
// domain the pair shares (pool, lab, building, none) and π_D that domain's
// figure, pooled over its pairs the same way and pulled toward
// Config.Prior with weight κ₀,
//
//	π_D = (Σ 2·c_ab + κ₀·Prior_D) / (Σ o_ab + κ₀)   over the pairs of D that are
//	                                                 not explained by their own record,
//
// a pair being explained when o_ab ≥ κ (its own record has at least half
// the weight in p̂_ab) and 2·c_ab > o_ab/2 (it left together in more than
// half its chances). Such a pair keeps its own high figure, but it does not
// lift its domain's: two labs that close their rooms in the same minute
// every evening would otherwise make every pair of different buildings
// look as likely to leave together as the host's own building, and P2
// would put the second copy next to the host. The pool is recomputed with
// the table, from the domains the pairs share then. Evidence fades with
// HalfLife. A departure is counted once it is Window old (its partners
// have had time to follow). Memory is one number per ordered node pair.
//
// It is not safe for concurrent use; the coordinator owns one on the leader.
type CoDepartureEstimator struct {
	cfg   CoDepartureConfig
	ids   []NodeID
	index map[NodeID]int
	dom   []nodeDomains
	// Per node: last departure and last return (to tell whether it was up
	// at a time in the recent past).
	lastDown, lastUp []time.Time
	everDown         []bool
	// Evidence, in weights that grow as 2^((t−epoch)/HalfLife) (so old
	// evidence fades without touching every entry): opp[a*stride+b] counts
	// a's departures with b up, co[a*stride+b] the pair's co-departures
	// (a < b).
	opp, co []float64
	stride  int // row length of opp and co (at least the nodes declared)
	epoch   time.Time
	// pairOpp and pairDom are buildTable's scratch: each pair's o at the
	// rebuild and its domain, in pair order (a < b).
	pairOpp []float64
	pairDom []Domain
	// pending are departures not Window old yet, in time order; recent
	// those counted but still within Window of the newest one (the
	// partners of a pending departure).
	pending, recent []Departure
	// cache of the published table's matrix.
	table        *coTable
	tableAt      time.Time
	tableChanged bool
}

// NewCoDepartureEstimator returns an empty estimator.
func NewCoDepartureEstimator(cfg CoDepartureConfig) (*CoDepartureEstimator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &CoDepartureEstimator{cfg: cfg, index: map[NodeID]int{}, tableChanged: true}, nil
}

// Node declares a node and its domains (call again when they change);
// departures of undeclared nodes declare them with no domain.
func (e *CoDepartureEstimator) Node(id NodeID, building, lab, pool string) {
	i := e.node(id)
	if d := (nodeDomains{building, lab, pool}); e.dom[i] != d {
		e.dom[i] = d
		e.tableChanged = true
	}
}

func (e *CoDepartureEstimator) node(id NodeID) int {
	if i, ok := e.index[id]; ok {
		return i
	}
	i := len(e.ids)
	e.index[id] = i
	e.ids = append(e.ids, id)
	e.dom = append(e.dom, nodeDomains{})
	e.lastDown = append(e.lastDown, time.Time{})
	e.lastUp = append(e.lastUp, time.Time{})
	e.everDown = append(e.everDown, false)
	// Grow the square matrices (rows of stride entries; doubling, so
	// declaring n nodes costs O(n²), not O(n³)).
	if n := len(e.ids); n > e.stride {
		s := max(2*e.stride, 16)
		grow := func(old []float64) []float64 {
			out := make([]float64, s*s)
			for a := range e.stride {
				copy(out[a*s:a*s+e.stride], old[a*e.stride:(a+1)*e.stride])
			}
			return out
		}
		e.opp, e.co = grow(e.opp), grow(e.co)
		e.stride = s
	}
	e.tableChanged = true
	return i
}

// Observe adds a departure to the log. Departures arrive in time order
// (an older one than the newest seen is counted as if it came now).
func (e *CoDepartureEstimator) Observe(d Departure) {
	e.node(d.Node)
	e.settle(d.At)
	if n := len(e.pending); n > 0 && d.At.Before(e.pending[n-1].At) {
		d.At = e.pending[n-1].At
	}
	e.pending = append(e.pending, d)
}

// Return records that node came back at t. The departures older than
// Window are counted first, with the node still down.
func (e *CoDepartureEstimator) Return(node NodeID, at time.Time) {
	i := e.node(node)
	e.settle(at)
	e.lastUp[i] = at
}

// upAt reports whether node i was up just before t, from its last
// departure and return (absences are much longer than Window).
func (e *CoDepartureEstimator) upAt(i int, t time.Time) bool {
	if !e.everDown[i] {
		return true
	}
	down, up := e.lastDown[i], e.lastUp[i]
	if down.After(up) { // down since its last departure
		return t.Before(down)
	}
	return !t.Before(up) || t.Before(down)
}

// weight is the weight of evidence at t (2^((t−epoch)/HalfLife)); a long
// run rebases the stored weights so they never overflow.
func (e *CoDepartureEstimator) weight(t time.Time) float64 {
	if e.epoch.IsZero() {
		e.epoch = t
	}
	x := t.Sub(e.epoch).Seconds() / e.cfg.HalfLife.Seconds()
	if x > 500 {
		f := math.Exp2(-x)
		for i := range e.opp {
			e.opp[i] *= f
			e.co[i] *= f
		}
		e.epoch, x = t, 0
	}
	return math.Exp2(x)
}

// settle counts the departures at least Window old at now.
func (e *CoDepartureEstimator) settle(now time.Time) {
	n, st := len(e.ids), e.stride
	k := 0
	for ; k < len(e.pending) && e.settled(e.pending[k], now); k++ {
		d := e.pending[k]
		a := e.index[d.Node]
		w := e.weight(d.At)
		// Opportunities: every node up just before the departure (its
		// partners within Window may have left by now).
		before := d.At.Add(-e.cfg.Window)
		for b := range n {
			if b == a || !e.upAt(b, before) && !e.leftWithin(b, d.At) {
				continue
			}
			e.opp[a*st+b] += w
		}
		// Co-departures with the departures counted before it that are
		// within Window (each pair once, from the later one).
		for _, r := range e.recent {
			b := e.index[r.Node]
			if b == a || d.At.Sub(r.At) > e.cfg.Window {
				continue
			}
			lo, hi := min(a, b), max(a, b)
			e.co[lo*st+hi] += w
		}
		e.lastDown[a], e.everDown[a] = d.At, true
		e.recent = append(e.recent, d)
	}
	if k > 0 {
		e.pending = slices.Delete(e.pending, 0, k)
		e.tableChanged = true
	}
	// Keep only what a later departure may still pair with.
	cut := 0
	if len(e.recent) > 0 {
		newest := e.recent[len(e.recent)-1].At
		for cut < len(e.recent) && newest.Sub(e.recent[cut].At) > e.cfg.Window {
			cut++
		}
	}
	e.recent = slices.Delete(e.recent, 0, cut)
}

// leftWithin reports whether node b's last departure is within Window
// before t (it was up when its partner's group began to leave).
func (e *CoDepartureEstimator) leftWithin(b int, t time.Time) bool {
	return e.everDown[b] && !e.lastDown[b].After(t) && t.Sub(e.lastDown[b]) <= e.cfg.Window
}

// Rebuilds reports whether Estimate(now) would rebuild the pair table,
// the part quadratic in the nodes (a caller runs only those estimates
// beside its other work).
func (e *CoDepartureEstimator) Rebuilds(now time.Time) bool {
	return e.rebuildDue(now, e.tableChanged || len(e.pending) > 0 && e.settled(e.pending[0], now))
}

// settled reports whether pending departure d is counted at now (it is
// Window old: its partners have had time to follow).
func (e *CoDepartureEstimator) settled(d Departure, now time.Time) bool {
	return !d.At.After(now.Add(-e.cfg.Window))
}

// rebuildDue reports whether the table is rebuilt at now, given whether
// the log changed since it was built (at most once per Refresh).
func (e *CoDepartureEstimator) rebuildDue(now time.Time, changed bool) bool {
	return e.table == nil || changed && now.Sub(e.tableAt) >= e.cfg.Refresh
}

// Estimate returns the table at now: every pair's figure (the matrix is
// rebuilt when the log changed, at most once per Refresh) and the
// departures of the last Window, whose partners may be leaving now.
func (e *CoDepartureEstimator) Estimate(now time.Time) *CoDeparture {
	e.settle(now)
	if e.rebuildDue(now, e.tableChanged) {
		e.table = e.buildTable(now)
		e.tableAt, e.tableChanged = now, false
	}
	out := &CoDeparture{Window: e.cfg.Window, t: e.table}
	// Departures within Window of now: counted ones and pending ones.
	for _, list := range [][]Departure{e.recent, e.pending} {
		for _, d := range list {
			if !d.At.After(now) && now.Sub(d.At) <= e.cfg.Window {
				out.Recent = append(out.Recent, d)
			}
		}
	}
	return out
}

// buildTable computes every pair's figure at now.
func (e *CoDepartureEstimator) buildTable(now time.Time) *coTable {
	n := len(e.ids)
	scale := 1.0
	if !e.epoch.IsZero() {
		scale = math.Exp2(-now.Sub(e.epoch).Seconds() / e.cfg.HalfLife.Seconds())
	}
	t := &coTable{ids: slices.Clone(e.ids), index: make(map[NodeID]int, n), dom: slices.Clone(e.dom), p: make([]float32, n*n)}
	for i, id := range t.ids {
		t.index[id] = i
	}
	// Domains as small integers (comparing names per pair is the cost).
	ids := map[string]int32{"": -1}
	intern := func(s string) int32 {
		if v, ok := ids[s]; ok {
			return v
		}
		v := int32(len(ids))
		ids[s] = v
		return v
	}
	type dom3 struct{ b, l, p int32 }
	doms := make([]dom3, n)
	for i, d := range e.dom {
		doms[i] = dom3{intern(d.building), intern(d.lab), intern(d.pool)}
	}
	shared := func(a, b dom3) Domain {
		switch {
		case a.p >= 0 && a.p == b.p:
			return DomainPool
		case a.l >= 0 && a.l == b.l:
			return DomainLab
		case a.b >= 0 && a.b == b.b:
			return DomainBuilding
		}
		return DomainNone
	}
	k, st := e.cfg.PairWeight, e.stride
	// First pass: each pair's evidence at now (o, 2·c) and domain, kept
	// in pair order for the second, and each domain's pool without the
	// pairs their own record explains.
	pairs := n * (n - 1) / 2
	if cap(e.pairOpp) < pairs {
		e.pairOpp, e.pairDom = make([]float64, pairs), make([]Domain, pairs)
	}
	pairOpp, pairDom := e.pairOpp[:pairs], e.pairDom[:pairs]
	var num, den [domains]float64
	i := 0
	for a := range n {
		for b := a + 1; b < n; b++ {
			o, c2 := (e.opp[a*st+b]+e.opp[b*st+a])*scale, 2*e.co[a*st+b]*scale
			d := shared(doms[a], doms[b])
			pairOpp[i], pairDom[i] = o, d
			i++
			if explainedByOwnRecord(o, c2, k) {
				continue
			}
			num[d] += c2
			den[d] += o
		}
	}
	k0 := e.cfg.DomainWeight
	for d := range domains {
		t.prior[d] = (num[d] + k0*e.cfg.Prior[d]) / (den[d] + k0)
	}
	// Second pass: every pair shrunk toward its domain's pool.
	i = 0
	for a := range n {
		for b := a + 1; b < n; b++ {
			o, c2, pi := pairOpp[i], 2*e.co[a*st+b]*scale, t.prior[pairDom[i]]
			i++
			p := min(1, (c2+k*pi)/(o+k))
			t.p[a*n+b], t.p[b*n+a] = float32(p), float32(p)
		}
	}
	return t
}

// explainedByOwnRecord reports whether a pair with o opportunities and c2
// (2·c) co-departures is left out of its domain's pool: its own record
// has at least half the weight in p̂ (o ≥ κ) and it left together in more
// than half its chances (c2 > o/2).
func explainedByOwnRecord(o, c2, kappa float64) bool {
	return o >= kappa && c2 > o/2
}

// coTable is the immutable matrix of a CoDeparture (shared by the
// estimates made between two rebuilds).
type coTable struct {
	ids   []NodeID
	index map[NodeID]int
	dom   []nodeDomains
	p     []float32
	prior [domains]float64
}

// CoDeparture is the estimator's table at one time (Snapshot.CoDeparture):
// how likely each pair of nodes leaves together, and which departures of
// the last Window may still take partners with them. It is immutable and
// safe to share between goroutines.
type CoDeparture struct {
	// Window is how close two departures count as together.
	Window time.Duration
	// Recent are the departures within Window before the estimate's time.
	Recent []Departure
	t      *coTable
}

// Pair returns p̂ for two nodes: the chance that one leaves within Window
// of the other's departure. A node the estimator has not seen gets its
// domain's figure for "none" (nothing known about it); a nil table 0.
func (c *CoDeparture) Pair(a, b NodeID) float64 {
	if c == nil || c.t == nil || a == b {
		return 0
	}
	i, okA := c.t.index[a]
	j, okB := c.t.index[b]
	if !okA || !okB {
		return c.t.prior[DomainNone]
	}
	return float64(c.t.p[i*len(c.t.ids)+j])
}

// indexOf returns a node's row in the table, -1 when the estimator has
// not seen it.
func (c *CoDeparture) indexOf(id NodeID) int {
	if i, ok := c.t.index[id]; ok {
		return i
	}
	return -1
}

// pairAt is Pair by table rows (-1: unknown node).
func (c *CoDeparture) pairAt(i, j int) float64 {
	if i < 0 || j < 0 {
		return c.t.prior[DomainNone]
	}
	if i == j {
		return 0
	}
	return float64(c.t.p[i*len(c.t.ids)+j])
}

// Prior returns a domain's pooled figure (what a pair in it with no record
// of its own gets).
func (c *CoDeparture) Prior(d Domain) float64 {
	if c == nil || c.t == nil || d >= domains {
		return 0
	}
	return c.t.prior[d]
}

// Following returns the chance that node leaves within Window because a
// partner left within the last Window (the largest Pair over Recent).
func (c *CoDeparture) Following(node NodeID) float64 {
	if c == nil {
		return 0
	}
	p := 0.0
	for _, d := range c.Recent {
		if d.Node != node {
			p = max(p, c.Pair(d.Node, node))
		}
	}
	return p
}

// PairRisk is one pair of nodes and how likely they leave together.
type PairRisk struct {
	A, B   NodeID
	P      float64
	Domain Domain
}

// Top returns the n pairs most likely to leave together, highest first
// (ties by IDs): what the status page shows.
func (c *CoDeparture) Top(n int) []PairRisk {
	if c == nil || c.t == nil || n <= 0 {
		return nil
	}
	t := c.t
	m := len(t.ids)
	var out []PairRisk
	for a := range m {
		for b := a + 1; b < m; b++ {
			out = append(out, PairRisk{A: t.ids[a], B: t.ids[b], P: float64(t.p[a*m+b]), Domain: sharedDomain(t.dom[a], t.dom[b])})
		}
	}
	slices.SortFunc(out, func(x, y PairRisk) int {
		return cmp.Or(cmp.Compare(y.P, x.P), cmp.Compare(x.A, y.A), cmp.Compare(x.B, y.B))
	})
	return out[:min(n, len(out))]
}

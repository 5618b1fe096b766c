package policy

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Departure is one entry of the departure log: a node left, with or without
// notice.
type Departure struct {
	Node      NodeID
	At        time.Time
	Emergency bool // τ = 0; scheduled departures count only for P2's survival
}

// HazardConfig tunes the hazard estimator (docs/design.md P1.7). DefaultHazardConfig
// gives the values used by the coordinator.
type HazardConfig struct {
	// Buckets is the number of equal time-of-day buckets in a UTC day
	// (24: hourly). The published HazardProfile has this many rates.
	Buckets int
	// Slot is the resolution at which exposure and events are kept (5 min).
	// It must divide the bucket width; the fast window moves in slots.
	Slot time.Duration
	// Window is the sliding window of the slowly learned time-of-day
	// profile (14 days).
	Window time.Duration
	// FastEvents is the number of events the fast window should expect
	// under the profile (300). The fast window is the shortest recent span
	// (whole slots, at most Window) whose expected count reaches it, so the
	// global scale reacts in about FastEvents/event-rate: quickly on a busy
	// cluster, slowly but without noise on a quiet one. Its relative noise
	// is about 1/sqrt(FastEvents) (≈ 6 % at 300).
	FastEvents float64
	// Confidence is the one-sided level of the upper bound λ̂⁺ (0.9).
	Confidence float64
	// NodePrior is the weight, in pseudo-events, that pulls a node's factor
	// toward 1 (5): a node with 0 events and 5 expected gets factor 0.5,
	// with 50 expected 0.09.
	NodePrior float64
	// Floor is the lowest hazard the bound ever reports, 1/s (MinHazard).
	Floor float64
	// PriorEmergencyPerHour and PriorDeparturePerHour are the prior rates
	// of emergency departures and of all departures, per node-hour, that
	// the estimate starts from before the cluster has data of its own.
	// Defaults follow docs/design.md §0's trace: 847 departures on 54 nodes over two
	// months ≈ 0.011 per node-hour, 42 % of them emergencies (≈ 0.0046).
	PriorEmergencyPerHour, PriorDeparturePerHour float64
	// PriorExposureHours is the prior's weight as equivalent exposure in
	// node-hours (200: worth about one emergency and two departures at the
	// default rates, so the first real events outweigh it; a 54-node pool
	// gathers that much in under four hours). It enters the window's
	// totals and every bucket (spread evenly) as pseudo-exposure with
	// prior-rate × exposure pseudo-events. 0 turns the prior off: an empty
	// window then has no point estimate and the bound is the zero-count
	// bound −ln(1−Confidence)/exposure, which is huge for little exposure.
	PriorExposureHours float64
}

// DefaultHazardConfig returns the coordinator's estimator settings.
func DefaultHazardConfig() HazardConfig {
	return HazardConfig{
		Buckets:    24,
		Slot:       5 * time.Minute,
		Window:     14 * 24 * time.Hour,
		FastEvents: 300,
		Confidence: 0.9,
		NodePrior:  5,
		Floor:      MinHazard,
		// docs/design.md §0: 847 departures / (54 nodes × ~61 days × 24 h), 42 %
		// emergencies.
		PriorDeparturePerHour: 0.011,
		PriorEmergencyPerHour: 0.42 * 0.011,
		PriorExposureHours:    200,
	}
}

// Validate reports the first setting that cannot work.
func (c HazardConfig) Validate() error {
	switch {
	case c.Buckets <= 0 || 86400%c.Buckets != 0:
		return fmt.Errorf("hazard config: buckets %d must divide a day's seconds", c.Buckets)
	case c.Slot <= 0 || (24*time.Hour/time.Duration(c.Buckets))%c.Slot != 0:
		return fmt.Errorf("hazard config: slot %v must divide the bucket width %v", c.Slot, 24*time.Hour/time.Duration(c.Buckets))
	case c.Window < 24*time.Hour:
		return fmt.Errorf("hazard config: window %v shorter than a day", c.Window)
	case c.Window/c.Slot > 1<<20:
		return errors.New("hazard config: window/slot above 2^20 slots")
	case !(c.FastEvents > 0):
		return fmt.Errorf("hazard config: fast events %v must be positive", c.FastEvents)
	case !(c.Confidence > 0 && c.Confidence < 1):
		return fmt.Errorf("hazard config: confidence %v outside (0,1)", c.Confidence)
	case c.NodePrior < 0:
		return fmt.Errorf("hazard config: node prior %v negative", c.NodePrior)
	case !(c.Floor > 0):
		return fmt.Errorf("hazard config: floor %v must be positive", c.Floor)
	case !(c.PriorEmergencyPerHour >= 0) || math.IsInf(c.PriorEmergencyPerHour, 1):
		return fmt.Errorf("hazard config: prior emergency rate %v must be finite and not negative", c.PriorEmergencyPerHour)
	case !(c.PriorDeparturePerHour >= 0) || math.IsInf(c.PriorDeparturePerHour, 1):
		return fmt.Errorf("hazard config: prior departure rate %v must be finite and not negative", c.PriorDeparturePerHour)
	case c.PriorEmergencyPerHour > c.PriorDeparturePerHour:
		return fmt.Errorf("hazard config: prior emergency rate %v above the prior rate of all departures %v", c.PriorEmergencyPerHour, c.PriorDeparturePerHour)
	case !(c.PriorExposureHours >= 0) || math.IsInf(c.PriorExposureHours, 1):
		return fmt.Errorf("hazard config: prior exposure %v node-hours must be finite and not negative", c.PriorExposureHours)
	}
	return nil
}

// Kinds of departure the estimator counts.
const (
	kindEmergency = 0 // emergencies only (P1)
	kindAll       = 1 // every departure (P2 survival)
)

// hazardSlot is one ring entry: exposure (node-seconds up) and events in an
// absolute slot of time.
type hazardSlot struct {
	index    int64 // absolute slot number; entries with an older number are stale
	exposure float64
	events   [2]float64
}

type upInterval struct{ from, to time.Time }

type nodeHistory struct {
	ups    []upInterval // sorted, non-overlapping
	events []Departure  // sorted by time
}

// HazardEstimator estimates each node's emergency hazard and departure
// hazard by time of day (docs/design.md P1.7) from the departure log and the exposure
// (node-time up). The estimate is
//
//	λ̂_v(t) = p_k(t) · s · f_v
//
// with p_k the maximum-likelihood rate of time-of-day bucket k over the
// sliding Window (events_k / exposure_k, per node, lightly pulled toward
// the window's mean so an empty bucket is not zero; the configured prior
// adds PriorExposureHours of pseudo-exposure at the prior rate to the
// window and, spread evenly, to every bucket, so a new cluster starts at
// the prior rather than at zero), s the fast global
// scale (events / expected events in the recent fast window), and f_v the
// node's factor (its events / its expected events, shrunk toward 1 by
// NodePrior). The upper bound λ̂⁺ treats the estimate as a Poisson count of
// effective size N_eff = 1/(1/n_k + κ_s/N_fast + 1/(n_v+prior)) and takes
// the one-sided Confidence quantile (Jeffreys: a Gamma of shape N_eff+½),
// with the bucket's prior pseudo-events counted in n_k and κ_s the share
// of the fast scale's deviation its shrinkage kept (its empirical-Bayes
// variance: a scale shrunk to 1 adds no noise); it is never below Floor.
// On stationary traces of known rate (TestHazardBoundCalibration) the true
// rate is above λ̂⁺ 6–16 % of the time from 0.01 to 1 per node-hour at the
// default 90 % (shape N_eff+1 with the fast scale's full variance would
// give 3–13 % and λ̂⁺ up to 1.9× the rate: a higher hazard than the stated
// confidence asks for).
//
// It is not safe for concurrent use; the coordinator owns one on the leader.
type HazardEstimator struct {
	cfg    HazardConfig
	slots  []hazardSlot
	perBkt int64 // slots per bucket
	nodes  map[NodeID]*nodeHistory
	// cache of the global part, valid for cacheSlot while nothing changed.
	cacheValid bool
	cacheSlot  int64
	cache      [2]globalHazard
}

// globalHazard is the cluster-wide part of the estimate for one kind.
type globalHazard struct {
	rates      []float64 // p_k, 1/s per node
	events     []float64 // n_k in the window
	fastEvents float64
	fastExpect float64
	fastWindow time.Duration
	scale      float64
	keep       float64 // the share of the fast scale's deviation shrinkScale kept
	total      float64 // events in the window
	exposure   float64 // node-seconds in the window
	// The prior per bucket: pseudo-events and pseudo-exposure (node-s).
	priorEvents, priorExposure float64
	// cum integrates rates (built once here, read by every node's factor).
	cum cumulative
}

// NewHazardEstimator returns an empty estimator.
func NewHazardEstimator(cfg HazardConfig) (*HazardEstimator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := int(cfg.Window/cfg.Slot) + 1
	return &HazardEstimator{
		cfg:    cfg,
		slots:  make([]hazardSlot, n),
		perBkt: int64(24 * time.Hour / time.Duration(cfg.Buckets) / cfg.Slot),
		nodes:  map[NodeID]*nodeHistory{},
	}, nil
}

func (e *HazardEstimator) slotOf(t time.Time) int64 {
	ns := t.UnixNano()
	s := int64(e.cfg.Slot)
	q := ns / s
	if ns%s < 0 {
		q--
	}
	return q
}

func (e *HazardEstimator) slotStart(idx int64) time.Time {
	return time.Unix(0, idx*int64(e.cfg.Slot)).UTC()
}

// slot returns the ring entry for an absolute slot, resetting a stale one;
// nil when the slot is older than what the ring now holds.
func (e *HazardEstimator) slot(idx int64) *hazardSlot {
	n := int64(len(e.slots))
	s := &e.slots[((idx%n)+n)%n]
	switch {
	case s.index == idx:
		return s
	case s.index < idx:
		*s = hazardSlot{index: idx}
		return s
	}
	return nil
}

func (e *HazardEstimator) history(node NodeID) *nodeHistory {
	h := e.nodes[node]
	if h == nil {
		h = &nodeHistory{}
		e.nodes[node] = h
	}
	return h
}

// Observe adds one departure to the log. Departures may arrive out of
// order (a replayed log); those older than the window are ignored once
// newer data has been seen.
func (e *HazardEstimator) Observe(d Departure) {
	s := e.slot(e.slotOf(d.At))
	if s == nil {
		return
	}
	s.events[kindAll]++
	if d.Emergency {
		s.events[kindEmergency]++
	}
	h := e.history(d.Node)
	i, _ := slices.BinarySearchFunc(h.events, d.At, func(a Departure, t time.Time) int { return a.At.Compare(t) })
	h.events = slices.Insert(h.events, i, d)
	e.prune(h, d.At)
	e.cacheValid = false
}

// Up records that node was up (exposed to departures) during [from, to).
// Call it for every stretch a node is a member, e.g. each control period
// with (previous tick, now). The part of a stretch that overlaps what was
// already recorded for the node is ignored, so repeated reports are safe.
func (e *HazardEstimator) Up(node NodeID, from, to time.Time) {
	h := e.history(node)
	if n := len(h.ups); n > 0 && from.Before(h.ups[n-1].to) {
		from = h.ups[n-1].to
	}
	if !to.After(from) {
		return
	}
	if n := len(h.ups); n > 0 && from.Equal(h.ups[n-1].to) {
		h.ups[n-1].to = to
	} else {
		// Only a new interval grows the history (what is older than the
		// window counts for nothing, so extending one need not prune).
		h.ups = append(h.ups, upInterval{from, to})
		e.prune(h, to)
	}
	for idx := e.slotOf(from); ; idx++ {
		a, b := e.slotStart(idx), e.slotStart(idx+1)
		lo, hi := maxTime(a, from), minTime(b, to)
		if hi.After(lo) {
			if s := e.slot(idx); s != nil {
				s.exposure += hi.Sub(lo).Seconds()
			}
		}
		if !b.Before(to) {
			break
		}
	}
	e.cacheValid = false
}

// prune drops a node's history older than the window before now.
func (e *HazardEstimator) prune(h *nodeHistory, now time.Time) {
	cut := now.Add(-e.cfg.Window - e.cfg.Slot)
	i := 0
	for i < len(h.ups) && !h.ups[i].to.After(cut) {
		i++
	}
	if i > 0 {
		h.ups = slices.Delete(h.ups, 0, i)
	}
	j := 0
	for j < len(h.events) && h.events[j].At.Before(cut) {
		j++
	}
	if j > 0 {
		h.events = slices.Delete(h.events, 0, j)
	}
}

// HazardEstimate is one node's estimate at one time.
type HazardEstimate struct {
	// Emergency is the point estimate λ̂e by time of day; EmergencyUpper
	// its one-sided upper bound λ̂⁺ (what P1 uses; publish it as
	// Node.Emergency). Rates are per second.
	Emergency, EmergencyUpper HazardProfile
	// Departure is the point estimate of the hazard of any departure
	// (publish it as Node.Departure for P2's survival); DepartureUpper its
	// upper bound.
	Departure, DepartureUpper HazardProfile
	// Scale is the fast global factor s of the emergency hazard, and
	// FastWindow the span it was measured over.
	Scale      float64
	FastWindow time.Duration
	// NodeFactor is the node's shrunk factor f_v of the emergency hazard.
	NodeFactor float64
	// Events and Exposure are the window's emergency events and node-time
	// up in node-seconds (cluster-wide), for the status page.
	Events, Exposure float64
}

// Profile returns λ̂⁺ for node at now: the profile P1 decides with.
func (e *HazardEstimator) Profile(node NodeID, now time.Time) HazardProfile {
	return e.Estimate(node, now).EmergencyUpper
}

// Global returns the cluster-wide estimate at now (per node, no node
// factor): what a node with no history of its own gets, and what the
// estimator's accuracy is judged by.
func (e *HazardEstimator) Global(now time.Time) HazardEstimate {
	return e.estimate(nil, now)
}

// Estimate returns node's estimate at now.
func (e *HazardEstimator) Estimate(node NodeID, now time.Time) HazardEstimate {
	h := e.nodes[node]
	if h == nil {
		h = &nodeHistory{}
	}
	return e.estimate(h, now)
}

func (e *HazardEstimator) estimate(h *nodeHistory, now time.Time) HazardEstimate {
	g := e.global(now)
	out := HazardEstimate{
		Scale:      g[kindEmergency].scale,
		FastWindow: g[kindEmergency].fastWindow,
		NodeFactor: 1,
		Events:     g[kindEmergency].total,
		Exposure:   g[kindEmergency].exposure,
	}
	z := math.Sqrt2 * math.Erfinv(2*e.cfg.Confidence-1)
	nb := e.cfg.Buckets
	// The four profiles share one allocation (an estimate per node is
	// made every few minutes on a large campus).
	rates := make([]float64, 4*nb+nb+1) // and the departure point's prefix
	nodePrior := max(e.cfg.NodePrior, 1)
	factors, events := [2]float64{1, 1}, [2]float64{math.Inf(1), math.Inf(1)}
	if h != nil {
		factors, events = e.nodeFactors(h, g, now)
	}
	for kind := range 2 {
		gh := g[kind]
		factor, nodeEvents := factors[kind], events[kind]
		point := rates[2*kind*nb : (2*kind+1)*nb : (2*kind+1)*nb]
		upper := rates[(2*kind+1)*nb : (2*kind+2)*nb : (2*kind+2)*nb]
		for k := range point {
			point[k] = gh.rates[k] * gh.scale * factor
			relVar := 1/(gh.events[k]+gh.priorEvents+1) + gh.keep/(gh.fastEvents+1)
			if !math.IsInf(nodeEvents, 1) {
				relVar += 1 / (nodeEvents + nodePrior)
			}
			switch {
			case point[k] > 0:
				n := 1 / relVar
				upper[k] = point[k] * poissonUpper(n, z) / n
			case gh.exposure+gh.priorExposure*float64(e.cfg.Buckets) > 0:
				// No event in the whole window (and a prior of rate 0):
				// the zero-count Poisson bound.
				upper[k] = -math.Log(1-e.cfg.Confidence) / (gh.exposure + gh.priorExposure*float64(e.cfg.Buckets))
			}
			if upper[k] < e.cfg.Floor { // math.Max without its NaN/±0 cases (Floor > 0)
				upper[k] = e.cfg.Floor
			}
		}
		if kind == kindEmergency {
			out.Emergency, out.EmergencyUpper = HazardProfile{Rates: point}, HazardProfile{Rates: upper}
			out.NodeFactor = factor
		} else {
			// P2's survival integrates the departure point estimate for
			// every candidate of every period until the next estimate.
			out.Departure = withPrefix(HazardProfile{Rates: point}, rates[4*nb:])
			out.DepartureUpper = HazardProfile{Rates: upper}
		}
	}
	return out
}

// shrinkScale returns the fast scale from fe events seen where fx were
// expected: the ratio fe/fx, with its deviation from 1 shrunk by how much
// of it Poisson noise alone would explain (a positive-part James–Stein
// factor keep = 1 − var/dev², returned too). A real shift of 1.7× over
// hundreds of events passes almost untouched; a 2-sigma wobble in a quiet
// window is halved.
func shrinkScale(fe, fx float64) (scale, keep float64) {
	if fx <= 0 {
		return 1, 0
	}
	raw := fe / fx
	dev := raw - 1
	if dev == 0 {
		return 1, 0
	}
	v := max(raw, 1/fx) / fx // variance of fe/fx under Poisson counts
	keep = max(0, 1-v/(dev*dev))
	return 1 + dev*keep, keep
}

// poissonUpper returns the upper z-quantile of the mean of a Poisson count
// observed as n (the Jeffreys posterior, a Gamma of shape n+½, by
// Wilson–Hilferty), so that for large n it is n + z·sqrt(n). Shape n+1
// (Garwood's exact bound) covers more than the stated confidence at the
// counts the estimator sees.
func poissonUpper(n, z float64) float64 {
	nu := 2 * (n + 0.5)
	a := 2 / (9 * nu)
	c := 1 - a + z*math.Sqrt(a)
	return nu * c * c * c / 2
}

// global computes (or returns the cached) cluster-wide profile and scale.
func (e *HazardEstimator) global(now time.Time) [2]globalHazard {
	nowSlot := e.slotOf(now)
	if e.cacheValid && e.cacheSlot == nowSlot {
		return e.cache
	}
	nb := e.cfg.Buckets
	var out [2]globalHazard
	exposure := make([]float64, nb)
	events := [2][]float64{make([]float64, nb), make([]float64, nb)}
	var totalExp float64
	var totalEv [2]float64
	n := int64(len(e.slots))
	first := nowSlot - n + 1
	// Ring position and bucket advance with idx (no division per slot:
	// this loop runs over the whole window on every recomputation).
	it := e.slotIter(first)
	for idx := first; idx <= nowSlot; idx++ {
		s, k := &e.slots[it.pos], it.bucket
		it.next(e)
		if s.index != idx {
			continue
		}
		exposure[k] += s.exposure
		totalExp += s.exposure
		for kind := range 2 {
			events[kind][k] += s.events[kind]
			totalEv[kind] += s.events[kind]
		}
	}
	priorRate := [2]float64{e.cfg.PriorEmergencyPerHour / 3600, e.cfg.PriorDeparturePerHour / 3600}
	priorExp := e.cfg.PriorExposureHours * 3600 // node-seconds
	for kind := range 2 {
		gh := globalHazard{rates: make([]float64, nb), events: events[kind], total: totalEv[kind], exposure: totalExp, scale: 1, keep: 1}
		// The prior as pseudo-counts: with weight 0 both are 0 and every
		// sum below is bit for bit what it was without a prior.
		priorEv := priorRate[kind] * priorExp
		gh.priorEvents, gh.priorExposure = priorEv/float64(nb), priorExp/float64(nb)
		if totalExp+priorExp > 0 && totalEv[kind]+priorEv > 0 {
			mean := (totalEv[kind] + priorEv) / (totalExp + priorExp)
			// One pseudo-event at the window's mean rate per bucket: an
			// empty bucket reads as the mean, a full one as its own MLE.
			for k := range nb {
				gh.rates[k] = (events[kind][k] + gh.priorEvents + 1) / (exposure[k] + gh.priorExposure + 1/mean)
			}
			// Fast window: walk back until the expected count reaches
			// FastEvents.
			var fe, fx float64
			slotsUsed := int64(0)
			back := e.slotIter(nowSlot)
			for idx := nowSlot; idx >= first; idx-- {
				s, k := &e.slots[back.pos], back.bucket
				back.prev(e)
				slotsUsed++
				if s.index != idx {
					continue
				}
				fe += s.events[kind]
				fx += gh.rates[k] * s.exposure
				if fx >= e.cfg.FastEvents {
					break
				}
			}
			gh.fastEvents, gh.fastExpect = fe, fx
			gh.fastWindow = time.Duration(slotsUsed) * e.cfg.Slot
			gh.scale, gh.keep = shrinkScale(fe, fx)
		}
		gh.cum = cumulativeOf(HazardProfile{Rates: gh.rates})
		out[kind] = gh
	}
	e.cache, e.cacheSlot, e.cacheValid = out, nowSlot, true
	return out
}

// slotCursor walks absolute slots one by one, keeping the ring position,
// the time-of-day bucket and the offset inside the bucket of its slot
// (what slot arithmetic and bucketOfSlot would give, without dividing).
type slotCursor struct {
	pos    int64 // ring index
	bucket int
	within int64 // slot offset inside its bucket, 0..perBkt−1
}

func (e *HazardEstimator) slotIter(idx int64) slotCursor {
	n := int64(len(e.slots))
	return slotCursor{pos: ((idx % n) + n) % n, bucket: e.bucketOfSlot(idx), within: ((idx % e.perBkt) + e.perBkt) % e.perBkt}
}

func (c *slotCursor) next(e *HazardEstimator) {
	if c.pos++; c.pos == int64(len(e.slots)) {
		c.pos = 0
	}
	if c.within++; c.within == e.perBkt {
		c.within = 0
		if c.bucket++; c.bucket == e.cfg.Buckets {
			c.bucket = 0
		}
	}
}

func (c *slotCursor) prev(e *HazardEstimator) {
	if c.pos--; c.pos < 0 {
		c.pos = int64(len(e.slots)) - 1
	}
	if c.within--; c.within < 0 {
		c.within = e.perBkt - 1
		if c.bucket--; c.bucket < 0 {
			c.bucket = e.cfg.Buckets - 1
		}
	}
}

func (e *HazardEstimator) bucketOfSlot(idx int64) int {
	b := idx / e.perBkt
	if idx%e.perBkt < 0 {
		b--
	}
	nb := int64(e.cfg.Buckets)
	return int(((b % nb) + nb) % nb)
}

// nodeFactors returns f_v = (n_v + prior)/(e_v + prior) for each kind,
// with e_v the node's expected events under the kind's profile over its
// time up in the window, and n_v its events (one pass over the node's
// history for both kinds).
func (e *HazardEstimator) nodeFactors(h *nodeHistory, g [2]globalHazard, now time.Time) (factors, events [2]float64) {
	from := now.Add(-e.cfg.Window)
	var expected [2]float64
	for _, u := range h.ups {
		a, b := maxTime(u.from, from), minTime(u.to, now)
		if b.After(a) {
			sec, span := secondOfDay(a), b.Sub(a).Seconds()
			for kind := range 2 {
				expected[kind] += g[kind].cum.span(sec, span)
			}
		}
	}
	for _, d := range h.events {
		if d.At.Before(from) || d.At.After(now) {
			continue
		}
		events[kindAll]++
		if d.Emergency {
			events[kindEmergency]++
		}
	}
	prior := e.cfg.NodePrior
	for kind := range 2 {
		factors[kind] = 1
		if prior != 0 || expected[kind] != 0 {
			factors[kind] = (events[kind] + prior) / (expected[kind] + prior)
		}
	}
	return factors, events
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

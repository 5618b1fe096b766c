package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// coLog is a synthetic departure log: nodes with domains, departures (some
// of them in groups), returns, and each node's up intervals.
type coLog struct {
	nodes   []NodeID
	dom     map[NodeID]nodeDomains
	events  []coEvent // in time order
	downs   map[NodeID][][2]time.Time
	start   time.Time
	horizon time.Duration
}

type coEvent struct {
	at     time.Time
	node   NodeID
	depart bool
}

// synthCoLog draws a log over horizon: every node leaves on its own at
// rate indep (1/s); each lab leaves as a group at rate group (1/s), each
// of its up members with probability member, spread over spread; a node
// stays away 10 min to 1 h.
func synthCoLog(rng *rand.Rand, buildings, labsPer, perLab int, indep, group, member float64, spread, horizon time.Duration) coLog {
	l := coLog{dom: map[NodeID]nodeDomains{}, downs: map[NodeID][][2]time.Time{}, start: testEpoch, horizon: horizon}
	var labs [][]NodeID
	for b := range buildings {
		for k := range labsPer {
			var lab []NodeID
			for n := range perLab {
				id := NodeID(fmt.Sprintf("b%d-l%d-n%d", b, k, n))
				l.nodes = append(l.nodes, id)
				pool := ""
				if n%2 == 0 {
					pool = "even"
				}
				l.dom[id] = nodeDomains{building: fmt.Sprintf("b%d", b), lab: fmt.Sprintf("b%d-l%d", b, k), pool: pool}
				lab = append(lab, id)
			}
			labs = append(labs, lab)
		}
	}
	// Candidate departures, then thinned by who is up.
	type cand struct {
		at   time.Time
		node NodeID
	}
	var cands []cand
	exp := func(rate float64) time.Duration { return time.Duration(rng.ExpFloat64() / rate * float64(time.Second)) }
	for _, id := range l.nodes {
		for t := exp(indep); t < horizon; t += exp(indep) {
			cands = append(cands, cand{testEpoch.Add(t), id})
		}
	}
	for _, lab := range labs {
		for t := exp(group); t < horizon; t += exp(group) {
			for _, id := range lab {
				if rng.Float64() < member {
					cands = append(cands, cand{testEpoch.Add(t + time.Duration(rng.Float64()*float64(spread))), id})
				}
			}
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return a.at.Compare(b.at) })
	backAt := map[NodeID]time.Time{}
	var returns []coEvent
	for _, c := range cands {
		if b, ok := backAt[c.node]; ok && c.at.Before(b) {
			continue // away
		}
		back := c.at.Add(10*time.Minute + time.Duration(rng.Float64()*float64(50*time.Minute)))
		backAt[c.node] = back
		l.events = append(l.events, coEvent{at: c.at, node: c.node, depart: true})
		l.downs[c.node] = append(l.downs[c.node], [2]time.Time{c.at, back})
		returns = append(returns, coEvent{at: back, node: c.node})
	}
	l.events = append(l.events, returns...)
	slices.SortStableFunc(l.events, func(a, b coEvent) int { return a.at.Compare(b.at) })
	return l
}

// upAt is the truth: whether node was up at t.
func (l coLog) upAt(node NodeID, t time.Time) bool {
	for _, d := range l.downs[node] {
		if !t.Before(d[0]) && t.Before(d[1]) {
			return false
		}
	}
	return true
}

// bruteForce computes every pair's p̂ from the whole log by the
// estimator's definitions, directly: opportunities are departures of one
// with the other up Window before, co-departures are pairs of departures
// at most Window apart, all weighted by 2^(−age/HalfLife) at now; a
// domain's pool sums its pairs but those with o ≥ κ and 2c > o/2.
func bruteForce(l coLog, cfg CoDepartureConfig, now time.Time) map[[2]NodeID]float64 {
	w := func(t time.Time) float64 { return math.Exp2(-now.Sub(t).Seconds() / cfg.HalfLife.Seconds()) }
	var deps []coEvent
	for _, e := range l.events {
		if e.depart && !e.at.After(now.Add(-cfg.Window)) {
			deps = append(deps, e)
		}
	}
	opp := map[[2]NodeID]float64{}
	co := map[[2]NodeID]float64{}
	key := func(a, b NodeID) [2]NodeID {
		if b < a {
			a, b = b, a
		}
		return [2]NodeID{a, b}
	}
	for i, d := range deps {
		for _, b := range l.nodes {
			if b != d.node && l.upAt(b, d.at.Add(-cfg.Window)) {
				opp[key(d.node, b)] += w(d.at)
			}
		}
		for _, e := range deps[:i] {
			if e.node != d.node && d.at.Sub(e.at) <= cfg.Window {
				co[key(d.node, e.node)] += w(d.at)
			}
		}
	}
	var domNum, domOpp [domains]float64
	for i, a := range l.nodes {
		for _, b := range l.nodes[i+1:] {
			k := key(a, b)
			if opp[k] >= cfg.PairWeight && 2*co[k] > opp[k]/2 {
				continue // its own record explains it
			}
			domNum[sharedDomain(l.dom[a], l.dom[b])] += 2 * co[k]
			domOpp[sharedDomain(l.dom[a], l.dom[b])] += opp[k]
		}
	}
	var prior [domains]float64
	for d := range domains {
		prior[d] = (domNum[d] + cfg.DomainWeight*cfg.Prior[d]) / (domOpp[d] + cfg.DomainWeight)
	}
	out := map[[2]NodeID]float64{}
	for i, a := range l.nodes {
		for _, b := range l.nodes[i+1:] {
			k := key(a, b)
			pi := prior[sharedDomain(l.dom[a], l.dom[b])]
			out[k] = math.Min(1, (2*co[k]+cfg.PairWeight*pi)/(opp[k]+cfg.PairWeight))
		}
	}
	return out
}

// TestCoDepartureMatchesBruteForce feeds synthetic logs (independent
// departures and labs leaving in groups) to the estimator, asking for
// estimates at random times as the leader would, and compares every
// pair's figure with a direct recount of the whole log.
func TestCoDepartureMatchesBruteForce(t *testing.T) {
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 77))
		cfg := DefaultCoDepartureConfig()
		cfg.Refresh = 0 // every estimate current (the default rebuilds at most hourly)
		if seed%2 == 1 {
			cfg.HalfLife = 2 * 24 * time.Hour // fading evidence matters
		}
		l := synthCoLog(rng, 2, 2, 3, 1.0/(20*3600), 1.0/(8*3600), 0.7, 40*time.Second, 6*24*time.Hour)
		e := coEstimatorFor(t, cfg, l)
		groups := 0
		for k, ev := range l.events {
			if ev.depart {
				e.Observe(Departure{Node: ev.node, At: ev.at, Emergency: true})
				if k > 0 && l.events[k-1].depart && ev.at.Sub(l.events[k-1].at) <= cfg.Window {
					groups++
				}
			} else {
				e.Return(ev.node, ev.at)
			}
			if rng.IntN(20) == 0 {
				e.Estimate(ev.at)
			}
		}
		if groups < 20 {
			t.Fatalf("seed %d: only %d co-departures in the log; the test needs groups", seed, groups)
		}
		now := testEpoch.Add(l.horizon + 2*cfg.Window)
		got := e.Estimate(now)
		want := bruteForce(l, cfg, now)
		for k, p := range want {
			if g := got.Pair(k[0], k[1]); math.Abs(g-p) > 1e-5*math.Max(p, 1e-3) {
				t.Errorf("seed %d: pair %v: estimator %.6g, brute force %.6g", seed, k, g, p)
			}
			if g, h := got.Pair(k[0], k[1]), got.Pair(k[1], k[0]); g != h {
				t.Errorf("seed %d: pair %v not symmetric: %g vs %g", seed, k, g, h)
			}
		}
		// Labs leave together, so a lab's pairs must read far above the
		// pairs of different buildings.
		lab := got.Pair(l.nodes[0], l.nodes[1])
		far := got.Pair(l.nodes[0], l.nodes[len(l.nodes)-1])
		if lab < 5*far || lab < 0.2 {
			t.Errorf("seed %d: same lab %.3f, other building %.3f: the groups do not show", seed, lab, far)
		}
		top := got.Top(3)
		if len(top) != 3 || top[0].P < top[2].P || top[0].Domain < DomainLab {
			t.Errorf("seed %d: top pairs %+v, want the highest first and in a lab", seed, top)
		}
	}
}

// TestCoDepartureFollowing: within Window of a departure its partners'
// chance to follow is their pair figure; after it, 0.
func TestCoDepartureFollowing(t *testing.T) {
	cfg := DefaultCoDepartureConfig()
	e, err := NewCoDepartureEstimator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []NodeID{"a", "b", "c"} {
		e.Node(id, "b1", "", "")
	}
	// a and b always leave together; c never with them.
	at := testEpoch
	for range 30 {
		e.Observe(Departure{Node: "a", At: at})
		e.Observe(Departure{Node: "b", At: at.Add(10 * time.Second)})
		e.Return("a", at.Add(20*time.Minute))
		e.Return("b", at.Add(20*time.Minute))
		at = at.Add(3 * time.Hour)
	}
	e.Observe(Departure{Node: "a", At: at})
	est := e.Estimate(at.Add(20 * time.Second))
	pab, pac := est.Pair("a", "b"), est.Pair("a", "c")
	if pab < 0.8 || pac > 0.1 {
		t.Fatalf("pair figures a-b %.3f, a-c %.3f: want a-b near 1, a-c near 0 (shrunk toward their building's figure)", pab, pac)
	}
	if f := est.Following("b"); math.Abs(f-pab) > 1e-9 {
		t.Errorf("b follows a's departure 20 s ago with %.3f, want the pair's %.3f", f, pab)
	}
	if f := est.Following("c"); math.Abs(f-pac) > 1e-9 {
		t.Errorf("c follows with %.3f, want %.3f", f, pac)
	}
	if f := est.Following("a"); f != 0 {
		t.Errorf("a follows itself with %.3f", f)
	}
	if f := e.Estimate(at.Add(2 * cfg.Window)).Following("b"); f != 0 {
		t.Errorf("b still follows a departure two windows old: %.3f", f)
	}
	var none *CoDeparture
	if none.Pair("a", "b") != 0 || none.Following("a") != 0 || none.Top(3) != nil {
		t.Errorf("a nil table must read as independent departures")
	}
}

// TestCoDepartureUnknownNodeGetsThePrior: a pair the log says nothing
// about reads its domain's figure, which starts at the configured prior.
func TestCoDepartureUnknownNodeGetsThePrior(t *testing.T) {
	cfg := DefaultCoDepartureConfig()
	e, _ := NewCoDepartureEstimator(cfg)
	e.Node("a", "b1", "l1", "")
	e.Node("b", "b1", "l1", "")
	e.Node("c", "b1", "", "")
	e.Node("d", "b2", "", "")
	est := e.Estimate(testEpoch)
	for _, tt := range []struct {
		a, b NodeID
		d    Domain
	}{{"a", "b", DomainLab}, {"a", "c", DomainBuilding}, {"a", "d", DomainNone}, {"a", "zz", DomainNone}} {
		if got, want := est.Pair(tt.a, tt.b), cfg.Prior[tt.d]; math.Abs(got-want) > 1e-7 {
			t.Errorf("pair %s-%s (%v): %.6g, want the prior %.6g", tt.a, tt.b, tt.d, got, want)
		}
	}
}

func TestCoDepartureConfigValidate(t *testing.T) {
	for _, mod := range []func(*CoDepartureConfig){
		func(c *CoDepartureConfig) { c.Window = 0 },
		func(c *CoDepartureConfig) { c.HalfLife = -time.Second },
		func(c *CoDepartureConfig) { c.Refresh = -time.Second },
		func(c *CoDepartureConfig) { c.PairWeight = 0 },
		func(c *CoDepartureConfig) { c.DomainWeight = math.Inf(1) },
		func(c *CoDepartureConfig) { c.Prior[DomainLab] = 1.5 },
		func(c *CoDepartureConfig) { c.Prior[DomainNone] = math.NaN() },
	} {
		c := DefaultCoDepartureConfig()
		mod(&c)
		if _, err := NewCoDepartureEstimator(c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
}

// TestCoDepartureScheduledLabsDoNotLiftTheirDomain: two labs in different
// buildings close their rooms in the same minute every evening; the other
// nodes leave on their own during the day. The labs' cross pairs keep
// their own high figure, but every other pair of different buildings
// stays near the prior: their domain's pool leaves out the pairs their
// own record explains.
func TestCoDepartureScheduledLabsDoNotLiftTheirDomain(t *testing.T) {
	cfg := DefaultCoDepartureConfig()
	e, err := NewCoDepartureEstimator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var labX, labY, others []NodeID
	for i := range 4 {
		labX = append(labX, NodeID(fmt.Sprintf("b1-lab1-%d", i)))
		labY = append(labY, NodeID(fmt.Sprintf("b3-lab1-%d", i)))
	}
	for _, id := range labX {
		e.Node(id, "b1", "b1-lab1", "")
	}
	for _, id := range labY {
		e.Node(id, "b3", "b3-lab1", "")
	}
	for b := range 4 {
		for i := range 2 {
			id := NodeID(fmt.Sprintf("b%d-n%d", b, i))
			others = append(others, id)
			e.Node(id, fmt.Sprintf("b%d", b), "", "")
		}
	}
	type ev struct {
		at     time.Time
		node   NodeID
		depart bool
	}
	var evs []ev
	rng := rand.New(rand.NewPCG(3, 21))
	const days = 25
	for day := range days {
		evening := testEpoch.Add(time.Duration(day)*24*time.Hour + 19*time.Hour)
		for i, id := range slices.Concat(labX, labY) {
			evs = append(evs, ev{evening.Add(time.Duration(i) * 3 * time.Second), id, true}, ev{evening.Add(13 * time.Hour), id, false})
		}
		// The others: each leaves on about half the days, at a random
		// minute of its own 40-minute slot after 08:00 (never with
		// another), for an hour.
		for i, id := range others {
			if rng.IntN(2) == 0 {
				at := testEpoch.Add(time.Duration(day)*24*time.Hour + 8*time.Hour + time.Duration(40*i+rng.IntN(30))*time.Minute)
				evs = append(evs, ev{at, id, true}, ev{at.Add(time.Hour), id, false})
			}
		}
	}
	slices.SortStableFunc(evs, func(a, b ev) int { return a.at.Compare(b.at) })
	for _, v := range evs {
		if v.depart {
			e.Observe(Departure{Node: v.node, At: v.at, Emergency: true})
		} else {
			e.Return(v.node, v.at)
		}
	}
	est := e.Estimate(testEpoch.Add(days * 24 * time.Hour))
	for _, x := range labX {
		for _, y := range labY {
			if p := est.Pair(x, y); p < 0.8 {
				t.Errorf("scheduled pair %s-%s: %.4f, want its own record (near 1)", x, y, p)
			}
		}
	}
	prior := cfg.Prior[DomainNone]
	if pi := est.Prior(DomainNone); pi > 2*prior {
		t.Errorf("π_None %.5f: the scheduled pairs lift the pool of different buildings (prior %.4f)", pi, prior)
	}
	for _, a := range slices.Concat(labX, others) {
		for _, b := range others {
			if a == b || sharedDomain(nodeDomains{building: string(a[:2])}, nodeDomains{building: string(b[:2])}) != DomainNone {
				continue
			}
			if p := est.Pair(a, b); p > 2*prior {
				t.Errorf("pair %s-%s of different buildings: %.5f, want near the prior %.4f", a, b, p, prior)
			}
		}
	}
}

// TestCoDepartureExclusionBoundary: a pair that always leaves together is
// left out of its domain's pool only once its record has κ's weight
// (o ≥ κ), and only while it leaves together in more than half its
// chances.
func TestCoDepartureExclusionBoundary(t *testing.T) {
	for _, tt := range []struct {
		name          string
		kappa         float64
		alone         int // departures of each of a and b on its own
		wantExcluded  bool
		o, c2, oOther float64
	}{
		{"o just below κ", 4.01, 0, false, 4, 4, 2},
		{"o just above κ", 3.99, 0, true, 4, 4, 2},
		{"together 4 of 6", 3.99, 1, true, 6, 4, 3},
		{"together 4 of 10", 3.99, 3, false, 10, 4, 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultCoDepartureConfig()
			cfg.PairWeight = tt.kappa
			cfg.HalfLife = 100 * 365 * 24 * time.Hour // no fading within the log
			e, err := NewCoDepartureEstimator(cfg)
			if err != nil {
				t.Fatal(err)
			}
			// a, b and c in three buildings; c never leaves.
			e.Node("a", "b1", "", "")
			e.Node("b", "b2", "", "")
			e.Node("c", "b3", "", "")
			at := testEpoch
			leave := func(nodes ...NodeID) {
				for i, n := range nodes {
					e.Observe(Departure{Node: n, At: at.Add(time.Duration(i) * 10 * time.Second)})
				}
				for _, n := range nodes {
					e.Return(n, at.Add(20*time.Minute))
				}
				at = at.Add(3 * time.Hour)
			}
			leave("a", "b")
			leave("a", "b")
			for range tt.alone {
				leave("a")
				leave("b")
			}
			est := e.Estimate(at)
			// The pool of "none": the pairs a-c and b-c (oOther each, no
			// co-departure) and a-b unless its own record explains it.
			num, den := 0.0, 2*tt.oOther
			if !tt.wantExcluded {
				num, den = tt.c2, den+tt.o
			}
			k0 := cfg.DomainWeight
			wantPi := (num + k0*cfg.Prior[DomainNone]) / (den + k0)
			if pi := est.Prior(DomainNone); math.Abs(pi-wantPi) > 1e-4*wantPi {
				t.Errorf("π_None %.6g, want %.6g (a-b excluded: %v)", pi, wantPi, tt.wantExcluded)
			}
			wantAB := (tt.c2 + tt.kappa*wantPi) / (tt.o + tt.kappa)
			if p := est.Pair("a", "b"); math.Abs(p-wantAB) > 1e-4*wantAB {
				t.Errorf("a-b %.6g, want %.6g", p, wantAB)
			}
			wantAC := tt.kappa * wantPi / (tt.oOther + tt.kappa)
			if p := est.Pair("a", "c"); math.Abs(p-wantAC) > 1e-4*wantAC {
				t.Errorf("a-c %.6g, want %.6g", p, wantAC)
			}
		})
	}
}

// TestCoDepartureRebuildsSaysWhenTheTableIsRebuilt: over a log of
// departures and returns estimated at random times (the default hourly
// refresh), Rebuilds(now) is true exactly when Estimate(now) builds a new
// pair table.
func TestCoDepartureRebuildsSaysWhenTheTableIsRebuilt(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	cfg := DefaultCoDepartureConfig()
	l := synthCoLog(rng, 2, 2, 3, 1.0/(20*3600), 1.0/(8*3600), 0.7, 40*time.Second, 6*24*time.Hour)
	e := coEstimatorFor(t, cfg, l)
	var table *coTable
	rebuilt, kept := 0, 0
	for _, ev := range l.events {
		if ev.depart {
			e.Observe(Departure{Node: ev.node, At: ev.at, Emergency: true})
		} else {
			e.Return(ev.node, ev.at)
		}
		if rng.IntN(3) != 0 {
			continue
		}
		// Now, or a little later (a pending departure may settle).
		now := ev.at.Add(time.Duration(rng.IntN(int(3 * cfg.Window))))
		want := e.Rebuilds(now)
		got := e.Estimate(now).t != table
		table = e.table
		if got != want {
			t.Fatalf("at %v: Rebuilds said %v, Estimate rebuilt: %v", now, want, got)
		}
		if got {
			rebuilt++
		} else {
			kept++
		}
	}
	if rebuilt < 10 || kept < 10 {
		t.Fatalf("%d estimates rebuilt the table and %d kept it: the log must exercise both", rebuilt, kept)
	}
}

// coEstimatorFor returns an estimator that knows the log's nodes and
// their domains.
func coEstimatorFor(t *testing.T, cfg CoDepartureConfig, l coLog) *CoDepartureEstimator {
	t.Helper()
	e, err := NewCoDepartureEstimator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range l.nodes {
		d := l.dom[id]
		e.Node(id, d.building, d.lab, d.pool)
	}
	return e
}

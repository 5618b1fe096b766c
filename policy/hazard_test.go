package policy

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// diurnal is a known time-of-day intensity shape with lunch and evening
// peaks up to 6× the night rate (docs/design.md §0), relative units.
func diurnal(hour float64) float64 {
	r := 1.0
	if hour >= 11.5 && hour < 13 {
		r = 6
	}
	if hour >= 17.5 && hour < 20 {
		r = 5
	}
	if hour >= 8 && hour < 11.5 || hour >= 13 && hour < 17.5 {
		r = 2.5
	}
	return r
}

// hourlyTruth returns the mean of diurnal over each UTC hour.
func hourlyTruth() []float64 {
	out := make([]float64, 24)
	for h := range 24 {
		var s float64
		for m := range 60 {
			s += diurnal(float64(h) + (float64(m)+0.5)/60)
		}
		out[h] = s / 60
	}
	return out
}

// synthTrace feeds an estimator with nodes always up from start to end and
// emergency departures from a non-homogeneous Poisson process of intensity
// perNode·scale(t)·diurnal(hour) per node (thinning). Departed nodes come
// back at once, so exposure stays nodes × time. It returns the events.
func synthTrace(t testing.TB, e *HazardEstimator, rng *rand.Rand, nodes int, start, end time.Time, perNode float64, scale func(time.Time) float64, step time.Duration) int {
	t.Helper()
	maxRate := perNode * 6 * float64(nodes)
	maxScale := 1.0
	for u := start; u.Before(end); u = u.Add(time.Hour) {
		maxScale = math.Max(maxScale, scale(u))
	}
	maxRate *= maxScale
	events := 0
	next := start
	last := start
	for {
		next = next.Add(time.Duration(rng.ExpFloat64() / maxRate * float64(time.Second)))
		if !next.Before(end) {
			break
		}
		// Exposure up to the event, in steps like a control loop would.
		for last.Add(step).Before(next) {
			for n := range nodes {
				e.Up(nodeName(0, n), last, last.Add(step))
			}
			last = last.Add(step)
		}
		h := float64(next.Hour()) + float64(next.Minute())/60
		if rng.Float64() < perNode*scale(next)*diurnal(h)*float64(nodes)/maxRate {
			e.Observe(Departure{Node: nodeName(0, rng.IntN(nodes)), At: next, Emergency: true})
			events++
		}
	}
	for last.Before(end) {
		to := minTime(last.Add(step), end)
		for n := range nodes {
			e.Up(nodeName(0, n), last, to)
		}
		last = to
	}
	return events
}

func meanRelativeError(est HazardProfile, truth []float64, perNode float64) float64 {
	var s float64
	for h, tr := range truth {
		want := tr * perNode
		s += math.Abs(est.Rates[h]-want) / want
	}
	return s / float64(len(truth))
}

func TestHazardEstimatorRecoversDiurnalProfile(t *testing.T) {
	cfg := DefaultHazardConfig()
	e, err := NewHazardEstimator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(23, 24))
	const nodes = 54
	perNode := 0.8 / 3600 / 6 // per node, at the off-peak unit
	start := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	end := start.Add(cfg.Window)
	n := synthTrace(t, e, rng, nodes, start, end, perNode, func(time.Time) float64 { return 1 }, time.Minute)
	if n < 500 {
		t.Fatalf("only %d synthetic departures; the test needs at least 500", n)
	}
	g := e.Global(end)
	mre := meanRelativeError(g.Emergency, hourlyTruth(), perNode)
	t.Logf("%d departures over %v: mean relative error over hourly buckets %.3f, scale %.3f over %v", n, cfg.Window, mre, g.Scale, g.FastWindow)
	if mre >= 0.15 {
		t.Errorf("mean relative error %.3f, want < 0.15", mre)
	}
	// The upper bound sits above the estimate and is never zero.
	for k, up := range g.EmergencyUpper.Rates {
		if !(up > g.Emergency.Rates[k]) || up < cfg.Floor {
			t.Errorf("bucket %d: upper %g, point %g", k, up, g.Emergency.Rates[k])
		}
	}
}

// reconvergence runs a 1.7× hazard shift and returns how long after it the
// estimate met the paper's criterion |λ̂ − λ|/λ < 0.10 continuously for two
// fast windows, judged every slot (ok false if it never did within the
// horizon). perNode is the per-node rate at the off-peak unit.
func reconvergence(t testing.TB, seed uint64, nodes int, perNode float64) (time.Duration, float64, bool) {
	return reconvergenceWith(t, DefaultHazardConfig(), seed, nodes, perNode)
}

func reconvergenceWith(t testing.TB, cfg HazardConfig, seed uint64, nodes int, perNode float64) (time.Duration, float64, bool) {
	e, err := NewHazardEstimator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, seed+1))
	start := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	shift := start.Add(cfg.Window)
	synthTrace(t, e, rng, nodes, start, shift, perNode, func(time.Time) float64 { return 1 }, time.Minute)
	// Event rate at the shift, cluster-wide, per hour (time-of-day mean).
	truth := hourlyTruth()
	var mean float64
	for _, v := range truth {
		mean += v / 24
	}
	eventsPerHour := mean * perNode * 1.7 * float64(nodes) * 3600
	horizon := 24 * time.Hour
	var ok bool
	var conv time.Duration
	var goodSince time.Time
	now := shift
	const step = 5 * time.Minute
	for now.Before(shift.Add(horizon)) {
		synthTrace(t, e, rng, nodes, now, now.Add(step), perNode*1.7, func(time.Time) float64 { return 1 }, time.Minute)
		now = now.Add(step)
		g := e.Global(now)
		want := truth[now.Add(-time.Nanosecond).Hour()] * perNode * 1.7
		got := g.Emergency.At(now.Add(-time.Nanosecond))
		if math.Abs(got-want)/want < 0.10 {
			if goodSince.IsZero() {
				goodSince = now
			}
			if now.Sub(goodSince) >= 2*g.FastWindow {
				return goodSince.Sub(shift), eventsPerHour, true
			}
		} else {
			goodSince = time.Time{}
		}
	}
	return conv, eventsPerHour, ok
}

func TestHazardEstimatorReconvergesAfterShift(t *testing.T) {
	// A busy cluster: 100 nodes, about 680 emergencies an hour after the
	// shift. With FastEvents 300 the fast window is about an hour at night,
	// so the estimate should re-converge within a few hours; quieter
	// clusters take proportionally longer, and below ~200 events/h the
	// two-window criterion is often not met within a day because of
	// Poisson noise (see BenchmarkHazardReconvergence).
	perNode := 400.0 / 100 / 3600 / meanDiurnal()
	for seed := range uint64(2) {
		got, rate, ok := reconvergence(t, 25+seed, 100, perNode)
		if !ok {
			t.Fatalf("seed %d: no re-convergence within 24 h at %.0f events/h", seed, rate)
		}
		t.Logf("seed %d: re-converged %v after a 1.7× shift at %.0f events/h", seed, got, rate)
		if got > 8*time.Hour {
			t.Errorf("seed %d: re-convergence took %v at %.0f events/h, want under 8 h", seed, got, rate)
		}
	}
}

func TestHazardNodeFactorShrinksTowardOne(t *testing.T) {
	e, start, end := twentyNodesUpAWeek(t)
	// Node 0 leaves 40 times, the others 2 times each: node 0 is flaky.
	for k := range 40 {
		e.Observe(Departure{Node: nodeName(0, 0), At: start.Add(time.Duration(k) * 4 * time.Hour), Emergency: true})
	}
	for n := 1; n < 20; n++ {
		for k := range 2 {
			e.Observe(Departure{Node: nodeName(0, n), At: start.Add(time.Duration(n*7+k*50) * time.Hour), Emergency: true})
		}
	}
	flaky := e.Estimate(nodeName(0, 0), end)
	calm := e.Estimate(nodeName(0, 5), end)
	unknown := e.Estimate("never-seen", end)
	if !(flaky.NodeFactor > 3) {
		t.Errorf("flaky node factor %.2f, want > 3", flaky.NodeFactor)
	}
	if !(calm.NodeFactor < 1 && calm.NodeFactor > 0.3) {
		t.Errorf("calm node factor %.2f, want in (0.3, 1): shrunk toward 1", calm.NodeFactor)
	}
	if unknown.NodeFactor != 1 {
		t.Errorf("unseen node factor %.2f, want 1", unknown.NodeFactor)
	}
	// A node with no own history gets a wider bound than the global one.
	if !(unknown.EmergencyUpper.Mean() > e.Global(end).EmergencyUpper.Mean()) {
		t.Errorf("unseen node's bound %g not above the global bound %g", unknown.EmergencyUpper.Mean(), e.Global(end).EmergencyUpper.Mean())
	}
}

func TestHazardBoundNeverZero(t *testing.T) {
	// Without a prior, the bound of an empty window is the zero-count
	// Poisson bound (the prior's own case is TestHazardPriorFreshNode).
	e, err := NewHazardEstimator(zeroPrior(DefaultHazardConfig()))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	for _, up := range e.Profile("a", now).Rates {
		if !(up >= MinHazard) {
			t.Fatalf("empty estimator bound %g, want ≥ %g", up, MinHazard)
		}
	}
	// Exposure without any event: the zero-count Poisson bound.
	e.Up("a", now, now.Add(48*time.Hour))
	p := e.Profile("a", now.Add(48*time.Hour))
	want := -math.Log(0.1) / (48 * 3600)
	for k, up := range p.Rates {
		if math.Abs(up-want) > 1e-9*want {
			t.Errorf("bucket %d: bound %g, want %g (2.30 events over the exposure)", k, up, want)
		}
	}
	if est := e.Estimate("a", now.Add(48*time.Hour)); est.Emergency.Mean() != 0 {
		t.Errorf("point estimate %g without events, want 0", est.Emergency.Mean())
	}
}

func TestHazardConfigValidate(t *testing.T) {
	mut := []func(*HazardConfig){
		func(c *HazardConfig) { c.Buckets = 7 },
		func(c *HazardConfig) { c.Slot = 7 * time.Minute },
		func(c *HazardConfig) { c.Window = time.Hour },
		func(c *HazardConfig) { c.FastEvents = 0 },
		func(c *HazardConfig) { c.Confidence = 1 },
		func(c *HazardConfig) { c.Floor = 0 },
		func(c *HazardConfig) { c.PriorEmergencyPerHour = -1 },
		func(c *HazardConfig) { c.PriorDeparturePerHour = math.NaN() },
		func(c *HazardConfig) { c.PriorEmergencyPerHour = 2 * c.PriorDeparturePerHour },
		func(c *HazardConfig) { c.PriorExposureHours = -1 },
		func(c *HazardConfig) { c.PriorExposureHours = math.Inf(1) },
	}
	for i, m := range mut {
		c := DefaultHazardConfig()
		m(&c)
		if _, err := NewHazardEstimator(c); err == nil {
			t.Errorf("mutation %d: no error for %+v", i, c)
		}
	}
}

// TestHazardBoundCalibration: on stationary traces of known rate (54
// nodes, every node the same rate, 28 days) the one-sided 90 % bound λ̂⁺
// should miss the true rate about 10 % of the time, neither much more (it
// would understate the hazard) nor much less (P1 would checkpoint more
// often than its stated confidence needs): between 4 % and 18 % at every
// rate from 0.01 to 1 per node-hour, judged over the last two weeks of
// each trace, every bucket of every fifth node.
func TestHazardBoundCalibration(t *testing.T) {
	const nodes = 54
	for _, rate := range []float64{0.01, 0.03, 0.1, 0.3, 1} {
		above, total := 0, 0
		ratio := 0.0
		for seed := range uint64(4) {
			rng := rand.New(rand.NewPCG(seed, 9))
			e, err := NewHazardEstimator(DefaultHazardConfig())
			if err != nil {
				t.Fatal(err)
			}
			perNode := rate / 3600
			step := 10 * time.Minute
			at := testEpoch
			for day := range 28 {
				end := at.Add(24 * time.Hour)
				for u := at; u.Before(end); u = u.Add(step) {
					for n := range nodes {
						e.Up(nodeName(0, n), u, u.Add(step))
						if rng.Float64() < perNode*step.Seconds() {
							e.Observe(Departure{Node: nodeName(0, n), At: u.Add(step / 2), Emergency: true})
						}
					}
				}
				at = end
				if day < 14 {
					continue
				}
				for n := 0; n < nodes; n += 5 {
					for _, r := range e.Estimate(nodeName(0, n), at).EmergencyUpper.Rates {
						total++
						if perNode > r {
							above++
						}
						ratio += r / perNode
					}
				}
			}
		}
		miss := float64(above) / float64(total)
		t.Logf("rate %.2f/h: true rate above λ̂⁺ %.1f %% of the time, λ̂⁺/true %.2f", rate, 100*miss, ratio/float64(total))
		if miss < 0.04 || miss > 0.18 {
			t.Errorf("rate %.2f/h: the true rate is above the 90 %% bound %.1f %% of the time, want about 10 %% (4–18)", rate, 100*miss)
		}
	}
}

// TestHazardDepartureProfileCountsEveryDeparture: a node whose many
// departures are all scheduled gets a departure factor above the others'
// and an emergency factor below theirs, and the departure profile's prefix
// integral (built with the estimate) is the one its rates give.
func TestHazardDepartureProfileCountsEveryDeparture(t *testing.T) {
	e, start, end := twentyNodesUpAWeek(t)
	for n := range 20 {
		emergencies, scheduled := 2, 0
		if n == 0 {
			emergencies, scheduled = 0, 40 // node 0 leaves often, always with notice
		}
		for k := range emergencies + scheduled {
			at := start.Add(time.Duration(n*7+k*4) * time.Hour)
			e.Observe(Departure{Node: nodeName(0, n), At: at, Emergency: k < emergencies})
		}
	}
	planned, calm := e.Estimate(nodeName(0, 0), end), e.Estimate(nodeName(0, 5), end)
	if !(planned.Departure.Mean() > 3*calm.Departure.Mean()) {
		t.Errorf("departure hazard of the node that leaves 40 times %.3g, of a calm one %.3g: want over 3×", planned.Departure.Mean(), calm.Departure.Mean())
	}
	if !(planned.Emergency.Mean() < calm.Emergency.Mean()) {
		t.Errorf("emergency hazard of the node with no emergency %.3g, not below a calm one's %.3g", planned.Emergency.Mean(), calm.Emergency.Mean())
	}
	for _, est := range []HazardEstimate{planned, calm, e.Global(end)} {
		got, want := cumulativeOf(est.Departure), cumulativeOf(HazardProfile{Rates: est.Departure.Rates})
		if len(est.Departure.prefix) != len(est.Departure.Rates)+1 || !slices.Equal(got.cum, want.cum) || got.width != want.width {
			t.Fatalf("departure profile's prefix %v (width %g), its rates give %v (width %g)", got.cum, got.width, want.cum, want.width)
		}
	}
}

// twentyNodesUpAWeek returns an estimator with the defaults that saw 20
// nodes up for the week from start to end.
func twentyNodesUpAWeek(t *testing.T) (e *HazardEstimator, start, end time.Time) {
	t.Helper()
	e, err := NewHazardEstimator(DefaultHazardConfig())
	if err != nil {
		t.Fatal(err)
	}
	start = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	end = start.Add(7 * 24 * time.Hour)
	for n := range 20 {
		e.Up(nodeName(0, n), start, end)
	}
	return e, start, end
}

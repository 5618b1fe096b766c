package policy

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// hazardTraceDump feeds cfg's estimator a small mixed trace (a few nodes,
// emergencies and scheduled departures, one out-of-order event, a node that
// joins late) and prints every estimate's float bits at several times.
func hazardTraceDump(t *testing.T, cfg HazardConfig) []byte {
	t.Helper()
	e, err := NewHazardEstimator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	dump := func(at time.Time, node NodeID) {
		est := e.Estimate(node, at)
		fmt.Fprintf(&out, "%s %s s=%x f=%x fw=%v ev=%x ex=%x\n", at.Format(time.RFC3339), node,
			math.Float64bits(est.Scale), math.Float64bits(est.NodeFactor), est.FastWindow,
			math.Float64bits(est.Events), math.Float64bits(est.Exposure))
		for _, p := range []HazardProfile{est.Emergency, est.EmergencyUpper, est.Departure, est.DepartureUpper} {
			for _, r := range p.Rates {
				fmt.Fprintf(&out, " %x", math.Float64bits(r))
			}
			out.WriteByte('\n')
		}
	}
	rng := rand.New(rand.NewPCG(7, 8))
	start := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	now := start
	dump(now, "n0")
	for step := range 3 * 24 * 12 { // three days in 5-minute periods
		next := now.Add(5 * time.Minute)
		for n := range 6 {
			if n == 5 && step < 24*12 {
				continue // joins on day 2
			}
			e.Up(nodeName(0, n), now, next)
		}
		if rng.Float64() < 0.05 {
			e.Observe(Departure{Node: nodeName(0, rng.IntN(5)), At: now.Add(time.Duration(rng.IntN(300)) * time.Second), Emergency: rng.Float64() < 0.42})
		}
		if step == 400 {
			e.Observe(Departure{Node: nodeName(0, 1), At: now.Add(-20 * time.Hour), Emergency: true})
		}
		now = next
		if step%97 == 0 {
			dump(now, nodeName(0, step%6))
			dump(now, "unseen")
		}
	}
	// Only exposure, no event: the zero-count branch.
	e2, err := NewHazardEstimator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e, e2 = e2, e
	e.Up("a", start, start.Add(10*time.Second))
	dump(start.Add(10*time.Second), "a")
	e.Up("a", start, start.Add(48*time.Hour))
	dump(start.Add(48*time.Hour), "a")
	return out.Bytes()
}

// TestHazardZeroPriorMatchesOriginal pins that a prior of zero weight gives
// bit for bit what the estimator gave before the prior existed: the golden
// file was written by the pre-prior code (regenerate only for an intended
// change of the no-prior behaviour, with -rewrite).
func TestHazardZeroPriorMatchesOriginal(t *testing.T) {
	got := hazardTraceDump(t, zeroPrior(DefaultHazardConfig()))
	path := filepath.Join("testdata", "hazard-noprior.golden")
	if *rewriteGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (create it with -rewrite)", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
		for i := range min(len(gl), len(wl)) {
			if !bytes.Equal(gl[i], wl[i]) {
				t.Fatalf("line %d differs:\ngot  %s\nwant %s", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("got %d lines, want %d", len(gl), len(wl))
	}
}

// zeroPrior returns c with the prior switched off (weight 0).
func zeroPrior(c HazardConfig) HazardConfig {
	c.PriorExposureHours = 0
	return c
}

// TestHazardPriorFreshNode: a node of a new cluster, with seconds to a day
// of exposure and no event, gets the prior as its point estimate (up to what
// its exposure without events already says) and a bound within [prior,
// 10 × prior] in every bucket, for emergencies and for all departures.
func TestHazardPriorFreshNode(t *testing.T) {
	cfg := DefaultHazardConfig()
	start := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	for _, up := range []time.Duration{0, 10 * time.Second, time.Hour, 24 * time.Hour} {
		e, err := NewHazardEstimator(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if up > 0 {
			e.Up("fresh", start, start.Add(up))
		}
		now := start.Add(up)
		// Exposure without events moves the estimate by the conjugate
		// update: prior events over prior + real exposure.
		xPrior := cfg.PriorExposureHours
		shrink := xPrior / (xPrior + up.Hours())
		for _, node := range []NodeID{"fresh", "other"} {
			est := e.Estimate(node, now)
			for _, c := range []struct {
				name         string
				prior        float64 // 1/s
				point, upper HazardProfile
			}{
				{"emergency", cfg.PriorEmergencyPerHour / 3600, est.Emergency, est.EmergencyUpper},
				{"departure", cfg.PriorDeparturePerHour / 3600, est.Departure, est.DepartureUpper},
			} {
				want := c.prior * shrink
				if node == "fresh" {
					// The node factor (n_v+5)/(e_v+5): no event where
					// e_v were expected over its time up.
					want *= cfg.NodePrior / (cfg.NodePrior + want*up.Seconds())
				}
				for k := range c.point.Rates {
					p, u := c.point.Rates[k], c.upper.Rates[k]
					if math.Abs(p-want) > 0.01*want {
						t.Errorf("up %v, %s %s bucket %d: point %g/h, want the prior %g/h", up, node, c.name, k, p*3600, want*3600)
					}
					if !(u >= c.prior && u <= 10*c.prior) {
						t.Errorf("up %v, %s %s bucket %d: bound %g/h outside [%g, %g]/h", up, node, c.name, k, u*3600, c.prior*3600, 10*c.prior*3600)
					}
				}
			}
			if up == 0 && est.EmergencyUpper.Mean() < cfg.PriorEmergencyPerHour/3600 {
				t.Errorf("no exposure: bound mean %g/h below the prior", est.EmergencyUpper.Mean()*3600)
			}
		}
	}
}

// TestHazardPriorWashesOut: after two weeks of a busy trace the estimate
// converges to the truth whatever the prior says (0, the default, a hundred
// times too low, thirty times too high, the default rate at ten times the
// weight), and at the default weight the estimates with and without the
// prior agree within 5 %.
func TestHazardPriorWashesOut(t *testing.T) {
	const nodes = 54
	perNode := 0.8 / 3600 / 6
	start := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	def := DefaultHazardConfig()
	var base []float64
	for i, mut := range []func(*HazardConfig){
		func(c *HazardConfig) { c.PriorExposureHours = 0 },
		func(c *HazardConfig) {},
		func(c *HazardConfig) { c.PriorEmergencyPerHour /= 100; c.PriorDeparturePerHour /= 100 },
		func(c *HazardConfig) { c.PriorEmergencyPerHour *= 30; c.PriorDeparturePerHour *= 30 },
		func(c *HazardConfig) { c.PriorExposureHours *= 10 },
	} {
		cfg := def
		mut(&cfg)
		e, err := NewHazardEstimator(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// The same trace for every prior.
		rng := rand.New(rand.NewPCG(23, 24))
		end := start.Add(cfg.Window)
		n := synthTrace(t, e, rng, nodes, start, end, perNode, func(time.Time) float64 { return 1 }, time.Minute)
		g := e.Global(end)
		mre := meanRelativeError(g.Emergency, hourlyTruth(), perNode)
		t.Logf("prior %g/h × %g node-h: %d events, mean relative error %.3f", cfg.PriorEmergencyPerHour, cfg.PriorExposureHours, n, mre)
		if mre >= 0.15 {
			t.Errorf("prior %g/h × %g node-h: mean relative error %.3f, want < 0.15", cfg.PriorEmergencyPerHour, cfg.PriorExposureHours, mre)
		}
		if i == 0 {
			base = g.Emergency.Rates
			continue
		}
		// Ten times the weight (2,000 node-h, 11 % of the trace's exposure)
		// still pulls by several per cent: only the accuracy bound above
		// applies to it.
		for k, r := range g.Emergency.Rates {
			if d := math.Abs(r-base[k]) / base[k]; d > 0.05 && cfg.PriorExposureHours <= def.PriorExposureHours {
				t.Errorf("prior %g/h × %g node-h, bucket %d: %g vs %g without prior (%.1f %% apart), want within 5 %%", cfg.PriorEmergencyPerHour, cfg.PriorExposureHours, k, r, base[k], 100*d)
			}
		}
		for k, u := range g.EmergencyUpper.Rates {
			if !(u > g.Emergency.Rates[k]) || !(g.Emergency.Rates[k] > 0) {
				t.Errorf("bucket %d: point %g, bound %g: want 0 < point < bound", k, g.Emergency.Rates[k], u)
			}
		}
	}
}

// TestHazardPriorNeverZero: with the default prior, point and bound are
// positive in every bucket at every stage, including a long quiet stretch.
func TestHazardPriorNeverZero(t *testing.T) {
	e, err := NewHazardEstimator(DefaultHazardConfig())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	check := func(now time.Time) {
		for _, node := range []NodeID{"a", "b"} {
			est := e.Estimate(node, now)
			for _, p := range []HazardProfile{est.Emergency, est.EmergencyUpper, est.Departure, est.DepartureUpper} {
				for k, r := range p.Rates {
					if !(r > 0) || math.IsInf(r, 0) {
						t.Fatalf("%v, node %s, bucket %d: rate %g, want positive and finite", now.Sub(start), node, k, r)
					}
				}
			}
		}
	}
	check(start)
	now := start
	for day := range 20 {
		next := now.Add(24 * time.Hour)
		e.Up("a", now, next)
		if day < 2 {
			e.Observe(Departure{Node: "a", At: now.Add(13 * time.Hour), Emergency: day == 0})
		}
		now = next
		check(now)
	}
}

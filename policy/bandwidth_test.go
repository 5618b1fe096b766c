package policy

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestBandwidthEstimatorTracksCapacityMinusTraffic(t *testing.T) {
	const capacity = 125e6 // 1 Gbit/s
	est, err := NewBandwidthEstimator(DefaultBandwidthConfig(capacity))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	if a, lo := est.Estimate(t0); a != capacity || lo != 0 {
		t.Errorf("before any sample: (%g, %g), want (capacity, 0)", a, lo)
	}
	rng := rand.New(rand.NewPCG(15, 16))
	period := 100 * time.Millisecond
	now := t0
	// Research traffic of 40 MB/s ± 10 MB/s noise for 5 minutes.
	for range 3000 {
		now = now.Add(period)
		rate := 40e6 + (rng.Float64()*2-1)*10e6
		est.ObserveEgress(now, int64(rate*period.Seconds()), period)
	}
	a, lo := est.Estimate(now)
	if math.Abs(a-85e6) > 3e6 {
		t.Errorf("available %g, want ≈ 85e6 (capacity − research traffic)", a)
	}
	if !(lo < a && lo > a-15e6) {
		t.Errorf("lower bound %g not a little below %g", lo, a)
	}
	// Traffic jumps to 100 MB/s: after a few half-lives the estimate follows.
	for range 3000 {
		now = now.Add(period)
		est.ObserveEgress(now, int64(100e6*period.Seconds()), period)
	}
	if a, _ := est.Estimate(now); math.Abs(a-25e6) > 1e6 {
		t.Errorf("after the jump: available %g, want ≈ 25e6", a)
	}
	// Traffic above capacity never makes the estimate negative.
	for range 3000 {
		now = now.Add(period)
		est.ObserveEgress(now, int64(200e6*period.Seconds()), period)
	}
	if a, lo := est.Estimate(now); a < 0 || lo < 0 || a > 1e6 {
		t.Errorf("saturated link: (%g, %g), want ≈ 0 and never negative", a, lo)
	}
}

func TestBandwidthEstimatorShortfallLowersEstimate(t *testing.T) {
	est, err := NewBandwidthEstimator(DefaultBandwidthConfig(125e6))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	period := 100 * time.Millisecond
	for range 100 {
		now = now.Add(period)
		est.ObserveEgress(now, int64(25e6*period.Seconds()), period)
	}
	before, _ := est.Estimate(now)
	est.ObserveTransfer(now, 80e6, 78e6) // within 10 %: pacing noise
	if a, _ := est.Estimate(now); a != before {
		t.Errorf("near-rate transfer changed the estimate: %g → %g", before, a)
	}
	est.ObserveTransfer(now, 80e6, 30e6) // fell short by 50 MB/s
	after, lo := est.Estimate(now)
	if math.Abs(after-(before-50e6)) > 1 {
		t.Errorf("after a shortfall: %g, want %g", after, before-50e6)
	}
	if lo > after {
		t.Errorf("lower bound %g above estimate %g", lo, after)
	}
	// The penalty fades: after 10 half-lives it is below 0.1 %.
	later := now.Add(10 * DefaultBandwidthConfig(1).HalfLife)
	if a, _ := est.Estimate(later); math.Abs(a-before) > 0.001*before {
		t.Errorf("penalty did not fade: %g, want ≈ %g", a, before)
	}
}

func TestBandwidthConfigValidate(t *testing.T) {
	bad := []BandwidthConfig{
		{Capacity: 0, HalfLife: time.Second, Confidence: 0.9, Shortfall: 0.9},
		{Capacity: 1, HalfLife: 0, Confidence: 0.9, Shortfall: 0.9},
		{Capacity: 1, HalfLife: time.Second, Confidence: 1, Shortfall: 0.9},
		{Capacity: 1, HalfLife: time.Second, Confidence: 0.9, Shortfall: 0},
	}
	for i, c := range bad {
		if _, err := NewBandwidthEstimator(c); err == nil {
			t.Errorf("config %d: no error for %+v", i, c)
		}
	}
}

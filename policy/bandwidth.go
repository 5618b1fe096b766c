package policy

import (
	"fmt"
	"math"
	"time"
)

// BandwidthConfig tunes one link's (or one destination building's)
// bandwidth estimator (docs/design.md P1.7).
type BandwidthConfig struct {
	// Capacity is the link's rate, bytes/s (configured or probed).
	Capacity float64
	// HalfLife is the smoothing half-life of the estimate (30 s): a change
	// in traffic is half absorbed after one half-life.
	HalfLife time.Duration
	// Confidence is the one-sided level of the lower bound B̂⁻ (0.9).
	Confidence float64
	// Shortfall is the fraction of its assigned rate below which a transfer
	// counts as falling short (0.9): a transfer reaching 95 % of its rate is
	// pacing noise, one reaching 50 % says the path has less room.
	Shortfall float64
}

// DefaultBandwidthConfig returns the agent's settings for a link of the
// given capacity (bytes/s).
func DefaultBandwidthConfig(capacity float64) BandwidthConfig {
	return BandwidthConfig{Capacity: capacity, HalfLife: 30 * time.Second, Confidence: 0.9, Shortfall: 0.9}
}

// Validate reports the first setting that cannot work.
func (c BandwidthConfig) Validate() error {
	switch {
	case !(c.Capacity > 0) || math.IsInf(c.Capacity, 0):
		return fmt.Errorf("bandwidth config: capacity %v must be positive and finite", c.Capacity)
	case c.HalfLife <= 0:
		return fmt.Errorf("bandwidth config: half-life %v must be positive", c.HalfLife)
	case !(c.Confidence > 0 && c.Confidence < 1):
		return fmt.Errorf("bandwidth config: confidence %v outside (0,1)", c.Confidence)
	case !(c.Shortfall > 0 && c.Shortfall <= 1):
		return fmt.Errorf("bandwidth config: shortfall %v outside (0,1]", c.Shortfall)
	}
	return nil
}

// BandwidthEstimator estimates the bandwidth available to migration on one
// link (docs/design.md P1.7): capacity minus the measured non-migration egress,
// smoothed with an exponential moving average (and variance), lowered when
// transfers on the path fail to reach their assigned rate. What our own
// paced flows send is never counted as "available": the caller passes only
// non-migration bytes. Before the first sample the estimate is the
// capacity with a lower bound of 0 (unknown), so deadline checks refuse
// until the link has been measured.
//
// It is not safe for concurrent use; each agent owns one per link.
type BandwidthEstimator struct {
	cfg     BandwidthConfig
	z       float64
	started bool
	last    time.Time
	mean    float64 // smoothed capacity − non-migration rate
	varr    float64 // smoothed variance of that sample
	penalty float64 // shortfall seen on transfers, decaying with HalfLife
}

// NewBandwidthEstimator returns an estimator with no samples.
func NewBandwidthEstimator(cfg BandwidthConfig) (*BandwidthEstimator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &BandwidthEstimator{cfg: cfg, z: math.Sqrt2 * math.Erfinv(2*cfg.Confidence-1)}, nil
}

// decay returns the weight an old value keeps after dt.
func (b *BandwidthEstimator) decay(dt time.Duration) float64 {
	if dt <= 0 {
		return 1
	}
	return math.Exp2(-dt.Seconds() / b.cfg.HalfLife.Seconds())
}

// ObserveEgress adds one counter sample: nonMigration bytes of
// non-migration egress seen on the link over the period ending at at
// (the BPF egress counters, every 100 ms). Samples with a non-positive
// period are ignored.
func (b *BandwidthEstimator) ObserveEgress(at time.Time, nonMigration int64, period time.Duration) {
	if period <= 0 {
		return
	}
	sample := max(0, b.cfg.Capacity-float64(max(nonMigration, 0))/period.Seconds())
	if !b.started {
		b.started, b.last, b.mean, b.varr = true, at, sample, 0
		return
	}
	// The sample's weight grows with the period it covers, so 100 ms
	// samples and 1 s samples smooth over the same half-life.
	keep := b.decay(period)
	if at.After(b.last) {
		b.penalty *= b.decay(at.Sub(b.last))
		b.last = at
	}
	diff := sample - b.mean
	b.mean += (1 - keep) * diff
	b.varr = keep * (b.varr + (1-keep)*diff*diff)
}

// ObserveTransfer reports a transfer on the link's path that was assigned
// assigned bytes/s and achieved achieved bytes/s. A transfer below
// Shortfall·assigned lowers the estimate by the missing rate; the penalty
// fades with the half-life unless transfers keep falling short.
func (b *BandwidthEstimator) ObserveTransfer(at time.Time, assigned, achieved float64) {
	if !(assigned > 0) || achieved >= b.cfg.Shortfall*assigned {
		return
	}
	if at.After(b.last) {
		b.penalty *= b.decay(at.Sub(b.last))
		b.last = at
	}
	b.penalty = max(b.penalty, assigned-max(achieved, 0))
}

// Estimate returns the smoothed bandwidth available to migration and its
// lower confidence bound, bytes/s, at now (the penalty fades with time).
// Both are within [0, Capacity] and low ≤ avail.
func (b *BandwidthEstimator) Estimate(now time.Time) (avail, low float64) {
	if !b.started {
		return b.cfg.Capacity, 0
	}
	pen := b.penalty
	if now.After(b.last) {
		pen *= b.decay(now.Sub(b.last))
	}
	avail = min(b.cfg.Capacity, max(0, b.mean-pen))
	low = max(0, avail-b.z*math.Sqrt(b.varr))
	return avail, low
}

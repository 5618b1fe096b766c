package enforce

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/bpf"
	"github.com/reclaimnet/reclaimnet/mesh"
	"github.com/reclaimnet/reclaimnet/policy"
)

// BuildingRates are the egress rates towards one building over the last
// sample, bytes/s, and that building's estimate.
type BuildingRates struct {
	Building string
	// NonMigration is traffic outside the flow table, Migration traffic
	// of ReclaimNet flows in it.
	NonMigration, Migration float64
	// Available and AvailableLow are the estimator's output (docs/design.md P1.7).
	Available, AvailableLow float64
}

// sampler turns successive counter readings into per-building rates and
// feeds the estimators. Time is passed in.
type sampler struct {
	bw          policy.BandwidthConfig
	resolve     func(netip.Addr) (string, bool)
	perBuilding bool

	mu      sync.Mutex // guards the fields below
	primed  bool
	last    time.Time
	prev    map[netip.Addr]bpf.DestCounters
	est     map[string]*policy.BandwidthEstimator
	rates   map[string]BuildingRates // last sample; "" is outside the cluster
	total   float64                  // last sample's non-migration rate, all destinations
	sampled time.Time
}

func newSampler(bw policy.BandwidthConfig, resolve func(netip.Addr) (string, bool), perBuilding bool) *sampler {
	return &sampler{bw: bw, resolve: resolve, perBuilding: perBuilding,
		est: map[string]*policy.BandwidthEstimator{}, rates: map[string]BuildingRates{}}
}

// counterDelta is what a destination sent since the previous reading. A
// counter that went down belongs to an entry that was evicted and seen
// again, starting from zero: all of its value is new.
func counterDelta(prev, cur bpf.DestCounters, seen bool) (other, migration uint64) {
	if !seen || cur.OtherBytes < prev.OtherBytes || cur.MigrationBytes < prev.MigrationBytes ||
		cur.OtherPackets < prev.OtherPackets || cur.MigrationPackets < prev.MigrationPackets {
		return cur.OtherBytes, cur.MigrationBytes
	}
	return cur.OtherBytes - prev.OtherBytes, cur.MigrationBytes - prev.MigrationBytes
}

// estimator returns building's estimator, creating it. Caller holds mu.
func (s *sampler) estimator(building string) *policy.BandwidthEstimator {
	if e, ok := s.est[building]; ok {
		return e
	}
	e, err := policy.NewBandwidthEstimator(s.bw)
	if err != nil {
		panic("enforce: bandwidth config validated in New: " + err.Error())
	}
	s.est[building] = e
	return e
}

// observe takes one counter reading at now. The first reading is the
// baseline: what was sent before it is not attributed to any period.
func (s *sampler) observe(now time.Time, cur map[netip.Addr]bpf.DestCounters, known []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.primed || !now.After(s.last) {
		if !s.primed {
			s.primed, s.last, s.prev = true, now, cur
		}
		return
	}
	period := now.Sub(s.last)
	other := map[string]uint64{}
	migration := map[string]uint64{}
	var total uint64
	for addr, c := range cur {
		p, seen := s.prev[addr]
		o, m := counterDelta(p, c, seen)
		if o == 0 && m == 0 {
			continue
		}
		b, ok := s.resolve(addr)
		if !ok {
			b = ""
		}
		other[b] += o
		migration[b] += m
		total += o
	}
	s.prev, s.last = cur, now
	for _, b := range known {
		if b != "" {
			s.estimator(b)
		}
	}
	for b := range other {
		if b != "" {
			s.estimator(b)
		}
	}
	secs := period.Seconds()
	s.total, s.sampled = float64(total)/secs, now
	clear(s.rates)
	for b, e := range s.est {
		feed := total
		if s.perBuilding {
			feed = other[b]
		}
		e.ObserveEgress(now, int64(min(feed, 1<<62)), period)
		avail, low := e.Estimate(now)
		s.rates[b] = BuildingRates{Building: b, NonMigration: float64(other[b]) / secs,
			Migration: float64(migration[b]) / secs, Available: avail, AvailableLow: low}
	}
	if o, m := other[""], migration[""]; o > 0 || m > 0 {
		s.rates[""] = BuildingRates{NonMigration: float64(o) / secs, Migration: float64(m) / secs}
	}
}

func (s *sampler) observeTransfer(now time.Time, building string, assigned, achieved float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.estimator(building).ObserveTransfer(now, assigned, achieved)
}

// estimates returns the published form, sorted by building and capped at
// what one telemetry report carries.
func (s *sampler) estimates(now time.Time) []mesh.BuildingBandwidth {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]mesh.BuildingBandwidth, 0, len(s.est))
	for b, e := range s.est {
		avail, low := e.Estimate(now)
		out = append(out, mesh.BuildingBandwidth{Building: b, Available: avail, AvailableLow: low})
	}
	slices.SortFunc(out, func(a, b mesh.BuildingBandwidth) int {
		switch {
		case a.Building < b.Building:
			return -1
		case a.Building > b.Building:
			return 1
		}
		return 0
	})
	if len(out) > mesh.MaxBandwidthEntries {
		out = out[:mesh.MaxBandwidthEntries]
	}
	return out
}

// snapshot returns the last sample's rates (sorted, the outside-cluster
// entry last), the total non-migration rate and when it was taken.
func (s *sampler) snapshot() ([]BuildingRates, float64, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]BuildingRates, 0, len(s.rates))
	for _, r := range s.rates {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b BuildingRates) int {
		switch {
		case a.Building == b.Building:
			return 0
		case a.Building == "":
			return 1
		case b.Building == "":
			return -1
		case a.Building < b.Building:
			return -1
		}
		return 1
	})
	return out, s.total, s.sampled
}

package view

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// Bandwidth history bounds: only the newest maxBandwidthSamples samples
// are kept; a link gets a new sample when it is first seen or its
// available bandwidth moved by more than bandwidthChange (relative).
const (
	maxBandwidthSamples = 8192
	bandwidthChange     = 0.05
)

// bandwidthSamplePeriod is five telemetry periods (5 s by default).
func bandwidthSamplePeriod(telemetry time.Duration) time.Duration { return 5 * telemetry }

// bandwidthSample is one link's available bandwidth at a time.
type bandwidthSample struct {
	At        time.Time
	Link      string
	Available float64 // bytes/s
}

// bandwidthHistory is what this node saw of the campus links (the graph
// the leader builds from gossip), kept in memory since the agent started:
// the links as last seen and a bounded list of samples that changed.
type bandwidthHistory struct {
	mu      sync.Mutex
	links   map[string]policy.Link
	last    map[string]float64
	samples []bandwidthSample
}

// sample records links at now: every link's description, and a sample for
// each that is new or whose available bandwidth changed by more than
// bandwidthChange.
func (h *bandwidthHistory) sample(links []policy.Link, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.links == nil {
		h.links, h.last = map[string]policy.Link{}, map[string]float64{}
	}
	for _, l := range links {
		h.links[l.ID] = l
		prev, seen := h.last[l.ID]
		if seen && math.Abs(l.Available-prev) <= bandwidthChange*max(prev, 1) {
			continue
		}
		h.last[l.ID] = l.Available
		h.samples = append(h.samples, bandwidthSample{At: now, Link: l.ID, Available: l.Available})
	}
	if n := len(h.samples) - maxBandwidthSamples; n > 0 {
		h.samples = slices.Clone(h.samples[n:])
	}
}

// snapshot returns copies of the links and samples.
func (h *bandwidthHistory) snapshot() (map[string]policy.Link, []bandwidthSample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	links := make(map[string]policy.Link, len(h.links))
	for id, l := range h.links {
		links[id] = l
	}
	return links, slices.Clone(h.samples)
}

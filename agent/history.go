package agent

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/web"
)

// webProtocols is the page's protocol line: the settings in force (the
// leader's) and this node's own.
func (a *Agent) webProtocols(state *state.State) web.Protocols {
	in := state.Protocols()
	return web.Protocols{
		P1: in.Switches.P1, P2: in.Switches.P2, P3: in.Switches.P3,
		FixedInterval: in.FixedInterval,
		Summary:       in.String(),
		DecidedBy:     state.Decisions.Leader,
		Local:         a.protocols.String(),
		Agree:         in == a.protocols,
	}
}

// historyLoop runs beside the node's other loops: it warns when the
// leader decides with protocol settings other than this node's and
// samples the bandwidth history for trace export.
func (a *Agent) historyLoop(ctx context.Context) {
	c := a.Coordinator()
	if c == nil {
		return
	}
	period := max(time.Duration(a.cfg.TelemetryInterval), 100*time.Millisecond)
	sample := time.NewTicker(bandwidthSamplePeriod(period))
	defer sample.Stop()
	var warned state.DecisionRecord
	a.bandwidth.sample(a.telemetry.Links(), time.Now())
	for {
		changed := c.Changed()
		if p, leader, ok := c.Store().RecordedProtocols(); ok {
			a.checkProtocols(p, leader, &warned)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-sample.C:
			a.bandwidth.sample(a.telemetry.Links(), time.Now())
		}
	}
}

// checkProtocols logs a warning, once per leader and setting, when the
// settings in force differ from this node's.
func (a *Agent) checkProtocols(p state.Protocols, leader policy.NodeID, warned *state.DecisionRecord) {
	if p == a.protocols {
		return
	}
	if warned.Protocols != nil && *warned.Protocols == p && warned.Leader == leader {
		return
	}
	a.logger.Warn("the leader decides with other protocol settings than this node: the leader's apply to the whole cluster; this node's apply only while it leads",
		"leader", leader, "in_force", p.String(), "this_node", a.protocols.String())
	*warned = state.DecisionRecord{Leader: leader, Protocols: &p}
}

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

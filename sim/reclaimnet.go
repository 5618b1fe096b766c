package sim

import (
	"fmt"
	"sort"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/trace"
)

// TickController drives ReclaimNet, or one of its ablations, through
// policy.Tick with the policy's own estimators: the hazard and
// co-departure estimators learn from the departures as they happen (never
// from the future), the bandwidth estimator from each link's
// non-migration traffic.
type TickController struct {
	Label  string
	Params policy.Params
	// IntervalOverride, when set, replaces P1's interval for a job after
	// Tick (baseline B7's state-independent interval).
	IntervalOverride func(j policy.Job, now time.Time) time.Duration

	hazard *policy.HazardEstimator
	co     *policy.CoDepartureEstimator
	coInit bool
	// links holds each observed link's bandwidth estimator by the world's
	// link index (nil: never observed).
	links   []*linkEstimate
	upSince map[policy.NodeID]time.Time
	down    map[policy.NodeID]bool
	// profiles holds each node's published hazard profiles (emergency
	// bound, departure), by the world's node index.
	profiles     [][2]policy.HazardProfile
	profAt       time.Time
	lastSeen     time.Time
	hazardSeries []HazardPoint
	gapSamples   []policy.GapSample
	nextSample   time.Time
	start        time.Time
	err          error
}

// NewTickController returns a controller for params.
func NewTickController(label string, params policy.Params) (*TickController, error) {
	h, err := policy.NewHazardEstimator(policy.DefaultHazardConfig())
	if err != nil {
		return nil, fmt.Errorf("hazard estimator: %w", err)
	}
	co, err := policy.NewCoDepartureEstimator(policy.DefaultCoDepartureConfig())
	if err != nil {
		return nil, fmt.Errorf("co-departure estimator: %w", err)
	}
	return &TickController{Label: label, Params: params, hazard: h, co: co,
		upSince: map[policy.NodeID]time.Time{}, down: map[policy.NodeID]bool{}}, nil
}

// linkEstimate is one link's bandwidth estimator, when it was last
// observed, and its estimate since then (cached: the simulator never
// reports shortfalls, so an estimate changes only when the link is
// observed).
type linkEstimate struct {
	est         *policy.BandwidthEstimator
	last        time.Time
	avail, low  float64
	cached, obs bool
}

// Name implements Controller.
func (c *TickController) Name() string { return c.Label }

// Enforced implements Controller: P3 paces every flow.
func (c *TickController) Enforced() bool { return c.Params.Switches.P3 }

// ObserveDeparture implements Observer.
func (c *TickController) ObserveDeparture(node policy.NodeID, at time.Time, emergency bool) {
	s, ok := c.upSince[node]
	if !ok && !c.down[node] && !c.start.IsZero() {
		s, ok = c.start, true // up since the start, never reported yet
	}
	if ok && at.After(s) {
		c.hazard.Up(node, s, at)
	}
	c.down[node] = true
	delete(c.upSince, node)
	c.hazard.Observe(policy.Departure{Node: node, At: at, Emergency: emergency})
	c.co.Observe(policy.Departure{Node: node, At: at, Emergency: emergency})
	// Republish the profiles soon (at most every 10 min: on a large
	// campus departures come every few minutes and a refresh costs one
	// estimate per node).
	if at.Sub(c.profAt) >= 10*time.Minute {
		c.profAt = time.Time{}
	}
}

// ObserveReturn implements Observer.
func (c *TickController) ObserveReturn(node policy.NodeID, at time.Time) {
	delete(c.down, node)
	c.upSince[node] = at
	c.co.Return(node, at)
}

// ObserveBandwidth implements Observer.
func (c *TickController) ObserveBandwidth(link int, at time.Time, capacity, nonMigration float64) {
	if link >= len(c.links) {
		c.links = append(c.links, make([]*linkEstimate, link+1-len(c.links))...)
	}
	le := c.links[link]
	if le == nil {
		est, err := policy.NewBandwidthEstimator(policy.DefaultBandwidthConfig(capacity))
		if err != nil {
			c.err = err
			return
		}
		le = &linkEstimate{est: est}
		c.links[link] = le
	}
	period := 10 * time.Minute
	if le.obs && at.After(le.last) {
		period = at.Sub(le.last)
	}
	le.last, le.obs, le.cached = at, true, false
	le.est.ObserveEgress(at, int64(nonMigration*period.Seconds()), period)
}

// linkBW returns link li's estimated available bandwidth and its lower
// bound at now; a link never observed gets its capacity and half of it.
func (c *TickController) linkBW(w *World, li int, now time.Time) (avail, low float64) {
	if li >= len(c.links) || c.links[li] == nil {
		return w.links[li].capacity, w.links[li].capacity / 2
	}
	le := c.links[li]
	if !le.cached {
		le.avail, le.low = le.est.Estimate(now)
		le.cached = true
	}
	return le.avail, le.low
}

// Control implements Controller.
func (c *TickController) Control(w *World, now time.Time) Plan {
	if c.start.IsZero() {
		c.start = w.Start
	}
	if !c.coInit {
		c.coInit = true
		for _, n := range w.nodes {
			if !n.storage {
				c.co.Node(n.id, n.rec.Building, n.rec.Lab, n.rec.Pool)
			}
		}
	}
	// The co-departure table (rebuilt hourly, quadratic in the nodes) and
	// the hazard profiles (one estimate per node) are independent: build
	// them on two cores (only a rebuild is worth a goroutine).
	co := make(chan *policy.CoDeparture, 1)
	if c.co.Rebuilds(now) {
		go func() { co <- c.co.Estimate(now) }()
	} else {
		co <- c.co.Estimate(now)
	}
	refresh := c.profAt.IsZero() || now.Sub(c.profAt) >= time.Hour
	sample := !now.Before(c.nextSample)
	if refresh || sample {
		c.expose(w, now)
	}
	if refresh {
		c.profAt = now
		if c.profiles == nil {
			c.profiles = make([][2]policy.HazardProfile, len(w.nodes))
		}
		for i, n := range w.nodes {
			if n.storage {
				continue
			}
			est := c.hazard.Estimate(n.id, now)
			c.profiles[i] = [2]policy.HazardProfile{est.EmergencyUpper, est.Departure}
		}
	}
	if sample {
		c.sample(w, now)
		c.nextSample = now.Add(10 * time.Minute)
	}
	snap := w.Snapshot(c.Params, c.profiles, func(li int) (float64, float64) { return c.linkBW(w, li, now) })
	snap.CoDeparture = <-co
	d := tick(snap, now)
	if c.IntervalOverride != nil {
		byID := map[policy.JobID]policy.Job{}
		for _, j := range snap.Jobs {
			byID[j.ID] = j
		}
		for i := range d.Jobs {
			jd := &d.Jobs[i]
			j := byID[jd.Job]
			if jd.Interval == policy.RescueInterval {
				// An order to checkpoint now (P1.6's last chance, or a
				// job exposed beyond its interval), not an interval.
				continue
			}
			iv := c.IntervalOverride(j, now)
			// B7 keeps P1's constraints (P1.5): the network floor
			// C/(β·b) on the bandwidth the allocator gave the job, and
			// the loss-budget ceiling 2·Lmax; only the state-dependent
			// optimum is replaced.
			if jd.Bandwidth > 0 && c.Params.BetaP1 > 0 {
				floor := secs(float64(j.CheckpointBytes) / (c.Params.BetaP1 * jd.Bandwidth))
				if j.LossBudget > 0 {
					iv = min(iv, 2*j.LossBudget)
				}
				iv = max(iv, floor)
			}
			jd.Interval = iv
		}
	}
	return d
}

// expose reports every up node's exposure since it was last reported. The
// estimator only reads exposure when it estimates, so the controller
// reports it just before (and the node's own interval at its departure);
// splitting an up interval differently gives the same totals.
func (c *TickController) expose(w *World, now time.Time) {
	for _, n := range w.nodes {
		if n.storage || !n.up {
			continue
		}
		s, ok := c.upSince[n.id]
		if !ok {
			s = w.Start
		}
		if now.After(s) {
			c.hazard.Up(n.id, s, now)
			c.upSince[n.id] = now
		}
	}
}

// sample records the estimated hazard (for the plot) and a (λ, B) point
// for the adaptivity gap the software reports from its own trace.
func (c *TickController) sample(w *World, now time.Time) {
	g := c.hazard.Global(now)
	lam := g.Emergency.At(now)
	c.hazardSeries = append(c.hazardSeries, HazardPoint{T: now.Sub(w.Start).Seconds(), Estimated: lam * 3600})
	// Beff: mean available bandwidth over the sampled links, as a path
	// would see it (same-building and cross-building paths alike).
	sum, n := 0.0, 0
	for _, le := range c.links {
		if le != nil {
			a, _ := le.est.Estimate(now)
			sum += a
			n++
		}
	}
	if n > 0 && lam > 0 {
		c.gapSamples = append(c.gapSamples, policy.GapSample{Hazard: lam, Bandwidth: sum / float64(n), Weight: 1})
	}
}

// HazardSeries returns the hourly estimated global hazard.
func (c *TickController) HazardSeries() []HazardPoint { return c.hazardSeries }

// PredictedGap is Theorem 2's adaptivity gap over the run's own estimates.
func (c *TickController) PredictedGap() float64 { return policy.AdaptivityGap(c.gapSamples) }

// StaticInterval is Appendix C's static interval for a trace: Δ =
// sqrt(2·C̄/(λ̄·B̄)) with C̄ the median checkpoint size, λ̄ the trace's
// emergency departures per node-second and B̄ the mean of the same-building
// and cross-building path bandwidths (the paper's 0.530 Gbit/s is the mean
// of 820 and 240).
func StaticInterval(tr *trace.Trace) time.Duration {
	lam, same, cross := traceMeans(tr)
	return policy.OptimalInterval(medianCheckpoint(tr), lam, (same+cross)/2)
}

// traceMeans returns the emergency hazard per node-second and the mean
// available bandwidth of access and uplink links (bytes/s).
func traceMeans(tr *trace.Trace) (lam, same, cross float64) {
	em := 0
	for _, d := range tr.Departures {
		if d.Type == trace.Emergency {
			em++
		}
	}
	lam = float64(em) / (float64(len(tr.Nodes)) * tr.Header.DurationS)
	up := map[string]bool{}
	for _, l := range tr.Links {
		if l.B == "core" || l.A == "core" {
			up[l.ID] = true
		}
	}
	var ss, cs float64
	var sn, cn int
	for _, b := range tr.Bandwidth {
		if up[b.Link] {
			cs += b.AvailableMbs
			cn++
		} else {
			ss += b.AvailableMbs
			sn++
		}
	}
	same, cross = 820e6/8, 240e6/8
	if sn > 0 {
		same = ss / float64(sn) * 1e6 / 8
	}
	if cn > 0 {
		cross = cs / float64(cn) * 1e6 / 8
	}
	return lam, same, cross
}

func medianCheckpoint(tr *trace.Trace) int64 {
	if len(tr.Jobs) == 0 {
		return 3_200_000_000
	}
	v := make([]float64, len(tr.Jobs))
	for i, j := range tr.Jobs {
		v[i] = j.CheckpointMB
	}
	sortFloats(v)
	return int64(v[len(v)/2] * 1e6)
}

// TimeVaryingInterval is baseline B7's state-independent schedule (the π_ind
// policy of docs/design.md P1.8): one interval per hour of day for every job,
// Δ(h) = sqrt(2·C·E[1/B]/λ̄(h)) from the trace-wide hazard of that hour of
// day and the trace's mean 1/B, never reacting to the current bandwidth,
// the node or the estimate's drift. The controller then applies P1.5's
// box to it as P1 would (floor C/(β·b) on the allocated b, ceiling
// 2·Lmax): B7 keeps P1's constraints and allocator, only the optimum is
// state-independent.
func TimeVaryingInterval(tr *trace.Trace) func(policy.Job, time.Time) time.Duration {
	var events, exposure [24]float64
	for _, d := range tr.Departures {
		if d.Type == trace.Emergency {
			events[int(timeOfDay(tr.Header.Start.Add(secs(d.T))).Hours())]++
		}
	}
	days := tr.Header.DurationS / 86400
	for h := range exposure {
		exposure[h] = float64(len(tr.Nodes)) * days * 3600
	}
	_, same, cross := traceMeans(tr)
	invB := (1/same + 1/cross) / 2
	return func(j policy.Job, now time.Time) time.Duration {
		h := int(timeOfDay(now).Hours())
		lam := max(events[h]/exposure[h], 1e-9)
		return policy.OptimalInterval(j.CheckpointBytes, lam, 1/invB)
	}
}

func sortFloats(v []float64) { sort.Float64s(v) }

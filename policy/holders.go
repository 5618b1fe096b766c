package policy

import (
	"math"
	"slices"
	"strings"
)

// DefaultCopies is k, the holders a job's freshest committed checkpoint
// should have when Job.Copies is 0 (docs/design.md P2.7).
const DefaultCopies = 2

// ReplicaPrefix starts the ID of a holder-to-holder copy: a node holding
// the job's freshest committed version sends it to another holder (ID
// ReplicaPrefix+job, class pre-sync).
const ReplicaPrefix = "replica/"

// follows returns the chance that node i leaves within the co-departure
// window because a partner left within the last window (CoDeparture.
// Following), cached for the period.
func (w *world) follows(i int) float64 {
	if w.co == nil || len(w.co.Recent) == 0 || w.storage[i] {
		return 0
	}
	if w.follow == nil {
		w.follow = make([]float64, len(w.nodes))
		for k := range w.follow {
			w.follow[k] = -1
		}
	}
	if w.follow[i] < 0 {
		w.follow[i] = w.co.Following(w.nodes[i].ID)
	}
	return w.follow[i]
}

// together returns the chance that nodes a and b leave within the
// co-departure window of each other (0 for a storage node, or without an
// estimate).
func (w *world) together(a, b int) float64 {
	if w.co == nil || w.co.t == nil || a == b || w.storage[a] || w.storage[b] {
		return 0
	}
	if w.coIdx == nil {
		w.coIdx = make([]int, len(w.nodes))
		for k, nd := range w.nodes {
			w.coIdx[k] = w.co.indexOf(nd.ID)
		}
	}
	return w.co.pairAt(w.coIdx[a], w.coIdx[b])
}

// survive returns S_i(span): the chance node i does not leave within span
// seconds from now by its departure hazard (1 for a storage node).
func (w *world) survive(i int, span float64) float64 {
	if w.storage[i] || span <= 0 {
		return 1
	}
	c := w.survivalOf(i)
	if len(c.rates) == 0 {
		return 1
	}
	return math.Exp(-c.integral(planSpan(len(c.rates), w.nowSec, span)))
}

// restoreWindow returns W, the seconds a restore of job j from holder d to
// a node in host h's building takes (docs/design.md P2.7): C over the building
// pair's representative bandwidth (P2.5's T̄mig figure), plus Tr.
func (w *world) restoreWindow(j *Job, d, h int) float64 {
	c := float64(j.CheckpointBytes)
	if c <= 0 {
		c = float64(DefaultCheckpointBytes)
	}
	bw := w.pairBW[w.bldg[d]][w.bldg[h]]
	if bw <= 0 {
		return MaxInterval.Seconds()
	}
	return c/bw + j.RestartTime.Seconds()
}

// leaveGiven returns the chance that node d leaves within its restore
// window for job j given that the nodes in given leave now (the host
// first): the largest co-departure of d with any of them or with a
// partner that just left, else independently by d's own hazard,
//
//	q = 1 − (1 − max(p_xd, following_d))·S_d(W_d).
func (w *world) leaveGiven(j *Job, d int, given []int) float64 {
	if w.storage[d] {
		return 0
	}
	p := w.coLeave(d, given)
	h := d
	if len(given) > 0 {
		h = given[0]
	}
	return 1 - (1-p)*w.survive(d, w.restoreWindow(j, d, h))
}

// restoreScan is what a scan of copy targets computes once per building
// of the candidates: the restore window to the host's building, its plan
// over the survival profiles, and whether the window lies inside the
// profiles' current bucket (for profiles of n buckets).
type restoreScan struct {
	ready  bool
	span   float64
	plan   spanPlan
	n, k   int
	inside bool
}

// leaveGivenBelow returns leaveGiven's q for node d when it is at most
// limit, the same figure (what depends only on d's building kept in *rs
// from one call to the next); ok is false when it is above. The bound
// q ≥ 1 − (1 − p)/(1 + I) (e^I ≥ 1 + I, I the hazard's integral over the
// restore window) rules most nodes out without the exponential, and where
// the window lies inside the profile's current bucket, of rate r, I = r·W
// rules them out without the node's cumulative profile either.
func (w *world) leaveGivenBelow(j *Job, d int, given []int, rs *restoreScan, limit float64) (float64, bool) {
	if w.storage[d] {
		return 0, 0 <= limit
	}
	p := w.coLeave(d, given)
	if !rs.ready {
		h := d
		if len(given) > 0 {
			h = given[0]
		}
		rs.span, rs.ready = w.restoreWindow(j, d, h), true
	}
	span := rs.span
	if boundAbove(p, limit) {
		return 0, false
	}
	if rates := w.nodes[d].Departure.Rates; len(rates) > 0 && span > 0 {
		if rs.n != len(rates) {
			width := secondsPerDay / float64(len(rates))
			rs.n, rs.k = len(rates), min(int(w.nowSec/width), len(rates)-1)
			// A millisecond from either edge: the exact integral's bucket is k.
			rs.inside = w.nowSec >= float64(rs.k)*width+1e-3 && w.nowSec+span <= float64(rs.k+1)*width-1e-3
		}
		if rs.inside {
			in := max(rates[rs.k], 0) * span
			if boundAbove(1-(1-p)/(1+in), limit) {
				return 0, false
			}
		}
	}
	c := w.survivalOf(d)
	if span <= 0 || len(c.rates) == 0 {
		q := 1 - (1 - p) // S = 1, as leaveGiven rounds it
		return q, q <= limit
	}
	if rs.plan.n != len(c.rates) || rs.plan.len != span || rs.plan.a != w.nowSec {
		rs.plan = planSpan(len(c.rates), w.nowSec, span)
	}
	in := c.integral(rs.plan)
	if boundAbove(1-(1-p)/(1+in), limit) {
		return 0, false
	}
	q := 1 - (1-p)*math.Exp(-in)
	return q, q <= limit
}

// boundAbove reports whether a lower bound on q puts q above limit, with
// a slack (1e-9 relative, 1e-15 absolute) that covers the bound's rounding
// against the exact figure.
func boundAbove(bound, limit float64) bool { return bound*(1-1e-9) > limit+1e-15 }

// coLeave is p in leaveGiven: the largest co-departure of node d with the
// nodes in given or with a partner that just left (0 for a storage node).
func (w *world) coLeave(d int, given []int) float64 {
	if w.storage[d] {
		return 0
	}
	p := w.follows(d)
	for _, x := range given {
		p = max(p, w.together(x, d))
	}
	return p
}

// jointRisk is P2.7's figure for holders hs of job j on host h: the
// chance that they all leave within their restore windows given that the
// host leaves, each conditioned on the host and the holders before it
// (∏ (1 − S_d(W)) when departures are independent). 1 with no holder.
func (w *world) jointRisk(j *Job, h int, hs []int) float64 {
	risk := 1.0
	given := append(make([]int, 0, len(hs)+1), h)
	for _, d := range hs {
		risk *= w.leaveGiven(j, d, given)
		given = append(given, d)
	}
	return risk
}

// atRisk is the work (seconds) job j loses if its host and every holder of
// its freshest version leave: Job.AtRisk, else Job.Exposure.
func atRisk(j *Job) float64 {
	if j.AtRisk > 0 {
		return j.AtRisk.Seconds()
	}
	return j.Exposure.Seconds()
}

// durable reports whether P2 weighs holders' durability this period: with
// P2 on and a co-departure estimate or a storage node to weigh.
func (w *world) durable() bool {
	return w.p.Switches.P2 && (w.co != nil || len(w.storageIdx) > 0)
}

// holderSet returns the job's live holders of its freshest committed
// version other than the host: the ones that stay (kept), and all of them
// with those under a scheduled reclaim whose deadline is ahead (sources of
// a copy).
func (w *world) holderSet(j *Job, host int) (kept, sources []int) {
	for _, rep := range sortedReplicas(j.Replicas) {
		ri, ok := w.nodeIndex(rep)
		if !ok || ri == host {
			continue
		}
		if w.leaving[ri] {
			if r, ok := w.reclaims[rep]; !ok || r.Emergency() || !r.Deadline.After(w.now) {
				continue
			}
		} else {
			kept = append(kept, ri)
		}
		sources = append(sources, ri)
	}
	return kept, sources
}

// replica is one holder-to-holder copy decided in P1.
type replica struct {
	id       string
	job      *Job
	from, to int
	links    []int
	rate     float64
}

// replicaFor decides the second (k-th) copy of job j's freshest version
// (docs/design.md P2.7), made holder-to-holder so the host's uplink carries each
// version once. k is Job.Copies (`run --replicas K`), DefaultCopies when
// 0; with fewer than k live holders that stay the copy is made whenever a
// source and a target that can take it exist. The target is a storage
// node where one is reachable and none holds the version yet (it never
// leaves; docs/design.md P2.7 prefers it), else the peer that, added to
// the holders, leaves the job least likely to lose every copy with its
// host (so another failure domain than the host's and the holders'
// wherever there is one), near-ties (within replicaRiskTie) by the
// copy's transfer time. The copy is a pre-sync flow that P1 paces inside
// its budget and P3 admits. A copy under way (a carried flow) keeps going
// while its ends stay. ok is false when no copy is made.
func (w *world) replicaFor(j *Job, host int, carried *Flow) (replica, float64, bool) {
	kept, sources := w.holderSet(j, host)
	if carried != nil {
		from, okF := w.nodeIndex(carried.From)
		to, okT := w.nodeIndex(carried.To)
		if okF && okT && slices.Contains(sources, from) && !w.leaving[to] && to != host && !slices.Contains(kept, to) {
			return replica{id: carried.ID, job: j, from: from, to: to, links: w.pathLinks(from, to)}, w.jointRisk(j, host, kept), true
		}
	}
	k := j.Copies
	if k <= 0 {
		k = DefaultCopies
	}
	if len(kept) == 0 || len(kept) >= k || j.CheckpointBytes <= 0 {
		return replica{}, 0, false
	}
	before := w.jointRisk(j, host, kept)
	given := append([]int{host}, kept...)
	durable := false
	for _, d := range kept {
		durable = durable || w.storage[d]
	}
	candidates := w.allNodes
	if !durable && len(w.storageIdx) > 0 {
		// A storage node never leaves: where one is reachable and no
		// holder is one, the copy goes there whatever the estimate says
		// (the pairwise figures miss a pool losing a third of its nodes
		// in minutes).
		candidates = w.storageIdx
	}
	best, found := safestReplica(w.replicaOptions(j, candidates, sources, given))
	if !found {
		return replica{}, 0, false
	}
	return replica{id: ReplicaPrefix + string(j.ID), job: j, from: best.from, to: best.to, links: w.pathLinks(best.from, best.to)}, before, true
}

// replicaRiskTie is how close (relative) two targets' chances to leave
// with the host and the holders count as a near-tie, which the copy's
// transfer time decides.
const replicaRiskTie = 0.1

// replicaOption is one possible target of a holder-to-holder copy: the
// target and source node indexes, q the target's chance to leave with
// the host and the holders (leaveGiven) and the copy's transfer time.
type replicaOption struct {
	to, from int
	q, secs  float64
}

// replicaOptions returns the targets among candidates that safestReplica
// would weigh: each with q (leaveGiven) and the transfer time from the
// source with the fastest path to it, leaving out those that cannot be the
// choice. A target whose q is past the near-tie of the smallest q found
// so far cannot be within it at the end, so its path is not looked at;
// the restore window, with its plan over the survival profiles, is one
// per building. The choice is the one safestReplica makes over every
// candidate (TestReplicaOptionsMatchFullScan).
func (w *world) replicaOptions(j *Job, candidates, sources, given []int) []replicaOption {
	c := float64(j.CheckpointBytes)
	scans := make([]restoreScan, len(w.pairBW))
	qMin := math.Inf(1)
	var opts []replicaOption
	for _, i := range candidates {
		if w.leaving[i] || w.ending[i] || w.vertex[i] < 0 || slices.Contains(given, i) || slices.Contains(sources, i) {
			continue
		}
		q, ok := w.leaveGivenBelow(j, i, given, &scans[w.bldg[i]], qMin*(1+replicaRiskTie))
		if !ok {
			continue
		}
		// The copy comes from the source with the fastest path to i.
		src, rate := -1, 0.0
		for _, s := range sources {
			if est, _, ok := w.pathRate(s, i); ok && est > rate {
				src, rate = s, est
			}
		}
		if src < 0 || rate <= 0 {
			continue
		}
		qMin = min(qMin, q)
		opts = append(opts, replicaOption{to: i, from: src, q: q, secs: c / rate})
	}
	return opts
}

// safestReplica returns the option with the smallest q, near-ties
// (within replicaRiskTie of the smallest) by the shortest transfer time,
// then by node index. ok is false when there is none.
func safestReplica(opts []replicaOption) (replicaOption, bool) {
	if len(opts) == 0 {
		return replicaOption{}, false
	}
	qMin := opts[0].q
	for _, o := range opts[1:] {
		qMin = min(qMin, o.q)
	}
	best := -1
	for k, o := range opts {
		if o.q > qMin*(1+replicaRiskTie) {
			continue
		}
		if best < 0 || o.secs < opts[best].secs || o.secs == opts[best].secs && o.to < opts[best].to {
			best = k
		}
	}
	return opts[best], true
}

// carriedReplicas returns the holder-to-holder copies under way, by job.
func carriedReplicas(flows []Flow) map[JobID]*Flow {
	var out map[JobID]*Flow
	for i := range flows {
		if f := &flows[i]; strings.HasPrefix(f.ID, ReplicaPrefix) && f.Remaining > 0 {
			if out == nil {
				out = map[JobID]*Flow{}
			}
			out[f.Job] = f
		}
	}
	return out
}

// holdersOf lists the nodes that should keep job j's freshest version:
// the live holders that stay, most durable first (the smallest chance to
// leave with the host), then the copy's target.
func (w *world) holdersOf(j *Job, host int, kept []int, copyTo int) []NodeID {
	if len(kept) == 0 && copyTo < 0 {
		return nil
	}
	given := []int{host}
	order := slices.Clone(kept)
	q := make(map[int]float64, len(order))
	for _, d := range order {
		q[d] = w.leaveGiven(j, d, given)
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case q[a] < q[b]:
			return -1
		case q[a] > q[b]:
			return 1
		}
		return 0
	})
	out := make([]NodeID, 0, len(order)+1)
	for _, d := range order {
		out = append(out, w.nodes[d].ID)
	}
	if copyTo >= 0 {
		out = append(out, w.nodes[copyTo].ID)
	}
	return out
}

package policy

import (
	"hash/fnv"
	"math"
	"slices"
	"time"
)

// Request is one destination choice for P2 (docs/design.md P2.3–P2.6).
type Request struct {
	Job Job
	// Source is the node the bytes come from: the host for a hand-off or a
	// standby, a replica holder for a recovery; empty to place a new job
	// (no transfer term, no locality filter).
	Source NodeID
	// Deadline is the reclaim deadline; zero for no deadline (standby,
	// recovery, placement).
	Deadline time.Time
	// Recovery lets the source host the job itself (it holds the replica,
	// so nothing moves).
	Recovery bool
	Now      time.Time
}

// SelectDestination ranks every node of the snapshot for one request
// (docs/design.md P2): candidates that pass the filters of P2.3 (not the source, not
// leaving, VRAM, CUDA capability, free GPUs, load ≤ θ, a path, and for a
// deadline C/bw⁻ + Tr ≤ time left) and the locality filter of P2.4
// (same-building candidates only when there are at least KMin) come first,
// by score
//
//	σ_d = C_d/bw(s,d) + Tr + α·(1 − S_d(Trem))·T̄mig(d)
//
// (seconds, lower is better), then the rejected nodes with their reason.
// C_d is what d still lacks: the job's checkpoint minus StandbyHas at its
// standby. bw uses the migration share of each link (capacity minus the
// reservation, at most the measured available rate) and the deadline filter
// its lower bound; both are divided by the ceiling factor, as admission
// counts flows at their ceiling. The first accepted candidate is the
// choice; with P2 switched off it is a seeded random feasible one, moved to
// the front. The list is bounded by Params.MaxCandidates.
func SelectDestination(s Snapshot, req Request) []Candidate {
	reclaimed := make(map[NodeID]bool, len(s.Reclaims))
	for _, r := range s.Reclaims {
		reclaimed[r.Node] = true // a node with a pending reclaim is leaving
	}
	w := newWorld(s, req.Now, reclaimed)
	src := -1
	if req.Source != "" {
		i, ok := w.nodeIndex(req.Source)
		if !ok {
			return nil
		}
		src = i
	}
	res := w.scan(scanRequest{job: &req.Job, src: src, deadline: req.Deadline, recovery: req.Recovery, list: true})
	return res.list
}

// scanRequest is one P2 evaluation inside a period.
type scanRequest struct {
	job      *Job
	src      int       // node index of the source, -1 for none
	deadline time.Time // zero: none
	recovery bool      // the source holds a replica and may host
	list     bool      // build the Candidates list
	// sole: the source's copy is the job's only live one, so it may not
	// host (P2.3's d ≠ s): a job restarted on it would run with no copy
	// off its node until its next checkpoint commits.
	sole bool
	// avoid is 1 + the index of a node that may not be chosen (0: none).
	avoid int
	// holdOnly: the node only has to keep a copy (a standby of last
	// resort), not run the job: GPUs, VRAM, capability and load do not
	// matter.
	holdOnly bool
	// holders: a standby choice that weighs durability (docs/design.md P2.7):
	// storage nodes are candidates too (they keep the copy; a recovery
	// restores from them), past the locality filter, and every
	// candidate's score adds α·q·AtRisk, q its chance to leave within its
	// restore window given that the host leaves.
	holders bool
	// srcRisk is added to every candidate's score: a recovery's cost of a
	// source that may leave before its restore lands.
	srcRisk float64
}

// scanResult is P2's outcome: best is a node index (-1 when no candidate
// passes), cand its scored entry.
type scanResult struct {
	best int
	cand Candidate
	list []Candidate
}

// lacking returns the bytes candidate i still needs for the request: the
// checkpoint (less what a standby has) and the bundle where i lacks it.
func (w *world) lacking(r scanRequest, i int) int64 {
	c := r.job.CheckpointBytes
	if r.recovery {
		if i == r.src {
			return 0
		}
		return c + bundleLack(r.job, w.nodes[i].ID)
	}
	if r.src < 0 {
		return 0
	}
	if r.job.Standby != "" && w.nodes[i].ID == r.job.Standby {
		return max(0, c-r.job.StandbyHas) + bundleLack(r.job, w.nodes[i].ID)
	}
	return c + bundleLack(r.job, w.nodes[i].ID)
}

// bundleLack is the bundle bytes node id lacks for job j.
func bundleLack(j *Job, id NodeID) int64 {
	if j.BundleBytes <= 0 || slices.Contains(j.BundleHolders, id) {
		return 0
	}
	return j.BundleBytes
}

// staticReject applies the filters of P2.3 that do not depend on the
// transfer (and P2.6's standby/placement uses).
func (w *world) staticReject(r scanRequest, i int) RejectReason {
	nd := &w.facts[i]
	j := r.job
	switch {
	case i == r.src && (!r.recovery || r.sole), i == r.avoid-1:
		return RejectSource
	case w.leaving[i] && w.nodes[i].Ineligible != "" && !w.nodes[i].Leaving:
		return RejectIneligible
	case w.leaving[i]:
		return RejectLeaving
	case w.ending[i]:
		return RejectLendingEnds
	case w.storage[i] && !r.holdOnly && !r.holders:
		return RejectStorage
	case r.holdOnly || w.storage[i]:
		if w.vertex[i] < 0 {
			return RejectNoPath
		}
		return ""
	case len(j.Lacking) > 0 && slices.Contains(j.Lacking, w.nodes[i].ID):
		return RejectMissingPath
	case nd.vram < j.VRAM:
		return RejectVRAM
	case nd.capability < j.Capability:
		return RejectCapability
	case w.freeGPUs[i] < j.GPUs:
		return RejectGPUs
	case nd.load > w.p.MaxLoad:
		return RejectLoad
	case w.vertex[i] < 0:
		return RejectNoPath
	}
	return ""
}

// remigration returns T̄mig for a candidate in building b: the mean of
// C/bw(b, b') + Tr over the other candidates, per building pair (docs/design.md
// P2.5). Buildings with no bandwidth between them are left out of the
// mean; a candidate with no other reachable candidate uses its own
// building's figure, as if a peer were there. count holds the candidates
// per building. Each is O(buildings); scan asks only for the buildings
// of the candidates it scores (usually one, thanks to locality).
func (w *world) remigration(r scanRequest, count []int, b int) float64 {
	nb := len(w.bldgs)
	c := float64(r.job.CheckpointBytes)
	tr := r.job.RestartTime.Seconds()
	var sum, n float64
	row := w.pairBW[b]
	for b2 := range nb {
		k := count[b2]
		if b2 == b {
			k-- // the candidate itself
		}
		bw := row[b2]
		if k <= 0 || bw <= 0 {
			continue
		}
		sum += float64(k) * (c/bw + tr)
		n += float64(k)
	}
	switch {
	case n > 0:
		return sum / n
	case row[b] > 0:
		return c/row[b] + tr
	default:
		return tr
	}
}

// scan evaluates the nodes for a request and returns the choice. With
// locality (P2.4) satisfied by the source's own building, only that
// building's nodes are evaluated and scored: the others are rejected as
// "other building" (or by a static filter, which the Candidates list
// states), and T̄mig needs only their per-building counts, which
// candidateCounts keeps across scans.
func (w *world) scan(r scanRequest) scanResult {
	n := len(w.nodes)
	if len(w.scratchReasons) < n {
		w.scratchReasons = make([]RejectReason, n)
		w.scratchCands = make([]Candidate, n)
		w.scratchEval = make([]bool, n)
	}
	if len(w.scratchTmig) < len(w.bldgs) {
		w.scratchCount = make([]int, len(w.bldgs))
		w.scratchTmig = make([]float64, len(w.bldgs))
	}
	reasons, cands, evaluated := w.scratchReasons[:n], w.scratchCands[:n], w.scratchEval[:n]
	// Statically feasible candidates per building (for T̄mig): counted
	// on the way when every node is visited, from candidateCounts' period
	// cache when only the home building is.
	count := w.scratchCount[:len(w.bldgs)]
	clear(count)
	tmig := w.scratchTmig[:len(w.bldgs)] // T̄mig per building, NaN until needed
	for b := range tmig {
		tmig[b] = math.NaN()
	}
	j := r.job
	tr := j.RestartTime
	var left time.Duration
	if !r.deadline.IsZero() {
		left = r.deadline.Sub(w.now)
	}
	// transfer applies the path, bandwidth and deadline filters to one
	// candidate and records its transfer figures.
	transfer := func(i int) {
		evaluated[i] = true
		bytes := w.lacking(r, i)
		est, low := math.Inf(1), math.Inf(1)
		if r.src >= 0 {
			var ok bool
			if est, low, ok = w.pathRate(r.src, i); !ok {
				reasons[i] = RejectNoPath
				cands[i] = Candidate{Node: w.nodes[i].ID}
				return
			}
		}
		if j.WriteCap > 0 {
			est, low = min(est, j.WriteCap), min(low, j.WriteCap)
		}
		secs := 0.0
		if bytes > 0 {
			secs = float64(bytes) / est
		}
		cands[i] = Candidate{Node: w.nodes[i].ID, Transfer: secondsToDuration(secs), Score: secs, Bottleneck: est}
		switch {
		case bytes > 0 && est <= 0:
			reasons[i] = RejectBandwidth
		case !r.deadline.IsZero() && !FinalCheckpointFeasible(bytes, low, tr, left):
			reasons[i] = RejectDeadline
		}
	}
	// Locality (P2.4): same-building candidates are checked first; with at
	// least KMin of them feasible the other buildings are set aside without
	// computing their paths (that is what keeps a scan cheap at thousands
	// of nodes). Not for a new job's placement, nor with P2 off.
	localFirst := r.src >= 0 && w.p.KMin > 0 && w.p.Switches.P2
	scored := w.allNodes // the nodes that may have a score
	home := -1
	if localFirst {
		local := 0
		home = w.bldg[r.src]
		members := w.members(home)
		for _, i := range members {
			evaluated[i] = false
			if reasons[i] = w.staticReject(r, i); reasons[i] == "" {
				if !w.storage[i] {
					count[home]++
				}
				if transfer(i); reasons[i] == "" {
					local++
				}
			}
		}
		if local >= w.p.KMin && (!r.list || w.p.MaxCandidates > 0) {
			scored = members // the others: static reason or locality
			count = w.candidateCounts(r)
		} else {
			for i := range n {
				if w.bldg[i] == home {
					continue
				}
				evaluated[i] = false
				if reasons[i] = w.staticReject(r, i); reasons[i] != "" {
					continue
				}
				if !w.storage[i] {
					count[w.bldg[i]]++
				}
				if local >= w.p.KMin && !w.storage[i] {
					reasons[i] = RejectLocality
				} else {
					transfer(i)
				}
			}
			home = -1
		}
	} else {
		for i := range n {
			evaluated[i] = false
			if reasons[i] = w.staticReject(r, i); reasons[i] == "" {
				if !w.storage[i] {
					count[w.bldg[i]]++
				}
				transfer(i)
			}
		}
	}
	if r.holders && home >= 0 && len(w.storageIdx) > 0 {
		// Storage nodes keep copies wherever they are: past the
		// locality filter.
		scored = slices.Clone(scored)
		for _, i := range w.storageIdx {
			if w.bldg[i] == home {
				continue
			}
			scored = append(scored, i)
			evaluated[i] = false
			if reasons[i] = w.staticReject(r, i); reasons[i] == "" {
				transfer(i)
			}
		}
	}
	remaining := j.Remaining.Seconds()
	var plan spanPlan // one plan per bucket count, usually one for all nodes
	memo := w.survivalMemo(remaining)
	for _, i := range scored {
		if reasons[i] != "" && reasons[i] != RejectDeadline {
			continue
		}
		surv := 1.0
		switch {
		case remaining <= 0, w.storage[i]:
		case memo != nil && memo[i] >= 0:
			surv = memo[i]
		default:
			var c cumulative
			if memo != nil {
				// Used once per node per remaining time: no need to keep it.
				if k := len(w.nodes[i].Departure.Rates) + 1; cap(w.cumScratch) < k {
					w.cumScratch = make([]float64, 0, k)
				}
				c, w.cumScratch = cumulativeInto(w.nodes[i].Departure, w.cumScratch[:0])
			} else {
				c = w.survivalOf(i)
			}
			if len(c.rates) != plan.n || plan.len == 0 {
				plan = planSpan(len(c.rates), w.nowSec, remaining)
			}
			surv = math.Exp(-c.integral(plan))
			if memo != nil {
				memo[i] = surv
			}
		}
		remig := tmig[w.bldg[i]]
		if math.IsNaN(remig) {
			remig = w.remigration(r, count, w.bldg[i])
			tmig[w.bldg[i]] = remig
		}
		c := &cands[i]
		c.Survival, c.Remigration = surv, secondsToDuration(remig)
		c.Score += tr.Seconds() + w.p.Alpha*(1-surv)*remig + r.srcRisk
		if r.holders {
			if w.storage[i] {
				c.Score += remig // every recovery restores from it
			}
			c.Score += w.p.Alpha * w.leaveGiven(j, i, []int{r.src}) * atRisk(j)
		}
	}
	res := scanResult{best: -1}
	if w.p.Switches.P2 {
		for _, i := range scored {
			if reasons[i] == "" && (res.best < 0 || cands[i].Score < cands[res.best].Score) {
				res.best = i
			}
		}
	} else {
		res.best = w.randomFeasible(r, reasons)
	}
	if res.best >= 0 {
		res.cand = cands[res.best]
	}
	if r.list {
		res.list = w.candidateList(r, home, cands, reasons, evaluated, scored, res.best)
	}
	return res
}

// countCache is, for one job requirement, how many nodes per building
// pass every static filter of P2.3 but "is the source".
type countCache struct {
	vram       int64
	capability float64
	gpus       int
	count      []int
}

// countCaches bounds how many job requirements a period keeps counts for.
const countCaches = 8

// passesStatic reports whether node i passes P2.3's static filters (all of
// staticReject's but the source one) for a job's requirements.
func (w *world) passesStatic(i int, vram int64, capability float64, gpus int) bool {
	nd := &w.facts[i]
	return !w.leaving[i] && !w.ending[i] && nd.vram >= vram && nd.capability >= capability &&
		w.freeGPUs[i] >= gpus && nd.load <= w.p.MaxLoad && w.vertex[i] >= 0
}

// candidateCounts returns, per building, how many nodes pass P2.3's static
// filters for the request (staticReject == ""), in scratch space. Counts
// per job requirement are kept for the period (jobs mostly share a few)
// and follow takeGPUs, so a scan need not visit every node for them.
func (w *world) candidateCounts(r scanRequest) []int {
	j := r.job
	var base []int
	for k := range w.counts {
		if c := &w.counts[k]; c.vram == j.VRAM && c.capability == j.Capability && c.gpus == j.GPUs {
			base = c.count
			break
		}
	}
	count := w.scratchCount[:len(w.bldgs)]
	if base == nil {
		clear(count)
		for i := range w.nodes {
			if w.passesStatic(i, j.VRAM, j.Capability, j.GPUs) {
				count[w.bldg[i]]++
			}
		}
		if len(w.counts) < countCaches {
			w.counts = append(w.counts, countCache{vram: j.VRAM, capability: j.Capability, gpus: j.GPUs, count: slices.Clone(count)})
		}
	} else {
		copy(count, base)
	}
	if r.src >= 0 && !r.recovery && w.passesStatic(r.src, j.VRAM, j.Capability, j.GPUs) {
		count[w.bldg[r.src]]--
	}
	return count
}

// takeGPUs gives gpus of node i's free GPUs to a job, keeping the counts
// of candidateCounts right.
func (w *world) takeGPUs(i, gpus int) {
	var before [countCaches]bool
	for k, c := range w.counts {
		before[k] = w.passesStatic(i, c.vram, c.capability, c.gpus)
	}
	w.freeGPUs[i] -= gpus
	for k, c := range w.counts {
		switch after := w.passesStatic(i, c.vram, c.capability, c.gpus); {
		case before[k] && !after:
			c.count[w.bldg[i]]--
		case !before[k] && after:
			c.count[w.bldg[i]]++
		}
	}
}

// survivalMemos bounds how many distinct remaining times a period keeps
// survivals for (each costs one float per node).
const survivalMemos = 4

// survivalMemo returns the per-node survivals S_d(remaining) computed so
// far this period (negative: not yet), or nil when the memo is full: jobs
// that share a remaining time (a batch submitted together, a default)
// then pay one exp per node per period instead of one per scan.
func (w *world) survivalMemo(remaining float64) []float64 {
	if remaining <= 0 {
		return nil
	}
	for k, r := range w.memoRemaining {
		if r == remaining {
			return w.memoSurvival[k]
		}
	}
	if len(w.memoRemaining) == survivalMemos {
		return nil
	}
	m := make([]float64, len(w.nodes))
	for i := range m {
		m[i] = -1
	}
	w.memoRemaining = append(w.memoRemaining, remaining)
	w.memoSurvival = append(w.memoSurvival, m)
	return m
}

// randomFeasible is P2 switched off: a seeded random choice among the
// nodes that pass P2.3's filters (deadline included, locality ignored).
func (w *world) randomFeasible(r scanRequest, reasons []RejectReason) int {
	var feasible []int
	for i, why := range reasons {
		if why == "" || why == RejectLocality {
			feasible = append(feasible, i)
		}
	}
	if len(feasible) == 0 {
		return -1
	}
	h := fnv.New64a()
	var seed [8]byte
	for k := range seed {
		seed[k] = byte(w.p.Seed >> (8 * k))
	}
	h.Write(seed[:])
	h.Write([]byte(r.job.ID))
	return feasible[h.Sum64()%uint64(len(feasible))]
}

// candidateList returns the chosen node first, then the other accepted
// candidates by score (ties by ID), then rejected nodes by ID with their
// reason, each part bounded by MaxCandidates. Accepted candidates are
// among scored (ascending). With home ≥ 0 only that building's nodes were
// visited (reasons, evaluated): the others' reasons are worked out here,
// for as many as the list shows.
func (w *world) candidateList(r scanRequest, home int, cands []Candidate, reasons []RejectReason, evaluated []bool, scored []int, best int) []Candidate {
	visited := func(i int) bool { return home < 0 || w.bldg[i] == home || r.holders && w.storage[i] }
	reasonOf := func(i int) RejectReason {
		if visited(i) {
			return reasons[i]
		}
		if why := w.staticReject(r, i); why != "" {
			return why
		}
		return RejectLocality
	}
	limit := w.p.MaxCandidates
	var top []int // accepted, kept sorted, at most limit
	var rejected []Candidate
	if limit > 0 {
		top = w.scratchTop[:0]
		rejected = make([]Candidate, 0, limit)
	}
	better := func(a, b int) bool {
		if cands[a].Score != cands[b].Score {
			return cands[a].Score < cands[b].Score
		}
		return a < b
	}
	for _, i := range scored {
		if i == best || reasonOf(i) != "" {
			continue
		}
		if limit > 0 && len(top) >= limit && !better(i, top[len(top)-1]) {
			continue
		}
		pos, _ := slices.BinarySearchFunc(top, i, func(a, b int) int {
			if better(a, b) {
				return -1
			}
			if better(b, a) {
				return 1
			}
			return 0
		})
		top = slices.Insert(top, pos, i)
		if limit > 0 && len(top) > limit {
			top = top[:limit]
		}
	}
	if limit > 0 {
		w.scratchTop = top[:0]
	}
	for i := range w.nodes {
		if limit > 0 && len(rejected) >= limit {
			break
		}
		if why := reasonOf(i); why != "" {
			c := Candidate{Node: w.nodes[i].ID}
			if visited(i) && evaluated[i] {
				c = cands[i]
			}
			c.Rejected = why
			rejected = append(rejected, c)
		}
	}
	out := make([]Candidate, 0, len(top)+len(rejected)+1)
	if best >= 0 {
		out = append(out, cands[best])
	}
	for _, i := range top {
		if limit > 0 && len(out) >= limit {
			break
		}
		out = append(out, cands[i])
	}
	return append(out, rejected...)
}

package policy

import "math"

// checkpoints is P1 for the running jobs (docs/design.md P1.3–P1.5, P1.9, P2.6,
// P2.7): it keeps or chooses each job's standby, decides the
// holder-to-holder copies of jobs whose freshest version has fewer than k
// holders (replicaFor), splits what is left of every link among the jobs'
// checkpoint flows host → standby and those copies by the same cube-root
// rule (a copy weighs as a checkpoint needed at the host's hazard times
// the chance that every holder leaves with it), and sets each interval.
// hosts are the jobs' host node indexes. The result is one JobDecision,
// one path and one standby node index (-1 for none) per job, in order,
// the copies with their rates, and the checkpoint budget: the room that
// was left, before P1, on the distinct first links of the jobs' paths
// (their hosts' uplinks).
func (w *world) checkpoints(running []*Job, hosts []int, flowsIn []Flow) ([]JobDecision, [][]int, []int, []replica, float64) {
	out := make([]JobDecision, len(running))
	paths := make([][]int, len(running))
	standbys := make([]int, len(running))
	flows := make([]fillFlow, len(running), len(running)+4)
	var copies []replica
	var carried map[JobID]*Flow
	if w.durable() {
		carried = carriedReplicas(flowsIn)
	}
	room := make([]float64, len(w.est))
	for l, e := range w.est {
		room[l] = e / w.cf
	}
	seen := make([]bool, len(w.est)) // first links already in the budget
	var budget float64
	for i, j := range running {
		host := hosts[i]
		lambda := w.hazardNow(host)
		out[i] = JobDecision{Job: j.ID, Hazard: lambda}
		sb := w.standby(j, host)
		standbys[i] = sb
		if sb < 0 {
			continue
		}
		out[i].Standby = w.nodes[sb].ID
		links := w.pathLinks(host, sb)
		paths[i] = links
		if len(links) == 0 {
			continue
		}
		if !seen[links[0]] {
			seen[links[0]] = true
			budget += room[links[0]]
		}
		c := j.CheckpointBytes
		if c <= 0 {
			c = DefaultCheckpointBytes
		}
		weight := 1.0
		if w.p.Switches.P1 {
			weight = math.Cbrt(lambda * float64(c))
		}
		capRate := math.Inf(1)
		if j.WriteCap > 0 {
			capRate = j.WriteCap
		}
		flows[i] = fillFlow{weight: weight, cap: capRate, links: links}
	}
	for i, j := range running {
		if !w.durable() {
			break
		}
		kept, _ := w.holderSet(j, hosts[i])
		r, risk, ok := w.replicaFor(j, hosts[i], carried[j.ID])
		copyTo := -1
		out[i].Risk = w.jointRisk(j, hosts[i], kept)
		if ok && len(r.links) > 0 {
			copyTo = r.to
			copies = append(copies, r)
			weight := 1.0
			if w.p.Switches.P1 {
				weight = math.Cbrt(out[i].Hazard * risk * float64(j.CheckpointBytes))
			}
			flows = append(flows, fillFlow{weight: weight, cap: math.Inf(1), links: r.links})
		}
		out[i].Holders = w.holdersOf(j, hosts[i], kept, copyTo)
	}
	rates := progressiveFill(flows, room)
	for l := range w.est {
		used := w.est[l] - room[l]*w.cf
		w.est[l] = max(0, room[l]*w.cf)
		w.low[l] = max(0, w.low[l]-used)
	}
	for k := range copies {
		copies[k].rate = rates[len(running)+k]
	}
	for i, j := range running {
		jd := &out[i]
		jd.Bandwidth = rates[i]
		c := j.CheckpointBytes
		if c <= 0 {
			c = DefaultCheckpointBytes
		}
		if w.p.Switches.P1 {
			box := IntervalBox(c, jd.Hazard, jd.Bandwidth, w.p.BetaP1, j.LossBudget)
			jd.Interval, jd.LossBudgetInfeasible, jd.Bound = box.Interval, box.Infeasible, box.Bound
			jd.Floor, jd.Ceiling = secondsToDuration(box.Floor), secondsToDuration(box.Ceiling)
			canSend := jd.Standby != "" && jd.Bandwidth > 0
			switch {
			case j.Exposure > jd.Interval+exposureSlack && canSend:
				// P1.1 prices an emergency at the work since the last
				// checkpoint committed off the node, at most Δ. A job
				// already exposed beyond Δ (its copies left with their
				// holders, or it restarted on the node that held its
				// only one) is past its interval: its next checkpoint is
				// due now.
				jd.Interval, jd.Bound = RescueInterval, BoundNow
			case len(j.Replicas) == 0 && !j.Started.IsZero() && canSend:
				// No live node other than the host holds the job's
				// freshest version (it just started, started over, or
				// restarted where its only copy was): an emergency loses
				// all of its work since then. Its first checkpoint is due
				// C/b after it (re)started (the time one checkpoint takes
				// to send, when that is shorter than the box; same rate,
				// same budget), so the first interval is not spent with
				// nothing off the node; the periodic ones follow from it.
				// (Interval counts from the last checkpoint's start, which
				// for such a job is its start.)
				if first := transferTime(c, jd.Bandwidth); first < jd.Interval {
					jd.Interval, jd.Bound = max(first, RescueInterval), BoundFirst
				}
			}
		} else {
			jd.Interval = w.p.FixedInterval
			jd.LossBudgetInfeasible = j.LossBudget > 0 && (jd.Bandwidth <= 0 || w.p.FixedInterval > 2*j.LossBudget)
		}
	}
	return out, paths, standbys, copies, budget
}

// standby keeps a job's standby while it can still take the job (present,
// not leaving, not the host, enough VRAM, capability and GPUs in total,
// reachable), so pre-sync is not thrown away; otherwise P2.6 picks the
// node it would hand off to with no deadline. -1 when there is none.
// With no node able to take the job and P1 on, any reachable node that
// stays keeps the copy (a standby of last resort; it need not run the
// job): without a standby P1 has no path to size b_i on and sets no
// interval, and the job would run with no copy off its node.
// Exception: a standby that is the only holder of the job's freshest copy
// and that riskyHolder finds too likely to leave (Params.SoleCopyRisk)
// gives way to the node P2.6 picks instead where that helps (relieves):
// always when the holder's own hazard is the risk (the last two versions
// then sit on two nodes), else only for a node less likely to leave with
// the host, so a standby is not moved on every version between nodes that
// share the host's building and its figure.
func (w *world) standby(j *Job, host int) int {
	if sb, ok := w.standbyOf[j.ID]; ok {
		return sb
	}
	// One node holding a job's only copy: when it may well leave within
	// the job's loss horizon (spot-like pools lose several nodes in the
	// same minute, host and standby together), the next checkpoint goes
	// to another node, so the last two versions live on two nodes.
	sole := -1
	if len(j.Replicas) == 1 {
		if r, ok := w.nodeIndex(j.Replicas[0]); ok && r != host && w.riskyHolder(r, j, host) {
			sole = r
		}
	}
	holders := w.durable()
	sticky := -1
	if sb, ok := w.nodeIndex(j.Standby); ok && sb != host && !w.leaving[sb] && !w.ending[sb] {
		nd := w.nodes[sb]
		if nd.GPU.VRAM >= j.VRAM && nd.GPU.Capability >= j.Capability && nd.GPUs >= j.GPUs {
			if _, _, ok := w.pathRate(host, sb); ok {
				sticky = sb
			}
		}
	}
	if sticky >= 0 && sticky != sole {
		return sticky
	}
	if sole >= 0 {
		if b := w.scan(scanRequest{job: j, src: host, avoid: sole + 1, holders: holders}).best; b >= 0 && w.relieves(b, sole, j, host) {
			return b
		}
		if sticky >= 0 {
			return sticky // no node spreads the risk: keep the pre-sync
		}
	}
	if b := w.scan(scanRequest{job: j, src: host, holders: holders}).best; b >= 0 {
		return b
	}
	// No node could take the job now: the copy still has to leave the
	// host (docs/design.md §0: an emergency recovers from a checkpoint committed off
	// the node), so any reachable node that stays keeps it; the job is
	// restored from it onto whichever node can take the job later.
	if !w.p.Switches.P1 {
		return -1
	}
	return w.scan(scanRequest{job: j, src: host, holdOnly: true}).best
}

// relieves reports whether moving job j's standby from sole, the risky
// only holder of its freshest copy, to node b lowers what makes sole
// risky: sole's own hazard over the job's 2·Lmax above
// Params.SoleCopyRisk (any other node then keeps the previous version
// apart from the next), or else b is less likely than sole to leave with
// the host or with a partner that just left.
func (w *world) relieves(b, sole int, j *Job, host int) bool {
	if 1-math.Exp(-w.hazardNow(sole)*soleHorizon(j)) > w.p.SoleCopyRisk {
		return true
	}
	co := func(i int) float64 { return max(w.follows(i), w.together(host, i)) }
	return co(b) < co(sole)
}

// soleHorizon is SoleCopyRisk's horizon for job j, in seconds: 2·Lmax, or
// DefaultSoleCopyHorizon without a loss budget.
func soleHorizon(j *Job) float64 {
	if h := 2 * j.LossBudget.Seconds(); h > 0 {
		return h
	}
	return DefaultSoleCopyHorizon.Seconds()
}

// riskyHolder reports whether node i, holding a job's only live copy, has
// more than Params.SoleCopyRisk chance to leave within the job's 2·Lmax:
// by its emergency hazard λ̂⁺ now, or together with the job's host (or
// with a partner that just left) by the co-departure estimate (docs/design.md
// P2.7). Too likely to keep that copy as the job's only one (P2.6's
// standby moves on, a recovery restores elsewhere). host is -1 when the
// job has none. A P2 choice: never with P2 off.
func (w *world) riskyHolder(i int, j *Job, host int) bool {
	risk := w.p.SoleCopyRisk
	if risk <= 0 || !w.p.Switches.P2 || w.storage[i] {
		return false
	}
	p := w.follows(i)
	if host >= 0 {
		p = max(p, w.together(host, i))
	}
	return 1-(1-p)*math.Exp(-w.hazardNow(i)*soleHorizon(j)) > risk
}

package policy

import "math"

// checkpoints is P1 for the running jobs (SPEC P1.3–P1.5, P1.9, P2.6):
// it keeps or chooses each job's standby, splits what is left of every
// link among the jobs' checkpoint flows host → standby, and sets each
// interval. hosts are the jobs' host node indexes. The result is one
// JobDecision, one path and one standby node index (-1 for none) per job,
// in order, and the
// checkpoint budget: the room that was left, before P1, on the distinct
// first links of the jobs' paths (their hosts' uplinks).
func (w *world) checkpoints(running []*Job, hosts []int) ([]JobDecision, [][]int, []int, float64) {
	out := make([]JobDecision, len(running))
	paths := make([][]int, len(running))
	standbys := make([]int, len(running))
	flows := make([]fillFlow, len(running))
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
	rates := progressiveFill(flows, room)
	for l := range w.est {
		used := w.est[l] - room[l]*w.cf
		w.est[l] = math.Max(0, room[l]*w.cf)
		w.low[l] = math.Max(0, w.low[l]-used)
	}
	for i, j := range running {
		jd := &out[i]
		jd.Bandwidth = rates[i]
		c := j.CheckpointBytes
		if c <= 0 {
			c = DefaultCheckpointBytes
		}
		if w.p.Switches.P1 {
			jd.Interval, jd.LossBudgetInfeasible = ConstrainedInterval(c, jd.Hazard, jd.Bandwidth, w.p.BetaP1, j.LossBudget)
		} else {
			jd.Interval = w.p.FixedInterval
			jd.LossBudgetInfeasible = j.LossBudget > 0 && (jd.Bandwidth <= 0 || w.p.FixedInterval > 2*j.LossBudget)
		}
	}
	return out, paths, standbys, budget
}

// standby keeps a job's standby while it can still take the job (present,
// not leaving, not the host, enough VRAM, capability and GPUs in total,
// reachable), so pre-sync is not thrown away; otherwise P2.6 picks the
// node it would hand off to with no deadline. -1 when there is none.
func (w *world) standby(j *Job, host int) int {
	if sb, ok := w.standbyOf[j.ID]; ok {
		return sb
	}
	if sb, ok := w.nodeIndex(j.Standby); ok && sb != host && !w.leaving[sb] {
		nd := w.nodes[sb]
		if nd.GPU.VRAM >= j.VRAM && nd.GPU.Capability >= j.Capability && nd.GPUs >= j.GPUs {
			if _, _, ok := w.pathRate(host, sb); ok {
				return sb
			}
		}
	}
	return w.scan(scanRequest{job: j, src: host}).best
}

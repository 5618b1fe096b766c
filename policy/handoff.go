package policy

import (
	"cmp"
	"math"
	"slices"
)

// handoffReq is a job on a node with a pending scheduled reclaim.
type handoffReq struct {
	job     *Job
	reclaim Reclaim
	carried *Flow // its migration flow from an earlier period, if any
	pushing *Flow // its periodic checkpoint in flight, if any
}

// handoffs is step 1 of Tick (SPEC P1.6, P2, P3.3–P3.4c): earliest
// deadline first, each job gets a destination whose path still holds its
// r_min at the ceiling (a carried flow keeps its destination), a start
// staggered within its slack, and admission on every link of its path.
// It appends one HandoffDecision per request to d and returns the
// admitted migrations, charged at r_min.
func (w *world) handoffs(reqs []handoffReq, d *Decisions) []*migration {
	var planned []*migration
	slices.SortStableFunc(reqs, func(a, b handoffReq) int {
		if c := a.reclaim.Deadline.Compare(b.reclaim.Deadline); c != 0 {
			return c
		}
		return cmp.Compare(a.job.ID, b.job.ID)
	})
	newPerNode := map[NodeID]int{}
	for _, h := range reqs {
		if h.carried == nil {
			newPerNode[h.job.Node]++
		}
	}
	rank := map[NodeID]int{}
	for _, h := range reqs {
		j, r := h.job, h.reclaim
		hd := HandoffDecision{Job: j.ID, From: j.Node, Deadline: r.Deadline}
		src, _ := w.nodeIndex(j.Node)
		notice := r.Deadline.Sub(r.Announced)
		if notice <= j.RestartTime || r.Deadline.Sub(w.now) <= j.RestartTime {
			hd.Degraded, hd.Reason = true, ReasonNoticeShort
			d.Handoffs = append(d.Handoffs, hd)
			continue
		}
		m := &migration{job: j, from: src, deadline: r.Deadline, start: w.now}
		if f := h.carried; f != nil {
			dst, ok := w.nodeIndex(f.To)
			if ok && !w.leaving[dst] {
				m.id, m.to, m.bytes = f.ID, dst, f.Remaining
				if f.Start.After(w.now) {
					m.start = f.Start
				}
			} else {
				h.carried = nil // its destination is leaving: choose again
			}
		}
		if h.carried == nil {
			res := w.scan(scanRequest{job: j, src: src, deadline: r.Deadline, list: true})
			hd.Candidates = res.list
			if res.best < 0 {
				hd.Degraded, hd.Reason = true, ReasonNoDestination
				d.Handoffs = append(d.Handoffs, hd)
				continue
			}
			m.id, m.to, m.bytes = HandoffPrefix+string(j.ID), res.best, w.lacking(scanRequest{job: j, src: src}, res.best)
			if w.p.Switches.P3 {
				_, low, _ := w.pathRate(src, res.best)
				if j.WriteCap > 0 {
					low = math.Min(low, j.WriteCap)
				}
				slack := r.Deadline.Sub(w.now) - j.RestartTime - transferTime(m.bytes, low)
				m.start = w.now.Add(StaggerOffset(rank[j.Node], newPerNode[j.Node], notice, slack))
				rank[j.Node]++
			}
		}
		m.links = w.pathLinks(src, m.to)
		rmin, _ := MinRate(m.bytes, m.start, m.deadline, j.RestartTime)
		m.minRate = rmin
		_, low, _ := w.pathRate(src, m.to)
		if j.WriteCap > 0 {
			low = math.Min(low, j.WriteCap)
		}
		hd.Bytes = m.bytes
		// P1.6 on the path's lower bound from the flow's actual start; with
		// P3 on, admission below implies it (r_min ≤ B⁻).
		if !FinalCheckpointFeasible(m.bytes, low, j.RestartTime, r.Deadline.Sub(m.start)) {
			hd.Degraded, hd.Reason = true, ReasonTooSlow
			d.Handoffs = append(d.Handoffs, hd)
			continue
		}
		if w.p.Switches.P3 {
			if rmin > low*(1+1e-12) || !admitOne(rmin*w.cf, m.links, w.low) {
				hd.Degraded, hd.Reason = true, ReasonNotAdmitted
				d.Handoffs = append(d.Handoffs, hd)
				continue
			}
			m.rate = rmin
			for _, l := range m.links {
				w.est[l] = math.Max(0, w.est[l]-rmin*w.cf)
			}
		}
		hd.To, hd.FinalCheckpoint = w.nodes[m.to].ID, true
		w.takeGPUs(m.to, j.GPUs)
		planned = append(planned, m)
		d.Handoffs = append(d.Handoffs, hd)
	}

	return planned
}

package policy

import (
	"cmp"
	"slices"
	"time"
)

// handoffReq is a job on a node with a pending scheduled reclaim.
type handoffReq struct {
	job     *Job
	reclaim Reclaim
	carried *Flow // its migration flow from an earlier period, if any
	pushing *Flow // its periodic checkpoint in flight, if any
}

// handoffs is step 1 of Tick (docs/design.md P1.6, P2, P3.3–P3.4c): earliest
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
	var timing []finalTiming
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
		waiting := true // the final checkpoint is not taken yet
		if f := h.carried; f != nil {
			dst, ok := w.nodeIndex(f.To)
			if ok && !w.leaving[dst] {
				m.id, m.to, m.bytes = f.ID, dst, f.Remaining
				if f.Start.After(w.now) {
					// Not under way: what the destination lacks now
					// (the pre-syncs of the wait shrink it, P1.6).
					m.start, m.bytes = f.Start, w.lacking(scanRequest{job: j, src: src}, dst)
				} else {
					waiting = false
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
					low = min(low, j.WriteCap)
				}
				slack := r.Deadline.Sub(w.now) - j.RestartTime - transferTime(m.bytes, low)
				m.start = w.now.Add(StaggerOffset(rank[j.Node], newPerNode[j.Node], notice, slack))
				rank[j.Node]++
			}
		}
		m.links = w.pathLinks(src, m.to)
		rmin, _ := MinRate(m.bytes, m.start.Add(writeTime(j)), m.deadline, j.RestartTime)
		m.minRate = rmin
		_, low, _ := w.pathRate(src, m.to)
		if j.WriteCap > 0 {
			low = min(low, j.WriteCap)
		}
		hd.Bytes = m.bytes
		// P1.6 on the path's lower bound from the flow's actual start; with
		// P3 on, admission below implies it (r_min ≤ B⁻).
		if !FinalCheckpointFeasible(m.bytes, low, j.RestartTime, r.Deadline.Sub(m.start.Add(writeTime(j)))) {
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
				w.est[l] = max(0, w.est[l]-rmin*w.cf)
			}
		}
		hd.To, hd.FinalCheckpoint = w.nodes[m.to].ID, true
		w.takeGPUs(m.to, j.GPUs)
		planned = append(planned, m)
		if w.p.Switches.P3 {
			timing = append(timing, finalTiming{m: m, decision: len(d.Handoffs), waiting: waiting, notice: notice})
		}
		d.Handoffs = append(d.Handoffs, hd)
	}
	w.timeFinals(timing, d)
	return planned
}

// finalTiming is an admitted hand-off whose final transfer gets its rate
// and start (docs/design.md P3.8).
type finalTiming struct {
	m        *migration
	decision int  // index of its HandoffDecision
	waiting  bool // its final checkpoint is not taken yet
	notice   time.Duration
}

// timeFinals is docs/design.md P3.8 (P3 on): the admitted hand-offs share what their
// r_min leave of their paths' migration share (the lower bound, so the rate
// is one the path can give) by max-min water-filling, and each one whose
// final checkpoint is not taken yet starts it at its latest safe start for
// that rate, computing on the source until then. The shares are charged
// to the links, so the rate is still there at the start (Theorem 3) and
// P1 gets what is left.
func (w *world) timeFinals(ts []finalTiming, d *Decisions) {
	if len(ts) == 0 {
		return
	}
	flows := make([]FinalFlow, len(ts))
	margins := make([]time.Duration, len(ts))
	for i, t := range ts {
		m := t.m
		margin := finalMargin(w.p.HandoffMargin, t.notice)
		margins[i] = margin
		// A flow not yet under way holds the rate its start needs by
		// FinalStart's rule, when its links have it: a flow timed in an
		// earlier period keeps its rate and its start (r_min alone, lower,
		// would let the others take the difference and pull its start
		// earlier every period).
		if need, ok := finalRate(m.bytes, writeTime(m.job), m.start, m.deadline, m.job.RestartTime, margin); t.waiting && ok && need > m.rate {
			// As much of it as the links hold (rounding in the starts
			// can make the sum a hair more than the share).
			raise := need - m.rate
			for _, l := range m.links {
				raise = min(raise, w.low[l]/w.cf)
			}
			for _, l := range m.links {
				w.low[l] = max(0, w.low[l]-raise*w.cf)
				w.est[l] = max(0, w.est[l]-raise*w.cf)
			}
			m.rate += raise
		}
		flows[i] = FinalFlow{MinRate: m.rate, Cap: m.job.WriteCap, Links: m.links}
	}
	rates := FinalRates(flows, w.low, w.cf)
	for i, t := range ts {
		m, j := t.m, t.m.job
		if gain := rates[i] - m.rate; gain > 0 {
			for _, l := range m.links {
				w.est[l] = max(0, w.est[l]-gain*w.cf)
			}
		}
		m.rate = rates[i]
		hd := &d.Handoffs[t.decision]
		hd.FinalRate = m.rate
		if !t.waiting {
			continue // the transfer is under way
		}
		// A flow timed in an earlier period whose room shrank moves
		// earlier; one whose latest safe start has come starts now
		// (earlier than admitted, so r_min only falls).
		m.start = w.now
		if start, ok := FinalStart(m.bytes, writeTime(j), m.deadline, m.rate, j.RestartTime, margins[i]); ok && start.After(w.now) {
			m.start = start
		}
		m.minRate, _ = MinRate(m.bytes, m.start.Add(writeTime(j)), m.deadline, j.RestartTime)
		hd.FinalStart = m.start
	}
}

// finalMargin is the slack a hand-off's latest safe start keeps before
// its deadline (docs/design.md P3.8b): the configured margin, at least one control
// period (the decision reaches the node up to a period late), and at
// least a quarter of the notice. On the loaded campus box a final
// checkpoint's write took five times the one measured before it, and a
// periodic checkpoint in flight delays the final one by its own length:
// measured phases can be short by more than their estimate, and the notice
// bounds what a hand-off may risk on them.
func finalMargin(margin, notice time.Duration) time.Duration {
	return max(margin, ControlPeriod, notice/4)
}

// writeTime is how long the job takes to write its final checkpoint
// locally (docs/design.md P3.8): its payload at its write cap, else 0. (The agent
// reports Tr with its checkpoints' write and commit time in it, so a
// measured write is already counted there.)
func writeTime(j *Job) time.Duration {
	if j.WriteCap > 0 {
		return transferTime(j.CheckpointBytes, j.WriteCap)
	}
	return 0
}

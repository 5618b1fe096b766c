package policy

import (
	"math"
	"time"
)

// RescueInterval is the Interval of a JobDecision that orders a
// last-chance checkpoint: start one now (see rescues).
const RescueInterval = time.Second

// rescueMargin is how much faster than the bare minimum a last-chance
// checkpoint is paced when the path allows, so that it lands before the
// deadline with some room (the estimate may be off).
const rescueMargin = 1.25

// rescue is a last-chance checkpoint for a job whose scheduled hand-off
// is infeasible.
type rescue struct {
	job      *Job
	host, to int
	links    []int
	rate     float64
	lambda   float64
}

// rescues is P1.6's fallback made as good as it can be. A scheduled
// reclaim whose zero-loss hand-off is infeasible (C/B⁻ + Tr > τ, or no
// destination, or not admitted) degrades to recovery from the freshest
// checkpoint committed off the node; the restart need not fit in the
// notice for that checkpoint, only its transfer. So when the job's
// standby (kept, or chosen by P2.6) can receive what it lacks before the
// deadline at the path's lower bound, P1 orders one more checkpoint now,
// paced at the rate that lands it in time (admitted on every link at its
// ceiling, after the hand-offs and recoveries, before periodic
// checkpoints: a deadline before durability). The job then loses only the
// work of the notice instead of everything since its last periodic
// checkpoint. reqs are the degraded scheduled hand-offs, earliest deadline
// first. Only with P1 on (it is P1.6's decision).
func (w *world) rescues(reqs []handoffReq) []rescue {
	if !w.p.Switches.P1 {
		return nil
	}
	var out []rescue
	for _, h := range reqs {
		j := h.job
		src, ok := w.nodeIndex(j.Node)
		left := h.reclaim.Deadline.Sub(w.now)
		if !ok || left <= 0 || w.vertex[src] < 0 {
			continue
		}
		sb := w.standby(j, src)
		if sb < 0 {
			continue
		}
		c := j.CheckpointBytes
		if c <= 0 {
			c = DefaultCheckpointBytes
		}
		bytes := c
		if j.Standby == w.nodes[sb].ID {
			bytes = max(0, c-j.StandbyHas)
		}
		if bytes == 0 {
			continue // the standby holds the current state already
		}
		_, low, ok := w.pathRate(src, sb)
		if j.WriteCap > 0 {
			low = math.Min(low, j.WriteCap)
		}
		need := float64(bytes) / left.Seconds()
		if !ok || need > low {
			continue
		}
		links := w.pathLinks(src, sb)
		rate, ok := w.admitLastChance(links, low, need)
		if !ok {
			continue
		}
		out = append(out, rescue{job: j, host: src, to: sb, links: links, rate: rate, lambda: w.hazardNow(src)})
	}
	return out
}

// admitLastChance paces a transfer that must land in time (need bytes/s
// at least, low the path's lower bound): rescueMargin faster than need
// when the path allows, admitted at its ceiling on the lower bounds of
// links (as a hand-off is) and charged to the estimates with P3 on, merely
// charged with P3 off. It reports false when P3 cannot admit even need.
func (w *world) admitLastChance(links []int, low, need float64) (float64, bool) {
	rate := math.Min(low, rescueMargin*need)
	if !w.p.Switches.P3 {
		w.charge(links, rate)
		return rate, true
	}
	if !admitOne(rate*w.cf, links, w.low) {
		if rate = need; !admitOne(rate*w.cf, links, w.low) {
			return 0, false
		}
	}
	for _, l := range links {
		w.est[l] = math.Max(0, w.est[l]-rate*w.cf)
	}
	return rate, true
}

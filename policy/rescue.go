package policy

import (
	"time"
)

// RescueInterval is the Interval of a JobDecision that orders a checkpoint
// now: a last-chance one before a scheduled reclaim (see rescues), or the
// next one of a job exposed beyond its interval (Job.Exposure).
const RescueInterval = time.Second

// exposureSlack is how far a job's exposure may run past its interval
// before P1 orders a checkpoint now (the copy of a checkpoint just taken
// is on its way while its write and its progress report arrive).
const exposureSlack = 5 * time.Second

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
// checkpoint. A periodic checkpoint already on its way (req.pushing) has
// fewer bytes left than a new one and is sent first (a job pushes one
// version at a time): when its rest lands in time it is the rescue, paced
// to arrive, and a newer one follows if time is left after it; without
// that, a checkpoint that would have landed was thrown away by the early
// recovery. reqs are the degraded scheduled hand-offs, earliest deadline
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
		if f := h.pushing; f != nil && f.From == j.Node {
			if to, ok := w.nodeIndex(f.To); ok && to != src && !w.leaving[to] {
				if r, ok := w.rescueTo(j, src, to, f.Remaining, left); ok {
					out = append(out, r)
					continue
				}
			}
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
		bytes += bundleLack(j, w.nodes[sb].ID)
		if bytes == 0 {
			continue // the standby holds the current state already
		}
		if r, ok := w.rescueTo(j, src, sb, bytes, left); ok {
			out = append(out, r)
		}
	}
	return out
}

// rescueTo admits a last-chance transfer of bytes from src to node to that
// must land within left, at the path's lower bound (capped by the job's
// write cap).
func (w *world) rescueTo(j *Job, src, to int, bytes int64, left time.Duration) (rescue, bool) {
	_, low, ok := w.pathRate(src, to)
	if j.WriteCap > 0 {
		low = min(low, j.WriteCap)
	}
	need := float64(bytes) / left.Seconds()
	if !ok || need > low {
		return rescue{}, false
	}
	links := w.pathLinks(src, to)
	rate, ok := w.admitLastChance(links, low, need)
	if !ok {
		return rescue{}, false
	}
	return rescue{job: j, host: src, to: to, links: links, rate: rate, lambda: w.hazardNow(src)}, true
}

// admitLastChance paces a transfer that must land in time (need bytes/s
// at least, low the path's lower bound): rescueMargin faster than need
// when the path allows, admitted at its ceiling on the lower bounds of
// links (as a hand-off is) and charged to the estimates with P3 on, merely
// charged with P3 off. It reports false when P3 cannot admit even need.
func (w *world) admitLastChance(links []int, low, need float64) (float64, bool) {
	rate := min(low, rescueMargin*need)
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
		w.est[l] = max(0, w.est[l]-rate*w.cf)
	}
	return rate, true
}

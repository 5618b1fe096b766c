package sim

import (
	"math"
	"slices"

	"github.com/reclaimnet/reclaimnet/policy"
)

// roomIntegral follows what a hand-off's path leaves to migration over
// the transfer's life, to find the time its bytes need at the room as it
// actually was: the t with ∫ room(s) ds over [start, start+t] = bytes
// (docs/design.md P3.8d). The room is piecewise constant: it changes only
// when a link's available bandwidth does.
type roomIntegral struct {
	start   float64 // when the transfer started, s
	bytes   float64 // what it moves
	moved   float64 // ∫ room ds from start to since, below bytes
	since   float64 // when room last changed
	room    float64 // bytes/s since then; 0: no path (nothing to pace)
	reached float64 // when the integral reached bytes; -1 not yet
}

func newRoomIntegral(start, bytes, room float64) roomIntegral {
	r := roomIntegral{start: start, bytes: bytes, since: start, room: room, reached: -1}
	if bytes <= 0 || room <= 0 {
		r.reached = start
	}
	return r
}

// advance integrates the current room up to t.
func (r *roomIntegral) advance(t float64) {
	if r.reached >= 0 || t <= r.since {
		return
	}
	if need := r.bytes - r.moved; r.room*(t-r.since) >= need {
		r.reached = r.since + need/r.room
	} else {
		r.moved += r.room * (t - r.since)
	}
	r.since = t
}

// set records that the room is room from t on.
func (r *roomIntegral) set(t, room float64) {
	r.advance(t)
	r.room = room
}

// need returns the seconds the bytes need from start at the room as it
// was up to t and, past t, as it is at t (a transfer that ended early, or
// was cut off, still gets the time its bytes need).
func (r *roomIntegral) need(t float64) float64 {
	r.advance(t)
	if r.reached >= 0 {
		return r.reached - r.start
	}
	return t - r.start + (r.bytes-r.moved)/r.room
}

// handoffLimit returns a hand-off's downtime limit (docs/design.md P3.8d)
// once its final transfer ended at t: the time its bytes need at its
// path's migration room as it was, Tr and one control period, through
// policy.DowntimeLimit at the mean room over that time.
func (f *simFlow) handoffLimit(t, restartS float64) float64 {
	need := f.limit.need(t)
	rate := math.Inf(1) // no path: nothing crosses the network
	if need > 0 {
		rate = f.limit.bytes / need
	}
	return policy.DowntimeLimit(int64(f.limit.bytes), rate, secs(restartS), policy.ControlPeriod).Seconds()
}

// trackRooms brings every hand-off's room integral up to now, with the
// room its path leaves it from now on: the engine calls it after links'
// available bandwidth changed, a hand-off started or ended, and after each
// control step.
func (e *Engine) trackRooms() {
	for _, f := range e.w.flows {
		if f.kind == flowHandoff {
			f.limit.set(e.w.now, e.handoffRoom(f))
		}
	}
}

// handoffRoom is the rate hand-off f's path can give it now (docs/design.md
// P3.8d): on each of its links, what the link leaves to migration less what
// the other hand-offs crossing it in the same direction need to land by
// their deadlines (their r_min from now); the smallest over the path, at
// least 1 byte/s. Another hand-off's need is not f's to take: no schedule
// gives f more without making that one miss its deadline.
func (e *Engine) handoffRoom(f *simFlow) float64 {
	room := math.Inf(1)
	for _, d := range f.links {
		r := e.linkRoom(d)
		for _, g := range e.w.flows {
			if g != f && g.kind == flowHandoff && slices.Contains(g.links, d) {
				r -= g.need(e.w.now)
			}
		}
		room = min(room, r)
	}
	if math.IsInf(room, 1) {
		return 0 // no link: nothing to pace
	}
	return max(room, 1)
}

// need is the rate hand-off g needs from t to land by its deadline: its
// remaining bytes over what the deadline leaves after its restart; 0 for
// one without a deadline, its current rate once the window has closed.
func (g *simFlow) need(t float64) float64 {
	if g.deadline <= 0 || g.remaining <= 0 {
		return 0
	}
	window := g.deadline - t - g.job.restartS
	if window <= 0 {
		return g.rate
	}
	return g.remaining / window
}

package sim

import (
	"math"
	"math/rand/v2"
	"testing"
)

// bruteNeed steps through a piecewise-constant room (rooms[i] from
// times[i] on, times[0] = start; past end the room at end stays) in
// small steps until bytes have crossed it, and returns the seconds from
// start.
func bruteNeed(times, rooms []float64, end, bytes float64) float64 {
	const dt = 1e-4
	roomAt := func(t float64) float64 {
		t = math.Min(t, end)
		r := rooms[0]
		for i, ti := range times {
			if ti <= t {
				r = rooms[i]
			}
		}
		return r
	}
	moved, t := 0.0, times[0]
	for moved < bytes {
		// The step's midpoint: exact within a piece, one step's error
		// at a change.
		moved += roomAt(t+dt/2) * dt
		t += dt
	}
	// Back off the overshoot inside the last step.
	return t - (moved-bytes)/roomAt(t-dt/2) - times[0]
}

// TestRoomIntegralAgainstBruteForce: the time a transfer's bytes need at
// a piecewise room, followed change by change and ended at a random
// time (before or after the bytes could have crossed), matches stepping
// through the room in 0.1-ms steps.
func TestRoomIntegralAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 1))
	for c := range 300 {
		start := rng.Float64() * 1000
		n := 1 + rng.IntN(6)
		times, rooms := []float64{start}, []float64{1 + rng.Float64()*99}
		for i := 1; i < n; i++ {
			times = append(times, times[i-1]+rng.Float64()*5)
			rooms = append(rooms, 1+rng.Float64()*99)
		}
		end := times[n-1] + rng.Float64()*5
		bytes := 1 + rng.Float64()*1000
		r := newRoomIntegral(start, bytes, rooms[0])
		for i := 1; i < n; i++ {
			r.set(times[i], rooms[i])
		}
		got := r.need(end)
		want := bruteNeed(times, rooms, end, bytes)
		if math.Abs(got-want) > 1e-3*math.Max(1, want) {
			t.Fatalf("case %d: start %.3f, changes at %v to %v, end %.3f, %.1f bytes: need %.5f s, brute force %.5f s", c, start, times, rooms, end, bytes, got, want)
		}
	}
}

// TestRoomIntegralEdges: nothing to move, or no path, needs no time; a
// room that rises once the bytes have crossed changes nothing; a
// transfer cut off early is extrapolated at the room it ended with.
func TestRoomIntegralEdges(t *testing.T) {
	r := newRoomIntegral(5, 0, 10)
	if got := r.need(9); got != 0 {
		t.Errorf("no bytes: need %g s, want 0", got)
	}
	r = newRoomIntegral(5, 100, 0)
	if got := r.need(9); got != 0 {
		t.Errorf("no path: need %g s, want 0", got)
	}
	r = newRoomIntegral(0, 100, 10) // 10 s at 10 bytes/s
	r.set(20, 1000)
	if got := r.need(30); got != 10 {
		t.Errorf("room rising after the bytes crossed: need %g s, want 10", got)
	}
	r = newRoomIntegral(0, 100, 10)
	r.set(4, 20) // 40 bytes by 4 s, then 60 at 20/s: 3 s more
	if got := r.need(5); math.Abs(got-7) > 1e-9 {
		t.Errorf("cut off at 5 s: need %g s, want 7", got)
	}
}

// TestHandoffRoomLeavesOthersNeeds: a hand-off's room is its path's
// migration room less what the other hand-offs crossing the same links in
// the same direction need to land by their deadlines (remaining bytes over
// deadline − now − Tr); a transfer the other way, or one with no deadline,
// takes nothing from it (docs/design.md P3.8d).
func TestHandoffRoomLeavesOthersNeeds(t *testing.T) {
	const mbps = 1e6 / 8
	tr := parseTrace(t, downtimeTrace, "downtime.jsonl")
	e := newTestEngine(t, "reclaimnet", tr)
	a, b := e.w.nodeIdx["a"], e.w.nodeIdx["b"]
	j := e.w.jobs[0]
	f := e.newFlow(flowHandoff, j, a, b, 400e6)
	f.deadline = 200
	alone := e.handoffRoom(f)
	if want := 700 * mbps; math.Abs(alone-want) > 1e-6 {
		t.Fatalf("alone: room %.0f B/s, want the path's migration room %.0f", alone, want)
	}
	back := e.newFlow(flowHandoff, j, b, a, 300e6)
	back.deadline = 100
	open := e.newFlow(flowHandoff, j, a, b, 300e6) // no deadline
	if got := e.handoffRoom(f); got != alone {
		t.Errorf("with a hand-off the other way and one without a deadline: room %.0f B/s, want %.0f", got, alone)
	}
	e.dropFlow(back, true)
	e.dropFlow(open, true)
	g := e.newFlow(flowHandoff, j, a, b, 300e6)
	g.deadline = 100
	need := 300e6 / (100 - e.w.now - j.restartS)
	if got, want := e.handoffRoom(f), alone-need; math.Abs(got-want) > 1e-6 {
		t.Errorf("beside a hand-off needing %.0f B/s: room %.0f B/s, want %.0f", need, got, want)
	}
	g.remaining = 0 // landed
	if got := e.handoffRoom(f); got != alone {
		t.Errorf("beside a landed hand-off: room %.0f B/s, want %.0f", got, alone)
	}
}

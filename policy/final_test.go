package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestFinalStartAgainstBruteForce: over a grid of start times and rates up
// to the flow's share R, the least downtime a safe pair (one whose final
// phase lands margin before the deadline even at FinalSafety times its
// length) reaches is write + C/R + Tr, and FinalStart is the latest start
// that reaches it: no earlier start gives less downtime, no later one is
// safe. finalRate inverts it.
func TestFinalStartAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 1))
	for k := range 200 {
		bytes := int64(1e6 + rng.Float64()*5e9)
		share := 1e6 + rng.Float64()*2e8 // R, bytes/s
		write := time.Duration(rng.IntN(5000)) * time.Millisecond
		restart := time.Duration(1+rng.IntN(60)) * time.Second
		margin := time.Duration(rng.IntN(3000)) * time.Millisecond
		notice := time.Duration(10+rng.IntN(600)) * time.Second
		deadline := testEpoch.Add(notice)
		got, ok := FinalStart(bytes, write, deadline, share, restart, margin)
		if !ok {
			t.Fatalf("case %d: no start for a positive rate", k)
		}
		best, latest, step := bruteFinalStart(bytes, write, deadline, share, restart, margin)
		want := write + transferTime(bytes, share) + restart
		if best != want {
			t.Fatalf("case %d: brute force's least safe downtime %v, want write + C/R + Tr = %v", k, best, want)
		}
		if got.Before(latest) || got.Sub(latest) >= step {
			t.Fatalf("case %d: FinalStart %v, brute force's latest start with the least downtime %v (grid %v)",
				k, got.Sub(testEpoch), latest.Sub(testEpoch), step)
		}
		if got.Add(FinalSafety*want + margin).After(deadline) {
			t.Fatalf("case %d: FinalStart %v lands after the deadline", k, got.Sub(testEpoch))
		}
		if r, ok := finalRate(bytes, write, got, deadline, restart, margin); !ok || math.Abs(r-share) > 1e-6*share {
			t.Fatalf("case %d: finalRate from FinalStart %g (%v), want the share %g", k, r, ok, share)
		}
	}
	if _, ok := FinalStart(1, 0, testEpoch, 0, 0, 0); ok {
		t.Error("FinalStart with bytes to move and no rate: want no safe start")
	}
	if s, ok := FinalStart(0, time.Second, testEpoch, 0, 3*time.Second, time.Second); !ok || !s.Equal(testEpoch.Add(-9*time.Second)) {
		t.Errorf("FinalStart with nothing to move: %v %v, want deadline − margin − 2·(write + Tr)", s, ok)
	}
}

// bruteFinalStart searches a grid of start times (twice the window a start
// needs, at 20,000 steps) and rates up to share for the least downtime of
// a final phase that lands margin before the deadline even at FinalSafety
// times its length, and the latest start that reaches it.
func bruteFinalStart(bytes int64, write time.Duration, deadline time.Time, share float64, restart, margin time.Duration) (best time.Duration, latest time.Time, step time.Duration) {
	span := 2 * (FinalSafety*(write+transferTime(bytes, share)+restart) + margin + time.Second)
	step = span / 20000
	best = time.Duration(math.MaxInt64)
	for s := deadline.Add(-span); !s.After(deadline); s = s.Add(step) {
		for f := 1; f <= 8; f++ {
			r := share * float64(f) / 8
			down := write + transferTime(bytes, r) + restart
			if s.Add(FinalSafety*down + margin).After(deadline) {
				continue // risks the deadline
			}
			if down < best {
				best, latest = down, s
			} else if down == best {
				latest = s
			}
		}
	}
	return best, latest, step
}

// TestFinalStartCountsWhatTheStandbyHas: a hand-off to the job's standby
// moves only what the standby lacks (docs/design.md P1.6), so its final
// checkpoint starts later than for the whole checkpoint by exactly
// FinalSafety·(bytes the standby has)/rate, at brute force's latest safe
// start for the bytes it lacks, and still lands margin before the
// deadline; a hand-off carried from an earlier period, still waiting for
// its final checkpoint, gets the updated bytes and start too.
func TestFinalStartCountsWhatTheStandbyHas(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 2, access: 20e6, uplink: gbit})
	host, standby := nodeName(0, 0), nodeName(0, 1)
	const notice = 10 * time.Minute
	deadline := testEpoch.Add(notice)
	j := testJob("j", host)
	j.CheckpointBytes, j.RestartTime, j.Standby = 2e9, 20*time.Second, standby
	snap := func(has int64, flows []Flow) Snapshot {
		jj := j
		jj.StandbyHas = has
		return Snapshot{Nodes: nodes, Links: links, Params: DefaultParams(), Jobs: []Job{jj}, Flows: flows,
			Reclaims: []Reclaim{{Node: host, Announced: testEpoch, Deadline: deadline}}}
	}
	decide := func(name string, s Snapshot, now time.Time) (HandoffDecision, FlowDecision) {
		t.Helper()
		d := Tick(s, now)
		checkInvariants(t, s, d, now)
		if len(d.Handoffs) != 1 || !d.Handoffs[0].Admitted() || d.Handoffs[0].To != standby || d.Handoffs[0].FinalStart.IsZero() {
			t.Fatalf("%s: hand-offs %+v, want one admitted to the standby %s with its final start", name, d.Handoffs, standby)
		}
		for _, f := range d.Flows {
			if f.Job == "j" && f.Class == ClassMigration {
				return d.Handoffs[0], f
			}
		}
		t.Fatalf("%s: no migration flow in %+v", name, d.Flows)
		return HandoffDecision{}, FlowDecision{}
	}
	whole, wf := decide("whole checkpoint", snap(0, nil), testEpoch)
	margin := finalMargin(DefaultHandoffMargin, notice)
	for _, has := range []int64{5e8, 1.5e9, 1.99e9, 2e9} {
		lacks := j.CheckpointBytes - has
		h, _ := decide(fmt.Sprintf("standby has %d", has), snap(has, nil), testEpoch)
		if h.Bytes != lacks || whole.Bytes != j.CheckpointBytes {
			t.Fatalf("has %d: bytes %d (whole %d), want %d (whole %d)", has, h.Bytes, whole.Bytes, lacks, j.CheckpointBytes)
		}
		if math.Abs(h.FinalRate-whole.FinalRate) > 1e-9*whole.FinalRate {
			t.Fatalf("has %d: final rate %g, whole checkpoint's %g: the share is the path's either way", has, h.FinalRate, whole.FinalRate)
		}
		later := FinalSafety * (transferTime(j.CheckpointBytes, h.FinalRate) - transferTime(lacks, h.FinalRate))
		if got := h.FinalStart.Sub(whole.FinalStart); got != later {
			t.Errorf("has %d: final start %v later than the whole checkpoint's, want FinalSafety·has/rate = %v", has, got, later)
		}
		_, latest, step := bruteFinalStart(lacks, writeTime(&j), deadline, h.FinalRate, j.RestartTime, margin)
		if h.FinalStart.Before(latest) || h.FinalStart.Sub(latest) >= step {
			t.Errorf("has %d: final start %v, brute force's latest safe start %v (grid %v)", has, h.FinalStart.Sub(testEpoch), latest.Sub(testEpoch), step)
		}
		if lands := h.FinalStart.Add(FinalSafety*(transferTime(lacks, h.FinalRate)+j.RestartTime) + margin); lands.After(deadline) {
			t.Errorf("has %d: the final phase at FinalSafety times its length lands %v, after the deadline", has, lands.Sub(deadline))
		}

		// The same, carried from the first period (decided on the whole
		// checkpoint) as the agent carries it, a second later.
		carried := []Flow{{ID: wf.ID, Job: "j", From: host, To: standby, Class: ClassMigration, Remaining: whole.Bytes,
			Deadline: deadline, Start: wf.Start, Rate: wf.Rate}}
		c, _ := decide(fmt.Sprintf("carried, standby has %d", has), snap(has, carried), testEpoch.Add(time.Second))
		if c.Bytes != lacks || c.FinalStart.Sub(h.FinalStart).Abs() > time.Microsecond {
			t.Errorf("has %d, carried: bytes %d final start %v, want %d and %v as decided fresh", has, c.Bytes,
				c.FinalStart.Sub(testEpoch), lacks, h.FinalStart.Sub(testEpoch))
		}
	}
}

// TestFinalRatesAgainstBruteForce: the final transfers' rates are the
// lexicographically largest sorted rate vector (max-min) over a grid of
// rates that keeps every flow at or above its r_min, within its cap, and
// every link's ceilings within its migration share.
func TestFinalRatesAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 2))
	const cf = 1.1
	for k := range 150 {
		nl := 2 + rng.IntN(3)
		room := make([]float64, nl)
		for l := range room {
			room[l] = 5 + float64(rng.IntN(15))
		}
		n := 1 + rng.IntN(3)
		flows := make([]FinalFlow, n)
		left := slices.Clone(room)
		for i := range flows {
			var links []int
			for l := range nl {
				if rng.IntN(2) == 0 {
					links = append(links, l)
				}
			}
			if len(links) == 0 {
				links = []int{rng.IntN(nl)}
			}
			rmin := float64(rng.IntN(3))
			for _, l := range links {
				rmin = math.Min(rmin, left[l]/cf)
			}
			for _, l := range links {
				left[l] -= rmin * cf
			}
			c := math.Inf(1)
			if rng.IntN(3) == 0 {
				c = rmin + 1 + float64(rng.IntN(10))
			}
			flows[i] = FinalFlow{MinRate: rmin, Cap: c, Links: links}
		}
		given := slices.Clone(left)
		got := FinalRates(flows, given, cf)
		// Feasibility, and Bres untouched: the ceilings fit in the share.
		load := make([]float64, nl)
		for i, r := range got {
			if r < flows[i].MinRate*(1-1e-12) || r > flows[i].Cap*(1+1e-12) {
				t.Fatalf("case %d: flow %d rate %g outside [r_min %g, cap %g]", k, i, r, flows[i].MinRate, flows[i].Cap)
			}
			for _, l := range flows[i].Links {
				load[l] += cf * r
			}
		}
		for l := range load {
			if load[l] > room[l]*(1+1e-9) {
				t.Fatalf("case %d: link %d carries %g at ceilings, share %g", k, l, load[l], room[l])
			}
			if want := room[l] - load[l]; math.Abs(given[l]-want) > 1e-9*room[l] {
				t.Fatalf("case %d: link %d room left %g, want %g", k, l, given[l], want)
			}
		}
		// Brute force on a 0.125 grid of rates.
		const step = 0.125
		best := make([]float64, 0, n)
		rates := make([]float64, n)
		var walk func(i int)
		walk = func(i int) {
			if i == n {
				for l := range nl {
					var sum float64
					for f, fl := range flows {
						if slices.Contains(fl.Links, l) {
							sum += cf * rates[f]
						}
					}
					if sum > room[l]*(1+1e-9) {
						return
					}
				}
				sorted := slices.Clone(rates)
				slices.Sort(sorted)
				if len(best) == 0 || slices.Compare(sorted, best) > 0 {
					best = sorted
				}
				return
			}
			hi := flows[i].Cap
			for _, l := range flows[i].Links {
				hi = math.Min(hi, room[l]/cf)
			}
			for r := flows[i].MinRate; r <= hi+1e-12; r += step {
				rates[i] = r
				walk(i + 1)
			}
		}
		walk(0)
		sorted := slices.Clone(got)
		slices.Sort(sorted)
		for i := range sorted {
			if math.Abs(sorted[i]-best[i]) > step*float64(n)+1e-9 {
				t.Fatalf("case %d: sorted rates %v, brute force max-min %v", k, sorted, best)
			}
		}
	}
}

// TestHandoffsLandLateAndFastOverTime runs Tick every 100 ms over random
// scheduled reclaims, carrying each admitted hand-off's flow as the agent
// does: nothing moves before its final start, then its bytes move at the
// decided rate. Theorem 3 holds (every hand-off admitted lands Tr before
// its deadline), the job computes on the source until the latest safe
// start, and its downtime stays within 1.3× its limit (bytes lacked ÷ the
// rate at the start + Tr + one control period).
func TestHandoffsLandLateAndFastOverTime(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 3))
	const step = 100 * time.Millisecond
	for k := range 12 {
		nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 4, access: gbit, uplink: gbit})
		s := Snapshot{Nodes: nodes, Links: links, Params: DefaultParams()}
		leaving := nodes[rng.IntN(len(nodes))].ID
		for i := range 1 + rng.IntN(4) {
			j := testJob(fmt.Sprintf("j%d", i), leaving)
			j.CheckpointBytes = int64(2e7 + rng.Float64()*2e9)
			j.RestartTime = time.Duration(1+rng.IntN(20)) * time.Second
			s.Jobs = append(s.Jobs, j)
		}
		// A second leaving node on the same uplink competes for it.
		other := nodeName(0, 3)
		if other != leaving {
			j := testJob("x", other)
			j.CheckpointBytes, j.RestartTime = int64(1e8+rng.Float64()*1e9), 5*time.Second
			s.Jobs = append(s.Jobs, j)
			s.Reclaims = append(s.Reclaims, Reclaim{Node: other, Announced: testEpoch, Deadline: testEpoch.Add(time.Duration(60+rng.IntN(60)) * time.Second)})
		}
		notice := time.Duration(40+rng.IntN(200)) * time.Second
		s.Reclaims = append(s.Reclaims, Reclaim{Node: leaving, Announced: testEpoch, Deadline: testEpoch.Add(notice)})

		type move struct {
			first     HandoffDecision // at the first tick
			started   bool
			startedAt time.Time
			rate      float64
			remaining float64
			landed    bool
			restart   time.Duration
			bytes     int64
			downtime  time.Duration
			limit     time.Duration
		}
		moves := map[JobID]*move{}
		d := Tick(s, testEpoch)
		checkInvariants(t, s, d, testEpoch)
		for _, h := range d.Handoffs {
			if h.Admitted() {
				j := s.Jobs[slices.IndexFunc(s.Jobs, func(j Job) bool { return j.ID == h.Job })]
				moves[h.Job] = &move{first: h, restart: j.RestartTime}
			}
		}
		if len(moves) == 0 {
			continue
		}
		for now := testEpoch; len(s.Jobs) > 0 && !now.After(testEpoch.Add(5*time.Minute)); now = now.Add(step) {
			d = Tick(s, now)
			checkInvariants(t, s, d, now)
			s.Flows = s.Flows[:0]
			for _, h := range d.Handoffs {
				mv := moves[h.Job]
				if mv == nil || mv.landed {
					continue
				}
				if !h.Admitted() {
					t.Fatalf("case %d %s at %v: an admitted hand-off was withdrawn: %s", k, h.Job, now.Sub(testEpoch), h.Reason)
				}
				var fd FlowDecision
				for _, f := range d.Flows {
					if f.Job == h.Job && f.Class == ClassMigration {
						fd = f
					}
				}
				if !mv.started && !now.Before(h.FinalStart) {
					mv.started, mv.startedAt, mv.remaining = true, now, float64(h.Bytes)
					mv.rate, mv.bytes = fd.Rate, h.Bytes
					mv.limit = DowntimeLimit(h.Bytes, fd.Rate, mv.restart, ControlPeriod)
				}
				start := fd.Start
				rem := int64(h.Bytes)
				if mv.started {
					mv.remaining -= fd.Rate * step.Seconds()
					rem, start = int64(math.Ceil(mv.remaining)), mv.startedAt
				}
				if mv.started && mv.remaining <= 0 {
					mv.landed = true
					landed := now.Add(step)
					mv.downtime = landed.Sub(mv.startedAt) + mv.restart
					if landed.Add(mv.restart).After(h.Deadline) {
						t.Fatalf("case %d %s: lands %v, + Tr after the deadline %v", k, h.Job, landed.Sub(testEpoch), h.Deadline.Sub(testEpoch))
					}
					continue
				}
				s.Flows = append(s.Flows, Flow{ID: fd.ID, Job: h.Job, From: h.From, To: h.To, Class: ClassMigration,
					Remaining: rem, Deadline: h.Deadline, Start: start, Rate: fd.Rate})
			}
			s.Jobs = slices.DeleteFunc(s.Jobs, func(j Job) bool { mv := moves[j.ID]; return mv != nil && mv.landed })
		}
		for id, mv := range moves {
			if !mv.landed {
				t.Fatalf("case %d %s: admitted hand-off never landed", k, id)
			}
			if mv.startedAt.Before(mv.first.FinalStart.Add(-step)) {
				t.Errorf("case %d %s: final checkpoint at %v, before the latest safe start %v decided first", k, id,
					mv.startedAt.Sub(testEpoch), mv.first.FinalStart.Sub(testEpoch))
			}
			if mv.downtime > mv.limit*13/10 {
				t.Errorf("case %d %s: downtime %v, limit %v (%d bytes at %.3g B/s + Tr + %v)", k, id, mv.downtime, mv.limit,
					mv.bytes, mv.rate, ControlPeriod)
			}
		}
	}
}

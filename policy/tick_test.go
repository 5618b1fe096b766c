package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// scenario builds a campus with running jobs (with standbys), pending and
// recovering jobs, a scheduled reclaim, an emergency reclaim and a carried
// flow; sizes scale it.
func scenario(rng *rand.Rand, buildings, perBuilding, jobs int) Snapshot {
	nodes, links := buildCampus(campusSpec{buildings: buildings, perBuilding: perBuilding, access: gbit, uplink: 4 * gbit})
	for i := range nodes {
		nodes[i].Emergency = flatProfile((0.2 + rng.Float64()*3) / 3600)
		nodes[i].Departure = flatProfile((0.5 + rng.Float64()*5) / 3600)
		nodes[i].Load = rng.Float64() * 0.9
	}
	for i := range links {
		f := 0.4 + 0.6*rng.Float64()
		links[i].Available = f * links[i].Capacity
		links[i].AvailableLow = 0.8 * links[i].Available
	}
	s := Snapshot{Nodes: nodes, Links: links, Params: DefaultParams()}
	n := len(nodes)
	for k := range jobs {
		host := nodes[rng.IntN(n)].ID
		j := testJob(fmt.Sprintf("job-%04d", k), host)
		j.CheckpointBytes = int64(1e8 + rng.Float64()*2e10)
		j.RestartTime = time.Duration(10+rng.IntN(60)) * time.Second
		if rng.IntN(3) > 0 {
			j.Standby = nodes[rng.IntN(n)].ID
			j.StandbyHas = int64(rng.Float64() * float64(j.CheckpointBytes))
		}
		if rng.IntN(4) == 0 {
			j.WriteCap = 5e6 + rng.Float64()*5e7
		}
		switch rng.IntN(20) {
		case 0:
			j.State, j.Node = JobPending, ""
		case 1:
			j.State, j.Node = JobRecovering, ""
			j.Replicas = []NodeID{nodes[rng.IntN(n)].ID}
		}
		s.Jobs = append(s.Jobs, j)
	}
	// Reclaims: a few scheduled with 30–300 s notice, one emergency.
	for k := 0; k < max(1, n/20); k++ {
		id := nodes[rng.IntN(n)].ID
		notice := time.Duration(30+rng.IntN(270)) * time.Second
		s.Reclaims = append(s.Reclaims, Reclaim{Node: id, Announced: testEpoch.Add(-time.Duration(rng.IntN(20)) * time.Second), Deadline: testEpoch.Add(notice)})
	}
	s.Reclaims = append(s.Reclaims, Reclaim{Node: nodes[rng.IntN(n)].ID, Announced: testEpoch, Deadline: testEpoch})
	return s
}

// directedLoads sums flow ceilings per directed link ("id>" A→B, "id<").
func directedLoads(t *testing.T, s Snapshot, d Decisions) map[string]float64 {
	t.Helper()
	topo := NewTopology(s.Links)
	load := map[string]float64{}
	for _, f := range d.Flows {
		hops, ok := topo.Path(string(f.From), string(f.To))
		if !ok {
			t.Fatalf("flow %s: no path %s → %s", f.ID, f.From, f.To)
		}
		if len(hops) != len(f.Links) {
			t.Fatalf("flow %s lists %d links, path has %d", f.ID, len(f.Links), len(hops))
		}
		for _, h := range hops {
			key := h.Link + map[bool]string{true: ">", false: "<"}[h.Forward]
			load[key] += f.Ceiling
		}
	}
	return load
}

func checkInvariants(t *testing.T, s Snapshot, d Decisions, now time.Time) {
	t.Helper()
	p := s.Params
	load := directedLoads(t, s, d)
	for _, l := range s.Links {
		share := MigrationShare(l.Capacity, l.Available, p.BetaP3, p.Bmin)
		for _, dir := range []string{">", "<"} {
			if got := load[l.ID+dir]; got > share*(1+1e-9)+1e-6 {
				t.Errorf("link %s%s: flows at ceilings %.6g exceed the migration share %.6g", l.ID, dir, got, share)
			}
		}
	}
	jobs := map[JobID]Job{}
	for _, j := range s.Jobs {
		jobs[j.ID] = j
	}
	handoffs := map[JobID]HandoffDecision{}
	for _, h := range d.Handoffs {
		handoffs[h.Job] = h
	}
	for _, f := range d.Flows {
		if f.Rate < 0 || f.Ceiling < f.Rate || (f.Ceiling > 0 && f.Burst < p.MinBurst) {
			t.Errorf("flow %s: rate %g ceiling %g burst %d", f.ID, f.Rate, f.Ceiling, f.Burst)
		}
		if f.Class != ClassMigration || f.Deadline.IsZero() {
			continue
		}
		// Theorem 3 from the flow's actual start: start + C/r + Tr ≤ deadline.
		j, h := jobs[f.Job], handoffs[f.Job]
		if f.Rate < f.MinRate*(1-1e-12) {
			t.Errorf("flow %s: rate %g below r_min %g", f.ID, f.Rate, f.MinRate)
		}
		finish := f.Start.Add(time.Duration(float64(h.Bytes) / f.Rate * float64(time.Second))).Add(j.RestartTime)
		if finish.After(f.Deadline.Add(time.Millisecond)) {
			t.Errorf("flow %s: starts %v, %d bytes at %g B/s + Tr %v ends %v after the deadline %v",
				f.ID, f.Start.Sub(now), h.Bytes, f.Rate, j.RestartTime, finish.Sub(now), f.Deadline.Sub(now))
		}
		if f.Start.Before(now) {
			t.Errorf("flow %s starts before now", f.ID)
		}
		if !h.FinalCheckpoint || h.Degraded {
			t.Errorf("flow %s admitted but hand-off %+v has no final checkpoint", f.ID, h)
		}
	}
	for _, jd := range d.Jobs {
		if !(jd.Hazard >= MinHazard) || jd.Bandwidth < 0 || jd.Interval <= 0 || jd.Interval > MaxInterval {
			t.Errorf("job %s: hazard %g bandwidth %g interval %v", jd.Job, jd.Hazard, jd.Bandwidth, jd.Interval)
		}
		if j := jobs[jd.Job]; j.WriteCap > 0 && jd.Bandwidth > j.WriteCap*(1+1e-12) {
			t.Errorf("job %s: bandwidth %g above its write cap %g", jd.Job, jd.Bandwidth, j.WriteCap)
		}
	}
}

func TestTickInvariantsOnRandomCampuses(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	seen := map[string]int{}
	defer func() {
		t.Logf("kinds seen: %v", seen)
		for _, kind := range []string{"mig", "restore", "ckpt", "degraded", "final", "staggered"} {
			if seen[kind] == 0 {
				t.Errorf("random scenarios never produced a %q decision", kind)
			}
		}
	}()
	for k := range 60 {
		s := scenario(rng, 2+rng.IntN(4), 3+rng.IntN(8), 5+rng.IntN(60))
		if k%3 == 1 {
			s.Params.Bmin = rng.Float64() * 2 * gbit // sometimes above a link's capacity
		}
		d := Tick(s, testEpoch)
		for _, f := range d.Flows {
			kind, _, _ := strings.Cut(f.ID, "/")
			seen[kind]++
			if f.Start.After(testEpoch) {
				seen["staggered"]++
			}
		}
		for _, h := range d.Handoffs {
			if h.Degraded {
				seen["degraded"]++
			}
			if h.FinalCheckpoint {
				seen["final"]++
			}
		}
		checkInvariants(t, s, d, testEpoch)
		if t.Failed() {
			t.Fatalf("case %d failed", k)
		}
	}
}

func shuffled[T any](rng *rand.Rand, in []T) []T {
	out := slices.Clone(in)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func TestTickIsDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	for k := range 10 {
		s := scenario(rng, 4, 8, 60)
		want := Tick(s, testEpoch)
		for range 3 {
			s2 := s
			s2.Nodes, s2.Links, s2.Jobs, s2.Reclaims = shuffled(rng, s.Nodes), shuffled(rng, s.Links), shuffled(rng, s.Jobs), shuffled(rng, s.Reclaims)
			if got := Tick(s2, testEpoch); !reflect.DeepEqual(got, want) {
				t.Fatalf("case %d: Tick differs when the input is reordered", k)
			}
		}
	}
}

// oneBuildingWithStandbysAcross puts jobs on building b0 with standbys in
// b1, so every checkpoint crosses the b0 uplink, the only bottleneck.
func oneBottleneck(jobs int) (Snapshot, []CheckpointDemand) {
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: jobs, access: 10 * gbit, uplink: gbit})
	s := Snapshot{Nodes: nodes, Links: links, Params: DefaultParams()}
	var d []CheckpointDemand
	for k := range jobs {
		j := testJob(fmt.Sprintf("j%02d", k), nodeName(0, k))
		j.Standby = nodeName(1, k)
		j.CheckpointBytes = int64(1e9 * (1 + k*k))
		s.Nodes[k].Emergency = flatProfile(float64(1+k) / 3600)
		if k == 0 {
			j.WriteCap = 1e6
		}
		s.Jobs = append(s.Jobs, j)
		d = append(d, CheckpointDemand{Bytes: j.CheckpointBytes, Hazard: float64(1+k) / 3600, Cap: j.WriteCap})
	}
	return s, d
}

func TestTickP1IsCubeRootOnOneBottleneck(t *testing.T) {
	s, demands := oneBottleneck(5)
	d := Tick(s, testEpoch)
	share := MigrationShare(gbit, gbit, 0.3, 0) / 1.1
	want := AllocateBandwidth(demands, share)
	for i, jd := range d.Jobs {
		if math.Abs(jd.Bandwidth-want[i]) > 1e-9*share {
			t.Errorf("job %s: bandwidth %g, P1.3/P1.4 gives %g", jd.Job, jd.Bandwidth, want[i])
		}
		wantD, wantInf := ConstrainedInterval(demands[i].Bytes, demands[i].Hazard, want[i], 0.2, s.Jobs[i].LossBudget)
		if jd.Interval != wantD || jd.LossBudgetInfeasible != wantInf {
			t.Errorf("job %s: interval %v (infeasible %v), want %v (%v)", jd.Job, jd.Interval, jd.LossBudgetInfeasible, wantD, wantInf)
		}
	}
	if !d.Jobs[0].LossBudgetInfeasible {
		t.Errorf("job capped at 1 MB/s with a 10 GB checkpoint should flag LossBudgetInfeasible")
	}
}

func TestTickMigrationBeforeCheckpoints(t *testing.T) {
	s, _ := oneBottleneck(4)
	// Node b0-n03 is reclaimed with 120 s notice; its job must cross the
	// shared uplink (no free GPUs left in b0).
	for i := range s.Nodes {
		if s.Nodes[i].Building == "b0" {
			s.Nodes[i].FreeGPUs = 0
		}
	}
	s.Jobs[3].CheckpointBytes, s.Jobs[3].StandbyHas = 1e9, 0
	s.Reclaims = []Reclaim{{Node: nodeName(0, 3), Announced: testEpoch, Deadline: testEpoch.Add(120 * time.Second)}}
	d := Tick(s, testEpoch)
	checkInvariants(t, s, d, testEpoch)
	var mig *FlowDecision
	for i := range d.Flows {
		if d.Flows[i].Class == ClassMigration {
			mig = &d.Flows[i]
		}
	}
	if mig == nil {
		t.Fatalf("no migration flow; hand-offs %+v", d.Handoffs)
	}
	// The hand-off alone on the uplink gets all its migration share
	// (P3.8) and computes until the latest start that share allows.
	share := MigrationShare(gbit, gbit, 0.3, 0)
	hd := d.Handoffs[0]
	deadline := testEpoch.Add(120 * time.Second)
	if math.Abs(hd.FinalRate*1.1-share) > 1e-9*share || mig.Rate < hd.FinalRate*(1-1e-12) {
		t.Errorf("final rate %g (flow %g), want the uplink's share %g at the ceiling", hd.FinalRate, mig.Rate, share/1.1)
	}
	wantStart := deadline.Add(-(FinalSafety*(transferTime(1e9, hd.FinalRate)+30*time.Second) + 120*time.Second/4))
	if !hd.FinalStart.Equal(wantStart) || !mig.Start.Equal(wantStart) {
		t.Errorf("final checkpoint at %v (flow %v), want the latest safe start %v", hd.FinalStart.Sub(testEpoch), mig.Start.Sub(testEpoch), wantStart.Sub(testEpoch))
	}
	rmin := 1e9 / (deadline.Sub(wantStart) - 30*time.Second).Seconds()
	if math.Abs(mig.MinRate-rmin) > 1e-6*rmin || mig.Rate < rmin {
		t.Errorf("migration r_min %g rate %g, want r_min %g from the final start and rate ≥ it", mig.MinRate, mig.Rate, rmin)
	}
	// The checkpoints share what is left of the uplink.
	var ckpt float64
	for _, f := range d.Flows {
		if f.Class == ClassPresync {
			ckpt += f.Ceiling
		}
	}
	if math.Abs(ckpt+mig.Ceiling-share) > 1e-6*share {
		t.Errorf("uplink: checkpoints %g + migration %g at ceilings, want the share %g used up", ckpt, mig.Ceiling, share)
	}
	if len(d.Jobs) != 3 {
		t.Errorf("P1 decided %d jobs, want 3 (the reclaimed job is in hand-off)", len(d.Jobs))
	}
}

func TestTickNoticeNotLongerThanRestartIsInfeasible(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 3, access: gbit, uplink: gbit})
	j := testJob("j", nodes[0].ID)
	j.CheckpointBytes = 1 // nothing to move: only the notice matters
	s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams(),
		Reclaims: []Reclaim{{Node: nodes[0].ID, Announced: testEpoch, Deadline: testEpoch.Add(j.RestartTime)}}}
	d := Tick(s, testEpoch)
	if len(d.Handoffs) != 1 || !d.Handoffs[0].Degraded || d.Handoffs[0].Reason != ReasonNoticeShort || d.Handoffs[0].FinalCheckpoint {
		t.Fatalf("hand-offs %+v, want one degraded with %q", d.Handoffs, ReasonNoticeShort)
	}
	for _, f := range d.Flows {
		if f.Class == ClassMigration {
			t.Errorf("flow %s admitted for an infeasible notice", f.ID)
		}
	}
	s.Reclaims[0].Deadline = testEpoch.Add(j.RestartTime + 5*time.Second)
	if d := Tick(s, testEpoch); d.Handoffs[0].Degraded || !d.Handoffs[0].FinalCheckpoint {
		t.Errorf("notice Tr+5 s with 1 byte: %+v, want a final checkpoint", d.Handoffs[0])
	}
}

func TestTickStandbyDeltaHandoff(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 4, access: gbit, uplink: gbit})
	j := testJob("j", nodes[0].ID)
	j.Standby, j.StandbyHas = nodes[2].ID, 9.5e9
	s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams(),
		Reclaims: []Reclaim{{Node: nodes[0].ID, Announced: testEpoch, Deadline: testEpoch.Add(45 * time.Second)}}}
	d := Tick(s, testEpoch)
	h := d.Handoffs[0]
	if h.To != nodes[2].ID || h.Bytes != 5e8 || !h.FinalCheckpoint {
		t.Fatalf("hand-off %+v, want to the standby %s with 5e8 bytes and a final checkpoint", h, nodes[2].ID)
	}
	checkInvariants(t, s, d, testEpoch)
}

func TestTickEmergencyRecoversFromReplica(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 3, access: gbit, uplink: gbit})
	j := testJob("j", nodes[0].ID)
	j.Replicas = []NodeID{nodes[4].ID}
	s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams(),
		Reclaims: []Reclaim{{Node: nodes[0].ID, Announced: testEpoch, Deadline: testEpoch}}}
	d := Tick(s, testEpoch)
	if len(d.Handoffs) != 1 || d.Handoffs[0].Reason != ReasonEmergency || !d.Handoffs[0].Degraded {
		t.Fatalf("hand-offs %+v, want one emergency degraded", d.Handoffs)
	}
	if len(d.Placements) != 1 || d.Placements[0].From != nodes[4].ID || !d.Placements[0].Recovery || d.Placements[0].To == nodes[0].ID || d.Placements[0].To == "" {
		t.Fatalf("placements %+v, want a recovery from %s", d.Placements, nodes[4].ID)
	}
	// The replica holder itself may host the job: nothing to move.
	if d.Placements[0].To == nodes[4].ID {
		for _, f := range d.Flows {
			if f.Job == "j" && f.Class == ClassMigration {
				t.Errorf("restore flow %s although the job restarts on its replica holder", f.ID)
			}
		}
	}
	if len(d.Jobs) != 0 {
		t.Errorf("P1 decided %d jobs for a job whose host is gone", len(d.Jobs))
	}
}

// TestTickSkipsOnlyWhatCannotFit overloads one building uplink with
// hand-offs of staggered deadlines and checks that every degraded hand-off
// could not have been admitted next to the admitted ones with earlier
// deadlines, on any destination.
func TestTickSkipsOnlyWhatCannotFit(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 8, access: 10 * gbit, uplink: gbit})
	for i := range nodes {
		if nodes[i].Building == "b0" {
			nodes[i].FreeGPUs = 0
		}
	}
	s := Snapshot{Nodes: nodes, Links: links, Params: DefaultParams()}
	for k := range 8 {
		j := testJob(fmt.Sprintf("j%d", k), nodeName(0, k))
		j.CheckpointBytes = 2e9
		s.Jobs = append(s.Jobs, j)
		s.Reclaims = append(s.Reclaims, Reclaim{Node: nodeName(0, k), Announced: testEpoch, Deadline: testEpoch.Add(time.Duration(60+10*k) * time.Second)})
	}
	d := Tick(s, testEpoch)
	checkInvariants(t, s, d, testEpoch)
	share := MigrationShare(gbit, gbit, 0.3, 0)
	admitted, degraded := 0, 0
	var used float64 // ceilings of admitted flows so far, at admission (r_min·cf)
	flows := map[JobID]FlowDecision{}
	for _, f := range d.Flows {
		flows[f.Job] = f
	}
	for k := range 8 { // deadlines increase with k
		h := d.Handoffs[k]
		dl := testEpoch.Add(time.Duration(60+10*k) * time.Second)
		need := 1.1 * 2e9 / (dl.Sub(testEpoch) - 30*time.Second).Seconds()
		if h.Degraded {
			degraded++
			if used+need <= share*(1-1e-9) {
				t.Errorf("%s degraded (%s) although r_min·1.1 = %.3g fits in the %.3g left", h.Job, h.Reason, need, share-used)
			}
			continue
		}
		admitted++
		used += flows[h.Job].MinRate * 1.1
	}
	if admitted == 0 || degraded == 0 {
		t.Fatalf("admitted %d, degraded %d: the scenario should overload the uplink", admitted, degraded)
	}
}

func TestTickSwitchesOff(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 36))
	s := scenario(rng, 3, 6, 30)
	s.Params.Switches = Switches{}
	d := Tick(s, testEpoch)
	for _, jd := range d.Jobs {
		if jd.Interval != s.Params.FixedInterval {
			t.Errorf("P1 off: job %s interval %v, want %v", jd.Job, jd.Interval, s.Params.FixedInterval)
		}
	}
	for _, f := range d.Flows {
		if f.Ceiling != 0 || f.Burst != 0 {
			t.Errorf("P3 off: flow %s has ceiling %g burst %d, want none", f.ID, f.Ceiling, f.Burst)
		}
	}
}

func TestTickHazardFloorWithEmptyProfiles(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 3, access: gbit, uplink: gbit})
	for i := range nodes {
		nodes[i].Emergency, nodes[i].Departure = HazardProfile{}, HazardProfile{}
	}
	j := testJob("j", nodes[0].ID)
	j.LossBudget = 0
	s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams()}
	d := Tick(s, testEpoch)
	if len(d.Jobs) != 1 {
		t.Fatalf("got %d job decisions, want 1", len(d.Jobs))
	}
	jd := d.Jobs[0]
	if jd.Hazard != MinHazard {
		t.Errorf("hazard %g with an empty profile, want the floor %g", jd.Hazard, MinHazard)
	}
	want, _ := ConstrainedInterval(j.CheckpointBytes, MinHazard, jd.Bandwidth, 0.2, 0)
	if jd.Interval != want || jd.Interval <= 0 || jd.Interval > MaxInterval {
		t.Errorf("interval %v, want %v (finite, from the floor hazard)", jd.Interval, want)
	}
}

// TestTickInvariantsAtBenchmarkScale checks the same invariants on the
// benchmark's 500- and 5,000-node snapshots, where thousands of flows share
// links and rounding in the water-filling would show.
func TestTickInvariantsAtBenchmarkScale(t *testing.T) {
	for _, size := range []struct {
		nodes, jobs int
		cold        bool
	}{{500, 500, true}, {5000, 5000, false}} {
		s := benchSnapshot(size.nodes, size.jobs, size.cold)
		d := Tick(s, testEpoch)
		checkInvariants(t, s, d, testEpoch)
		var ckpt int
		for _, f := range d.Flows {
			if f.Class == ClassPresync {
				ckpt++
			}
		}
		if ckpt < size.jobs*9/10 {
			t.Errorf("%d nodes: only %d checkpoint flows for %d jobs", size.nodes, ckpt, size.jobs)
		}
	}
}

// TestTickRecoversFromLeavingHolder: a replica on a node under scheduled
// reclaim is still readable until that node's deadline, so an emergency
// recovery restores from it when the transfer lands in time, and starts
// over when it cannot.
func TestTickRecoversFromLeavingHolder(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 3, access: gbit, uplink: gbit})
	j := testJob("j", nodes[0].ID)
	j.Replicas = []NodeID{nodes[4].ID}
	for _, tt := range []struct {
		notice time.Duration
		want   NodeID
	}{
		{300 * time.Second, nodes[4].ID}, // 10 GB at ~80 MB/s: ~126 s
		{60 * time.Second, ""},
	} {
		s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams(),
			Reclaims: []Reclaim{
				{Node: nodes[0].ID, Announced: testEpoch, Deadline: testEpoch},
				{Node: nodes[4].ID, Announced: testEpoch, Deadline: testEpoch.Add(tt.notice)},
			}}
		d := Tick(s, testEpoch)
		if len(d.Placements) != 1 || d.Placements[0].From != tt.want || d.Placements[0].To == nodes[4].ID || d.Placements[0].To == nodes[0].ID {
			t.Fatalf("holder leaving in %v: placements %+v, want a recovery from %q, not onto a leaving node", tt.notice, d.Placements, tt.want)
		}
		for _, f := range d.Flows {
			if f.Job != "j" || f.Class != ClassMigration {
				continue
			}
			if tt.want == "" {
				t.Errorf("holder leaving in %v: restore flow %+v although no copy can land in time", tt.notice, f)
			} else if secs := float64(j.CheckpointBytes) / f.Rate; secs > tt.notice.Seconds() {
				t.Errorf("holder leaving in %v: restore at %g B/s takes %.0f s, after the holder leaves", tt.notice, f.Rate, secs)
			}
		}
		checkInvariants(t, s, d, testEpoch)
	}
}

// TestTickRecoversFromLeavingHolderAtTheEstimate: when the only holder
// is leaving and its copy cannot land before it leaves at the paths' lower
// bounds but can at the estimated rate, the job is still placed from it
// (the state machine returns it to recovery if the holder leaves first)
// rather than started from the beginning; not when even the estimate is
// too slow.
func TestTickRecoversFromLeavingHolderAtTheEstimate(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 3, access: gbit, uplink: gbit})
	for i := range links {
		links[i].AvailableLow = links[i].Available / 2 // an uncertain estimate
	}
	j := testJob("j", nodes[0].ID)
	j.Replicas = []NodeID{nodes[4].ID}
	atEstimate := time.Duration(float64(j.CheckpointBytes) / MigrationShare(gbit, gbit, DefaultParams().BetaP3, 0) * float64(time.Second))
	for _, tt := range []struct {
		notice time.Duration
		want   NodeID
	}{
		{atEstimate + atEstimate/4, nodes[4].ID}, // fits the estimate, not the lower bound (2×)
		{atEstimate / 2, ""},
	} {
		s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams(),
			Reclaims: []Reclaim{
				{Node: nodes[0].ID, Announced: testEpoch, Deadline: testEpoch},
				{Node: nodes[4].ID, Announced: testEpoch, Deadline: testEpoch.Add(tt.notice)},
			}}
		d := Tick(s, testEpoch)
		if len(d.Placements) != 1 || d.Placements[0].From != tt.want || d.Placements[0].To == "" {
			t.Fatalf("holder leaving in %v (transfer at the estimate %v): placements %+v, want a recovery from %q", tt.notice, atEstimate, d.Placements, tt.want)
		}
		checkInvariants(t, s, d, testEpoch)
	}
}

// TestTickJudgesCarriedHandoffOnItsProgress: a hand-off under way is
// judged on the bytes it still has to move. 60 s before the deadline, with
// a 30-s restart, a 10 GB hand-off cannot start over on a 1 Gbit/s path
// (its lower bound, 0.5 Gbit/s: 160 s), but one with 1 GB left (16 s)
// stays admitted to its destination; reported as not started, the same
// flow degrades. (The agent's leader learns other
// nodes' progress from gossip.)
func TestTickJudgesCarriedHandoffOnItsProgress(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 4, access: gbit, uplink: gbit})
	j := testJob("j", nodes[0].ID)
	announced := testEpoch.Add(-80 * time.Second)
	for _, tt := range []struct {
		remaining int64
		degraded  bool
	}{{1e9, false}, {j.CheckpointBytes, true}} {
		s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams(),
			Reclaims: []Reclaim{{Node: nodes[0].ID, Announced: announced, Deadline: testEpoch.Add(time.Minute)}},
			Flows: []Flow{{ID: "mig/j", Job: "j", From: nodes[0].ID, To: nodes[2].ID, Class: ClassMigration,
				Remaining: tt.remaining, Deadline: testEpoch.Add(time.Minute), Start: announced, Rate: 125e6}}}
		d := Tick(s, testEpoch)
		if len(d.Handoffs) != 1 {
			t.Fatalf("remaining %d: hand-offs %+v, want one", tt.remaining, d.Handoffs)
		}
		h := d.Handoffs[0]
		if h.Degraded != tt.degraded || !tt.degraded && (h.To != nodes[2].ID || h.Bytes != tt.remaining) {
			t.Errorf("remaining %d: hand-off %+v, want degraded = %v (else to %s with %d bytes)", tt.remaining, h, tt.degraded, nodes[2].ID, tt.remaining)
		}
		checkInvariants(t, s, d, testEpoch)
	}
}

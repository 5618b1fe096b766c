package policy

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTickLastChanceCheckpoint: a scheduled reclaim whose notice holds the
// transfer but not the restart (C/B⁻ < τ < C/B⁻ + Tr) is a degraded
// hand-off, and P1 orders a checkpoint now to the standby, paced so it
// lands before the deadline; with a notice shorter than the transfer, or
// P1 off, there is none. The threshold is computed here from the path's
// lower bound, independently of Tick.
func TestTickLastChanceCheckpoint(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 3, access: gbit, uplink: gbit})
	j := testJob("j", nodes[0].ID)
	j.RestartTime = 120 * time.Second
	p := DefaultParams()
	// The access links' lower bound at the ceiling: the best rate a new
	// flow can be admitted at on an idle path.
	low := MigrationShare(gbit, gbit, p.BetaP3, p.Bmin) / p.CeilingFactor
	transfer := time.Duration(float64(j.CheckpointBytes) / low * float64(time.Second))
	for _, tt := range []struct {
		name   string
		notice time.Duration
		p1     bool
		want   bool
	}{
		{"transfer fits, restart does not", transfer + j.RestartTime/2, true, true},
		{"just above the transfer", transfer + 2*time.Second, true, true},
		{"shorter than the transfer", transfer - 2*time.Second, true, false},
		{"P1 off", transfer + j.RestartTime/2, false, false},
	} {
		params := p
		params.Switches.P1 = tt.p1
		s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: params,
			Reclaims: []Reclaim{{Node: nodes[0].ID, Announced: testEpoch, Deadline: testEpoch.Add(tt.notice)}}}
		d := Tick(s, testEpoch)
		if len(d.Handoffs) != 1 || !d.Handoffs[0].Degraded || d.Handoffs[0].FinalCheckpoint {
			t.Fatalf("%s: hand-offs %+v, want one degraded (Tr does not fit)", tt.name, d.Handoffs)
		}
		var jd *JobDecision
		for i := range d.Jobs {
			if d.Jobs[i].Job == j.ID {
				jd = &d.Jobs[i]
			}
		}
		if (jd != nil) != tt.want {
			t.Fatalf("%s: job decision %+v, want a last-chance checkpoint: %v", tt.name, jd, tt.want)
		}
		if !tt.want {
			continue
		}
		if jd.Interval != RescueInterval || jd.Standby == "" || jd.Standby == nodes[0].ID {
			t.Errorf("%s: decision %+v, want interval %v to a standby", tt.name, jd, RescueInterval)
		}
		if lands := float64(j.CheckpointBytes) / jd.Bandwidth; lands > tt.notice.Seconds() {
			t.Errorf("%s: %d bytes at %g B/s take %.1f s, after the deadline %v", tt.name, j.CheckpointBytes, jd.Bandwidth, lands, tt.notice)
		}
		var flow bool
		for _, f := range d.Flows {
			flow = flow || (f.Job == j.ID && f.Class == ClassPresync && f.Rate == jd.Bandwidth && string(f.To) == string(jd.Standby))
		}
		if !flow {
			t.Errorf("%s: no pre-sync flow at the decided rate in %+v", tt.name, d.Flows)
		}
		checkInvariants(t, s, d, testEpoch)
	}
}

// TestTickDegradedHandoffRecoversEarly: a scheduled reclaim whose notice
// holds neither a hand-off nor a last-chance checkpoint recovers the job
// at once from its freshest live replica, while the holders are still up
// (the leaving node included when the restore lands before it leaves);
// with no replica at all the job is left running (nothing to gain by
// starting it again from the beginning now).
func TestTickDegradedHandoffRecoversEarly(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 3, access: gbit, uplink: gbit})
	p := DefaultParams()
	low := MigrationShare(gbit, gbit, p.BetaP3, p.Bmin) / p.CeilingFactor
	base := testJob("j", nodes[0].ID)
	transfer := time.Duration(float64(base.CheckpointBytes) / low * float64(time.Second))
	for _, tt := range []struct {
		name     string
		replicas []NodeID
		leaving  []NodeID // other nodes under the same scheduled reclaim
		notice   time.Duration
		wantFrom NodeID // "" for no placement
	}{
		{"replica on a staying node", []NodeID{nodes[4].ID}, nil, transfer / 2, nodes[4].ID},
		{"replica on another leaving node", []NodeID{nodes[4].ID}, []NodeID{nodes[4].ID}, 2 * transfer, nodes[4].ID},
		{"only the leaving host holds it", []NodeID{nodes[0].ID}, nil, 2 * transfer, nodes[0].ID},
		{"holder leaves before a restore lands", []NodeID{nodes[4].ID}, []NodeID{nodes[4].ID}, transfer / 2, ""},
		{"no replica", nil, nil, transfer / 2, ""},
	} {
		j := base
		j.Replicas = tt.replicas
		// A restart longer than any notice here: no hand-off is feasible.
		j.RestartTime = 3 * transfer
		rs := []Reclaim{{Node: nodes[0].ID, Announced: testEpoch, Deadline: testEpoch.Add(tt.notice)}}
		for _, n := range tt.leaving {
			rs = append(rs, Reclaim{Node: n, Announced: testEpoch, Deadline: testEpoch.Add(tt.notice)})
		}
		params := p
		params.Switches.P1 = false // no last-chance checkpoint
		s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: params, Reclaims: rs}
		d := Tick(s, testEpoch)
		if len(d.Handoffs) != 1 || !d.Handoffs[0].Degraded {
			t.Fatalf("%s: hand-offs %+v, want one degraded", tt.name, d.Handoffs)
		}
		if tt.wantFrom == "" {
			if len(d.Placements) != 0 {
				t.Errorf("%s: placements %+v, want none", tt.name, d.Placements)
			}
			checkInvariants(t, s, d, testEpoch)
			continue
		}
		if len(d.Placements) != 1 || !d.Placements[0].Recovery || d.Placements[0].From != tt.wantFrom {
			t.Fatalf("%s: placements %+v, want a recovery from %s", tt.name, d.Placements, tt.wantFrom)
		}
		to := d.Placements[0].To
		if to == "" || to == nodes[0].ID || slices.Contains(tt.leaving, to) {
			t.Errorf("%s: recovery onto %q, want a node that stays", tt.name, to)
		}
		var restore *FlowDecision
		for i, f := range d.Flows {
			if f.Job == j.ID && f.Class == ClassMigration {
				restore = &d.Flows[i]
			}
		}
		switch {
		case tt.wantFrom == to:
			if restore != nil {
				t.Errorf("%s: restore flow %+v onto the holder itself", tt.name, restore)
			}
		case restore == nil || restore.From != tt.wantFrom || restore.To != to || restore.Rate <= 0:
			t.Errorf("%s: restore flow %+v, want %s → %s at a positive rate", tt.name, restore, tt.wantFrom, to)
		}
		checkInvariants(t, s, d, testEpoch)
	}

	// With a last-chance checkpoint possible the job keeps running instead.
	j := base
	j.Replicas = []NodeID{nodes[4].ID}
	j.RestartTime = 3 * transfer
	s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: p,
		Reclaims: []Reclaim{{Node: nodes[0].ID, Announced: testEpoch, Deadline: testEpoch.Add(2 * transfer)}}}
	d := Tick(s, testEpoch)
	if len(d.Placements) != 0 {
		t.Errorf("rescue possible: placements %+v, want none (a last-chance checkpoint instead)", d.Placements)
	}
	if len(d.Jobs) != 1 || d.Jobs[0].Interval != RescueInterval {
		t.Errorf("rescue possible: job decisions %+v, want a last-chance checkpoint", d.Jobs)
	}
}

// TestTickEvacuatesReplicasOfLeavingHolders: a running job whose only
// live replica is on a node under a scheduled reclaim gets an evacuation
// flow from that node to its (staying) standby, admitted within P3's
// share; none when a staying node holds a copy, when the reclaim is an
// emergency (no time), or when the job's own host is leaving (its hand-off
// covers it).
func TestTickEvacuatesReplicasOfLeavingHolders(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 3, access: gbit, uplink: gbit})
	j := testJob("j", nodes[0].ID)
	scheduled := func(n NodeID) Reclaim {
		// 10 GB in 10 min: ≈ 17 MB/s, well within an idle gigabit path.
		return Reclaim{Node: n, Announced: testEpoch, Deadline: testEpoch.Add(10 * time.Minute)}
	}
	for _, tt := range []struct {
		name     string
		replicas []NodeID
		reclaims []Reclaim
		wantFrom NodeID // "" for no evacuation
	}{
		{"only replica leaving", []NodeID{nodes[1].ID}, []Reclaim{scheduled(nodes[1].ID)}, nodes[1].ID},
		{"a staying copy too", []NodeID{nodes[1].ID, nodes[4].ID}, []Reclaim{scheduled(nodes[1].ID)}, ""},
		{"replica on an emergency", []NodeID{nodes[1].ID}, []Reclaim{{Node: nodes[1].ID, Announced: testEpoch, Deadline: testEpoch}}, ""},
		{"host leaving", []NodeID{nodes[1].ID}, []Reclaim{scheduled(nodes[1].ID), scheduled(nodes[0].ID)}, ""},
		{"nothing leaving", []NodeID{nodes[1].ID}, nil, ""},
		{"cannot land in time", []NodeID{nodes[1].ID}, []Reclaim{{Node: nodes[1].ID, Announced: testEpoch, Deadline: testEpoch.Add(10 * time.Second)}}, ""},
	} {
		job := j
		job.Replicas = tt.replicas
		s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{job}, Params: DefaultParams(), Reclaims: tt.reclaims}
		d := Tick(s, testEpoch)
		var evac *FlowDecision
		for i, f := range d.Flows {
			if strings.HasPrefix(f.ID, EvacuationPrefix) {
				evac = &d.Flows[i]
			}
		}
		if tt.wantFrom == "" {
			if evac != nil {
				t.Errorf("%s: evacuation %+v, want none", tt.name, evac)
			}
			checkInvariants(t, s, d, testEpoch)
			continue
		}
		var standby NodeID
		for _, jd := range d.Jobs {
			if jd.Job == j.ID {
				standby = jd.Standby
			}
		}
		if evac == nil || evac.From != tt.wantFrom || evac.To != standby || standby == "" || evac.Class != ClassPresync || evac.Rate <= 0 || evac.Ceiling <= 0 {
			t.Fatalf("%s: evacuation %+v (standby %q), want %s → standby, pre-sync, paced with a ceiling", tt.name, evac, standby, tt.wantFrom)
		}
		if slices.Contains(tt.replicas, evac.To) || evac.To == nodes[0].ID {
			t.Errorf("%s: evacuation to %s, a holder or the host", tt.name, evac.To)
		}
		if lands := float64(job.CheckpointBytes) / evac.Rate; lands > tt.reclaims[0].Deadline.Sub(testEpoch).Seconds() {
			t.Errorf("%s: %d bytes at %g B/s take %.0f s, after the holder leaves", tt.name, job.CheckpointBytes, evac.Rate, lands)
		}
		checkInvariants(t, s, d, testEpoch)
	}
}

// TestTickCountsRestoresInFlight: a restore decided in an earlier period
// and still under way (a carried flow, RestorePrefix) keeps its place on
// every link it crosses: it is decided again, with a rate, and the
// evacuation that wants the same uplink gets only what is left, so the
// flows at their ceilings stay within P3's share. A carried restore of a
// job that is no longer on its destination is dropped.
func TestTickCountsRestoresInFlight(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 3, access: gbit, uplink: gbit})
	// Both copies leave b0-n01 before its owner takes it back: job r waits
	// on b1 for its restore, job e's only replica must be evacuated.
	restored := testJob("r", nodes[3].ID)
	carried := Flow{ID: RestorePrefix + "r", Job: restored.ID, From: nodes[1].ID, To: nodes[3].ID,
		Class: ClassMigration, Remaining: restored.CheckpointBytes, Start: testEpoch.Add(-5 * time.Second)}
	running := testJob("e", nodes[4].ID)
	running.Replicas = []NodeID{nodes[1].ID}
	reclaim := Reclaim{Node: nodes[1].ID, Announced: testEpoch, Deadline: testEpoch.Add(20 * time.Minute)}

	evacRate := func(d Decisions) float64 {
		for _, f := range d.Flows {
			if strings.HasPrefix(f.ID, EvacuationPrefix) {
				return f.Rate
			}
		}
		return 0
	}
	base := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{restored, running}, Params: DefaultParams(), Reclaims: []Reclaim{reclaim}}
	alone := Tick(base, testEpoch)
	checkInvariants(t, base, alone, testEpoch)
	if evacRate(alone) <= 0 {
		t.Fatalf("without a restore in flight: flows %+v, want an evacuation", alone.Flows)
	}

	s := base
	s.Flows = []Flow{carried}
	d := Tick(s, testEpoch)
	checkInvariants(t, s, d, testEpoch)
	var restore *FlowDecision
	for i, f := range d.Flows {
		if f.ID == carried.ID {
			restore = &d.Flows[i]
		}
	}
	if restore == nil || restore.From != carried.From || restore.To != carried.To || restore.Class != ClassMigration ||
		restore.Rate <= 0 || restore.Ceiling < restore.Rate {
		t.Fatalf("restore in flight decided as %+v, want %s → %s, migration, paced with a ceiling", restore, carried.From, carried.To)
	}
	if got, was := evacRate(d), evacRate(alone); got >= was {
		t.Errorf("evacuation at %g B/s with a restore on its uplink, %g without: the restore is not counted", got, was)
	}

	moved := s
	moved.Jobs = []Job{testJob("r", nodes[5].ID), running} // placed elsewhere since
	d = Tick(moved, testEpoch)
	for _, f := range d.Flows {
		if f.ID == carried.ID {
			t.Errorf("restore to %s decided for a job now on %s: %+v", carried.To, nodes[5].ID, f)
		}
	}
}

// TestTickKeepsEvacuationUnderWay: an evacuation decided earlier and
// still running (a carried flow) goes on with its holder, destination,
// rate and start even when, judged from scratch (the whole copy in what
// is left of the notice), it would no longer be admitted; it ends when
// its destination starts leaving too (it is then chosen again, here not
// at all: nothing fits any more).
func TestTickKeepsEvacuationUnderWay(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 2, perBuilding: 3, access: gbit, uplink: gbit})
	j := testJob("j", nodes[0].ID)
	j.Replicas = []NodeID{nodes[1].ID}
	// 10 GB in 30 s left: no evacuation from scratch (see the "cannot
	// land in time" case above).
	reclaim := Reclaim{Node: nodes[1].ID, Announced: testEpoch.Add(-10 * time.Minute), Deadline: testEpoch.Add(30 * time.Second)}
	carried := Flow{ID: EvacuationPrefix + "j", Job: j.ID, From: nodes[1].ID, To: nodes[2].ID, Class: ClassPresync,
		Remaining: j.CheckpointBytes, Start: testEpoch.Add(-9 * time.Minute), Rate: 2e7}
	s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams(), Reclaims: []Reclaim{reclaim}}
	find := func(d Decisions) *FlowDecision {
		for i, f := range d.Flows {
			if strings.HasPrefix(f.ID, EvacuationPrefix) {
				return &d.Flows[i]
			}
		}
		return nil
	}
	if f := find(Tick(s, testEpoch)); f != nil {
		t.Fatalf("from scratch: evacuation %+v, want none (the test proves nothing)", f)
	}
	s.Flows = []Flow{carried}
	d := Tick(s, testEpoch)
	checkInvariants(t, s, d, testEpoch)
	f := find(d)
	if f == nil || f.From != carried.From || f.To != carried.To || f.Rate != carried.Rate || !f.Start.Equal(carried.Start) || f.Ceiling < f.Rate {
		t.Fatalf("under way: evacuation %+v, want %s → %s kept at %g B/s from its start", f, carried.From, carried.To, carried.Rate)
	}
	var standby NodeID
	for _, jd := range d.Jobs {
		if jd.Job == j.ID {
			standby = jd.Standby
		}
	}
	if standby != carried.To {
		t.Errorf("standby %q while the evacuation goes to %s", standby, carried.To)
	}
	s.Reclaims = append(s.Reclaims, Reclaim{Node: nodes[2].ID, Announced: testEpoch, Deadline: testEpoch.Add(time.Hour)})
	if f := find(Tick(s, testEpoch)); f != nil && f.To == nodes[2].ID {
		t.Errorf("destination leaving: evacuation %+v still kept", f)
	}
}

// TestTickLastChanceFinishesCheckpointInFlight: when a reclaim's notice is
// too short for a new checkpoint to get off the node but the periodic one
// already on its way can land, that one is the rescue: the job keeps its
// standby (the flow's destination) at a rate that lands the rest before
// the deadline, and is not recovered early from its older replica (which
// would throw the nearly sent checkpoint away). With too much left, or a
// destination that is leaving too, it is the early recovery as before.
func TestTickLastChanceFinishesCheckpointInFlight(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 4, access: gbit, uplink: gbit})
	p := DefaultParams()
	low := MigrationShare(gbit, gbit, p.BetaP3, p.Bmin) / p.CeilingFactor
	j := testJob("j", nodes[0].ID)
	j.RestartTime = 2 * time.Minute
	j.Standby, j.Replicas = nodes[2].ID, []NodeID{nodes[2].ID}
	notice := time.Duration(float64(j.CheckpointBytes) / low / 4 * float64(time.Second)) // a new one cannot land
	for _, tt := range []struct {
		name      string
		remaining int64
		to        NodeID
		rescued   bool
	}{
		{"a tenth left", j.CheckpointBytes / 10, nodes[2].ID, true},
		{"half left", j.CheckpointBytes / 2, nodes[2].ID, false},
		{"a tenth left, destination leaving", j.CheckpointBytes / 10, nodes[3].ID, false},
		{"no push in flight", 0, "", false},
	} {
		s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: p,
			Reclaims: []Reclaim{
				{Node: nodes[0].ID, Announced: testEpoch, Deadline: testEpoch.Add(notice)},
				{Node: nodes[3].ID, Announced: testEpoch, Deadline: testEpoch.Add(time.Hour)},
			}}
		if tt.remaining > 0 {
			s.Flows = []Flow{{ID: CheckpointPrefix + "j", Job: "j", From: nodes[0].ID, To: tt.to, Class: ClassPresync,
				Remaining: tt.remaining, Start: testEpoch.Add(-time.Minute), Rate: low}}
		}
		d := Tick(s, testEpoch)
		var jd *JobDecision
		for i := range d.Jobs {
			if d.Jobs[i].Job == "j" {
				jd = &d.Jobs[i]
			}
		}
		recovered := slices.ContainsFunc(d.Placements, func(pl Placement) bool { return pl.Job == "j" })
		if got := jd != nil && jd.Interval == RescueInterval; got != tt.rescued || recovered == tt.rescued {
			t.Fatalf("%s: decision %+v, placements %+v; want rescued = %v (else recovered early)", tt.name, jd, d.Placements, tt.rescued)
		}
		if tt.rescued {
			if jd.Standby != tt.to || float64(tt.remaining)/jd.Bandwidth > notice.Seconds() {
				t.Errorf("%s: decision %+v, want the flow's destination %s and %d bytes landing within %v", tt.name, jd, tt.to, tt.remaining, notice)
			}
		}
		checkInvariants(t, s, d, testEpoch)
	}
}

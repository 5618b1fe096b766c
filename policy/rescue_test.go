package policy

import (
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

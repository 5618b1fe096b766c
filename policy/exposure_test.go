package policy

import (
	"testing"
	"time"
)

// TestTickExposedJobCheckpointsNow: a running job whose work since its
// freshest off-node copy already exceeds its interval (its copies' holders
// left, or it restarted on the node that held its only copy) is ordered to
// checkpoint now; a job exposed less than its interval, or not reported,
// keeps P1.5's interval; with P1 off (B3) the fixed interval stays.
func TestTickExposedJobCheckpointsNow(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 4, access: gbit, uplink: gbit})
	base := Tick(Snapshot{Nodes: nodes, Links: links, Jobs: []Job{testJob("j", nodes[0].ID)}, Params: DefaultParams()}, testEpoch)
	interval := base.Jobs[0].Interval
	if interval <= exposureSlack || interval == RescueInterval {
		t.Fatalf("P1.5's interval %v: the test needs a longer one", interval)
	}
	for _, tt := range []struct {
		exposure time.Duration
		now      bool
	}{
		{0, false},
		{time.Minute, false},
		{interval, false},
		{interval + exposureSlack + time.Second, true},
		{2 * time.Hour, true},
	} {
		j := testJob("j", nodes[0].ID)
		j.Exposure = tt.exposure
		s := Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams()}
		d := Tick(s, testEpoch)
		if len(d.Jobs) != 1 {
			t.Fatalf("exposure %v: %d job decisions, want 1", tt.exposure, len(d.Jobs))
		}
		jd := d.Jobs[0]
		want := interval
		if tt.now {
			want = RescueInterval
		}
		if jd.Interval != want || jd.Standby == "" || jd.Bandwidth <= 0 {
			t.Errorf("exposure %v: decision %+v, want interval %v with a standby and a rate", tt.exposure, jd, want)
		}
		checkInvariants(t, s, d, testEpoch)
	}
	j := testJob("j", nodes[0].ID)
	j.Exposure = 2 * time.Hour
	p := DefaultParams()
	p.Switches.P1 = false
	d := Tick(Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: p}, testEpoch)
	if d.Jobs[0].Interval != p.FixedInterval {
		t.Errorf("P1 off: interval %v, want the fixed %v", d.Jobs[0].Interval, p.FixedInterval)
	}
}

// TestTickEarlyFirstCheckpoint: a running job with no live copy off its
// host (just started, started over, or restarted where its only copy
// was) is due for its first checkpoint C/b after its start (one
// checkpoint's transfer) instead of at P1.5's interval; with a copy off
// the host the box stands; P1 off keeps the fixed interval.
func TestTickEarlyFirstCheckpoint(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 4, access: gbit, uplink: gbit})
	for _, tt := range []struct {
		name     string
		replicas []NodeID
		exposure time.Duration
		early    bool
	}{
		{"no copy, some work", nil, time.Minute, true},
		{"no copy, just started", nil, 0, true},
		{"a copy off the host", []NodeID{nodes[2].ID}, time.Minute, false},
	} {
		j := testJob("j", nodes[0].ID)
		j.Replicas, j.Exposure, j.Started = tt.replicas, tt.exposure, testEpoch.Add(-tt.exposure)
		d := Tick(Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams()}, testEpoch)
		jd := d.Jobs[0]
		box := IntervalBox(j.CheckpointBytes, jd.Hazard, jd.Bandwidth, DefaultParams().BetaP1, j.LossBudget)
		first := transferTime(j.CheckpointBytes, jd.Bandwidth)
		if first >= box.Interval {
			t.Fatalf("%s: C/b %v not below the box %v: the test needs a shorter transfer", tt.name, first, box.Interval)
		}
		switch {
		case tt.early && (jd.Interval != first || jd.Bound != BoundFirst):
			t.Errorf("%s: interval %v (%v), want C/b = %v (first checkpoint)", tt.name, jd.Interval, jd.Bound, first)
		case !tt.early && (jd.Interval != box.Interval || jd.Bound != box.Bound):
			t.Errorf("%s: interval %v (%v), want the box's %v (%v)", tt.name, jd.Interval, jd.Bound, box.Interval, box.Bound)
		}
	}
	// Without Started (not reported) the box stands.
	j := testJob("j", nodes[0].ID)
	if d := Tick(Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: DefaultParams()}, testEpoch); d.Jobs[0].Bound == BoundFirst {
		t.Errorf("start not reported: bound %v, want the box", d.Jobs[0].Bound)
	}
	j.Started = testEpoch
	p := DefaultParams()
	p.Switches.P1 = false
	if d := Tick(Snapshot{Nodes: nodes, Links: links, Jobs: []Job{j}, Params: p}, testEpoch); d.Jobs[0].Interval != p.FixedInterval {
		t.Errorf("P1 off: interval %v, want the fixed %v", d.Jobs[0].Interval, p.FixedInterval)
	}
}

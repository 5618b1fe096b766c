package policy

import (
	"testing"
	"time"
)

func TestKeepAdmittedHandoffs(t *testing.T) {
	now := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	dl := now.Add(10 * time.Second)
	admitted := Decisions{
		Handoffs: []HandoffDecision{{Job: "j", From: "a", To: "b", FinalCheckpoint: true, Bytes: 100, Deadline: dl}},
		Flows:    []FlowDecision{{ID: "mig/j", Job: "j", From: "a", To: "b", Class: ClassMigration, Rate: 50, Ceiling: 55, Burst: 1 << 18, Deadline: dl}},
	}
	snap := Snapshot{
		Nodes: []Node{{ID: "a", Leaving: true}, {ID: "b"}, {ID: "c"}},
		Jobs:  []Job{{ID: "j", State: JobMigrating, Node: "a"}},
	}
	degraded := Decisions{
		Handoffs: []HandoffDecision{{Job: "j", From: "a", Deadline: dl, Degraded: true, Reason: ReasonTooSlow}},
		Jobs:     []JobDecision{{Job: "j", Bandwidth: 5, Standby: "c"}},
		Flows:    []FlowDecision{{ID: "ckpt/j", Job: "j", From: "a", To: "c", Class: ClassPresync, Rate: 5}},
	}
	slower := Decisions{
		Handoffs: admitted.Handoffs,
		Flows:    []FlowDecision{{ID: "mig/j", Job: "j", From: "a", To: "b", Class: ClassMigration, Rate: 20, Ceiling: 22, Burst: 1 << 18, Deadline: dl}},
	}
	emergency := Decisions{Handoffs: []HandoffDecision{{Job: "j", From: "a", Deadline: now, Degraded: true, Reason: ReasonEmergency}}}
	running := snap
	running.Jobs = []Job{{ID: "j", State: JobRunning, Node: "b"}}
	bLeaving := snap
	bLeaving.Nodes = []Node{{ID: "a", Leaving: true}, {ID: "b", Leaving: true}}
	bIneligible := snap
	bIneligible.Nodes = []Node{{ID: "a", Leaving: true}, {ID: "b", Ineligible: "kill-switch hard"}, {ID: "c"}}

	cases := []struct {
		name     string
		next     Decisions
		s        Snapshot
		at       time.Time
		wantTo   NodeID
		wantRate float64
		wantJobs int
	}{
		{"degraded next keeps the admitted hand-off", degraded, snap, now, "b", 50, 0},
		{"slower next is raised to the admitted rate", slower, snap, now, "b", 50, 0},
		{"an emergency releases it", emergency, snap, now, "", 0, 0},
		{"a committed move releases it", degraded, running, now, "", 0, 1},
		{"a leaving destination releases it", degraded, bLeaving, now, "", 0, 1},
		{"an ineligible destination releases it", degraded, bIneligible, now, "", 0, 1},
		{"the deadline releases it", degraded, snap, dl, "", 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := KeepAdmittedHandoffs(admitted, c.next, c.s, c.at)
			if len(got.Handoffs) != 1 || got.Handoffs[0].To != c.wantTo {
				t.Fatalf("hand-offs got %+v, want one to %q", got.Handoffs, c.wantTo)
			}
			var rate float64
			for _, f := range got.Flows {
				if f.Class == ClassMigration && f.Job == "j" {
					rate = f.Rate
				}
			}
			if rate != c.wantRate {
				t.Fatalf("migration rate got %g, want %g (flows %+v)", rate, c.wantRate, got.Flows)
			}
			if len(got.Jobs) != c.wantJobs {
				t.Fatalf("job decisions got %+v, want %d", got.Jobs, c.wantJobs)
			}
		})
	}
}

// A hand-off goes ahead only with a destination and not degraded.
func TestHandoffDecisionAdmitted(t *testing.T) {
	for _, tc := range []struct {
		h    HandoffDecision
		want bool
	}{
		{HandoffDecision{To: "b"}, true},
		{HandoffDecision{To: "b", Degraded: true}, false},
		{HandoffDecision{Degraded: true}, false},
		{HandoffDecision{}, false},
	} {
		if got := tc.h.Admitted(); got != tc.want {
			t.Errorf("%+v: Admitted() = %v, want %v", tc.h, got, tc.want)
		}
	}
}

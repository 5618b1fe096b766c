package state

import (
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

func TestMateriallyEqual(t *testing.T) {
	at := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	base := policy.Decisions{
		Jobs:  []policy.JobDecision{{Job: "j", Bandwidth: 1000, Interval: 10 * time.Minute, Hazard: 1e-4}},
		Flows: []policy.FlowDecision{{ID: "f", Rate: 5e6, Start: at, Links: []string{"l1"}}},
	}
	cases := []struct {
		name   string
		change func(d *policy.Decisions)
		equal  bool
	}{
		{"same", func(d *policy.Decisions) {}, true},
		{"hazard drift 0.5%", func(d *policy.Decisions) { d.Jobs[0].Hazard *= 1.005 }, true},
		{"interval drift 0.5%", func(d *policy.Decisions) { d.Jobs[0].Interval += 3 * time.Second }, true},
		{"start within a period", func(d *policy.Decisions) { d.Flows[0].Start = at.Add(500 * time.Millisecond) }, true},
		{"rate 2%", func(d *policy.Decisions) { d.Flows[0].Rate *= 1.02 }, false},
		{"interval 5%", func(d *policy.Decisions) { d.Jobs[0].Interval += 30 * time.Second }, false},
		{"start two periods", func(d *policy.Decisions) { d.Flows[0].Start = at.Add(2 * time.Second) }, false},
		{"other link", func(d *policy.Decisions) { d.Flows[0].Links = []string{"l2"} }, false},
		{"new flow", func(d *policy.Decisions) { d.Flows = append(d.Flows, policy.FlowDecision{ID: "g"}) }, false},
		{"standby", func(d *policy.Decisions) { d.Jobs[0].Standby = "b" }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := cloneDecisions(base)
			c.change(&d)
			if got := MateriallyEqual(base, d, time.Second); got != c.equal {
				t.Fatalf("got %v, want %v", got, c.equal)
			}
		})
	}
}

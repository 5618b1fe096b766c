package policy

import (
	"strings"
	"testing"
	"time"
)

// TestIneligibleRule checks each condition of the rule alone, in its order.
func TestIneligibleRule(t *testing.T) {
	ok := NodeHealth{Alive: true, Verified: true, DiskKnown: true, DataWritable: true, FreeDisk: 100 << 30,
		NeedDisk: 10 << 30, Load: 0.5, MaxLoad: 0.8, KillSwitch: "off"}
	if r := Ineligible(ok); r != "" {
		t.Fatalf("healthy node: %q, want eligible", r)
	}
	for name, c := range map[string]struct {
		mutate func(*NodeHealth)
		want   string
	}{
		"dead":          {func(h *NodeHealth) { h.Alive = false }, "not alive"},
		"kill hard":     {func(h *NodeHealth) { h.KillSwitch = "hard" }, "kill-switch hard"},
		"kill soft":     {func(h *NodeHealth) { h.KillSwitch = "soft" }, "kill-switch soft"},
		"unverified":    {func(h *NodeHealth) { h.Verified = false }, "certificate not verified"},
		"why":           {func(h *NodeHealth) { h.Verified, h.Unverified = false, "unknown CA" }, "unknown CA"},
		"read-only":     {func(h *NodeHealth) { h.DataWritable = false }, "data directory not writable"},
		"full":          {func(h *NodeHealth) { h.FreeDisk = 1 << 30 }, "data directory full (a checkpoint needs 10.0 GiB)"},
		"full, no size": {func(h *NodeHealth) { h.FreeDisk, h.NeedDisk = 1<<20, 0 }, "data directory full (a checkpoint needs 64.0 MiB)"},
		"reclaimed":     {func(h *NodeHealth) { h.Reclaimed = true }, "reclaimed by its owner"},
		"draining":      {func(h *NodeHealth) { h.Draining = true }, "draining"},
		"loaded":        {func(h *NodeHealth) { h.Load = 0.9 }, "load above θ = 0.80"},
		"first failure": {func(h *NodeHealth) { h.Alive, h.KillSwitch = false, "hard" }, "not alive"},
	} {
		h := ok
		c.mutate(&h)
		if got := Ineligible(h); got != c.want {
			t.Errorf("%s: %q, want %q", name, got, c.want)
		}
	}
	// No kernel layer, or a node that does not report: not a reason.
	for _, ks := range []string{"", "disabled", "unknown"} {
		h := ok
		h.KillSwitch = ks
		if r := Ineligible(h); r != "" {
			t.Errorf("kill-switch %q: %q, want eligible", ks, r)
		}
	}
	h := ok
	h.DiskKnown, h.DataWritable, h.FreeDisk = false, false, 0
	if r := Ineligible(h); r != "" {
		t.Errorf("disk not reported: %q, want eligible", r)
	}
}

// TestIneligibleNodesTakeNothing: with the only other eligible node full,
// an ineligible node is never a placement, a standby or a replica holder,
// and the job that needs one waits with the node's reason.
func TestIneligibleNodesTakeNothing(t *testing.T) {
	nodes, links := buildCampus(campusSpec{buildings: 1, perBuilding: 3, access: 125e6, uplink: 1.25e9})
	for i := range nodes {
		nodes[i].GPUs, nodes[i].FreeGPUs = 1, 1
	}
	nodes[1].Ineligible = "kill-switch hard"
	nodes[2].Ineligible = "data directory full (a checkpoint needs 9.3 GiB)"
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	running := testJob("run", nodes[0].ID)
	running.Replicas = []NodeID{nodes[1].ID}
	running.Standby = nodes[2].ID
	pending := testJob("new", "")
	pending.State = JobPending
	nodes[0].FreeGPUs = 0
	d := Tick(Snapshot{Nodes: nodes, Links: links, Jobs: []Job{running, pending}, Params: DefaultParams()}, now)
	if len(d.Placements) != 1 || d.Placements[0].Job != "new" {
		t.Fatalf("placements %+v, want one for the new job", d.Placements)
	}
	for _, p := range d.Placements {
		if p.To != "" {
			t.Errorf("placement %+v on an ineligible node", p)
		}
		if p.Job == "new" && (!strings.Contains(p.Reason, "not eligible: kill-switch hard (1)") || !strings.Contains(p.Reason, "not eligible: data directory full")) {
			t.Errorf("pending reason %q, want both nodes' reasons", p.Reason)
		}
		for _, c := range p.Candidates {
			if c.Node != nodes[0].ID && c.Rejected != RejectIneligible {
				t.Errorf("candidate %s: rejected %q, want %q", c.Node, c.Rejected, RejectIneligible)
			}
		}
	}
	for _, jd := range d.Jobs {
		if jd.Standby == nodes[1].ID || jd.Standby == nodes[2].ID {
			t.Errorf("job %s: standby %s is ineligible", jd.Job, jd.Standby)
		}
	}
	for _, f := range d.Flows {
		if f.To == nodes[1].ID || f.To == nodes[2].ID {
			t.Errorf("flow %s to ineligible %s", f.ID, f.To)
		}
	}
	if len(d.Ineligible) != 2 || d.Ineligible[0] != (NodeVerdict{Node: nodes[1].ID, Reason: "kill-switch hard"}) {
		t.Errorf("decisions' ineligible nodes %+v", d.Ineligible)
	}
}

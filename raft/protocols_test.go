package raft

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/state"

	"github.com/reclaimnet/reclaimnet/policy"
)

// TestLeaderProtocolsApplyClusterWide runs three coordinators: n00 with P1
// off (a 7-minute fixed interval), n01 and n02 with every protocol on.
// While n00 leads, the recorded settings are its own and the job's interval
// is the fixed one; once leadership moves, the new leader records its own
// settings at once and P1 decides the interval again.
func TestLeaderProtocolsApplyClusterWide(t *testing.T) {
	const fixed = 7 * time.Minute
	cfg := localConfig()
	cfg.Params.Switches = policy.Switches{P2: true, P3: true}
	cfg.Params.FixedInterval = fixed
	tc := newTestCluster(t, 1, cfg, false)
	for _, id := range []policy.NodeID{"n01", "n02"} {
		c := tc.config(id, false)
		c.Params = policy.DefaultParams()
		co, err := Open(c)
		if err != nil {
			t.Fatalf("open %s: %v", id, err)
		}
		tc.nodes[id] = co
		idx := len(tc.nodes)
		tc.gossip.set(Member{ID: id, RaftAddr: co.Addr(), Building: "b0", GPUs: 1,
			GPU: policy.GPU{Model: "A100", VRAM: 80 << 30, Capability: 8}, Status: MemberAlive, Since: tc.since.Add(time.Duration(idx) * time.Minute)})
	}
	l := tc.waitConfigured(3, 30*time.Second)
	if l.ID() != "n00" {
		t.Fatalf("leader %s, want the bootstrap node n00", l.ID())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Submit(ctx, testJob("ablate")); err != nil {
		t.Fatal(err)
	}
	interval := func(c *Coordinator) (time.Duration, *state.Protocols, policy.NodeID) {
		st := c.State()
		for _, jd := range st.Decisions.Jobs {
			if jd.Job == "ablate" {
				return jd.Interval, st.Decisions.Protocols, st.Decisions.Leader
			}
		}
		return 0, st.Decisions.Protocols, st.Decisions.Leader
	}
	// Every node sees n00's settings and the fixed interval.
	wait.For(tc.t, 15*time.Second, "n00's protocols and the fixed interval on every node", func() bool {
		for _, c := range tc.nodes {
			iv, p, by := interval(c)
			if iv != fixed || p == nil || p.Switches != cfg.Params.Switches || p.FixedInterval != fixed || by != "n00" {
				return false
			}
		}
		return true
	})
	if err := l.TransferLeadership(); err != nil {
		t.Fatalf("transfer leadership: %v", err)
	}
	var got time.Duration
	var gotP *state.Protocols
	var by policy.NodeID
	wait.For(tc.t, 20*time.Second, "the new leader's protocols recorded", func() bool {
		got, gotP, by = interval(tc.nodes["n00"])
		return by != "n00" && gotP != nil && *gotP == state.DefaultProtocols()
	})
	if got == fixed || got <= 0 {
		t.Fatalf("with P1 on (leader %s) the interval is %v, want P1's own (not the fixed %v)", by, got, fixed)
	}
}

// TestP2OffSpreadsPlacements: the same snapshot of six equal nodes, one of
// which has a much lower hazard, placed by the leader's tick: with P2 on
// every new job goes to the safest node, with P2 off (random feasible
// destination, seeded) they spread over the nodes.
func TestP2OffSpreadsPlacements(t *testing.T) {
	at := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	st := state.New()
	must := func(cmd state.Command) {
		t.Helper()
		if _, err := st.Apply(cmd); err != nil {
			t.Fatal(err)
		}
	}
	hz := map[policy.NodeID]policy.HazardEstimate{}
	var tel fixedTelemetry
	for i := range 6 {
		id := policy.NodeID("n" + string(rune('0'+i)))
		acc := "acc-" + string(id)
		tel.nodes = append(tel.nodes, NodeTelemetry{ID: id, FreeGPUs: 64, AccessLink: acc})
		tel.links = append(tel.links, policy.Link{ID: acc, A: string(id), B: "sw-b", Capacity: 125e6, Available: 125e6, AvailableLow: 100e6})
		must(state.UpsertNode{Node: state.NodeRecord{ID: id, Admitted: true, Building: "b", GPUs: 64, GPU: policy.GPU{Model: "A100", VRAM: 80 << 30, Capability: 8}, Joined: at.Add(-time.Hour)}})
		rate := 1e-3
		if i == 3 {
			rate = 1e-7
		}
		hz[id] = policy.HazardEstimate{EmergencyUpper: policy.HazardProfile{Rates: []float64{rate}}, Departure: policy.HazardProfile{Rates: []float64{rate}}}
	}
	for i := range 30 {
		must(state.SubmitJob{Job: state.JobRecord{Job: policy.Job{ID: policy.JobID("j" + string(rune('a'+i))), GPUs: 1, CheckpointBytes: 1 << 20, LossBudget: time.Hour, Remaining: 10 * time.Hour},
			Spec: state.JobSpec{Command: []string{"x"}}}})
	}
	spread := func(sw policy.Switches) map[policy.NodeID]int {
		p := policy.DefaultParams()
		p.Switches = sw
		d := policy.Tick(buildSnapshot(st, hz, tel, p, at), at)
		out := map[policy.NodeID]int{}
		for _, pl := range d.Placements {
			out[pl.To]++
		}
		return out
	}
	on := spread(policy.Switches{P1: true, P2: true, P3: true})
	if on["n3"] != 30 {
		t.Fatalf("P2 on: placements %v, want all 30 on the safest node n3", on)
	}
	off := spread(policy.Switches{P1: true, P3: true})
	total := 0
	for _, n := range off {
		total += n
	}
	if total != 30 || len(off) < 4 || off["n3"] > 15 {
		t.Fatalf("P2 off: placements %v, want all 30 spread over at least 4 nodes, not piled on n3", off)
	}
}

// TestForwardedCommandsCheckedAgainstCertificate: a follower forwards
// commands to the leader over mutual TLS. Commands about itself and
// submissions go through; a leader-only kind, or a command about another
// node, is refused with ErrForbidden and changes nothing.
func TestForwardedCommandsCheckedAgainstCertificate(t *testing.T) {
	tc := newTestCluster(t, 2, localConfig(), false)
	l := tc.waitConfigured(1, 30*time.Second)
	var f *Coordinator
	for _, c := range tc.nodes {
		if c != l {
			f = c
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	now := time.Now()
	// Allowed: its own reclaim, a job submission.
	if _, err := f.Submit(ctx, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: f.ID(), Announced: now, Deadline: now.Add(time.Hour)}}); err != nil {
		t.Fatalf("follower's own reclaim: %v", err)
	}
	if _, err := f.Submit(ctx, testJobOn("fwd", f.ID())); err != nil {
		t.Fatalf("job submission from the follower: %v", err)
	}
	forbidden := []state.Command{
		state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: l.ID(), Announced: now, Deadline: now.Add(time.Hour)}},
		state.CancelReclaim{Node: l.ID()},
		state.RecordReclaimReport{Report: state.ReclaimReport{Node: l.ID(), Kind: state.DepartureEmergency, Announced: now, Deadline: now}},
		state.RecordDeparture{Departure: state.Departure{Node: l.ID(), At: now, Kind: state.DepartureEmergency}},
		state.UpsertNode{Node: state.NodeRecord{ID: "intruder", GPUs: 8}},
		state.SetDecisions{Decisions: state.DecisionRecord{At: now, Leader: f.ID()}},
	}
	for _, cmd := range forbidden {
		_, err := f.Submit(ctx, cmd)
		if !errors.Is(err, ErrForbidden) {
			t.Errorf("%s forwarded by %s: got %v, want ErrForbidden", cmd.Kind(), f.ID(), err)
		}
	}
	st := l.State()
	if _, ok := st.Reclaims[l.ID()]; ok {
		t.Error("a reclaim of the leader was recorded from the follower")
	}
	if _, ok := st.Nodes["intruder"]; ok || st.Nodes[l.ID()].State != state.NodeActive {
		t.Errorf("registry changed by forwarded leader-only commands: %+v", st.Nodes)
	}
	if _, ok := st.Reclaims[f.ID()]; !ok {
		t.Error("the follower's own reclaim is missing")
	}
}

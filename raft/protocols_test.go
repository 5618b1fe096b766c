package raft

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

func TestParseProtocols(t *testing.T) {
	cases := []struct {
		in   string
		want policy.Switches
	}{
		{"p1,p2,p3", policy.Switches{P1: true, P2: true, P3: true}},
		{"P3, p1", policy.Switches{P1: true, P3: true}},
		{"p2", policy.Switches{P2: true}},
		{"", policy.Switches{}},
		{"none", policy.Switches{}},
		{" NONE ", policy.Switches{}},
	}
	for _, c := range cases {
		got, err := ParseProtocols(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseProtocols(%q): got %+v, %v; want %+v", c.in, got, err, c.want)
		}
		// FormatSwitches writes what ParseProtocols reads back.
		if back, err := ParseProtocols(FormatSwitches(got)); err != nil || back != got {
			t.Errorf("round trip of %+v through %q: got %+v, %v", got, FormatSwitches(got), back, err)
		}
	}
	for _, bad := range []string{"p4", "p1,,p2", "p1,p1", "all", "p1;p2"} {
		if _, err := ParseProtocols(bad); err == nil || !strings.Contains(err.Error(), "p1, p2, p3") && !strings.Contains(err.Error(), "twice") {
			t.Errorf("ParseProtocols(%q): got error %v, want one naming the valid protocols (or the repeat)", bad, err)
		}
	}
	p := Protocols{Switches: policy.Switches{P3: true}, FixedInterval: 7 * time.Minute}
	if s := p.String(); !strings.Contains(s, "fixed interval 7m0s") || !strings.Contains(s, "random destination") || strings.Contains(s, "no admission") {
		t.Errorf("String of %+v: %q, want P1 and P2 explained, not P3", p, s)
	}
	if (&State{}).Protocols() != DefaultProtocols() || !DefaultProtocols().Switches.P1 || !DefaultProtocols().Switches.P3 {
		t.Errorf("a state without a recorded setting must report all protocols on, got %+v", (&State{}).Protocols())
	}
}

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
	interval := func(c *Coordinator) (time.Duration, *Protocols, policy.NodeID) {
		st := c.FSM().State()
		for _, jd := range st.Decisions.Jobs {
			if jd.Job == "ablate" {
				return jd.Interval, st.Decisions.Protocols, st.Decisions.Leader
			}
		}
		return 0, st.Decisions.Protocols, st.Decisions.Leader
	}
	// Every node sees n00's settings and the fixed interval.
	tc.eventually(15*time.Second, "n00's protocols and the fixed interval on every node", func() bool {
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
	var gotP *Protocols
	var by policy.NodeID
	tc.eventually(20*time.Second, "the new leader's protocols recorded", func() bool {
		got, gotP, by = interval(tc.nodes["n00"])
		return by != "n00" && gotP != nil && *gotP == DefaultProtocols()
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
	st := newState()
	must := func(cmd Command) {
		t.Helper()
		if _, err := applyTo(st, cmd); err != nil {
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
		must(UpsertNode{Node: NodeRecord{ID: id, Building: "b", GPUs: 64, GPU: policy.GPU{Model: "A100", VRAM: 80 << 30, Capability: 8}, Joined: at.Add(-time.Hour)}})
		rate := 1e-3
		if i == 3 {
			rate = 1e-7
		}
		hz[id] = policy.HazardEstimate{EmergencyUpper: policy.HazardProfile{Rates: []float64{rate}}, Departure: policy.HazardProfile{Rates: []float64{rate}}}
	}
	for i := range 30 {
		must(SubmitJob{Job: JobRecord{Job: policy.Job{ID: policy.JobID("j" + string(rune('a'+i))), GPUs: 1, CheckpointBytes: 1 << 20, LossBudget: time.Hour, Remaining: 10 * time.Hour},
			Spec: JobSpec{Command: []string{"x"}}}})
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
	if _, err := f.Submit(ctx, AnnounceReclaim{Reclaim: policy.Reclaim{Node: f.ID(), Announced: now, Deadline: now.Add(time.Hour)}}); err != nil {
		t.Fatalf("follower's own reclaim: %v", err)
	}
	if _, err := f.Submit(ctx, testJob("fwd")); err != nil {
		t.Fatalf("job submission from the follower: %v", err)
	}
	forbidden := []Command{
		AnnounceReclaim{Reclaim: policy.Reclaim{Node: l.ID(), Announced: now, Deadline: now.Add(time.Hour)}},
		CancelReclaim{Node: l.ID()},
		RecordReclaimReport{Report: ReclaimReport{Node: l.ID(), Kind: DepartureEmergency, Announced: now, Deadline: now}},
		RecordDeparture{Departure: Departure{Node: l.ID(), At: now, Kind: DepartureEmergency}},
		UpsertNode{Node: NodeRecord{ID: "intruder", GPUs: 8}},
		SetDecisions{Decisions: DecisionRecord{At: now, Leader: f.ID()}},
	}
	for _, cmd := range forbidden {
		_, err := f.Submit(ctx, cmd)
		if !errors.Is(err, ErrForbidden) {
			t.Errorf("%s forwarded by %s: got %v, want ErrForbidden", cmd.Kind(), f.ID(), err)
		}
	}
	st := l.FSM().State()
	if _, ok := st.Reclaims[l.ID()]; ok {
		t.Error("a reclaim of the leader was recorded from the follower")
	}
	if _, ok := st.Nodes["intruder"]; ok || st.Nodes[l.ID()].State != NodeActive {
		t.Errorf("registry changed by forwarded leader-only commands: %+v", st.Nodes)
	}
	if _, ok := st.Reclaims[f.ID()]; !ok {
		t.Error("the follower's own reclaim is missing")
	}
}

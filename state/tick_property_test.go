package state

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// randomSnapshot is a small campus with random nodes (some full, loaded,
// leaving, ineligible or storage), jobs in every live state (some asking
// for more GPUs or VRAM than any node has, some on nodes that are gone),
// reclaims with and without notice and carried flows.
func randomSnapshot(rng *rand.Rand, now time.Time) policy.Snapshot {
	s := policy.Snapshot{Params: policy.DefaultParams()}
	if rng.IntN(6) == 0 {
		s.Params.Switches = policy.Switches{P1: rng.IntN(2) == 0, P2: rng.IntN(2) == 0, P3: rng.IntN(2) == 0}
	}
	buildings := 1 + rng.IntN(3)
	for b := range buildings {
		s.Links = append(s.Links, policy.Link{ID: fmt.Sprintf("up-%d", b), A: fmt.Sprintf("sw-%d", b), B: "core",
			Capacity: 1.25e9, Available: rng.Float64() * 1.25e9, AvailableLow: rng.Float64() * 1e9})
	}
	n := rng.IntN(7)
	var ids []policy.NodeID
	for i := range n {
		id := policy.NodeID(fmt.Sprintf("n%d", i))
		ids = append(ids, id)
		b := rng.IntN(buildings)
		nd := policy.Node{ID: id, Building: fmt.Sprintf("b%d", b), GPUs: rng.IntN(5),
			GPU:  policy.GPU{Model: "A100", VRAM: int64(rng.IntN(3)) << 34, Capability: float64(7 + rng.IntN(3))},
			Load: rng.Float64(), AccessLink: "acc-" + string(id),
			Emergency: policy.HazardProfile{Rates: []float64{rng.Float64() / 3600}},
			Departure: policy.HazardProfile{Rates: []float64{rng.Float64() / 3600}},
			Leaving:   rng.IntN(6) == 0, Storage: rng.IntN(8) == 0}
		nd.FreeGPUs = rng.IntN(nd.GPUs + 1)
		if rng.IntN(5) == 0 {
			nd.Ineligible = "kill-switch hard"
		}
		if rng.IntN(8) != 0 { // some nodes have no link at all
			s.Links = append(s.Links, policy.Link{ID: nd.AccessLink, A: string(id), B: fmt.Sprintf("sw-%d", b),
				Capacity: 1.25e8, Available: rng.Float64() * 1.25e8, AvailableLow: rng.Float64() * 1e8})
		}
		s.Nodes = append(s.Nodes, nd)
	}
	pick := func() policy.NodeID {
		if len(ids) == 0 || rng.IntN(8) == 0 {
			return "gone"
		}
		return ids[rng.IntN(len(ids))]
	}
	for k := range rng.IntN(10) {
		j := policy.Job{ID: policy.JobID(fmt.Sprintf("job-%d", k)), GPUs: rng.IntN(6), VRAM: int64(rng.IntN(3)) << 34,
			CheckpointBytes: int64(rng.IntN(1 << 30)), LossBudget: time.Duration(rng.IntN(600)) * time.Second,
			RestartTime: time.Duration(rng.IntN(60)) * time.Second, Remaining: time.Duration(rng.IntN(7200)) * time.Second}
		switch rng.IntN(5) {
		case 0:
			j.State = policy.JobPending
		case 1:
			j.State = policy.JobRecovering
		case 2:
			j.State, j.Node = policy.JobMigrating, pick()
		case 3:
			j.State = policy.JobDone
		default:
			j.State, j.Node = policy.JobRunning, pick()
			j.Started = now.Add(-time.Duration(rng.IntN(3600)) * time.Second)
			j.Exposure = time.Duration(rng.IntN(3600)) * time.Second
		}
		for range rng.IntN(3) {
			j.Replicas = append(j.Replicas, pick())
		}
		if rng.IntN(2) == 0 {
			j.Standby = pick()
		}
		s.Jobs = append(s.Jobs, j)
	}
	for range rng.IntN(3) {
		notice := time.Duration(rng.IntN(3)) * time.Duration(rng.IntN(600)) * time.Second
		s.Reclaims = append(s.Reclaims, policy.Reclaim{Node: pick(), Announced: now.Add(-time.Second), Deadline: now.Add(notice)})
	}
	for _, j := range s.Jobs {
		if rng.IntN(4) == 0 {
			prefix := []string{policy.CheckpointPrefix, policy.HandoffPrefix, policy.RestorePrefix, policy.EvacuationPrefix}[rng.IntN(4)]
			s.Flows = append(s.Flows, policy.Flow{ID: prefix + string(j.ID), Job: j.ID, From: pick(), To: pick(),
				Class: policy.TrafficClass(rng.IntN(4)), Remaining: int64(rng.IntN(1 << 30)), Rate: rng.Float64() * 1e8,
				Start: now, Deadline: now.Add(time.Duration(rng.IntN(300)) * time.Second)})
		}
	}
	return s
}

// TestTickDecisionsPassValidation is the property of docs/design.md's
// leader loop: whatever the snapshot, the state machine accepts every
// Tick output (a refused SetDecisions would freeze every decision), and a
// placement without a node always says why.
func TestTickDecisionsPassValidation(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 4))
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	var unplaced, placed int
	for iter := range 3000 {
		snap := randomSnapshot(rng, now)
		d := policy.Tick(snap, now)
		d = policy.KeepAdmittedHandoffs(policy.Decisions{}, d, snap, now)
		cmd := SetDecisions{Decisions: DecisionRecord{Decisions: d, At: now, Leader: "n0"}}
		b, err := EncodeCommand(cmd)
		if err != nil {
			t.Fatalf("iteration %d: the state machine refuses Tick's output: %v\nsnapshot: %+v", iter, err, snap)
		}
		if _, err := DecodeCommand(b); err != nil {
			t.Fatalf("iteration %d: decoded decisions refused: %v", iter, err)
		}
		for _, p := range d.Placements {
			if p.To == "" {
				unplaced++
				if p.Reason == "" {
					t.Fatalf("iteration %d: placement of %s without node or reason", iter, p.Job)
				}
			} else {
				placed++
			}
		}
	}
	// The generator must reach both kinds, or the property says little.
	if unplaced < 100 || placed < 100 {
		t.Fatalf("generator too narrow: %d placements without a node, %d with one", unplaced, placed)
	}
}

// TestUnplaceableJobKeepsOthersDecided: a job asking for more GPUs than
// any node has stays pending with that reason while the job beside it is
// placed, and the whole decision applies.
func TestUnplaceableJobKeepsOthersDecided(t *testing.T) {
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	s := New()
	for _, id := range []policy.NodeID{"a", "b"} {
		s.Nodes[id] = NodeRecord{ID: id, GPUs: 2, GPU: policy.GPU{VRAM: 1 << 34}, Joined: now}
	}
	for _, j := range []JobRecord{
		{Job: policy.Job{ID: "big", GPUs: 4}, Spec: JobSpec{Command: []string{"sleep", "1000"}}},
		{Job: policy.Job{ID: "small", GPUs: 1}, Spec: JobSpec{Command: []string{"sleep", "1000"}}},
	} {
		mustApply(t, s, SubmitJob{Job: j})
	}
	snap := policy.Snapshot{Params: policy.DefaultParams()}
	for _, id := range []policy.NodeID{"a", "b"} {
		snap.Nodes = append(snap.Nodes, policy.Node{ID: id, GPUs: 2, FreeGPUs: 2, GPU: policy.GPU{VRAM: 1 << 34}, AccessLink: "acc-" + string(id)})
		snap.Links = append(snap.Links, policy.Link{ID: "acc-" + string(id), A: string(id), B: "sw", Capacity: 1e9, Available: 1e9, AvailableLow: 1e9})
	}
	for _, j := range s.SortedJobs() {
		snap.Jobs = append(snap.Jobs, j.Job)
	}
	d := policy.Tick(snap, now)
	mustApply(t, s, SetDecisions{Decisions: DecisionRecord{Decisions: d, At: now, Leader: "a"}})
	if j := s.Jobs["small"]; j.State != policy.JobRunning || j.Node == "" {
		t.Fatalf("small job: %v on %q, want running", j.State, j.Node)
	}
	big := s.Jobs["big"]
	if big.State != policy.JobPending || big.Node != "" {
		t.Fatalf("big job: %v on %q, want pending", big.State, big.Node)
	}
	if got, want := s.PendingReason("big"), "needs 4 GPUs; the largest node has 2"; got != want {
		t.Fatalf("pending reason %q, want %q", got, want)
	}
	if got := s.PendingReason("small"); got != "" {
		t.Fatalf("placed job has pending reason %q", got)
	}
}

func mustApply(t *testing.T, s *State, cmd Command) {
	t.Helper()
	b, err := EncodeCommand(cmd)
	if err != nil {
		t.Fatalf("encode %s: %v", cmd.Kind(), err)
	}
	c, err := DecodeCommand(b)
	if err != nil {
		t.Fatalf("decode %s: %v", cmd.Kind(), err)
	}
	if _, err := s.Apply(c); err != nil {
		t.Fatalf("apply %s: %v", cmd.Kind(), err)
	}
}

package web

import (
	"context"
	"sync"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// memSource is an in-memory Source for tests: it builds a fresh Status on
// every call (so the caller owns it, as the contract requires) from the
// scenario function set last.
type memSource struct {
	mu    sync.Mutex
	build func() Status
	err   error
	calls int
}

func newMemSource(build func() Status) *memSource { return &memSource{build: build} }

func (m *memSource) Status(ctx context.Context) (Status, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	if m.err != nil {
		return Status{}, m.err
	}
	return m.build(), nil
}

func (m *memSource) set(build func() Status) {
	m.mu.Lock()
	m.build = build
	m.mu.Unlock()
}

func (m *memSource) fail(err error) {
	m.mu.Lock()
	m.err = err
	m.mu.Unlock()
}

// sourceFunc adapts a function to Source.
type sourceFunc func(ctx context.Context) (Status, error)

func (f sourceFunc) Status(ctx context.Context) (Status, error) { return f(ctx) }

// scenarioNow is the fixed time of the test scenarios: the lunch peak.
var scenarioNow = time.Date(2026, 11, 30, 12, 10, 0, 0, time.UTC)

// lunchProfile is a 48-bucket (30 min) time-of-day hazard in 1/s with the
// the design's peaks (lunch 11:30–13:00, evening 17:30–20:00) at 6× off-peak.
func lunchProfile(offPeakPerHour float64) HazardProfile {
	rates := make([]float64, 48)
	for k := range rates {
		h := float64(k) / 2
		r := offPeakPerHour
		if (h >= 11.5 && h < 13) || (h >= 17.5 && h < 20) {
			r *= 6
		}
		rates[k] = r / 3600
	}
	return HazardProfile{Rates: rates}
}

// profileAt returns the profile's rate in the bucket holding t.
func profileAt(p HazardProfile, t time.Time) float64 {
	t = t.UTC()
	frac := float64(t.Sub(t.Truncate(24*time.Hour))) / float64(24*time.Hour)
	return p.Rates[int(frac*float64(len(p.Rates)))]
}

// Scenario parameters the tests check against.
const (
	ckptLlama      = int64(3_200_000_000)
	ckptResnet     = int64(1_600_000_000)
	xferDone       = int64(600_000_000)
	xferAchieved   = 28_500_000.0
	xferAssigned   = 30_000_000.0
	reclaimNotice  = 90 * time.Second
	reclaimElapsed = 30 * time.Second
	llamaAge       = 3*time.Minute + 12*time.Second
)

var (
	gpuA100 = GPU{Model: "A100-80GB", VRAM: 80 << 30, Capability: 8.0}
	gpu4090 = GPU{Model: "RTX-4090", VRAM: 24 << 30, Capability: 8.9}
	gpuA6k  = GPU{Model: "A6000", VRAM: 48 << 30, Capability: 8.6}
)

func member(id, building string, state MemberState, role RaftRole, gpu GPU, gpus, free int, offPeak float64) Member {
	p := lunchProfile(offPeak)
	return Member{
		ID: policy.NodeID(id), Building: building, Addr: "127.0.0.1:7946", State: state, RaftRole: role,
		GPU: gpu, GPUs: gpus, FreeGPUs: free, Load: 0.35,
		Hazard: profileAt(p, scenarioNow), HazardProfile: p, KillSwitch: KillSwitchOff, Eligible: true,
	}
}

// scenarioA is a small cluster in the middle of a scheduled reclaim: node
// n3 (building sci) is being reclaimed and its job resnet is handed off to
// n2 while llama-ft runs on n1 and bert waits for a placement.
func scenarioA() Status {
	now := scenarioNow
	n3 := member("n3", "sci", MemberLeaving, RaftFollower, gpuA6k, 2, 1, 0.3)
	n3.KillSwitch, n3.KillSwitchDrops = KillSwitchSoft, 17
	n3.Eligible, n3.IneligibleReason = false, "kill-switch soft"
	n4 := member("n4", "sci", MemberSuspect, RaftNonvoter, gpuA6k, 1, 1, 0.4)
	n4.Storage = true
	decisionLlama := JobDecision{Bandwidth: 12_500_000, Interval: 9*time.Minute + 52*time.Second, Hazard: 0.99 / 3600, Standby: "n2",
		Bound: policy.BoundOptimum.String(), Floor: 100 * time.Second, Ceiling: 20 * time.Minute, Holders: []policy.NodeID{"n2"}, Risk: 0.004}
	decisionResnet := JobDecision{Bandwidth: 4_000_000, Interval: 2000 * time.Second, Hazard: 1.8 / 3600, LossBudgetInfeasible: true,
		Bound: policy.BoundFloor.String(), Floor: 2000 * time.Second, Ceiling: 10 * time.Minute, Risk: 1}
	deadline := now.Add(reclaimNotice - reclaimElapsed)
	return Status{
		GeneratedAt: now,
		Node:        "n1",
		Version:     "v0.1.0-test",
		CoDeparture: []NodePair{
			{A: "n3", B: "n4", P: 0.62, Domain: "building"},
			{A: "n1", B: "n2", P: 0.01, Domain: "building"},
			{A: "n1", B: "n3", P: 0.002, Domain: "none"},
		},
		CoDepartureWindow: time.Minute,
		Cluster: Cluster{
			Name:   "campus",
			Leader: "n1",
			Members: []Member{
				member("n1", "eng", MemberAlive, RaftLeader, gpuA100, 4, 2, 0.2),
				member("n2", "eng", MemberAlive, RaftFollower, gpu4090, 2, 2, 0.25),
				n3,
				n4,
			},
			Hazard: lunchProfile(0.25),
			Bandwidth: []BuildingBandwidth{
				{From: "eng", To: "eng", Available: 102_500_000, AvailableLow: 90_000_000, Capacity: 125_000_000, Basis: BandwidthMeasured},
				{From: "eng", To: "sci", Available: 30_000_000, AvailableLow: 22_000_000, Capacity: 125_000_000, Basis: BandwidthMeasured},
				{From: "sci", To: "eng", Available: 28_000_000, AvailableLow: 20_000_000, Capacity: 125_000_000, Basis: BandwidthMeasured},
				// No node of sci reports bandwidth: the 1 Gbit/s access default.
				{From: "sci", To: "sci", Available: 125_000_000, AvailableLow: 62_500_000, Capacity: 125_000_000, Basis: BandwidthAssumed},
			},
			Protocols: Protocols{P1: true, P3: true, FixedInterval: 10 * time.Minute, Summary: "p1,p3 (P2 off: random destination)",
				DecidedBy: "n1", Local: "p1,p2,p3"},
		},
		Jobs: []Job{
			{
				ID: "llama-ft", State: policy.JobRunning.String(), UnderWay: "checkpointing", Node: "n1", GPUs: 2, CheckpointBytes: ckptLlama,
				LossBudget: 10 * time.Minute, Standby: "n2", StandbyHas: 2_400_000_000, Restarts: 1, Replicas: 2, BundleBytes: 12_500_000,
				Decision:       &decisionLlama,
				LastCheckpoint: &Checkpoint{Version: 7, Bytes: ckptLlama, CommittedAt: now.Add(-llamaAge), Holders: []policy.NodeID{"n2", "n3"}},
			},
			{
				ID: "resnet", State: policy.JobMigrating.String(), UnderWay: "handing off", Node: "n3", GPUs: 1, CheckpointBytes: ckptResnet,
				LossBudget: 5 * time.Minute, Restarts: 3, Replicas: 2, Decision: &decisionResnet,
				LastCheckpoint: &Checkpoint{Version: 12, Bytes: ckptResnet, CommittedAt: now.Add(-41 * time.Minute), Holders: []policy.NodeID{"n4"}},
			},
			{ID: "bert", State: policy.JobPending.String(), GPUs: 1, CheckpointBytes: 400_000_000, LossBudget: 15 * time.Minute},
			{ID: "huge", State: policy.JobPending.String(), GPUs: 16, Reason: "needs 16 GPUs; the largest node has 4"},
			{ID: "vit", State: "failed", GPUs: 1, Failures: 2, MaxFailures: 1, EndedAt: now.Add(-2 * time.Minute),
				LastExit: &JobExit{Node: "n2", At: now.Add(-2 * time.Minute), ExitCode: -1, Signal: "killed", Reason: "out of memory",
					Description: "signal killed (out of memory)", LogTail: []string{"epoch 3", "allocating 40 GiB"}},
				Results: &Results{Version: 9, Holders: []policy.NodeID{"n2", "n4"}, KeptUntil: time.Date(2026, 12, 9, 6, 30, 0, 0, time.UTC)}},
			{ID: "t5", State: "cancelled", GPUs: 1, CancelledBy: "alice on n1", EndedAt: now.Add(-time.Minute)},
		},
		Transfers: []Transfer{
			{
				Flow: WebFlow(policy.FlowDecision{
					ID: "f-resnet-12", Job: "resnet", From: "n3", To: "n2", Class: policy.ClassMigration,
					Rate: xferAssigned, Ceiling: 1.1 * xferAssigned, Burst: 256 << 10, MinRate: 26_666_667,
					Start: now.Add(-reclaimElapsed), Deadline: deadline, Links: []string{"n3-acc", "sci-up", "eng-up", "n2-acc"},
				}),
				Achieved: xferAchieved, BytesDone: xferDone, BytesTotal: ckptResnet,
			},
			{
				Flow: WebFlow(policy.FlowDecision{
					ID: "f-llama-presync", Job: "llama-ft", From: "n1", To: "n2", Class: policy.ClassPresync,
					Rate: 5_000_000, Ceiling: 5_500_000, Burst: 256 << 10, Start: now.Add(-time.Minute),
				}),
				Achieved: 4_900_000, BytesDone: 2_400_000_000, BytesTotal: ckptLlama,
			},
		},
		Reclaims: Reclaims{
			Pending: []PendingReclaim{{
				Reclaim: Reclaim{Node: "n3", Announced: now.Add(-reclaimElapsed), Deadline: deadline},
				Jobs:    []policy.JobID{"resnet"},
			}},
			History: []ReclaimRecord{{
				Reclaim:  Reclaim{Node: "n5", Announced: now.Add(-2 * time.Hour), Deadline: now.Add(-2 * time.Hour)},
				Released: now.Add(-2*time.Hour + 700*time.Microsecond), OnTime: true,
				Jobs:     []ReclaimOutcome{{Job: "vit", To: "n2", Replica: "n4", Version: 3, Degraded: true, Reason: "emergency: recovered from replica v3", WorkLost: 4 * time.Minute, Downtime: 61 * time.Second}},
				Detected: true,
			}},
		},
		Decisions: []Decision{
			{
				At: now.Add(-reclaimElapsed), Kind: DecisionHandoff,
				Handoff: WebHandoff(policy.HandoffDecision{
					Job: "resnet", From: "n3", To: "n2", FinalCheckpoint: true, Bytes: ckptResnet, Deadline: deadline,
					Candidates: []policy.Candidate{
						{Node: "n1", Score: 71.2, Transfer: 53 * time.Second, Survival: 0.91, Remigration: 60 * time.Second, Bottleneck: 30_000_000},
						{Node: "n2", Score: 64.5, Transfer: 53 * time.Second, Survival: 0.97, Remigration: 58 * time.Second, Bottleneck: 30_000_000},
						{Node: "n3", Rejected: policy.RejectSource},
						{Node: "n4", Rejected: policy.RejectLoad},
					},
				}),
			},
			{
				At: now.Add(-5 * time.Second), Kind: DecisionPlacement,
				Placement: WebPlacement(policy.Placement{
					Job: "bert", To: "n2",
					Candidates: []policy.Candidate{
						{Node: "n2", Score: 22.0, Survival: 0.95, Remigration: 40 * time.Second},
						{Node: "n1", Rejected: policy.RejectGPUs},
						{Node: "n3", Rejected: policy.RejectLeaving},
					},
				}),
			},
		},
		Control:  Control{LastTick: now.Add(-time.Second), CheckpointBudget: 16_500_000},
		Counters: Counters{AdmittedMigrations: 9, RejectedMigrations: 2, Handoffs: 8, DegradedRecoveries: 3},
	}
}

// scenarioB is scenarioA after the hand-off: resnet runs on n2, n3 has
// left, the transfer is gone and a new job gpt-small runs on n4.
func scenarioB() Status {
	s := scenarioA()
	s.GeneratedAt = scenarioNow.Add(2 * time.Minute)
	s.Cluster.Members[2].State = MemberLeft
	s.Cluster.Members[2].KillSwitch = KillSwitchHard
	s.Jobs[1].State, s.Jobs[1].Node, s.Jobs[1].Restarts = policy.JobRunning.String(), "n2", 4
	s.Jobs = append(s.Jobs, Job{ID: "gpt-small", State: policy.JobRunning.String(), Node: "n4", GPUs: 1, CheckpointBytes: 900_000_000})
	s.Transfers = s.Transfers[1:]
	rec := s.Reclaims.Pending[0]
	s.Reclaims.Pending = nil
	s.Reclaims.History = append([]ReclaimRecord{{
		Reclaim: rec.Reclaim, Released: rec.Reclaim.Deadline.Add(-20 * time.Second), OnTime: true,
		Jobs: []ReclaimOutcome{{Job: "resnet", To: "n2", FinalCheckpoint: true, Downtime: 48 * time.Second}},
	}}, s.Reclaims.History...)
	s.Counters.Handoffs++
	return s
}

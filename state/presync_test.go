package state

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

// presyncState is job j (1 MB checkpoints) running on a with standby b,
// v1 committed on b.
func presyncState(t *testing.T) *State {
	t.Helper()
	s := runningJob(t, 0)
	mustApply(t, s, JobReport{Job: "j", Node: "a", CheckpointBytes: 1e6})
	mustApply(t, s, SetDecisions{Decisions: DecisionRecord{At: t0.Add(time.Minute), Leader: "a",
		Decisions: policy.Decisions{Jobs: []policy.JobDecision{{Job: "j", Standby: "b", Interval: time.Minute}}}}})
	stored(t, s, 1, "a", "a")
	stored(t, s, 1, "a", "b")
	return s
}

func stored(t *testing.T, s *State, v uint64, source, holder policy.NodeID) {
	t.Helper()
	mustApply(t, s, ReplicaComplete{Job: "j", Version: v, ManifestHash: "h", Size: 1e6, Source: source, Holder: holder,
		At: t0.Add(time.Duration(v) * time.Minute)})
}

func wantStandby(t *testing.T, s *State, step string, node policy.NodeID, has int64, v uint64) {
	t.Helper()
	if j := s.Jobs["j"]; j.Standby != node || j.StandbyHas != has || j.StandbyVersion != v {
		t.Fatalf("%s: standby %q has %d of v%d, want %q has %d of v%d", step, j.Standby, j.StandbyHas, j.StandbyVersion, node, has, v)
	}
}

// TestPresyncReportSetsStandbyHas: the host's report of what its standby
// holds becomes StandbyHas = C − delta; it follows a newer version the
// standby receives, keeps the delta when the checkpoint grows or shrinks,
// and is cleared when a version the standby lacks is committed, when the
// standby changes, and when the job moves.
func TestPresyncReportSetsStandbyHas(t *testing.T) {
	s := presyncState(t)
	wantStandby(t, s, "before any report", "b", 0, 0)
	mustApply(t, s, JobReport{Job: "j", Node: "a", Presync: Presync{Node: "b", Version: 1, Delta: 1e5}})
	wantStandby(t, s, "reported", "b", 9e5, 1)

	// v2 goes to b: the delta still holds for it.
	stored(t, s, 2, "a", "a")
	wantStandby(t, s, "v2 written on a", "b", 9e5, 1)
	stored(t, s, 2, "a", "b")
	wantStandby(t, s, "v2 committed on b", "b", 9e5, 2)

	// The checkpoint grows by 2e5: b lacks that too; shrinking below
	// keeps the delta.
	mustApply(t, s, JobReport{Job: "j", Node: "a", CheckpointBytes: 1.2e6})
	wantStandby(t, s, "grown", "b", 9e5, 2)
	mustApply(t, s, JobReport{Job: "j", Node: "a", CheckpointBytes: 5e5})
	wantStandby(t, s, "shrunk", "b", 2e5, 2)
	mustApply(t, s, JobReport{Job: "j", Node: "a", CheckpointBytes: 1e6})

	// v3 committed on c, not b: b's copy is older than the freshest.
	stored(t, s, 3, "a", "a")
	stored(t, s, 3, "a", "c")
	wantStandby(t, s, "v3 committed on c", "b", 0, 0)
	stored(t, s, 3, "a", "b")
	mustApply(t, s, JobReport{Job: "j", Node: "a", Presync: Presync{Node: "b", Version: 3, Delta: 0}})
	wantStandby(t, s, "b holds v3, nothing changed", "b", 1e6, 3)

	// A new standby.
	mustApply(t, s, SetDecisions{Decisions: DecisionRecord{At: t0.Add(10 * time.Minute), Leader: "a",
		Decisions: policy.Decisions{Jobs: []policy.JobDecision{{Job: "j", Standby: "c", Interval: time.Minute}}}}})
	wantStandby(t, s, "standby c", "c", 0, 0)
	mustApply(t, s, JobReport{Job: "j", Node: "a", Presync: Presync{Node: "c", Version: 3, Delta: 3e5}})
	wantStandby(t, s, "c reported", "c", 7e5, 3)

	// The standby leaves.
	mustApply(t, s, RecordDeparture{Departure: Departure{Node: "c", At: t0.Add(11 * time.Minute), Kind: DepartureEmergency}})
	wantStandby(t, s, "c left", "", 0, 0)
}

// TestPresyncReportForHandoffDestination: during an admitted hand-off's
// wait the host pre-syncs its destination; the report makes it the
// standby with what it holds, and the move clears what the standby holds
// (the new host's state is another story).
func TestPresyncReportForHandoffDestination(t *testing.T) {
	s := presyncState(t)
	mustApply(t, s, JobReport{Job: "j", Node: "a", Presync: Presync{Node: "b", Version: 1, Delta: 1e5}})
	handoff := policy.Decisions{Handoffs: []policy.HandoffDecision{{Job: "j", From: "a", To: "c", FinalCheckpoint: true}}}
	mustApply(t, s, SetDecisions{Decisions: DecisionRecord{At: t0.Add(5 * time.Minute), Leader: "a", Decisions: handoff}})
	wantStandby(t, s, "hand-off decided", "b", 9e5, 1)
	stored(t, s, 2, "a", "a")
	stored(t, s, 2, "a", "c")
	wantStandby(t, s, "v2 committed on the destination", "b", 0, 0)
	mustApply(t, s, JobReport{Job: "j", Node: "a", Presync: Presync{Node: "c", Version: 2, Delta: 2e5}})
	wantStandby(t, s, "destination reported", "c", 8e5, 2)

	mustApply(t, s, MoveJob{Job: "j", From: "a", To: "c", At: t0.Add(6 * time.Minute), Version: 2})
	wantStandby(t, s, "moved to c", "", 0, 0)

	// Moved to another node than the standby: the standby stays, what it
	// holds is forgotten.
	s = presyncState(t)
	mustApply(t, s, JobReport{Job: "j", Node: "a", Presync: Presync{Node: "b", Version: 1, Delta: 1e5}})
	mustApply(t, s, MoveJob{Job: "j", From: "a", To: "c", At: t0.Add(6 * time.Minute), Version: 1})
	wantStandby(t, s, "moved to c, standby b", "b", 0, 0)
}

// TestPresyncReportRejected: a report from another node than the host, of
// an unknown job, with a delta outside [0, C], of a node that receives no
// pre-sync, of a version that is not the freshest committed or that the
// node does not hold, is rejected and changes nothing.
func TestPresyncReportRejected(t *testing.T) {
	s := presyncState(t)
	stored(t, s, 2, "a", "a") // written, not committed
	cases := []struct {
		name string
		cmd  JobReport
		want error
	}{
		{"not the host", JobReport{Job: "j", Node: "c", Presync: Presync{Node: "b", Version: 1}}, ErrNotHost},
		{"unknown job", JobReport{Job: "x", Node: "a", Presync: Presync{Node: "b", Version: 1}}, ErrUnknownJob},
		{"negative delta", JobReport{Job: "j", Node: "a", Presync: Presync{Node: "b", Version: 1, Delta: -1}}, ErrInvalidCommand},
		{"delta above C", JobReport{Job: "j", Node: "a", Presync: Presync{Node: "b", Version: 1, Delta: 1e6 + 1}}, ErrInvalidCommand},
		{"delta above the reported C", JobReport{Job: "j", Node: "a", CheckpointBytes: 5e5, Presync: Presync{Node: "b", Version: 1, Delta: 6e5}}, ErrInvalidCommand},
		{"the host itself", JobReport{Job: "j", Node: "a", Presync: Presync{Node: "a", Version: 1}}, ErrInvalidCommand},
		{"version 0", JobReport{Job: "j", Node: "a", Presync: Presync{Node: "b"}}, ErrInvalidCommand},
		{"no node", JobReport{Job: "j", Node: "a", Presync: Presync{Version: 1, Delta: 5}}, ErrInvalidCommand},
		{"not a pre-sync target", JobReport{Job: "j", Node: "a", Presync: Presync{Node: "c", Version: 1}}, ErrNotPresyncTarget},
		{"a version not committed", JobReport{Job: "j", Node: "a", Presync: Presync{Node: "b", Version: 2}}, ErrStalePresync},
		{"an unknown version", JobReport{Job: "j", Node: "a", Presync: Presync{Node: "b", Version: 9}}, ErrStalePresync},
	}
	for _, c := range cases {
		before := s.clone()
		_, err := s.Apply(c.cmd)
		if vErr := c.cmd.validate(); vErr != nil {
			err = vErr // what decoding a forwarded entry rejects
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if !reflect.DeepEqual(before, s) {
			t.Errorf("%s: the rejected report changed the state", c.name)
		}
	}
	// The standby holds only an older committed version: v2 committed
	// on c, b still at v1.
	stored(t, s, 2, "a", "c")
	if _, err := s.Apply(JobReport{Job: "j", Node: "a", Presync: Presync{Node: "b", Version: 1}}); !errors.Is(err, ErrStalePresync) {
		t.Errorf("an older version than the freshest committed: %v, want ErrStalePresync", err)
	}
	// A degraded hand-off's destination gets no pre-sync.
	mustApply(t, s, SetDecisions{Decisions: DecisionRecord{At: t0.Add(5 * time.Minute), Leader: "a",
		Decisions: policy.Decisions{Handoffs: []policy.HandoffDecision{{Job: "j", From: "a", To: "c", Degraded: true}}}}})
	if _, err := s.Apply(JobReport{Job: "j", Node: "a", Presync: Presync{Node: "c", Version: 2}}); !errors.Is(err, ErrNotPresyncTarget) {
		t.Errorf("a degraded hand-off's destination: %v, want ErrNotPresyncTarget", err)
	}
}

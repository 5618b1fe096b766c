package state

import (
	"slices"

	"github.com/reclaimnet/reclaimnet/policy"
)

// What the cluster is doing with a job beside its state (State.UnderWay),
// as every view shows it next to the state.
const (
	// UnderWayCheckpointing: a running job's newest checkpoint is written
	// on its node and on its way to its standby, not yet committed off the
	// node.
	UnderWayCheckpointing = "checkpointing"
	// UnderWayHandingOff: the job is migrating (a hand-off is under way:
	// its final checkpoint, the transfer, the start on the destination).
	UnderWayHandingOff = "handing off"
	// UnderWayRestoring: a recovery placed the job and its node waits for
	// the replica holder's copy before starting it.
	UnderWayRestoring = "restoring"
	// UnderWayRecovering: the job lost its node (or restarts after a
	// failure) and waits for a placement.
	UnderWayRecovering = "recovering"
)

// UnderWay says what is under way for job id in s: one of the UnderWay
// constants, or "" when nothing is (a running job between checkpoints,
// a pending or ended job).
//
// It is read from the replicated record: a checkpoint counts from its
// node's own ReplicaComplete (the version stored there) until a holder
// off the node has it (Committed). The moments between the checkpoint
// request and that local store are not replicated, so no command is spent
// on the start of every checkpoint; a node without a standby keeps its
// versions to itself, and its job shows nothing under way.
func (s *State) UnderWay(id policy.JobID) string {
	j, ok := s.Jobs[id]
	if !ok {
		return ""
	}
	switch j.State {
	case policy.JobMigrating:
		return UnderWayHandingOff
	case policy.JobRecovering:
		return UnderWayRecovering
	case policy.JobRunning:
	default:
		return ""
	}
	if j.Restore.From != "" {
		return UnderWayRestoring
	}
	if j.Standby == "" || j.Standby == j.Node {
		return ""
	}
	cps := s.Checkpoints[id]
	if len(cps) == 0 {
		return ""
	}
	cp := cps[len(cps)-1]
	if cp.Committed || cp.Source != j.Node || !slices.Contains(cp.Holders, j.Node) {
		return ""
	}
	if !j.RunningSince.IsZero() && !cp.Written.IsZero() && cp.Written.Before(j.RunningSince) {
		return "" // written before the job last started here: a leftover
	}
	return UnderWayCheckpointing
}

package state

import (
	"fmt"
	"slices"

	"github.com/reclaimnet/reclaimnet/policy"
)

// Presync is a host's report of how much of its job's next checkpoint a
// node already holds (docs/design.md P1.6, P3.8b): Node holds committed
// version Version completely, and Delta bytes is what a checkpoint taken
// now would still have to send it (the host measures it from its chunked
// versions). The state keeps CheckpointBytes − Delta as the job's
// StandbyHas, so the leader times a hand-off's final checkpoint, and
// admits it, on the bytes the destination lacks, not the whole checkpoint.
type Presync struct {
	Node    policy.NodeID
	Version uint64
	Delta   int64
}

// validate checks what a report can tell by itself: a version, a
// non-negative delta, and a node other than the reporting host.
func (p Presync) validate(job policy.JobID, host policy.NodeID) error {
	switch {
	case p.Node == "":
		if p != (Presync{}) {
			return invalid("job report %s: pre-sync without a node", job)
		}
	case p.Node == host:
		return invalid("job report %s: pre-sync to its own host %s", job, host)
	case p.Version == 0:
		return invalid("job report %s: pre-sync to %s of version 0", job, p.Node)
	case p.Delta < 0:
		return invalid("job report %s: pre-sync to %s with negative delta %d", job, p.Node, p.Delta)
	}
	return nil
}

// applyPresync sets j's standby from p, a report of j's host: p.Node must
// be j's standby or the destination of j's admitted hand-off (where the
// host pre-syncs during the wait; it becomes the standby, so the leader's
// P2 counts what it holds), hold p.Version, the freshest committed
// version, by the catalogue, and p.Delta must be within the checkpoint.
// It changes j only when it returns nil.
func applyPresync(s *State, j *JobRecord, host policy.NodeID, p Presync) error {
	if err := p.validate(j.ID, host); err != nil || p.Node == "" {
		return err
	}
	if p.Delta > j.CheckpointBytes {
		return invalid("job report %s: pre-sync delta %d above the checkpoint's %d bytes", j.ID, p.Delta, j.CheckpointBytes)
	}
	if p.Node != j.Standby && !handoffTo(s, j.ID, host, p.Node) {
		return fmt.Errorf("pre-sync report %s to %s: %w", j.ID, p.Node, ErrNotPresyncTarget)
	}
	cp, ok := s.FreshestCommitted(j.ID)
	if !ok || cp.Version != p.Version || !slices.Contains(cp.Holders, p.Node) {
		return fmt.Errorf("pre-sync report %s v%d at %s: %w", j.ID, p.Version, p.Node, ErrStalePresync)
	}
	j.Standby, j.StandbyHas, j.StandbyVersion = p.Node, j.CheckpointBytes-p.Delta, p.Version
	return nil
}

// handoffTo reports whether the current decisions hold an admitted
// hand-off of job from host to node.
func handoffTo(s *State, job policy.JobID, host, node policy.NodeID) bool {
	return slices.ContainsFunc(s.Decisions.Handoffs, func(h policy.HandoffDecision) bool {
		return h.Job == job && h.From == host && h.To == node && h.Admitted()
	})
}

// clearStandbyHas forgets what j's standby holds: its node, its version or
// the job's placement changed, so the host's last report no longer tells.
func (j *JobRecord) clearStandbyHas() {
	j.StandbyHas, j.StandbyVersion = 0, 0
}

// resizeStandbyHas keeps the delta j's standby lacks when the checkpoint's
// size changes from old to j.CheckpointBytes: a growing checkpoint adds
// its growth to what the standby lacks, a shrinking one never makes it
// hold more than the new checkpoint minus that delta.
func (j *JobRecord) resizeStandbyHas(old int64) {
	if j.StandbyHas <= 0 || old == j.CheckpointBytes {
		return
	}
	lack := max(0, old-j.StandbyHas)
	j.StandbyHas = min(j.StandbyHas, max(0, j.CheckpointBytes-lack))
	if j.StandbyHas == 0 {
		j.clearStandbyHas()
	}
}

// followStandbyVersion keeps StandbyHas of job while its standby holds the
// freshest committed version (a newer version the standby received keeps
// the host's delta: it is the version a pre-sync sent there), and clears
// it once a version the standby lacks is the freshest committed one.
func followStandbyVersion(s *State, job policy.JobID) {
	j, ok := s.Jobs[job]
	if !ok || j.StandbyVersion == 0 {
		return
	}
	cp, ok := s.FreshestCommitted(job)
	if !ok || cp.Version == j.StandbyVersion {
		return
	}
	if cp.Version > j.StandbyVersion && slices.Contains(cp.Holders, j.Standby) {
		j.StandbyVersion = cp.Version
	} else {
		j.clearStandbyHas()
	}
	s.Jobs[job] = j
}

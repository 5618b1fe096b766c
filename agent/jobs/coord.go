package jobs

import (
	"context"

	"github.com/reclaimnet/reclaimnet/raft"
)

// Coordinator is what the manager needs from the coordinator: commit a
// command from any node, read a copy of the replicated state, and wait for
// its next change.
type Coordinator interface {
	// Submit commits cmd through the leader.
	Submit(ctx context.Context, cmd raft.Command) (uint64, error)
	// State returns a deep copy of the replicated state.
	State() *raft.State
	// Changed returns a channel closed at the state's next change.
	Changed() <-chan struct{}
}

// FromRaft adapts a *raft.Coordinator.
func FromRaft(c *raft.Coordinator) Coordinator { return raftCoordinator{c} }

type raftCoordinator struct{ c *raft.Coordinator }

func (r raftCoordinator) Submit(ctx context.Context, cmd raft.Command) (uint64, error) {
	return r.c.Submit(ctx, cmd)
}
func (r raftCoordinator) State() *raft.State       { return r.c.FSM().State() }
func (r raftCoordinator) Changed() <-chan struct{} { return r.c.FSM().Changed() }

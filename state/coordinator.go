package state

import "context"

// Coordinator is what a node's parts (the job manager, the reclaim flow,
// the local API) need of the coordinator: commit a command from any node,
// read a copy of the local state, and wait for its next change.
// raft.Coordinator implements it.
type Coordinator interface {
	// Submit commits cmd through the leader and returns its log index.
	Submit(ctx context.Context, cmd Command) (uint64, error)
	// State returns a deep copy of the local replicated state.
	State() *State
	// Changed returns a channel closed at the state's next change.
	Changed() <-chan struct{}
}

// FlowProgress is how far an admitted flow got, as its sender reports it
// (in gossip): the leader carries a flow's remaining bytes into its next
// decisions and drops the flows that are done.
type FlowProgress struct {
	ID        string
	Remaining int64 // bytes still to move
	Done      bool
}

package raft

import (
	"io"

	hraft "github.com/hashicorp/raft"

	"github.com/reclaimnet/reclaimnet/state"
)

// fsm adapts the replicated state (state.Store) to hashicorp/raft's state
// machine: Raft calls Apply, Snapshot and Restore.
type fsm struct{ store *state.Store }

// Apply implements hraft.FSM. It returns nil or an error; a rejected
// command leaves the state unchanged.
func (f fsm) Apply(l *hraft.Log) any {
	if l.Type != hraft.LogCommand {
		return nil
	}
	if err := f.store.Apply(l.Index, l.Data); err != nil {
		return err
	}
	return nil
}

// Snapshot implements hraft.FSM.
func (f fsm) Snapshot() (hraft.FSMSnapshot, error) {
	return fsmSnapshot{f.store.Snapshot()}, nil
}

// Restore implements hraft.FSM: it replaces the state with a snapshot.
func (f fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	return f.store.Restore(rc)
}

type fsmSnapshot struct{ snap state.Snapshot }

func (s fsmSnapshot) Persist(sink hraft.SnapshotSink) error {
	if err := s.snap.Encode(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (fsmSnapshot) Release() {}

package state

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// snapshotVersion is the format of a persisted snapshot.
const snapshotVersion = 1

// Store is one node's copy of the replicated state: the state machine the
// consensus layer feeds log entries in order. Everyone else reads copies
// through the accessor methods and waits for changes on Changed.
type Store struct {
	mu sync.RWMutex
	// The following are guarded by mu.
	state   *State
	index   uint64        // last applied log index that changed the state
	changed chan struct{} // closed and replaced on every change
	// events counts changes that call for an immediate tick (new job,
	// reclaim, departure); departures counts changes of the departure log
	// (a restore counts as one). Both are local to this node.
	events, departures uint64
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{state: New(), changed: make(chan struct{})}
}

// Apply decodes the log entry at index and applies it. A rejected command
// (undecodable or invalid in the current state) leaves the state unchanged
// and is returned as the error.
func (s *Store) Apply(index uint64, entry []byte) error {
	cmd, err := DecodeCommand(entry)
	if err != nil {
		return err
	}
	return s.ApplyCommand(index, cmd)
}

// ApplyCommand applies a decoded command as the entry at index.
func (s *Store) ApplyCommand(index uint64, cmd Command) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed, err := s.state.Apply(cmd)
	if err != nil {
		return err
	}
	if changed {
		s.index = index
		switch cmd.Kind() {
		case KindSubmitJob, KindAnnounceReclaim, KindCancelReclaim:
			s.events++
		case KindRecordDeparture:
			s.events++
			s.departures++
		}
		s.notifyLocked()
	}
	return nil
}

func (s *Store) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// EventCounts returns the local counters of changes that call for an
// immediate tick (events) and of changes of the departure log.
func (s *Store) EventCounts() (events, departures uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.events, s.departures
}

// Snapshot is a point-in-time copy of a store, encoded later (outside the
// store's lock).
type Snapshot struct {
	state *State
	index uint64
}

// Snapshot returns a copy of the state and its index.
func (s *Store) Snapshot() Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return Snapshot{state: s.state.clone(), index: s.index}
}

type persistedState struct {
	Version int
	Index   uint64
	State   *State
}

// Encode writes the snapshot as JSON with its format version.
func (sn Snapshot) Encode(w io.Writer) error {
	if err := json.NewEncoder(w).Encode(Normalize(persistedState{Version: snapshotVersion, Index: sn.index, State: sn.state})); err != nil {
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return nil
}

// Restore replaces the state with a snapshot Encode wrote.
func (s *Store) Restore(r io.Reader) error {
	var snap persistedState
	if err := json.NewDecoder(io.LimitReader(r, 1<<30)).Decode(&snap); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	if snap.Version != snapshotVersion {
		return fmt.Errorf("restore snapshot: %w: %d", ErrUnknownVersion, snap.Version)
	}
	st := snap.State
	if st == nil {
		return fmt.Errorf("restore snapshot: no state")
	}
	fill := New()
	if st.Nodes == nil {
		st.Nodes = fill.Nodes
	}
	if st.Jobs == nil {
		st.Jobs = fill.Jobs
	}
	if st.Checkpoints == nil {
		st.Checkpoints = fill.Checkpoints
	}
	if st.Hazards == nil {
		st.Hazards = fill.Hazards
	}
	if st.Reclaims == nil {
		st.Reclaims = fill.Reclaims
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state, s.index = st, snap.Index
	s.events++
	s.departures++
	s.notifyLocked()
	return nil
}

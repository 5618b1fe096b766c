package ckpt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// BeginPending records m as a version being received: its chunks are pinned
// against eviction (across restarts too) until Commit or AbortPending. It
// makes room for the missing chunks now and fails with ErrQuota if they cannot
// fit under the cap.
func (s *Store) BeginPending(m *Manifest) error {
	if err := m.Validate(); err != nil {
		return err
	}
	k := versionKey{m.JobID, m.Version}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.committed[k]; ok {
		return nil // already complete; Commit will be a no-op
	}
	if old, ok := s.pending[k]; ok && old.Hash() == m.Hash() {
		// Resumed (or received on a second connection): room was made when
		// it began.
		s.touched[k] = s.now()
		return nil
	}
	p := filepath.Join(s.root, "pending", m.JobID, versionFile(m.Version))
	if err := s.writeFile(p, m.Encode(), 0o644); err != nil {
		return fmt.Errorf("begin %s v%d: %w", m.JobID, m.Version, err)
	}
	s.pending[k] = m
	s.touched[k] = s.now()
	if s.max > 0 {
		var need int64
		for _, c := range m.Chunks() {
			if _, ok := s.chunks[c.Hash]; !ok {
				need += c.Size
			}
		}
		if s.total+need > s.max {
			if err := s.evictLocked(s.max - need); err != nil {
				delete(s.pending, k)
				delete(s.touched, k)
				os.Remove(p)
				return fmt.Errorf("begin %s v%d: need %d bytes: %w", m.JobID, m.Version, need, err)
			}
		}
	}
	return nil
}

// Pending returns the manifests being received (for resume after restart).
func (s *Store) Pending() []*Manifest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Manifest, 0, len(s.pending))
	for _, m := range s.pending {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].JobID != out[j].JobID {
			return out[i].JobID < out[j].JobID
		}
		return out[i].Version < out[j].Version
	})
	return out
}

// AbortPending forgets a pending version and removes the chunks it brought
// that no other version uses: the partial data is gone, nothing committed.
func (s *Store) AbortPending(job string, version uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.abortPendingLocked(job, version)
}

// TouchPending records activity on a pending version now (a connection
// working on it started or ended), restarting its expiry age. It does
// nothing for a version that is not pending.
func (s *Store) TouchPending(job string, version uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := versionKey{job, version}
	if _, ok := s.pending[k]; ok {
		s.touched[k] = s.now()
	}
}

// PendingTouched returns the last activity on a pending version.
func (s *Store) PendingTouched(job string, version uint64) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.touched[versionKey{job, version}]
	return t, ok
}

// ExpirePending aborts (as AbortPending) every pending version whose last
// activity is at least maxAge old by the store's clock and for which busy
// (nil = none busy) returns false, and returns the manifests it removed.
// busy is called with the store locked and must not call the store. It is
// how a receiver cleans up after senders that never came back.
func (s *Store) ExpirePending(maxAge time.Duration, busy func(job string, version uint64) bool) ([]*Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var expired []*Manifest
	var errs []error
	for k, m := range s.pending {
		if now.Sub(s.touched[k]) < maxAge || (busy != nil && busy(k.job, k.version)) {
			continue
		}
		if err := s.abortPendingLocked(k.job, k.version); err != nil {
			errs = append(errs, err)
			continue
		}
		expired = append(expired, m)
	}
	sort.Slice(expired, func(i, j int) bool {
		if expired[i].JobID != expired[j].JobID {
			return expired[i].JobID < expired[j].JobID
		}
		return expired[i].Version < expired[j].Version
	})
	return expired, errors.Join(errs...)
}

func (s *Store) abortPendingLocked(job string, version uint64) error {
	k := versionKey{job, version}
	m, ok := s.pending[k]
	if !ok {
		return nil
	}
	delete(s.pending, k)
	delete(s.touched, k)
	if err := os.Remove(filepath.Join(s.root, "pending", job, versionFile(version))); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("abort %s v%d: %w", job, version, err)
	}
	s.removeUnreferencedLocked(m.Chunks())
	return nil
}

package ckpt

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// removeUnreferencedLocked deletes those of refs that no committed or pending
// version and no AddDir in progress uses.
func (s *Store) removeUnreferencedLocked(refs []ChunkRef) {
	used := s.referencedLocked()
	for _, c := range refs {
		if used[c.Hash] || s.inflight[c.Hash] > 0 {
			continue
		}
		if ci, ok := s.chunks[c.Hash]; ok {
			os.Remove(s.chunkPath(c.Hash))
			s.total -= ci.size
			delete(s.chunks, c.Hash)
			delete(s.verified, c.Hash)
		}
	}
}

func (s *Store) referencedLocked() map[Hash]bool {
	used := map[Hash]bool{}
	for _, set := range []map[versionKey]*Manifest{s.committed, s.pending} {
		for _, m := range set {
			for _, f := range m.Files {
				for _, c := range f.Chunks {
					used[c.Hash] = true
				}
			}
		}
	}
	return used
}

// SetLive marks job live (its newest committed version is never evicted) or
// not. The mark is kept on disk.
func (s *Store) SetLive(job string, live bool) error {
	if err := ValidJobID(job); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setLiveLocked(job, live)
}

func (s *Store) setLiveLocked(job string, live bool) error {
	p := filepath.Join(s.root, "live", job)
	if live {
		if err := s.writeFile(p, nil, 0o644); err != nil {
			return fmt.Errorf("set live %s: %w", job, err)
		}
		s.live[job] = true
		return nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("set live %s: %w", job, err)
	}
	delete(s.live, job)
	return nil
}

// pinnedLocked returns the chunks eviction must keep: the newest committed
// version of each live job, versions held by a pin without expiry, every
// pending version, AddDirs in progress.
func (s *Store) pinnedLocked() map[Hash]bool {
	pinned := map[Hash]bool{}
	add := func(m *Manifest) {
		for _, f := range m.Files {
			for _, c := range f.Chunks {
				pinned[c.Hash] = true
			}
		}
	}
	for job := range s.live {
		if vs := s.versionsLocked(job); len(vs) > 0 {
			add(s.committed[versionKey{job, vs[len(vs)-1]}])
		}
	}
	for _, m := range s.pending {
		add(m)
	}
	for k, until := range s.pins {
		if m, ok := s.committed[versionKey{k.job, k.version}]; ok && until.IsZero() {
			add(m)
		}
	}
	for h, n := range s.inflight {
		if n > 0 {
			pinned[h] = true
		}
	}
	return pinned
}

// Evict trims the store to its cap now.
func (s *Store) Evict() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.max == 0 {
		return nil
	}
	return s.evictLocked(s.max)
}

// retainedLocked returns, for each chunk of a version held by a pin that
// has an expiry not reached yet, the latest such expiry.
func (s *Store) retainedLocked() map[Hash]time.Time {
	now := s.now()
	out := map[Hash]time.Time{}
	for k, until := range s.pins {
		if until.IsZero() || !now.Before(until) {
			continue
		}
		m, ok := s.committed[versionKey{k.job, k.version}]
		if !ok {
			continue
		}
		for _, c := range m.Chunks() {
			if t, ok := out[c.Hash]; !ok || until.After(t) {
				out[c.Hash] = until
			}
		}
	}
	return out
}

// evictLocked removes unpinned chunks until total <= target: first the
// least recently used of those no pin holds, then those only pins with an
// expiry hold (earliest expiry first). It drops every committed version
// that needed a removed chunk. If the target cannot be reached it evicts
// nothing and returns ErrQuota.
func (s *Store) evictLocked(target int64) error {
	if s.total <= target {
		return nil
	}
	pinned := s.pinnedLocked()
	retained := s.retainedLocked()
	type cand struct {
		h Hash
		*chunkInfo
		until time.Time // zero: no pin holds it
	}
	var cands []cand
	var free int64
	for h, ci := range s.chunks {
		if !pinned[h] {
			cands = append(cands, cand{h, ci, retained[h]})
			free += ci.size
		}
	}
	if s.total-free > target {
		return fmt.Errorf("%w: %d bytes pinned, %d wanted under cap %d", ErrQuota, s.total-free, target, s.max)
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.until.IsZero() != b.until.IsZero() {
			return a.until.IsZero()
		}
		if !a.until.Equal(b.until) {
			return a.until.Before(b.until)
		}
		if !a.used.Equal(b.used) {
			return a.used.Before(b.used)
		}
		return bytes.Compare(a.h[:], b.h[:]) < 0
	})
	gone := map[Hash]bool{}
	for _, c := range cands {
		if s.total <= target {
			break
		}
		os.Remove(s.chunkPath(c.h))
		s.total -= c.size
		delete(s.chunks, c.h)
		delete(s.verified, c.h)
		gone[c.h] = true
	}
	// A version missing a chunk can no longer be restored: drop it.
	for k, m := range s.committed {
		for _, c := range m.Chunks() {
			if gone[c.Hash] {
				os.Remove(filepath.Join(s.root, "versions", k.job, versionFile(k.version)))
				delete(s.committed, k)
				if s.dropPinsLocked(k.job, k.version) {
					s.log.Warn("ckpt: store full: evicted a retained version before its time", "job", k.job, "version", k.version)
					if len(s.versionsLocked(k.job)) == 0 {
						if err := s.markPurgedLocked(k.job, s.now()); err != nil {
							s.log.Warn("ckpt: marking an evicted job purged", "err", err)
						}
					}
				} else {
					s.log.Info("ckpt: evicted version", "job", k.job, "version", k.version)
				}
				break
			}
		}
	}
	return nil
}

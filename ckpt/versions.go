package ckpt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// Commit makes version m durable: every chunk must be present with the right
// size and verified (chunks not verified by this process are re-hashed), then
// the manifest is written atomically. It ends any pending state for m and
// then trims the cache to its cap.
func (s *Store) Commit(m *Manifest) error {
	if err := m.Validate(); err != nil {
		return err
	}
	k := versionKey{m.JobID, m.Version}
	s.mu.Lock()
	if old, ok := s.committed[k]; ok {
		s.mu.Unlock()
		if old.Hash() == m.Hash() {
			return nil
		}
		return fmt.Errorf("commit %s v%d: a different manifest is already committed", m.JobID, m.Version)
	}
	var unverified []ChunkRef
	for _, c := range m.Chunks() {
		ci, ok := s.chunks[c.Hash]
		if !ok || ci.size != c.Size {
			s.mu.Unlock()
			return fmt.Errorf("commit %s v%d: chunk %s: %w", m.JobID, m.Version, c.Hash, ErrIncomplete)
		}
		if !s.verified[c.Hash] {
			unverified = append(unverified, c)
		}
	}
	s.mu.Unlock()
	for _, c := range unverified {
		if _, err := s.ReadChunk(c.Hash); err != nil {
			return fmt.Errorf("commit %s v%d: %w: %w", m.JobID, m.Version, ErrIncomplete, err)
		}
	}
	if err := s.waitDurable(m); err != nil {
		return fmt.Errorf("commit %s v%d: %w", m.JobID, m.Version, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range m.Chunks() {
		// Pending and in-flight chunks are pinned; this catches a caller
		// committing chunks nothing pins while they are evicted.
		if ci, ok := s.chunks[c.Hash]; !ok || !ci.durable {
			return fmt.Errorf("commit %s v%d: chunk %s gone before the manifest was written: %w", m.JobID, m.Version, c.Hash, ErrIncomplete)
		}
	}
	// Every chunk is on disk now (waitDurable); the manifest is written
	// last, atomically (fsync, rename, fsync of its directory and of the
	// directory above, which may be new).
	dir := filepath.Join(s.root, "versions", m.JobID)
	mp := filepath.Join(dir, versionFile(m.Version))
	// From here a crash may leave the manifest on disk.
	s.hook("manifest", mp)
	if err := s.writeFile(mp, m.Encode(), 0o644); err != nil {
		return fmt.Errorf("commit %s v%d: %w", m.JobID, m.Version, err)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := syncDir(d); err != nil {
			os.Remove(mp)
			return fmt.Errorf("commit %s v%d: %w", m.JobID, m.Version, diskErr(err))
		}
	}
	s.committed[k] = m
	if _, ok := s.purged[m.JobID]; ok {
		// The job has a version again: it is no longer purged.
		delete(s.purged, m.JobID)
		os.Remove(filepath.Join(s.root, "purged", m.JobID))
	}
	now := s.now()
	for _, c := range m.Chunks() {
		if ci := s.chunks[c.Hash]; ci != nil {
			ci.used = now
		}
		// mtime is the LRU time that survives a restart.
		_ = os.Chtimes(s.chunkPath(c.Hash), now, now)
	}
	if _, ok := s.pending[k]; ok {
		delete(s.pending, k)
		delete(s.touched, k)
		os.Remove(filepath.Join(s.root, "pending", m.JobID, versionFile(m.Version)))
	}
	if s.max > 0 && s.total > s.max {
		if err := s.evictLocked(s.max); err != nil {
			s.log.Warn("ckpt: cache over its cap after commit", "usage", s.total, "cap", s.max, "err", err)
		}
	}
	return nil
}

// Manifest returns committed version v of job.
func (s *Store) Manifest(job string, version uint64) (*Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.committed[versionKey{job, version}]
	if !ok {
		return nil, fmt.Errorf("%s v%d: %w", job, version, ErrNoVersion)
	}
	return m, nil
}

// Versions returns the committed versions of job, ascending.
func (s *Store) Versions(job string) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versionsLocked(job)
}

func (s *Store) versionsLocked(job string) []uint64 {
	var vs []uint64
	for k := range s.committed {
		if k.job == job {
			vs = append(vs, k.version)
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
	return vs
}

// Latest returns the newest committed version of job.
func (s *Store) Latest(job string) (*Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vs := s.versionsLocked(job)
	if len(vs) == 0 {
		return nil, fmt.Errorf("%s: %w", job, ErrNoVersion)
	}
	return s.committed[versionKey{job, vs[len(vs)-1]}], nil
}

// Jobs returns the ids of jobs with a committed version, sorted.
func (s *Store) Jobs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for k := range s.committed {
		seen[k.job] = true
	}
	out := make([]string, 0, len(seen))
	for j := range seen {
		out = append(out, j)
	}
	sort.Strings(out)
	return out
}

// DropVersion removes committed version v of job, its pins and the chunks
// only it used.
func (s *Store) DropVersion(job string, version uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropVersionLocked(job, version)
}

func (s *Store) dropVersionLocked(job string, version uint64) error {
	k := versionKey{job, version}
	m, ok := s.committed[k]
	if !ok {
		return fmt.Errorf("%s v%d: %w", job, version, ErrNoVersion)
	}
	if err := os.Remove(filepath.Join(s.root, "versions", job, versionFile(version))); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("drop %s v%d: %w", job, version, err)
	}
	delete(s.committed, k)
	s.dropPinsLocked(job, version)
	s.removeUnreferencedLocked(m.Chunks())
	return nil
}

// NextVersion returns one more than the newest version of job ever seen
// (committed or pending), starting at 1.
func (s *Store) NextVersion(job string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var v uint64
	for _, set := range []map[versionKey]*Manifest{s.committed, s.pending} {
		for k := range set {
			if k.job == job && k.version > v {
				v = k.version
			}
		}
	}
	return v + 1
}

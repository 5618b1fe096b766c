package ckpt

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Restore writes committed version of job into dst (created if absent; files
// already there with the same names are replaced). Every chunk is verified as
// it is read and every file against its whole-file hash; on any failure the
// files written so far are removed and the error wraps ErrCorruptChunk or
// ErrChunkMissing so the caller can fall back to another version.
func (s *Store) Restore(job string, version uint64, dst string) error {
	m, err := s.Manifest(job, version)
	if err != nil {
		return err
	}
	return s.RestoreManifest(m, dst)
}

// RestoreManifest writes the files of m into dst, verifying every chunk.
func (s *Store) RestoreManifest(m *Manifest, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("restore %s v%d: %w", m.JobID, m.Version, err)
	}
	var done []string
	fail := func(err error) error {
		for _, p := range done {
			os.Remove(p)
		}
		return fmt.Errorf("restore %s v%d: %w", m.JobID, m.Version, err)
	}
	for _, f := range m.Files {
		p := filepath.Join(dst, filepath.FromSlash(f.Path))
		if err := s.restoreFile(f, p); err != nil {
			return fail(err)
		}
		done = append(done, p)
	}
	return nil
}

func (s *Store) restoreFile(f File, p string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return diskErr(err)
	}
	out, err := os.CreateTemp(filepath.Dir(p), ".restore-*")
	if err != nil {
		return diskErr(err)
	}
	tmp := out.Name()
	fail := func(err error) error {
		out.Close()
		os.Remove(tmp)
		return err
	}
	whole := sha256.New()
	for _, c := range f.Chunks {
		b, err := s.ReadChunk(c.Hash)
		if err != nil {
			return fail(fmt.Errorf("%s: %w", f.Path, err))
		}
		whole.Write(b)
		if _, err := out.Write(b); err != nil {
			return fail(diskErr(err))
		}
	}
	var sum Hash
	copy(sum[:], whole.Sum(nil))
	if sum != f.Hash {
		return fail(fmt.Errorf("%s: whole-file hash mismatch: %w", f.Path, ErrCorruptChunk))
	}
	if err := out.Chmod(os.FileMode(f.Mode & 0o7777)); err != nil {
		return fail(err)
	}
	if err := out.Sync(); err != nil {
		return fail(diskErr(err))
	}
	if err := out.Close(); err != nil {
		os.Remove(tmp)
		return diskErr(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// RestoreNewest restores the newest committed version of job that verifies,
// trying older versions when a newer one has a corrupt or missing chunk. It
// returns the manifest restored and, in skipped, why each newer version was
// passed over.
func (s *Store) RestoreNewest(job, dst string) (m *Manifest, skipped []error, err error) {
	vs := s.Versions(job)
	if len(vs) == 0 {
		return nil, nil, fmt.Errorf("restore %s: %w", job, ErrNoVersion)
	}
	for i := len(vs) - 1; i >= 0; i-- {
		mv, err := s.Manifest(job, vs[i])
		if err != nil {
			skipped = append(skipped, err)
			continue // evicted meanwhile
		}
		err = s.RestoreManifest(mv, dst)
		if err == nil {
			return mv, skipped, nil
		}
		if !errors.Is(err, ErrCorruptChunk) && !errors.Is(err, ErrChunkMissing) {
			return nil, skipped, err
		}
		skipped = append(skipped, err)
	}
	return nil, skipped, fmt.Errorf("restore %s: no version verifies: %w", job, errors.Join(skipped...))
}

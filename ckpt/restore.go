package ckpt

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
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

// RestoreManifest writes the checkpoint files of m into dst, verifying
// every chunk; the outputs stay out (RestoreCheckpoint restores them).
func (s *Store) RestoreManifest(m *Manifest, dst string) error {
	return s.RestoreCheckpoint(m, dst, "")
}

// restoreEntries writes files (paths relative to dst) into dst, created if
// absent: regular files verified chunk by chunk and whole, directories,
// symlinks. Directory modes are set last, without their write bits when
// readOnly (files lose theirs as they are written). It returns what it
// wrote, parents first, also on failure.
func (s *Store) restoreEntries(files []File, dst string, readOnly bool) ([]string, error) {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, diskErr(err)
	}
	var written []string
	var dirs []File
	for _, f := range files {
		p := filepath.Join(dst, filepath.FromSlash(f.Path))
		switch {
		case f.IsDir():
			if err := os.MkdirAll(p, 0o755); err != nil {
				return written, diskErr(err)
			}
			dirs = append(dirs, f)
		case f.IsSymlink():
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return written, diskErr(err)
			}
			if err := replaceSymlink(f.Target, p); err != nil {
				return written, diskErr(err)
			}
		default:
			if readOnly {
				f.Mode = layoutMode(f.Mode)
			}
			if err := s.restoreFile(f, p); err != nil {
				return written, err
			}
		}
		written = append(written, p)
	}
	// Deepest first, so a parent's mode never stands in the way.
	for i := len(dirs) - 1; i >= 0; i-- {
		mode := dirs[i].Mode & 0o777
		if readOnly {
			mode = layoutMode(mode)
		}
		if err := os.Chmod(filepath.Join(dst, filepath.FromSlash(dirs[i].Path)), os.FileMode(mode)); err != nil {
			return written, err
		}
	}
	return written, nil
}

// replaceSymlink makes p a symlink to target, replacing what is there
// atomically.
func replaceSymlink(target, p string) error {
	tmp := filepath.Join(filepath.Dir(p), fmt.Sprintf(".restore-link-%d", time.Now().UnixNano()))
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
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
	if err := out.Chmod(os.FileMode(f.Mode & 0o777)); err != nil {
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

// layoutMode is the mode of a file or directory laid out read-only for a
// job: no write bits, readable by everyone (the job runs as its own uid,
// not the agent's) and executable by everyone where its owner could
// execute it. Set-id and sticky bits never come from a manifest: a peer
// must not make the agent, as root, create a set-uid file.
func layoutMode(m uint32) uint32 {
	m = m&0o777&^0o222 | 0o444
	if m&0o100 != 0 {
		m |= 0o111
	}
	return m
}

package ckpt

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// AddDir chunks every regular file under dir, stores the chunks and commits
// them as version of job, created at now. On any error (ErrDiskFull, ErrQuota,
// a read error) the chunks it wrote that nothing else uses are removed and
// nothing is committed.
func (s *Store) AddDir(job string, version uint64, dir string, now time.Time) (*Manifest, error) {
	if err := ValidJobID(job); err != nil {
		return nil, err
	}
	m := &Manifest{JobID: job, Version: version, Created: time.Unix(0, now.UnixNano()).UTC()}
	var written []ChunkRef
	var pinnedHere []Hash
	unpin := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, h := range pinnedHere {
			if s.inflight[h]--; s.inflight[h] <= 0 {
				delete(s.inflight, h)
			}
		}
		pinnedHere = nil
	}
	defer unpin()
	fail := func(err error) (*Manifest, error) {
		unpin()
		s.mu.Lock()
		s.removeUnreferencedLocked(written)
		s.mu.Unlock()
		return nil, fmt.Errorf("add %s v%d: %w", job, version, err)
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		f := File{Path: filepath.ToSlash(rel), Mode: uint32(info.Mode().Perm())}
		r, err := os.Open(p)
		if err != nil {
			return err
		}
		defer r.Close()
		whole := sha256.New()
		err = s.chunker.Split(r, func(chunk []byte) error {
			whole.Write(chunk)
			h := Sum(chunk)
			s.mu.Lock()
			s.inflight[h]++
			_, had := s.chunks[h]
			s.mu.Unlock()
			pinnedHere = append(pinnedHere, h)
			if !had {
				if err := s.putVerified(h, chunk); err != nil {
					return err
				}
				written = append(written, ChunkRef{h, int64(len(chunk))})
			} else {
				s.touch(h)
			}
			f.Chunks = append(f.Chunks, ChunkRef{Hash: h, Size: int64(len(chunk))})
			f.Size += int64(len(chunk))
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		copy(f.Hash[:], whole.Sum(nil))
		m.Files = append(m.Files, f)
		return nil
	})
	if err != nil {
		return fail(err)
	}
	sortFiles(m.Files)
	if err := s.Commit(m); err != nil {
		return fail(err)
	}
	return m, nil
}

package ckpt

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
)

// ErrUnsupportedEntry is wrapped by the error for an entry a tree may not
// hold: anything but a regular file, a directory or a symlink (a FIFO, a
// socket, a device).
var ErrUnsupportedEntry = errors.New("not a regular file, directory or symlink")

// source is one entry to store: its manifest entry (no chunks yet) and,
// for a regular file, where to read it.
type source struct {
	file File
	abs  string
}

// walkTree lists the entries under root (root itself excluded) as
// sources, each path prefixed with prefix: regular files, directories
// and symlinks (whose targets must resolve inside the listed tree); any
// other entry is refused. Entries ig excludes are left out (an excluded
// directory with everything under it). size is the sum of the file sizes
// and symlink target lengths.
func walkTree(root, prefix string, ig *Ignore) (srcs []source, size int64, err error) {
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			if !d.IsDir() {
				return fmt.Errorf("%s: not a directory", p)
			}
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ig.excluded(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if len(srcs) >= MaxFiles {
			return fmt.Errorf("more than %d entries", MaxFiles)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		f := File{Path: prefix + rel}
		switch {
		case d.IsDir():
			f.Mode = ModeDir | uint32(info.Mode().Perm())
		case d.Type().IsRegular():
			f.Mode = uint32(info.Mode().Perm())
			size += info.Size()
		case d.Type()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := validTarget(t); err != nil {
				return fmt.Errorf("symlink %s: %w", rel, err)
			}
			f.Mode, f.Target, f.Size, f.Hash = ModeSymlink|0o777, t, int64(len(t)), Sum([]byte(t))
			size += f.Size
		default:
			return fmt.Errorf("%s (%v): %w", rel, d.Type(), ErrUnsupportedEntry)
		}
		if err := validPath(f.Path); err != nil {
			return err
		}
		srcs = append(srcs, source{file: f, abs: p})
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	files := make([]File, len(srcs))
	for i := range srcs {
		files[i] = srcs[i].file
	}
	if prefix != "" {
		// The subtree's own directory is part of it.
		files = append(files, File{Path: path.Clean(prefix), Mode: ModeDir | 0o755})
	}
	if err := CheckLinks(files); err != nil {
		return nil, 0, err
	}
	return srcs, size, nil
}

// adder stores the chunks of new entries for one version; they stay
// pinned (in flight) until done.
type adder struct {
	s       *Store
	written []ChunkRef
	pinned  []Hash
	// stored counts the bytes of chunks this adder wrote (the store
	// lacked them).
	stored int64
}

// done unpins the adder's chunks; when the version was not committed it
// also removes the chunks it wrote that nothing else uses.
func (a *adder) done(committed bool) {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range a.pinned {
		if s.inflight[h]--; s.inflight[h] <= 0 {
			delete(s.inflight, h)
		}
	}
	a.pinned = nil
	if !committed {
		s.removeUnreferencedLocked(a.written)
		a.written = nil
	}
}

// add chunks and stores the regular files among srcs and returns every
// entry with its chunks, sorted by path. limit > 0 bounds the bytes read
// (a file that grows while it is read); past it add fails with over.
func (a *adder) add(srcs []source, limit int64, over func(read int64) error) ([]File, error) {
	s := a.s
	files := make([]File, 0, len(srcs))
	var read int64
	for _, src := range srcs {
		f := src.file
		if !f.IsRegular() {
			files = append(files, f)
			continue
		}
		r, err := os.Open(src.abs)
		if err != nil {
			return nil, err
		}
		whole := sha256.New()
		err = s.chunker.Split(r, func(chunk []byte) error {
			if read += int64(len(chunk)); limit > 0 && read > limit {
				return over(read)
			}
			whole.Write(chunk)
			h := Sum(chunk)
			s.mu.Lock()
			s.inflight[h]++
			_, had := s.chunks[h]
			s.mu.Unlock()
			a.pinned = append(a.pinned, h)
			if !had {
				if err := s.putVerified(h, chunk); err != nil {
					return err
				}
				a.written = append(a.written, ChunkRef{h, int64(len(chunk))})
				a.stored += int64(len(chunk))
			} else {
				s.touch(h)
			}
			f.Chunks = append(f.Chunks, ChunkRef{Hash: h, Size: int64(len(chunk))})
			f.Size += int64(len(chunk))
			return nil
		})
		r.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		copy(f.Hash[:], whole.Sum(nil))
		files = append(files, f)
	}
	sortFiles(files)
	return files, nil
}

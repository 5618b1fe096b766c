package ckpt

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"time"
)

// AddDir chunks every regular file under dir, stores the chunks and commits
// them as version of job, created at now. On any error (ErrDiskFull, ErrQuota,
// a read error) the chunks it wrote that nothing else uses are removed and
// nothing is committed.
func (s *Store) AddDir(job string, version uint64, dir string, now time.Time) (*Manifest, error) {
	return s.AddCheckpoint(job, version, dir, "", now)
}

// checkpointSources lists the regular files under dir; anything else but
// a directory is refused, and so is a top-level OutputDir (that name holds
// the outputs).
func checkpointSources(dir string) ([]source, error) {
	var srcs []source
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
		rel = filepath.ToSlash(rel)
		if rel == OutputDir || len(rel) > len(OutputDir) && rel[:len(OutputDir)+1] == OutputDir+"/" {
			return fmt.Errorf("%s: the name %s is reserved for the outputs", p, OutputDir)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		srcs = append(srcs, source{file: File{Path: rel, Mode: uint32(info.Mode().Perm())}, abs: p})
		return nil
	})
	return srcs, err
}

package ckpt

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// OutputDir is the top-level directory of a checkpoint version that holds
// the job's outputs (what it wrote to its output directory) at the time
// of the checkpoint. Checkpoint files never use the name, so the two
// trees restore apart.
const OutputDir = ".reclaimnet-output"

// AddCheckpoint stores one checkpoint version of job: the regular files
// under ckptDir at their paths, and the job's output directory outDir
// (files, directories and symlinks that stay inside it) under OutputDir.
// Either may be "": a version taken when a job ends holds only its
// outputs. Chunks shared with earlier versions are not stored again. On
// any error (ErrDiskFull, ErrQuota, a read error, an entry outDir may not
// hold) the chunks it wrote that nothing else uses are removed and nothing
// is committed.
func (s *Store) AddCheckpoint(job string, version uint64, ckptDir, outDir string, now time.Time) (*Manifest, error) {
	if err := ValidJobID(job); err != nil {
		return nil, err
	}
	fail := func(err error) (*Manifest, error) {
		return nil, fmt.Errorf("add %s v%d: %w", job, version, err)
	}
	var srcs []source
	if ckptDir != "" {
		cs, err := checkpointSources(ckptDir)
		if err != nil {
			return fail(err)
		}
		srcs = cs
	}
	if outDir != "" {
		outs, _, err := walkTree(outDir, OutputDir+"/", nil)
		if err != nil {
			return fail(fmt.Errorf("outputs: %w", err))
		}
		srcs = append(srcs, source{file: File{Path: OutputDir, Mode: ModeDir | 0o755}})
		srcs = append(srcs, outs...)
	}
	a := &adder{s: s}
	files, err := a.add(srcs, 0, nil)
	if err != nil {
		a.done(false)
		return fail(err)
	}
	m := &Manifest{JobID: job, Version: version, Created: time.Unix(0, now.UnixNano()).UTC(), Files: files}
	if err := s.Commit(m); err != nil {
		a.done(false)
		return fail(err)
	}
	a.done(true)
	return m, nil
}

// SplitOutputs parts a version's entries into its checkpoint files and
// its outputs, the latter with their paths relative to the output
// directory. hasOutputs reports whether the version holds an output
// directory at all (an empty one counts).
func SplitOutputs(files []File) (checkpoint, outputs []File, hasOutputs bool) {
	for _, f := range files {
		switch {
		case f.Path == OutputDir:
			hasOutputs = true
		case strings.HasPrefix(f.Path, OutputDir+"/"):
			f.Path = f.Path[len(OutputDir)+1:]
			outputs = append(outputs, f)
			hasOutputs = true
		default:
			checkpoint = append(checkpoint, f)
		}
	}
	return checkpoint, outputs, hasOutputs
}

// ErrNoOutputs: a version holds no output directory.
var ErrNoOutputs = errors.New("version holds no outputs")

// RestoreCheckpoint writes version m's checkpoint files into ckptDst and
// its outputs into outDst (either "" to leave that part out), verifying
// every chunk and file. outDst should be a fresh directory (a symlink
// already in it would be followed); a version without outputs gives an
// empty outDst. On failure what it wrote is removed.
func (s *Store) RestoreCheckpoint(m *Manifest, ckptDst, outDst string) error {
	ck, out, _ := SplitOutputs(m.Files)
	if err := CheckLinks(out); err != nil {
		return fmt.Errorf("restore %s v%d: outputs: %w", m.JobID, m.Version, err)
	}
	var undo []func()
	fail := func(err error) error {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		return fmt.Errorf("restore %s v%d: %w", m.JobID, m.Version, err)
	}
	for _, part := range []struct {
		files []File
		dst   string
	}{{ck, ckptDst}, {out, outDst}} {
		if part.dst == "" {
			continue
		}
		written, err := s.restoreEntries(part.files, part.dst, false)
		undo = append(undo, func() { removeWritten(written) })
		if err != nil {
			return fail(err)
		}
	}
	return nil
}

// removeWritten removes restored entries, deepest first.
func removeWritten(paths []string) {
	for i := len(paths) - 1; i >= 0; i-- {
		os.Remove(paths[i])
	}
}

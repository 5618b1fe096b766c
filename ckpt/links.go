package ckpt

import (
	"errors"
	"fmt"
	"strings"
)

// Limits on resolving symlinks inside a tree; they bound the work a
// crafted manifest can cause.
const (
	// maxLinkHops is how many symlinks one resolution may follow (the
	// kernel's limit is 40 too).
	maxLinkHops = 40
	// linkStepBudget bounds the path elements walked to check all the
	// symlinks of one tree.
	linkStepBudget = 1 << 22
)

// ErrLinkOutside is wrapped by the error for a symlink that does not
// resolve to an entry inside its tree.
var ErrLinkOutside = errors.New("symlink does not stay inside the tree")

// validTarget checks a symlink target's form: relative, no NUL, bounded.
func validTarget(t string) error {
	if t == "" || len(t) > maxPathLen {
		return fmt.Errorf("target length %d outside 1..%d", len(t), maxPathLen)
	}
	if strings.ContainsRune(t, 0) {
		return errors.New("target holds a NUL byte")
	}
	if strings.HasPrefix(t, "/") {
		return fmt.Errorf("target %q is absolute: %w", trunc(t), ErrLinkOutside)
	}
	return nil
}

// CheckLinks checks that every symlink among files resolves, following
// the tree's own entries as the kernel would follow them on disk, to an
// entry of the tree: no absolute target, no ".." above the top, no
// missing target, no loop. A tree laid out on disk then has no path
// through its symlinks that leaves it.
func CheckLinks(files []File) error {
	var kinds map[string]*File
	budget := linkStepBudget
	for i := range files {
		f := &files[i]
		if !f.IsSymlink() {
			continue
		}
		if kinds == nil {
			kinds = treeEntries(files)
		}
		if err := resolveLink(kinds, f, &budget); err != nil {
			return fmt.Errorf("symlink %q -> %q: %w", f.Path, trunc(f.Target), err)
		}
	}
	return nil
}

// resolveLink follows link inside the tree given by entries (path to
// entry) until it reaches a directory or a file.
func resolveLink(entries map[string]*File, link *File, budget *int) error {
	// cur is the directory being resolved in, as path elements; todo is
	// what is left to walk.
	cur := parentElems(link.Path)
	todo := strings.Split(link.Target, "/")
	hops := 1
	for len(todo) > 0 {
		if *budget--; *budget < 0 {
			return errors.New("too many symlinks to check in one tree")
		}
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return fmt.Errorf("climbs above the top: %w", ErrLinkOutside)
			}
			cur = cur[:len(cur)-1]
			continue
		}
		p := strings.Join(append(cur, name), "/")
		e, ok := entries[p]
		switch {
		case !ok:
			return fmt.Errorf("%q is not in the tree: %w", trunc(p), ErrLinkOutside)
		case e.IsSymlink():
			if hops++; hops > maxLinkHops {
				return fmt.Errorf("more than %d symlinks deep: %w", maxLinkHops, ErrLinkOutside)
			}
			todo = append(strings.Split(e.Target, "/"), todo...)
		case e.IsDir():
			cur = append(cur, name)
		default:
			if len(todo) > 0 {
				return fmt.Errorf("%q is a file, not a directory: %w", trunc(p), ErrLinkOutside)
			}
			return nil
		}
	}
	return nil
}

var impliedDir = &File{Mode: ModeDir | 0o755}

// treeEntries maps every path of the tree to its entry; a directory that
// only appears as the parent of an entry (checkpoints list files only)
// maps to a directory entry too.
func treeEntries(files []File) map[string]*File {
	m := make(map[string]*File, len(files))
	for i := range files {
		m[files[i].Path] = &files[i]
	}
	for i := range files {
		p := files[i].Path
		for j := strings.LastIndexByte(p, '/'); j > 0; j = strings.LastIndexByte(p[:j], '/') {
			if _, ok := m[p[:j]]; ok {
				break
			}
			m[p[:j]] = impliedDir
		}
	}
	return m
}

// parentElems returns the path elements of p's parent directory.
func parentElems(p string) []string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return nil
	}
	return strings.Split(p[:i], "/")
}

package ckpt

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A bundle is a job's working directory taken at submission: its files,
// directories and symlinks (which must stay inside it), less what its
// IgnoreFile excludes. It is stored like a checkpoint, as version 1 of the
// pseudo-job BundleKey(id), so the same chunks dedupe against everything
// else in the store and package transfer moves it as it moves a
// checkpoint (only the chunks a receiver lacks).
//
// Its BundleID is the SHA-256 of the entries' paths, sizes, modes and
// contents' hashes (not of the chunking, not of any time): an unchanged
// directory taken again has the same ID and stores no new chunk.

// DefaultMaxBundle is the default cap on a bundle's size (the sum of its
// files' sizes and symlink targets' lengths).
const DefaultMaxBundle = 1 << 30

// bundleKeyPrefix starts the pseudo-job id of every bundle. With the 64
// hex digits of the ID it is 71 bytes: longer than any job name the
// agent accepts (64), so no job's id is ever a bundle's.
const bundleKeyPrefix = "bundle-"

// bundleVersion is the version number a bundle is stored under.
const bundleVersion = 1

// BundleID names a bundle by its content.
type BundleID Hash

// String returns the lowercase hex form.
func (id BundleID) String() string { return Hash(id).String() }

// ParseBundleID parses 64 lowercase hex digits.
func ParseBundleID(s string) (BundleID, error) {
	h, err := ParseHash(s)
	return BundleID(h), err
}

// BundleKey is the job id a bundle is stored and sent under (version 1).
func BundleKey(id BundleID) string { return bundleKeyPrefix + id.String() }

// IsBundleKey reports whether job names a bundle, and which.
func IsBundleKey(job string) (BundleID, bool) {
	rest, ok := strings.CutPrefix(job, bundleKeyPrefix)
	if !ok {
		return BundleID{}, false
	}
	id, err := ParseBundleID(rest)
	return id, err == nil
}

// BundleIDOf computes the ID of a tree of entries (sorted by path).
func BundleIDOf(files []File) BundleID {
	var b bytes.Buffer
	b.WriteString("reclaimnet-bundle v1\n")
	fmt.Fprintf(&b, "entries %d\n", len(files))
	for _, f := range files {
		fmt.Fprintf(&b, "%s %d %o %s\n", strconv.Quote(f.Path), f.Size, f.Mode, f.Hash)
	}
	return BundleID(Sum(b.Bytes()))
}

// validBundle checks what a manifest stored under a bundle key must hold:
// version 1, no creation time, entries that hash to the ID in its key,
// modes without set-id or sticky bits.
func validBundle(m *Manifest, id BundleID) error {
	if m.Version != bundleVersion || m.Created.UnixNano() != 0 {
		return fmt.Errorf("bundle %s: version %d created %d, want version %d created 0", id, m.Version, m.Created.UnixNano(), bundleVersion)
	}
	for _, f := range m.Files {
		if f.Mode&0o7000 != 0 {
			return fmt.Errorf("bundle %s: %q has set-id or sticky bits", id, f.Path)
		}
	}
	if got := BundleIDOf(m.Files); got != id {
		return fmt.Errorf("bundle %s: its entries hash to %s", id, got)
	}
	return nil
}

// Errors about bundles (match with errors.Is).
var (
	// ErrBadBundle is wrapped by every error that is the caller's
	// mistake in taking a bundle: a missing or unreadable directory, an
	// entry a bundle may not hold, a symlink leaving it, a bad ignore
	// file, a bundle over its cap.
	ErrBadBundle = errors.New("bad bundle")
	// ErrBundleTooLarge is wrapped by *TooLargeError.
	ErrBundleTooLarge = errors.New("bundle too large")
	// ErrNoBundle: the store does not hold the bundle, or not every chunk
	// of it.
	ErrNoBundle = errors.New("bundle not here")
	// ErrLayoutMismatch: a laid-out directory differs from its bundle.
	ErrLayoutMismatch = errors.New("layout differs from the bundle")
)

// TooLargeError is the error for a bundle over its size cap.
type TooLargeError struct {
	Dir string
	// Size is the bundle's size in bytes (at least this much when AtLeast:
	// a file grew while it was read).
	Size    int64
	AtLeast bool
	Cap     int64
}

func (e *TooLargeError) Error() string {
	least := ""
	if e.AtLeast {
		least = "at least "
	}
	return fmt.Sprintf("bundle %s is %s%s (%d bytes), over the bundle size cap of %s (%d bytes); leave files out with %s or raise the cap",
		e.Dir, least, FormatBytes(e.Size), e.Size, FormatBytes(e.Cap), e.Cap, IgnoreFile)
}

// Unwrap makes the error match ErrBadBundle and ErrBundleTooLarge.
func (e *TooLargeError) Unwrap() []error { return []error{ErrBadBundle, ErrBundleTooLarge} }

// FormatBytes writes n in binary units (KiB, MiB, GiB, TiB) with one
// decimal.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + []string{"KiB", "MiB", "GiB", "TiB"}[i]
}

// Bundle is what AddBundle stored.
type Bundle struct {
	ID       BundleID
	Manifest *Manifest
	// Size is the bundle's size: its files' bytes and its symlinks'
	// target lengths.
	Size int64
	// Stored is how many bytes of chunks the store lacked and wrote: 0 for
	// a bundle it already held.
	Stored int64
}

// BundleOptions configure AddBundle.
type BundleOptions struct {
	// MaxBytes caps the bundle's size; 0 means DefaultMaxBundle, negative
	// means no cap.
	MaxBytes int64
}

// AddBundle takes dir as a bundle and stores it. dir's IgnoreFile, if
// there is one, leaves paths out (it is itself part of the bundle unless
// it ignores itself). Modes keep their permission bits (set-id and
// sticky bits are dropped). Caller mistakes wrap ErrBadBundle, a bundle
// over the cap is a *TooLargeError (the size is known before any file is
// read); a full disk or quota give ErrDiskFull or ErrQuota and store
// nothing.
func (s *Store) AddBundle(dir string, opts BundleOptions) (*Bundle, error) {
	limit := opts.MaxBytes
	if limit == 0 {
		limit = DefaultMaxBundle
	}
	bad := func(err error) (*Bundle, error) {
		return nil, fmt.Errorf("bundle %s: %w: %w", dir, ErrBadBundle, err)
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return bad(err)
	}
	if root, err = filepath.EvalSymlinks(root); err != nil {
		return bad(err)
	}
	var ig *Ignore
	switch b, err := os.ReadFile(filepath.Join(root, IgnoreFile)); {
	case err == nil:
		if ig, err = ParseIgnore(b); err != nil {
			return bad(fmt.Errorf("%s: %w", IgnoreFile, err))
		}
	case !errors.Is(err, fs.ErrNotExist):
		return bad(err)
	}
	srcs, size, err := walkTree(root, "", ig)
	if err != nil {
		return bad(err)
	}
	for i := range srcs {
		srcs[i].file.Mode &^= 0o7000
	}
	if limit > 0 && size > limit {
		return nil, &TooLargeError{Dir: dir, Size: size, Cap: limit}
	}
	a := &adder{s: s}
	files, err := a.add(srcs, limit, func(read int64) error {
		return &TooLargeError{Dir: dir, Size: read, AtLeast: true, Cap: limit}
	})
	if err != nil {
		a.done(false)
		var tl *TooLargeError
		if errors.As(err, &tl) {
			return nil, tl
		}
		if errors.Is(err, ErrDiskFull) || errors.Is(err, ErrQuota) {
			return nil, fmt.Errorf("bundle %s: %w", dir, err)
		}
		return bad(err)
	}
	id := BundleIDOf(files)
	m := &Manifest{JobID: BundleKey(id), Version: bundleVersion, Created: time.Unix(0, 0).UTC(), Files: files}
	if err := s.Commit(m); err != nil {
		a.done(false)
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	a.done(true)
	return &Bundle{ID: id, Manifest: m, Size: m.TotalSize(), Stored: a.stored}, nil
}

// BundleManifest returns the stored manifest of bundle id.
func (s *Store) BundleManifest(id BundleID) (*Manifest, error) {
	m, err := s.Manifest(BundleKey(id), bundleVersion)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", id, ErrNoBundle)
	}
	return m, nil
}

// HasBundle reports, without reading chunk data, whether the store holds
// bundle id whole: its manifest and every chunk (a chunk found corrupt
// when read is still caught by LayoutBundle).
func (s *Store) HasBundle(id BundleID) error {
	m, err := s.BundleManifest(id)
	if err != nil {
		return err
	}
	if missing := s.Missing(m.Chunks()); len(missing) > 0 {
		return fmt.Errorf("bundle %s: %d of %d chunks missing: %w", id, len(missing), len(m.Chunks()), ErrNoBundle)
	}
	return nil
}

// MissingBytes is how many bytes of m's chunks has does not report held
// (each distinct chunk counted once): what a destination lacks.
func (m *Manifest) MissingBytes(has func(Hash) bool) int64 {
	var n int64
	for _, c := range m.Chunks() {
		if !has(c.Hash) {
			n += c.Size
		}
	}
	return n
}

// MissingBytes is how many bytes of m's chunks this store lacks.
func (s *Store) MissingBytes(m *Manifest) int64 {
	var n int64
	for _, c := range s.Missing(m.Chunks()) {
		n += c.Size
	}
	return n
}

// LayoutBundle writes bundle id into dst, which must not exist, as a job's
// read-only working directory: every entry with its mode less the write
// bits (owned by the caller: a job running as another user can change
// nothing in it). Every chunk and file is verified as it is written; the
// tree is built beside dst and renamed into place, so dst either is the
// exact bundle or does not exist. A store that cannot produce the exact
// bundle says so with ErrNoBundle (and the cause: ErrChunkMissing,
// ErrCorruptChunk).
func (s *Store) LayoutBundle(id BundleID, dst string) error {
	fail := func(err error) error {
		return fmt.Errorf("lay out bundle %s in %s: %w", id, dst, err)
	}
	m, err := s.BundleManifest(id)
	if err != nil {
		return fail(err)
	}
	if _, err := os.Lstat(dst); err == nil {
		return fail(fs.ErrExist)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fail(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".layout-")
	if err != nil {
		return fail(diskErr(err))
	}
	if _, err := s.restoreEntries(m.Files, tmp, true); err != nil {
		RemoveLayout(tmp)
		if errors.Is(err, ErrChunkMissing) || errors.Is(err, ErrCorruptChunk) {
			err = fmt.Errorf("%w: %w", ErrNoBundle, err)
		}
		return fail(err)
	}
	if err := os.Chmod(tmp, 0o555); err != nil {
		RemoveLayout(tmp)
		return fail(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		RemoveLayout(tmp)
		return fail(err)
	}
	if err := syncDir(filepath.Dir(dst)); err != nil {
		return fail(diskErr(err))
	}
	return nil
}

// VerifyLayout checks that dir holds exactly bundle id as LayoutBundle
// lays it out: the same entries, kinds, modes (less write bits), symlink
// targets and file contents (every file is hashed). A difference wraps
// ErrLayoutMismatch and names the first path that differs.
func (s *Store) VerifyLayout(id BundleID, dir string) error {
	m, err := s.BundleManifest(id)
	if err != nil {
		return err
	}
	mismatch := func(p, why string) error {
		return fmt.Errorf("bundle %s in %s: %s: %s: %w", id, dir, p, why, ErrLayoutMismatch)
	}
	want := make(map[string]*File, len(m.Files))
	for i := range m.Files {
		want[m.Files[i].Path] = &m.Files[i]
	}
	seen := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		f, ok := want[rel]
		if !ok {
			return mismatch(rel, "not in the bundle")
		}
		seen++
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case f.IsDir():
			if !d.IsDir() {
				return mismatch(rel, "not a directory")
			}
		case f.IsSymlink():
			t, err := os.Readlink(p)
			if err != nil {
				return mismatch(rel, "not a symlink")
			}
			if t != f.Target {
				return mismatch(rel, "symlink target differs")
			}
			return nil
		default:
			if !d.Type().IsRegular() {
				return mismatch(rel, "not a regular file")
			}
			h, err := hashFile(p)
			if err != nil {
				return err
			}
			if info.Size() != f.Size || h != f.Hash {
				return mismatch(rel, "content differs")
			}
		}
		if got, wantMode := uint32(info.Mode().Perm()), layoutMode(f.Mode); got != wantMode {
			return mismatch(rel, fmt.Sprintf("mode %o, want %o", got, wantMode))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if seen != len(m.Files) {
		return fmt.Errorf("bundle %s in %s: %d of %d entries present: %w", id, dir, seen, len(m.Files), ErrLayoutMismatch)
	}
	return nil
}

// RemoveLayout removes a laid-out directory (giving its directories their
// write bits back first, which a caller that is not root needs).
func RemoveLayout(dir string) error {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// hashFile returns the SHA-256 of the file at p.
func hashFile(p string) (Hash, error) {
	f, err := os.Open(p)
	if err != nil {
		return Hash{}, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return Hash{}, err
	}
	var sum Hash
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

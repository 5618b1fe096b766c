package ckpt

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Hash is the SHA-256 of a chunk's bytes (or of a file, or of a manifest's
// encoding).
type Hash [sha256.Size]byte

// Sum returns the Hash of b.
func Sum(b []byte) Hash { return sha256.Sum256(b) }

// String returns the lowercase hex form.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether h is the zero value.
func (h Hash) IsZero() bool { return h == Hash{} }

// ParseHash parses 64 lowercase hex digits.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 2*len(h) {
		return h, fmt.Errorf("hash %q: want %d hex digits", trunc(s), 2*len(h))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return h, fmt.Errorf("hash %q: want lowercase hex", trunc(s))
		}
	}
	hex.Decode(h[:], []byte(s))
	return h, nil
}

// ChunkRef names a chunk: its hash and its length in bytes.
type ChunkRef struct {
	Hash Hash
	Size int64
}

// File is one entry of a checkpoint or a bundle: a regular file, or (in
// bundles and outputs) a directory or a symbolic link.
type File struct {
	// Path is slash-separated and relative to the checkpoint directory.
	Path string
	Size int64
	// Mode holds the permission bits (0o644, 0o755, ...) and, for a
	// directory or a symlink, its type (ModeDir, ModeSymlink); a regular
	// file has no type bits.
	Mode uint32
	// Hash is the SHA-256 of the whole file (of a symlink: of its target;
	// of a directory: zero).
	Hash   Hash
	Chunks []ChunkRef
	// Target is a symlink's target (relative, resolving inside the tree);
	// empty for other entries.
	Target string
}

// Entry types in File.Mode, as in POSIX st_mode; a symlink's
// permission bits are always 0o777. A directory has no size or chunks;
// a symlink has no chunks, its size is its target's length.
const (
	ModeType    uint32 = 0o170000
	ModeDir     uint32 = 0o040000
	ModeSymlink uint32 = 0o120000
)

// IsDir reports whether f is a directory entry.
func (f *File) IsDir() bool { return f.Mode&ModeType == ModeDir }

// IsSymlink reports whether f is a symbolic link.
func (f *File) IsSymlink() bool { return f.Mode&ModeType == ModeSymlink }

// IsRegular reports whether f is a regular file.
func (f *File) IsRegular() bool { return f.Mode&ModeType == 0 }

// Manifest is one version of one job's checkpoint.
type Manifest struct {
	JobID   string
	Version uint64
	Created time.Time
	Files   []File
}

// Limits on what a manifest may describe; they bound a parser's allocations.
const (
	// MaxChunkSize is the largest chunk any manifest may name.
	MaxChunkSize = 64 << 20
	// MaxFiles is the most files one checkpoint may have.
	MaxFiles = 1 << 16
	// MaxJobIDLen bounds job ids (they become directory names).
	MaxJobIDLen = 128
	maxPathLen  = 4096
)

// ErrBadManifest is wrapped by every manifest parse or validation error.
var ErrBadManifest = errors.New("bad manifest")

const manifestMagic = "reclaimnet-manifest v1"

// TotalSize is the sum of the file sizes in bytes.
func (m *Manifest) TotalSize() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// Chunks returns every distinct chunk the manifest names, in first-use order.
func (m *Manifest) Chunks() []ChunkRef {
	seen := make(map[Hash]bool)
	var out []ChunkRef
	for _, f := range m.Files {
		for _, c := range f.Chunks {
			if !seen[c.Hash] {
				seen[c.Hash] = true
				out = append(out, c)
			}
		}
	}
	return out
}

// Hash is the SHA-256 of the canonical encoding.
func (m *Manifest) Hash() Hash { return Sum(m.Encode()) }

// Encode returns the canonical encoding:
//
//	reclaimnet-manifest v1
//	job "<job id>"
//	version <n>
//	created <unix nanoseconds>
//	files <count>
//	file "<path>" <size> <mode octal> <sha256 hex> <chunk count>
//	<chunk sha256 hex> <chunk size>      (one line per chunk)
//	target "<symlink target>"            (symlinks only, no chunks)
//	...
//	end
//
// Strings are Go-quoted (strconv.Quote). Files are sorted by path.
func (m *Manifest) Encode() []byte {
	var b bytes.Buffer
	b.WriteString(manifestMagic + "\n")
	fmt.Fprintf(&b, "job %s\nversion %d\ncreated %d\nfiles %d\n", strconv.Quote(m.JobID), m.Version, m.Created.UnixNano(), len(m.Files))
	for _, f := range m.Files {
		fmt.Fprintf(&b, "file %s %d %o %s %d\n", strconv.Quote(f.Path), f.Size, f.Mode, f.Hash, len(f.Chunks))
		for _, c := range f.Chunks {
			fmt.Fprintf(&b, "%s %d\n", c.Hash, c.Size)
		}
		if f.IsSymlink() {
			fmt.Fprintf(&b, "target %s\n", strconv.Quote(f.Target))
		}
	}
	b.WriteString("end\n")
	return b.Bytes()
}

// Validate checks the invariants every manifest must hold.
func (m *Manifest) Validate() error {
	if err := ValidJobID(m.JobID); err != nil {
		return fmt.Errorf("%w: %w", ErrBadManifest, err)
	}
	if len(m.Files) > MaxFiles {
		return fmt.Errorf("%w: %d files, max %d", ErrBadManifest, len(m.Files), MaxFiles)
	}
	for i, f := range m.Files {
		if err := validPath(f.Path); err != nil {
			return fmt.Errorf("%w: %w", ErrBadManifest, err)
		}
		if i > 0 && m.Files[i-1].Path >= f.Path {
			return fmt.Errorf("%w: files not sorted/unique at %q", ErrBadManifest, f.Path)
		}
		switch f.Mode & ModeType {
		case 0:
			if f.Mode&^0o7777 != 0 {
				return fmt.Errorf("%w: file %q mode %o has unknown bits", ErrBadManifest, f.Path, f.Mode)
			}
		case ModeDir:
			if f.Mode&^(ModeDir|0o7777) != 0 || f.Size != 0 || len(f.Chunks) != 0 || !f.Hash.IsZero() {
				return fmt.Errorf("%w: directory %q must have mode %o|perm, no size, chunks or hash", ErrBadManifest, f.Path, ModeDir)
			}
		case ModeSymlink:
			if f.Mode != ModeSymlink|0o777 || len(f.Chunks) != 0 || f.Size != int64(len(f.Target)) || f.Hash != Sum([]byte(f.Target)) {
				return fmt.Errorf("%w: symlink %q must have mode %o, no chunks, its target's size and hash", ErrBadManifest, f.Path, ModeSymlink|0o777)
			}
			if err := validTarget(f.Target); err != nil {
				return fmt.Errorf("%w: symlink %q: %w", ErrBadManifest, f.Path, err)
			}
		default:
			return fmt.Errorf("%w: file %q mode %o: unknown type", ErrBadManifest, f.Path, f.Mode)
		}
		if !f.IsSymlink() && f.Target != "" {
			return fmt.Errorf("%w: %q has a target but is no symlink", ErrBadManifest, f.Path)
		}
		var sum int64
		for _, c := range f.Chunks {
			if c.Size <= 0 || c.Size > MaxChunkSize {
				return fmt.Errorf("%w: file %q chunk size %d outside 1..%d", ErrBadManifest, f.Path, c.Size, MaxChunkSize)
			}
			sum += c.Size
		}
		if !f.IsSymlink() && sum != f.Size {
			return fmt.Errorf("%w: file %q size %d but chunks sum to %d", ErrBadManifest, f.Path, f.Size, sum)
		}
	}
	// A file or symlink that is also a parent directory of another entry
	// would clash on restore (and a symlink there would redirect it).
	kinds := make(map[string]uint32, len(m.Files))
	for _, f := range m.Files {
		kinds[f.Path] = f.Mode & ModeType
	}
	for _, f := range m.Files {
		for dir := path.Dir(f.Path); dir != "."; dir = path.Dir(dir) {
			if k, ok := kinds[dir]; ok && k != ModeDir {
				return fmt.Errorf("%w: %q is both a file and a directory", ErrBadManifest, dir)
			}
		}
	}
	if err := CheckLinks(m.Files); err != nil {
		return fmt.Errorf("%w: %w", ErrBadManifest, err)
	}
	if id, ok := IsBundleKey(m.JobID); ok {
		if err := validBundle(m, id); err != nil {
			return fmt.Errorf("%w: %w", ErrBadManifest, err)
		}
	}
	return nil
}

// ValidJobID checks that a job id is usable as a directory name.
func ValidJobID(id string) error {
	if id == "" || len(id) > MaxJobIDLen || id == "." || id == ".." {
		return fmt.Errorf("job id %q must be 1..%d bytes", trunc(id), MaxJobIDLen)
	}
	for _, r := range id {
		if !(r == '-' || r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return fmt.Errorf("job id %q: character %q not allowed", trunc(id), r)
		}
	}
	return nil
}

func validPath(p string) error {
	if p == "" || len(p) > maxPathLen {
		return fmt.Errorf("path %q: length must be 1..%d", trunc(p), maxPathLen)
	}
	if strings.ContainsRune(p, 0) || strings.Contains(p, "\\") {
		return fmt.Errorf("path %q: NUL or backslash", trunc(p))
	}
	if path.IsAbs(p) || path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../") {
		return fmt.Errorf("path %q: must be clean and relative", trunc(p))
	}
	return nil
}

// ParseManifest decodes the canonical encoding and validates the result. It
// rejects anything that would not encode back to exactly b.
func ParseManifest(b []byte) (*Manifest, error) {
	p := lineParser{b: b}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: line %d: %s", ErrBadManifest, p.line, fmt.Sprintf(format, a...))
	}
	if l, ok := p.next(); !ok || l != manifestMagic {
		return nil, bad("want %q", manifestMagic)
	}
	m := &Manifest{}
	var err error
	l, _ := p.next()
	rest, ok := strings.CutPrefix(l, "job ")
	if !ok {
		return nil, bad("want job")
	}
	if m.JobID, err = strconv.Unquote(rest); err != nil {
		return nil, bad("job: %v", err)
	}
	l, _ = p.next()
	rest, ok = strings.CutPrefix(l, "version ")
	if !ok {
		return nil, bad("want version")
	}
	if m.Version, err = strconv.ParseUint(rest, 10, 64); err != nil {
		return nil, bad("version: %v", err)
	}
	l, _ = p.next()
	rest, ok = strings.CutPrefix(l, "created ")
	if !ok {
		return nil, bad("want created")
	}
	ns, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		return nil, bad("created: %v", err)
	}
	m.Created = time.Unix(0, ns).UTC()
	l, _ = p.next()
	rest, ok = strings.CutPrefix(l, "files ")
	if !ok {
		return nil, bad("want files")
	}
	nfiles, err := strconv.Atoi(rest)
	if err != nil || nfiles < 0 || nfiles > MaxFiles {
		return nil, bad("files count %q", trunc(rest))
	}
	for i := 0; i < nfiles; i++ {
		l, ok = p.next()
		rest, ok2 := strings.CutPrefix(l, "file ")
		if !ok || !ok2 {
			return nil, bad("want file")
		}
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return nil, bad("file path: %v", err)
		}
		var f File
		f.Path, _ = strconv.Unquote(q)
		fields := strings.Split(strings.TrimPrefix(rest[len(q):], " "), " ")
		if len(fields) != 4 {
			return nil, bad("file: want path size mode hash chunks")
		}
		if f.Size, err = strconv.ParseInt(fields[0], 10, 64); err != nil || f.Size < 0 {
			return nil, bad("file size %q", trunc(fields[0]))
		}
		mode, err := strconv.ParseUint(fields[1], 8, 32)
		if err != nil {
			return nil, bad("file mode %q", trunc(fields[1]))
		}
		f.Mode = uint32(mode)
		if f.Hash, err = ParseHash(fields[2]); err != nil {
			return nil, bad("file hash: %v", err)
		}
		nchunks, err := strconv.Atoi(fields[3])
		if err != nil || nchunks < 0 {
			return nil, bad("chunk count %q", trunc(fields[3]))
		}
		// Never allocate from a declared count beyond what the input can hold
		// (a chunk line is 66+ bytes).
		if nchunks > (len(b)-p.off)/66+1 {
			return nil, bad("chunk count %d exceeds input", nchunks)
		}
		f.Chunks = make([]ChunkRef, 0, nchunks)
		for j := 0; j < nchunks; j++ {
			l, ok = p.next()
			hs, ss, ok2 := strings.Cut(l, " ")
			if !ok || !ok2 {
				return nil, bad("want chunk line")
			}
			var c ChunkRef
			if c.Hash, err = ParseHash(hs); err != nil {
				return nil, bad("chunk: %v", err)
			}
			if c.Size, err = strconv.ParseInt(ss, 10, 64); err != nil {
				return nil, bad("chunk size %q", trunc(ss))
			}
			f.Chunks = append(f.Chunks, c)
		}
		if f.IsSymlink() {
			l, ok = p.next()
			rest, ok2 := strings.CutPrefix(l, "target ")
			if !ok || !ok2 {
				return nil, bad("want target")
			}
			if f.Target, err = strconv.Unquote(rest); err != nil {
				return nil, bad("target: %v", err)
			}
		}
		m.Files = append(m.Files, f)
	}
	if l, ok = p.next(); !ok || l != "end" {
		return nil, bad("want end")
	}
	if p.off != len(b) {
		return nil, bad("trailing bytes after end")
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if !bytes.Equal(m.Encode(), b) {
		return nil, fmt.Errorf("%w: not in canonical form", ErrBadManifest)
	}
	return m, nil
}

type lineParser struct {
	b    []byte
	off  int
	line int
}

// next returns the next '\n'-terminated line; ok is false at the end or on
// an unterminated line.
func (p *lineParser) next() (string, bool) {
	p.line++
	i := bytes.IndexByte(p.b[p.off:], '\n')
	if i < 0 {
		return "", false
	}
	l := string(p.b[p.off : p.off+i])
	p.off += i + 1
	return l, true
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// sortFiles orders files by path, as the encoding requires.
func sortFiles(fs []File) {
	sort.Slice(fs, func(i, j int) bool { return fs[i].Path < fs[j].Path })
}

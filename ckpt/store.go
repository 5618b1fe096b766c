package ckpt

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Errors callers act on (match with errors.Is).
var (
	// ErrChunkMissing: the store does not hold a chunk.
	ErrChunkMissing = errors.New("chunk missing")
	// ErrCorruptChunk: a stored chunk no longer matches its hash (it is
	// removed so it can be fetched again).
	ErrCorruptChunk = errors.New("corrupt chunk")
	// ErrHashMismatch: bytes offered as a chunk do not match the hash claimed.
	ErrHashMismatch = errors.New("chunk hash mismatch")
	// ErrDiskFull: the disk ran out of space; nothing was committed.
	ErrDiskFull = errors.New("disk full")
	// ErrQuota: the store's size cap cannot fit the data even after evicting
	// everything evictable.
	ErrQuota = errors.New("store quota exceeded")
	// ErrNoVersion: the job has no such committed version.
	ErrNoVersion = errors.New("no such version")
	// ErrIncomplete: a version cannot be committed because a chunk is absent
	// or corrupt.
	ErrIncomplete = errors.New("version incomplete")
)

// Config configures a Store.
type Config struct {
	// Root is the store's directory (created if absent).
	Root string
	// MaxBytes caps the bytes of chunks kept (the cache size and the
	// receiver's disk quota); 0 means no cap.
	MaxBytes int64
	// Chunker cuts files in AddDir; zero means DefaultChunker.
	Chunker Chunker
	// Logger receives eviction and repair notes; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock for LRU times; nil means time.Now.
	Now func() time.Time
}

type chunkInfo struct {
	size int64
	used time.Time
	// durable: the chunk's data and directory entry are known to be on
	// disk. A chunk written by this process is durable once its background
	// fsync (sync) succeeds; a chunk found at Open is made durable by one
	// syncfs(2) at the first commit that uses one.
	durable bool
	sync    *syncTicket
}

type versionKey struct {
	job     string
	version uint64
}

// Store is an on-disk content-addressed chunk store with versioned manifests.
// It is safe for concurrent use.
type Store struct {
	// Constant after Open.
	root    string
	max     int64
	chunker Chunker
	log     *slog.Logger
	now     func() time.Time

	mu sync.Mutex
	// chunks is every chunk file present; total is the sum of their sizes.
	chunks map[Hash]*chunkInfo
	total  int64
	// committed and pending manifests by (job, version).
	committed map[versionKey]*Manifest
	pending   map[versionKey]*Manifest
	// touched is the last activity on each pending version (BeginPending,
	// TouchPending, or this process opening the store), for ExpirePending.
	touched map[versionKey]time.Time
	live    map[string]bool
	// pins are the named holds on committed versions (zero time: no
	// expiry); purged is when each job's last version was purged.
	pins   map[pinKey]time.Time
	purged map[string]time.Time
	// inflight pins chunks that an AddDir in progress has written.
	inflight map[Hash]int
	// verified holds chunks hashed since this process opened the store, so a
	// commit re-reads only chunks it has not seen verified.
	verified map[Hash]bool
	// writing holds chunks being written now; a second put of the same
	// chunk waits for the first instead of writing (and renaming) a
	// second copy whose durability no fsync would cover.
	writing map[Hash]chan struct{}

	// Background fsync of chunk files (see syncWorker).
	syncMu      sync.Mutex
	syncQueue   []syncItem
	syncRunning int
	syncIdle    *sync.Cond // on syncMu; broadcast when syncRunning drops to 0
	syncHurry   bool       // a commit waits: do not gather
	// syncSlots bounds the chunk files written but not yet fsynced: a
	// writer faster than the disk waits for a slot.
	syncSlots chan struct{}
	// syncHook, when set (tests), is called for every durability step:
	// "file" path (fsync of a chunk file), "dir" path (fsync of a
	// directory), "syncfs" root, "manifest" path (a committed manifest
	// renamed into place).
	syncHook func(kind, path string)
	// fsync syncs a chunk file; tests inject failures here.
	fsync func(*os.File) error
}

// Open opens (or creates) the store at cfg.Root and loads its state.
func Open(cfg Config) (*Store, error) {
	if cfg.Root == "" {
		return nil, errors.New("ckpt: empty store root")
	}
	if cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("ckpt: negative MaxBytes %d", cfg.MaxBytes)
	}
	if cfg.Chunker == (Chunker{}) {
		cfg.Chunker = DefaultChunker
	}
	if err := cfg.Chunker.Validate(); err != nil {
		return nil, err
	}
	s := &Store{
		root: cfg.Root, max: cfg.MaxBytes, chunker: cfg.Chunker, log: cfg.Logger, now: cfg.Now,
		chunks: map[Hash]*chunkInfo{}, committed: map[versionKey]*Manifest{}, pending: map[versionKey]*Manifest{},
		touched: map[versionKey]time.Time{}, live: map[string]bool{}, pins: map[pinKey]time.Time{}, purged: map[string]time.Time{}, inflight: map[Hash]int{}, verified: map[Hash]bool{}, writing: map[Hash]chan struct{}{},
		syncSlots: make(chan struct{}, maxUnsynced), fsync: (*os.File).Sync,
	}
	s.syncIdle = sync.NewCond(&s.syncMu)
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	for _, d := range []string{"chunks", "versions", "pending", "live", "pins", "purged", "tmp"} {
		if err := os.MkdirAll(filepath.Join(s.root, d), 0o755); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
	}
	// Temp files are leftovers of writes interrupted by a crash.
	if err := os.RemoveAll(filepath.Join(s.root, "tmp")); err != nil {
		return nil, fmt.Errorf("open store: clear tmp: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(s.root, "tmp"), 0o755); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if err := s.load(); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	// A pending version found at open gets a full expiry age from now: its
	// sender may be about to resume.
	now := s.now()
	for k := range s.pending {
		s.touched[k] = now
	}
	return s, nil
}

func (s *Store) load() error {
	err := filepath.WalkDir(filepath.Join(s.root, "chunks"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		h, perr := ParseHash(d.Name())
		if perr != nil {
			return nil // not ours
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		s.chunks[h] = &chunkInfo{size: info.Size(), used: info.ModTime()}
		s.total += info.Size()
		return nil
	})
	if err != nil {
		return err
	}
	for _, kind := range []string{"versions", "pending"} {
		target := s.committed
		if kind == "pending" {
			target = s.pending
		}
		jobs, err := os.ReadDir(filepath.Join(s.root, kind))
		if err != nil {
			return err
		}
		for _, j := range jobs {
			files, err := os.ReadDir(filepath.Join(s.root, kind, j.Name()))
			if err != nil {
				return err
			}
			for _, f := range files {
				p := filepath.Join(s.root, kind, j.Name(), f.Name())
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				m, err := ParseManifest(b)
				if err != nil || m.JobID != j.Name() || f.Name() != versionFile(m.Version) {
					s.log.Warn("ckpt: ignoring unreadable manifest", "path", p, "err", err)
					continue
				}
				target[versionKey{m.JobID, m.Version}] = m
			}
		}
	}
	lives, err := os.ReadDir(filepath.Join(s.root, "live"))
	if err != nil {
		return err
	}
	for _, l := range lives {
		s.live[l.Name()] = true
	}
	if err := s.loadPins(); err != nil {
		return err
	}
	// A pin whose version is gone (dropped by a process that stopped
	// before it removed the pin) holds nothing.
	for k := range s.pins {
		if _, ok := s.committed[versionKey{k.job, k.version}]; !ok {
			if err := s.unpinLocked(k); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close waits until every chunk written so far is on disk (their
// background fsyncs). It is safe to call more than once; the store holds no
// open files or goroutines once it returns (a later write starts them
// again).
func (s *Store) Close() error {
	s.syncMu.Lock()
	for s.syncRunning > 0 {
		s.syncIdle.Wait()
	}
	s.syncMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for h, ci := range s.chunks {
		if ci.sync != nil && ci.sync.err != nil {
			errs = append(errs, fmt.Errorf("sync chunk %s: %w", h, ci.sync.err))
		}
	}
	return errors.Join(errs...)
}

func versionFile(v uint64) string { return fmt.Sprintf("%020d.manifest", v) }

func (s *Store) chunkPath(h Hash) string {
	x := h.String()
	return filepath.Join(s.root, "chunks", x[:2], x)
}

// Usage returns the bytes of chunks held.
func (s *Store) Usage() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Has reports whether the store holds chunk h.
func (s *Store) Has(h Hash) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.chunks[h]
	return ok
}

// Missing returns the refs the store does not hold, in order.
func (s *Store) Missing(refs []ChunkRef) []ChunkRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ChunkRef
	for _, r := range refs {
		if _, ok := s.chunks[r.Hash]; !ok {
			out = append(out, r)
		}
	}
	return out
}

// writeFile writes data to path atomically: temp file in tmp/, fsync, rename.
// ENOSPC becomes ErrDiskFull; the temp file is always removed on failure.
func (s *Store) writeFile(path string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return diskErr(err)
	}
	f, err := os.CreateTemp(filepath.Join(s.root, "tmp"), "w-*")
	if err != nil {
		return diskErr(err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return diskErr(err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Chmod(perm); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return diskErr(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return diskErr(err)
	}
	return nil
}

func diskErr(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// String describes the store for logs.
func (s *Store) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "ckpt store " + s.root + " (" + strconv.FormatInt(s.total, 10) + " bytes, " + strconv.Itoa(len(s.committed)) + " versions)"
}

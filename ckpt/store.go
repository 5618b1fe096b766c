package ckpt

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
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

// syncTicket is the background fsync of one chunk file.
type syncTicket struct {
	done chan struct{}
	err  error // set before done closes
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

const (
	// maxSyncWorkers fsync chunk files at once. One, gathering batches:
	// each batch costs a journal commit, and while the journal commits the
	// receiver's own file creates and renames wait (two workers taking
	// whatever was queued cost a 1 Gbit/s receiver a fifth of its rate).
	maxSyncWorkers = 1
	// syncBatch is the most files one worker takes at a time.
	syncBatch = 32
	// syncGather is how long a worker waits for a batch to fill.
	syncGather = 20 * time.Millisecond
	// maxUnsynced chunk files may wait for their fsync (128 MiB at the
	// average chunk size): enough to ride out a slow journal commit (other
	// writers' data is flushed with it) without stalling the receiver,
	// small enough that a commit never waits for much.
	maxUnsynced = 256
)

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
		touched: map[versionKey]time.Time{}, live: map[string]bool{}, inflight: map[Hash]int{}, verified: map[Hash]bool{}, writing: map[Hash]chan struct{}{},
		syncSlots: make(chan struct{}, maxUnsynced), fsync: (*os.File).Sync,
	}
	s.syncIdle = sync.NewCond(&s.syncMu)
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	for _, d := range []string{"chunks", "versions", "pending", "live", "tmp"} {
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

// PutChunk stores data as chunk h after checking that h is its SHA-256. It
// is idempotent. It returns once the chunk is in the store (readable, and
// counted by Has and Missing); a background worker then makes it durable,
// and Commit waits for that. When the size cap would be exceeded it first evicts least
// recently used unpinned chunks, and fails with ErrQuota if that is not
// enough; a full disk gives ErrDiskFull and leaves no partial file.
func (s *Store) PutChunk(h Hash, data []byte) error {
	if len(data) == 0 || len(data) > MaxChunkSize {
		return fmt.Errorf("put chunk %s: size %d outside 1..%d", h, len(data), MaxChunkSize)
	}
	if Sum(data) != h {
		return fmt.Errorf("put chunk %s: %w", h, ErrHashMismatch)
	}
	return s.putVerified(h, data)
}

func (s *Store) putVerified(h Hash, data []byte) error {
	s.mu.Lock()
	for {
		if ci, ok := s.chunks[h]; ok {
			ci.used = s.now()
			s.mu.Unlock()
			return nil
		}
		wait, busy := s.writing[h]
		if !busy {
			break
		}
		// Another put is writing this chunk: take its result.
		s.mu.Unlock()
		<-wait
		s.mu.Lock()
	}
	if s.max > 0 && s.total+int64(len(data)) > s.max {
		if err := s.evictLocked(s.max - int64(len(data))); err != nil {
			s.mu.Unlock()
			return fmt.Errorf("put chunk %s: %w", h, err)
		}
	}
	// Reserve the space now so concurrent puts see it.
	s.total += int64(len(data))
	done := make(chan struct{})
	s.writing[h] = done
	s.mu.Unlock()

	// A slot bounds the files waiting for their fsync: a writer faster
	// than the disk waits here.
	s.syncSlots <- struct{}{}
	dst := s.chunkPath(h)
	// No fsync here (inline it capped a receiver at a few dozen chunks per
	// second): the file goes to a background fsync worker, and Commit
	// waits for the fsyncs of its chunks before the manifest lands. A
	// chunk torn by a crash before its fsync is caught by the re-hash of
	// unverified chunks at commit and by verify-on-read.
	f, newDir, err := s.writeChunkFile(dst, data)
	s.mu.Lock()
	delete(s.writing, h)
	close(done)
	if err != nil {
		s.total -= int64(len(data))
		s.mu.Unlock()
		<-s.syncSlots
		return fmt.Errorf("put chunk %s: %w", h, err)
	}
	t := &syncTicket{done: make(chan struct{})}
	s.chunks[h] = &chunkInfo{size: int64(len(data)), used: s.now(), sync: t}
	s.verified[h] = true
	s.mu.Unlock()
	s.enqueueSync(syncItem{hash: h, f: f, path: dst, newDir: newDir, ticket: t})
	return nil
}

// writeChunkFile writes data to a temp file and renames it to dst, creating
// dst's directory if needed (newDir). It returns the file still open, for
// its fsync. ENOSPC becomes ErrDiskFull; nothing is left on failure.
func (s *Store) writeChunkFile(dst string, data []byte) (f *os.File, newDir bool, err error) {
	f, err = os.CreateTemp(filepath.Join(s.root, "tmp"), "w-*")
	if err != nil {
		return nil, false, diskErr(err)
	}
	tmp := f.Name()
	fail := func(err error) (*os.File, bool, error) {
		f.Close()
		os.Remove(tmp)
		return nil, false, diskErr(err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Chmod(0o444); err != nil {
		return fail(err)
	}
	err = os.Rename(tmp, dst)
	if errors.Is(err, os.ErrNotExist) {
		// First chunk under this prefix.
		if merr := os.Mkdir(filepath.Dir(dst), 0o755); merr != nil && !errors.Is(merr, os.ErrExist) {
			return fail(merr)
		}
		newDir = true
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		return fail(err)
	}
	return f, newDir, nil
}

// syncItem is one chunk file waiting for its fsync.
type syncItem struct {
	hash   Hash
	f      *os.File // open; closed by the worker
	path   string   // where it was renamed to; its directory is fsynced after the file
	newDir bool     // dir was created: its entry in chunks/ is fsynced too
	ticket *syncTicket
}

// enqueueSync hands a written chunk file to the background fsync workers,
// starting one if fewer than maxSyncWorkers run. Workers exit when the
// queue is empty, so an idle store holds no goroutine.
func (s *Store) enqueueSync(it syncItem) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.syncQueue = append(s.syncQueue, it)
	if s.syncRunning < maxSyncWorkers && s.syncRunning < len(s.syncQueue) {
		s.syncRunning++
		go s.syncWorker()
	}
}

// syncWorker fsyncs queued chunk files in batches until the queue is empty.
func (s *Store) syncWorker() {
	for {
		s.syncMu.Lock()
		if len(s.syncQueue) == 0 {
			if s.syncRunning--; s.syncRunning == 0 {
				s.syncIdle.Broadcast()
			}
			s.syncMu.Unlock()
			return
		}
		if len(s.syncQueue) < syncBatch && !s.syncHurry {
			// Let a batch gather: every fsync batch costs a journal
			// commit, which also stalls the writers' file creates.
			s.syncMu.Unlock()
			time.Sleep(syncGather)
			s.syncMu.Lock()
		}
		n := min(len(s.syncQueue), syncBatch)
		batch := make([]syncItem, n)
		copy(batch, s.syncQueue)
		s.syncQueue = s.syncQueue[n:]
		if len(s.syncQueue) == 0 {
			s.syncQueue = nil // let the backing array go
		}
		s.syncMu.Unlock()
		s.syncBatchFiles(batch)
	}
}

// syncBatchFiles makes a batch of chunk files durable: it starts the write
// of all of them, fsyncs each (the first fsync waits for the data and the
// journal; most later ones find both done), then fsyncs each directory that
// got a new entry. Each ticket gets its chunk's result.
func (s *Store) syncBatchFiles(batch []syncItem) {
	for _, it := range batch {
		startWriteback(it.f)
	}
	errs := make([]error, len(batch))
	dirs := map[string]error{}
	newDir := false
	for i, it := range batch {
		errs[i] = s.fsync(it.f)
		if errs[i] == nil {
			s.hook("file", it.path)
		}
		if cerr := it.f.Close(); errs[i] == nil {
			errs[i] = cerr
		}
		dirs[filepath.Dir(it.path)] = nil
		newDir = newDir || it.newDir
	}
	if newDir {
		// A new chunks/xx directory's own entry must be durable too.
		dirs[filepath.Join(s.root, "chunks")] = nil
	}
	for d := range dirs {
		if dirs[d] = syncDir(d); dirs[d] == nil {
			s.hook("dir", d)
		}
	}
	rootErr := dirs[filepath.Join(s.root, "chunks")]
	s.mu.Lock()
	for i, it := range batch {
		err := errs[i]
		if err == nil {
			err = dirs[filepath.Dir(it.path)]
		}
		if err == nil && it.newDir {
			err = rootErr
		}
		if err != nil {
			it.ticket.err = fmt.Errorf("fsync: %w", diskErr(err))
		} else if ci := s.chunks[it.hash]; ci != nil && ci.sync == it.ticket {
			ci.durable, ci.sync = true, nil
		}
		close(it.ticket.done)
	}
	s.mu.Unlock()
	for range batch {
		<-s.syncSlots
	}
}

func (s *Store) hook(kind, path string) {
	if s.syncHook != nil {
		s.syncHook(kind, path)
	}
}

// ReadChunk returns chunk h after verifying its hash. A corrupt chunk is
// removed from the store and ErrCorruptChunk returned.
func (s *Store) ReadChunk(h Hash) ([]byte, error) {
	return s.ReadChunkInto(h, nil)
}

// ReadChunkInto is ReadChunk reading into buf when it is large enough (a
// sender reuses one buffer per stream instead of allocating one per chunk).
// The result aliases buf then.
func (s *Store) ReadChunkInto(h Hash, buf []byte) ([]byte, error) {
	s.mu.Lock()
	ci, ok := s.chunks[h]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("read chunk %s: %w", h, ErrChunkMissing)
	}
	p := s.chunkPath(h)
	b, err := readFileInto(p, ci.size, buf)
	if errors.Is(err, os.ErrNotExist) {
		s.forget(h)
		return nil, fmt.Errorf("read chunk %s: %w", h, ErrChunkMissing)
	}
	if err != nil {
		return nil, fmt.Errorf("read chunk %s: %w", h, err)
	}
	if int64(len(b)) != ci.size || Sum(b) != h {
		s.log.Warn("ckpt: corrupt chunk removed", "chunk", h.String())
		s.forget(h)
		os.Remove(p)
		return nil, fmt.Errorf("read chunk %s: %w", h, ErrCorruptChunk)
	}
	now := s.now()
	s.mu.Lock()
	ci.used = now
	s.verified[h] = true
	s.mu.Unlock()
	// The file's mtime is the LRU time that survives a restart.
	_ = os.Chtimes(p, now, now)
	return b, nil
}

// forget drops h from the index (its file is gone or bad).
func (s *Store) forget(h Hash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ci, ok := s.chunks[h]; ok {
		s.total -= ci.size
		delete(s.chunks, h)
	}
	delete(s.verified, h)
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

// syncLoadedLocked makes the chunks found at Open durable with one
// syncfs(2) of the store's file system (a previous process may have
// written them without an fsync before it stopped). It runs at most once
// per Open, at the first commit that needs it.
func (s *Store) syncLoadedLocked() error {
	if err := syncFS(s.root); err != nil {
		return fmt.Errorf("sync %s: %w", s.root, err)
	}
	s.hook("syncfs", s.root)
	for _, ci := range s.chunks {
		if ci.sync == nil {
			ci.durable = true
		}
	}
	return nil
}

// BeginPending records m as a version being received: its chunks are pinned
// against eviction (across restarts too) until Commit or AbortPending. It
// makes room for the missing chunks now and fails with ErrQuota if they cannot
// fit under the cap.
func (s *Store) BeginPending(m *Manifest) error {
	if err := m.Validate(); err != nil {
		return err
	}
	k := versionKey{m.JobID, m.Version}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.committed[k]; ok {
		return nil // already complete; Commit will be a no-op
	}
	if old, ok := s.pending[k]; ok && old.Hash() == m.Hash() {
		// Resumed (or received on a second connection): room was made when
		// it began.
		s.touched[k] = s.now()
		return nil
	}
	p := filepath.Join(s.root, "pending", m.JobID, versionFile(m.Version))
	if err := s.writeFile(p, m.Encode(), 0o644); err != nil {
		return fmt.Errorf("begin %s v%d: %w", m.JobID, m.Version, err)
	}
	s.pending[k] = m
	s.touched[k] = s.now()
	if s.max > 0 {
		var need int64
		for _, c := range m.Chunks() {
			if _, ok := s.chunks[c.Hash]; !ok {
				need += c.Size
			}
		}
		if s.total+need > s.max {
			if err := s.evictLocked(s.max - need); err != nil {
				delete(s.pending, k)
				delete(s.touched, k)
				os.Remove(p)
				return fmt.Errorf("begin %s v%d: need %d bytes: %w", m.JobID, m.Version, need, err)
			}
		}
	}
	return nil
}

// Pending returns the manifests being received (for resume after restart).
func (s *Store) Pending() []*Manifest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Manifest, 0, len(s.pending))
	for _, m := range s.pending {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].JobID != out[j].JobID {
			return out[i].JobID < out[j].JobID
		}
		return out[i].Version < out[j].Version
	})
	return out
}

// AbortPending forgets a pending version and removes the chunks it brought
// that no other version uses: the partial data is gone, nothing committed.
func (s *Store) AbortPending(job string, version uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.abortPendingLocked(job, version)
}

// TouchPending records activity on a pending version now (a connection
// working on it started or ended), restarting its expiry age. It does
// nothing for a version that is not pending.
func (s *Store) TouchPending(job string, version uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := versionKey{job, version}
	if _, ok := s.pending[k]; ok {
		s.touched[k] = s.now()
	}
}

// PendingTouched returns the last activity on a pending version.
func (s *Store) PendingTouched(job string, version uint64) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.touched[versionKey{job, version}]
	return t, ok
}

// ExpirePending aborts (as AbortPending) every pending version whose last
// activity is at least maxAge old by the store's clock and for which busy
// (nil = none busy) returns false, and returns the manifests it removed.
// busy is called with the store locked and must not call the store. It is
// how a receiver cleans up after senders that never came back.
func (s *Store) ExpirePending(maxAge time.Duration, busy func(job string, version uint64) bool) ([]*Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var expired []*Manifest
	var errs []error
	for k, m := range s.pending {
		if now.Sub(s.touched[k]) < maxAge || (busy != nil && busy(k.job, k.version)) {
			continue
		}
		if err := s.abortPendingLocked(k.job, k.version); err != nil {
			errs = append(errs, err)
			continue
		}
		expired = append(expired, m)
	}
	sort.Slice(expired, func(i, j int) bool {
		if expired[i].JobID != expired[j].JobID {
			return expired[i].JobID < expired[j].JobID
		}
		return expired[i].Version < expired[j].Version
	})
	return expired, errors.Join(errs...)
}

func (s *Store) abortPendingLocked(job string, version uint64) error {
	k := versionKey{job, version}
	m, ok := s.pending[k]
	if !ok {
		return nil
	}
	delete(s.pending, k)
	delete(s.touched, k)
	if err := os.Remove(filepath.Join(s.root, "pending", job, versionFile(version))); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("abort %s v%d: %w", job, version, err)
	}
	s.removeUnreferencedLocked(m.Chunks())
	return nil
}

// removeUnreferencedLocked deletes those of refs that no committed or pending
// version and no AddDir in progress uses.
func (s *Store) removeUnreferencedLocked(refs []ChunkRef) {
	used := s.referencedLocked()
	for _, c := range refs {
		if used[c.Hash] || s.inflight[c.Hash] > 0 {
			continue
		}
		if ci, ok := s.chunks[c.Hash]; ok {
			os.Remove(s.chunkPath(c.Hash))
			s.total -= ci.size
			delete(s.chunks, c.Hash)
			delete(s.verified, c.Hash)
		}
	}
}

func (s *Store) referencedLocked() map[Hash]bool {
	used := map[Hash]bool{}
	for _, set := range []map[versionKey]*Manifest{s.committed, s.pending} {
		for _, m := range set {
			for _, f := range m.Files {
				for _, c := range f.Chunks {
					used[c.Hash] = true
				}
			}
		}
	}
	return used
}

// Commit makes version m durable: every chunk must be present with the right
// size and verified (chunks not verified by this process are re-hashed), then
// the manifest is written atomically. It ends any pending state for m and
// then trims the cache to its cap.
func (s *Store) Commit(m *Manifest) error {
	if err := m.Validate(); err != nil {
		return err
	}
	k := versionKey{m.JobID, m.Version}
	s.mu.Lock()
	if old, ok := s.committed[k]; ok {
		s.mu.Unlock()
		if old.Hash() == m.Hash() {
			return nil
		}
		return fmt.Errorf("commit %s v%d: a different manifest is already committed", m.JobID, m.Version)
	}
	var unverified []ChunkRef
	for _, c := range m.Chunks() {
		ci, ok := s.chunks[c.Hash]
		if !ok || ci.size != c.Size {
			s.mu.Unlock()
			return fmt.Errorf("commit %s v%d: chunk %s: %w", m.JobID, m.Version, c.Hash, ErrIncomplete)
		}
		if !s.verified[c.Hash] {
			unverified = append(unverified, c)
		}
	}
	s.mu.Unlock()
	for _, c := range unverified {
		if _, err := s.ReadChunk(c.Hash); err != nil {
			return fmt.Errorf("commit %s v%d: %w: %w", m.JobID, m.Version, ErrIncomplete, err)
		}
	}
	if err := s.waitDurable(m); err != nil {
		return fmt.Errorf("commit %s v%d: %w", m.JobID, m.Version, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range m.Chunks() {
		// Pending and in-flight chunks are pinned; this catches a caller
		// committing chunks nothing pins while they are evicted.
		if ci, ok := s.chunks[c.Hash]; !ok || !ci.durable {
			return fmt.Errorf("commit %s v%d: chunk %s gone before the manifest was written: %w", m.JobID, m.Version, c.Hash, ErrIncomplete)
		}
	}
	// Every chunk is on disk now (waitDurable); the manifest is written
	// last, atomically (fsync, rename, fsync of its directory and of the
	// directory above, which may be new).
	dir := filepath.Join(s.root, "versions", m.JobID)
	mp := filepath.Join(dir, versionFile(m.Version))
	// From here a crash may leave the manifest on disk.
	s.hook("manifest", mp)
	if err := s.writeFile(mp, m.Encode(), 0o644); err != nil {
		return fmt.Errorf("commit %s v%d: %w", m.JobID, m.Version, err)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := syncDir(d); err != nil {
			os.Remove(mp)
			return fmt.Errorf("commit %s v%d: %w", m.JobID, m.Version, diskErr(err))
		}
	}
	s.committed[k] = m
	now := s.now()
	for _, c := range m.Chunks() {
		if ci := s.chunks[c.Hash]; ci != nil {
			ci.used = now
		}
		// mtime is the LRU time that survives a restart.
		_ = os.Chtimes(s.chunkPath(c.Hash), now, now)
	}
	if _, ok := s.pending[k]; ok {
		delete(s.pending, k)
		delete(s.touched, k)
		os.Remove(filepath.Join(s.root, "pending", m.JobID, versionFile(m.Version)))
	}
	if s.max > 0 && s.total > s.max {
		if err := s.evictLocked(s.max); err != nil {
			s.log.Warn("ckpt: cache over its cap after commit", "usage", s.total, "cap", s.max, "err", err)
		}
	}
	return nil
}

// waitDurable returns once every chunk of m is on disk: it waits for the
// background fsyncs of chunks written by this process and runs one syncfs
// for chunks found at Open. A chunk whose fsync failed is removed (its data
// may never reach the disk; a resumed transfer fetches it again) and the
// commit fails.
func (s *Store) waitDurable(m *Manifest) error {
	s.mu.Lock()
	var waits []*syncTicket
	var hashes []Hash
	loaded := false
	for _, c := range m.Chunks() {
		ci, ok := s.chunks[c.Hash]
		switch {
		case !ok:
			s.mu.Unlock()
			return fmt.Errorf("chunk %s: %w", c.Hash, ErrIncomplete)
		case ci.durable:
		case ci.sync != nil:
			waits = append(waits, ci.sync)
			hashes = append(hashes, c.Hash)
		default:
			loaded = true
		}
	}
	if loaded {
		if err := s.syncLoadedLocked(); err != nil {
			s.mu.Unlock()
			return diskErr(err)
		}
	}
	s.mu.Unlock()
	if len(waits) > 0 {
		s.syncMu.Lock()
		s.syncHurry = true
		s.syncMu.Unlock()
		defer func() {
			s.syncMu.Lock()
			s.syncHurry = false
			s.syncMu.Unlock()
		}()
	}
	var errs []error
	for i, t := range waits {
		<-t.done
		if t.err != nil {
			errs = append(errs, fmt.Errorf("chunk %s: %w: %w", hashes[i], ErrIncomplete, t.err))
			s.mu.Lock()
			if ci := s.chunks[hashes[i]]; ci != nil && ci.sync == t {
				os.Remove(s.chunkPath(hashes[i]))
				s.total -= ci.size
				delete(s.chunks, hashes[i])
				delete(s.verified, hashes[i])
			}
			s.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// Manifest returns committed version v of job.
func (s *Store) Manifest(job string, version uint64) (*Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.committed[versionKey{job, version}]
	if !ok {
		return nil, fmt.Errorf("%s v%d: %w", job, version, ErrNoVersion)
	}
	return m, nil
}

// Versions returns the committed versions of job, ascending.
func (s *Store) Versions(job string) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versionsLocked(job)
}

func (s *Store) versionsLocked(job string) []uint64 {
	var vs []uint64
	for k := range s.committed {
		if k.job == job {
			vs = append(vs, k.version)
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
	return vs
}

// Latest returns the newest committed version of job.
func (s *Store) Latest(job string) (*Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vs := s.versionsLocked(job)
	if len(vs) == 0 {
		return nil, fmt.Errorf("%s: %w", job, ErrNoVersion)
	}
	return s.committed[versionKey{job, vs[len(vs)-1]}], nil
}

// Jobs returns the ids of jobs with a committed version, sorted.
func (s *Store) Jobs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for k := range s.committed {
		seen[k.job] = true
	}
	out := make([]string, 0, len(seen))
	for j := range seen {
		out = append(out, j)
	}
	sort.Strings(out)
	return out
}

// SetLive marks job live (its newest committed version is never evicted) or
// not. The mark is kept on disk.
func (s *Store) SetLive(job string, live bool) error {
	if err := ValidJobID(job); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := filepath.Join(s.root, "live", job)
	if live {
		if err := s.writeFile(p, nil, 0o644); err != nil {
			return fmt.Errorf("set live %s: %w", job, err)
		}
		s.live[job] = true
		return nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("set live %s: %w", job, err)
	}
	delete(s.live, job)
	return nil
}

// DropVersion removes committed version v of job and the chunks only it used.
func (s *Store) DropVersion(job string, version uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := versionKey{job, version}
	m, ok := s.committed[k]
	if !ok {
		return fmt.Errorf("%s v%d: %w", job, version, ErrNoVersion)
	}
	if err := os.Remove(filepath.Join(s.root, "versions", job, versionFile(version))); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("drop %s v%d: %w", job, version, err)
	}
	delete(s.committed, k)
	s.removeUnreferencedLocked(m.Chunks())
	return nil
}

// pinnedLocked returns the chunks eviction must keep: the newest committed
// version of each live job, every pending version, AddDirs in progress.
func (s *Store) pinnedLocked() map[Hash]bool {
	pinned := map[Hash]bool{}
	add := func(m *Manifest) {
		for _, f := range m.Files {
			for _, c := range f.Chunks {
				pinned[c.Hash] = true
			}
		}
	}
	for job := range s.live {
		if vs := s.versionsLocked(job); len(vs) > 0 {
			add(s.committed[versionKey{job, vs[len(vs)-1]}])
		}
	}
	for _, m := range s.pending {
		add(m)
	}
	for h, n := range s.inflight {
		if n > 0 {
			pinned[h] = true
		}
	}
	return pinned
}

// Evict trims the store to its cap now.
func (s *Store) Evict() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.max == 0 {
		return nil
	}
	return s.evictLocked(s.max)
}

// evictLocked removes least recently used unpinned chunks until total <=
// target, and drops every committed version that needed a removed chunk. If
// the target cannot be reached it evicts nothing and returns ErrQuota.
func (s *Store) evictLocked(target int64) error {
	if s.total <= target {
		return nil
	}
	pinned := s.pinnedLocked()
	type cand struct {
		h Hash
		*chunkInfo
	}
	var cands []cand
	var free int64
	for h, ci := range s.chunks {
		if !pinned[h] {
			cands = append(cands, cand{h, ci})
			free += ci.size
		}
	}
	if s.total-free > target {
		return fmt.Errorf("%w: %d bytes pinned, %d wanted under cap %d", ErrQuota, s.total-free, target, s.max)
	}
	sort.Slice(cands, func(i, j int) bool {
		if !cands[i].used.Equal(cands[j].used) {
			return cands[i].used.Before(cands[j].used)
		}
		return bytes.Compare(cands[i].h[:], cands[j].h[:]) < 0
	})
	gone := map[Hash]bool{}
	for _, c := range cands {
		if s.total <= target {
			break
		}
		os.Remove(s.chunkPath(c.h))
		s.total -= c.size
		delete(s.chunks, c.h)
		delete(s.verified, c.h)
		gone[c.h] = true
	}
	// A version missing a chunk can no longer be restored: drop it.
	for k, m := range s.committed {
		for _, c := range m.Chunks() {
			if gone[c.Hash] {
				os.Remove(filepath.Join(s.root, "versions", k.job, versionFile(k.version)))
				delete(s.committed, k)
				s.log.Info("ckpt: evicted version", "job", k.job, "version", k.version)
				break
			}
		}
	}
	return nil
}

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

func (s *Store) touch(h Hash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ci, ok := s.chunks[h]; ok {
		ci.used = s.now()
	}
}

// NextVersion returns one more than the newest version of job ever seen
// (committed or pending), starting at 1.
func (s *Store) NextVersion(job string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var v uint64
	for _, set := range []map[versionKey]*Manifest{s.committed, s.pending} {
		for k := range set {
			if k.job == job && k.version > v {
				v = k.version
			}
		}
	}
	return v + 1
}

// String describes the store for logs.
func (s *Store) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "ckpt store " + s.root + " (" + strconv.FormatInt(s.total, 10) + " bytes, " + strconv.Itoa(len(s.committed)) + " versions)"
}

// readFileInto reads the file at p, expected to hold size bytes, into buf
// when it is large enough. A file of another size is returned as it is (the
// caller's size check reports it).
func readFileInto(p string, size int64, buf []byte) ([]byte, error) {
	if int64(cap(buf)) < size+1 {
		return os.ReadFile(p)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// One byte more than expected tells a longer file.
	n, err := io.ReadFull(f, buf[:size+1])
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return buf[:n], nil
	case err != nil:
		return nil, err
	}
	return buf[:n], nil
}

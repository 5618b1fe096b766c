package ckpt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// syncTicket is the background fsync of one chunk file.
type syncTicket struct {
	done chan struct{}
	err  error // set before done closes
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

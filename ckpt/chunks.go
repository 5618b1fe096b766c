package ckpt

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

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

func (s *Store) touch(h Hash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ci, ok := s.chunks[h]; ok {
		ci.used = s.now()
	}
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

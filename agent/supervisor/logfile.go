package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"sync"
)

// rotatingLog is the job's output file: path, rotated to path.1 ... path.N
// when it would grow past max. A failed write (full disk) drops the data
// and counts it: the job's pipe must keep draining or the job blocks.
type rotatingLog struct {
	path string
	max  int64
	keep int

	mu      sync.Mutex // protects the fields below
	f       *os.File
	size    int64
	dropped int64
	lastErr error
}

func openRotatingLog(path string, max int64, keep int) (*rotatingLog, error) {
	l := &rotatingLog{path: path, max: max, keep: keep}
	if err := l.openLocked(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *rotatingLog) openLocked() error {
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open job log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("stat job log: %w", err)
	}
	l.f, l.size = f, st.Size()
	return nil
}

// Write never fails: the job must not notice the log's problems. Data is
// split so that no file grows past max, cutting at a line end where one
// fits.
func (l *rotatingLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	total := len(p)
	for len(p) > 0 {
		room := l.max - l.size
		if l.f != nil && room <= 0 {
			l.rotateLocked()
			room = l.max - l.size
		}
		if l.f == nil {
			// A rotation could not reopen the file; try again.
			if err := l.openLocked(); err != nil {
				l.dropLocked(len(p), err)
				return total, nil
			}
			room = l.max - l.size
		}
		chunk := p
		if int64(len(chunk)) > room {
			chunk = p[:max(room, 0)]
			if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
				chunk = chunk[:i+1]
			} else if l.size > 0 {
				// No line end fits: start a new file rather than split a line.
				l.rotateLocked()
				continue
			}
		}
		n, err := l.f.Write(chunk)
		l.size += int64(n)
		if err != nil {
			l.dropLocked(len(p)-n, err)
			return total, nil
		}
		p = p[len(chunk):]
	}
	return total, nil
}

func (l *rotatingLog) dropLocked(n int, err error) {
	l.dropped += int64(n)
	l.lastErr = err
}

func (l *rotatingLog) rotateLocked() {
	l.f.Close()
	l.f = nil
	if l.keep == 0 {
		os.Remove(l.path)
	} else {
		for i := l.keep - 1; i >= 1; i-- {
			os.Rename(fmt.Sprintf("%s.%d", l.path, i), fmt.Sprintf("%s.%d", l.path, i+1))
		}
		os.Rename(l.path, l.path+".1")
	}
	if err := l.openLocked(); err != nil {
		l.lastErr = err
	}
}

// Dropped returns how many bytes were lost and the last write error.
func (l *rotatingLog) Dropped() (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped, l.lastErr
}

func (l *rotatingLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

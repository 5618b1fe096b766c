package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/reclaimnet/reclaimnet/localapi"
)

// ErrDataDirLocked is wrapped by New when another agent holds the data dir.
var ErrDataDirLocked = errors.New("data dir is locked by another agent")

// dirLock is an exclusive flock on DataDir/agent.lock (localapi.LockFile). The kernel drops it
// when the process dies, so a crashed agent never leaves a stale lock.
type dirLock struct{ f *os.File }

func lockDataDir(dir string) (*dirLock, error) {
	if err := openDataDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, localapi.LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := strings.TrimSpace(string(b))
			if holder == "" {
				holder = "unknown"
			}
			return nil, fmt.Errorf("%w: %s (held by pid %s)", ErrDataDirLocked, dir, holder)
		}
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return &dirLock{f: f}, nil
}

func (l *dirLock) release() {
	if l == nil || l.f == nil {
		return
	}
	syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
	l.f = nil
}

// privateDirs are the data dir's subdirectories no other user may enter:
// the Raft log, checkpoints, jobs' files and the TLS keys.
var privateDirs = []string{"raft", ckptDirName, jobsDirName, tlsDirName}

// openDataDir creates the data dir so that any local user can reach the
// control socket in it (mode 0711: enter, not list) while everything else
// stays the agent's: the private subdirectories are 0700 and the files at
// the top are 0600, except the socket (0666).
func openDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	for _, d := range privateDirs {
		p := filepath.Join(dir, d)
		if err := os.MkdirAll(p, 0o700); err != nil {
			return fmt.Errorf("create data dir: %w", err)
		}
		if err := os.Chmod(p, 0o700); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	return nil
}

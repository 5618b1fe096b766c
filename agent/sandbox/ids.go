package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrNoFreeUID: every uid of the guest range is held by a running job.
var ErrNoFreeUID = errors.New("no free guest uid")

// Identity is one job's uid and gid, leased from the guest range for as
// long as the job runs. The lease is an exclusive lock on a file in
// StateDir that the job's init inherits, so a uid is never given to two
// running jobs on one machine, whichever agent asks, and a job that
// outlives its agent keeps its uid until it ends.
type Identity struct {
	UID, GID uint32

	mu   sync.Mutex // protects lock
	lock *os.File
}

// Release ends the lease. The job's init, if still running, holds it
// until it ends. Calling it again is harmless.
func (id *Identity) Release() {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.lock != nil {
		id.lock.Close()
		id.lock = nil
	}
}

func (id *Identity) lockFile() *os.File {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.lock
}

// idPool hands out uids of [first, first+count).
type idPool struct {
	first, count uint32
	dir          string // lock files

	mu   sync.Mutex // protects next
	next uint32     // offset tried first, so a freed uid is not reused at once
}

// checkRange reports users and groups of the passwd and group files (and
// the agent's own ids) that fall into the range: a guest must never be
// anybody else.
func checkRange(first, count uint32, passwd, group string) error {
	var errs []error
	in := func(id uint64) bool { return id >= uint64(first) && id < uint64(first)+uint64(count) }
	for _, db := range []struct{ path, what string }{{passwd, "user"}, {group, "group"}} {
		f, err := os.Open(db.path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("check guest uid range: %w", err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) < 3 || strings.HasPrefix(fields[0], "#") {
				continue
			}
			if id, err := strconv.ParseUint(fields[2], 10, 32); err == nil && in(id) {
				errs = append(errs, fmt.Errorf("%s %s has id %d in the guest range %d-%d (%s)", db.what, fields[0], id, first, uint64(first)+uint64(count)-1, db.path))
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return fmt.Errorf("check guest uid range: read %s: %w", db.path, err)
		}
	}
	for _, own := range []int{os.Getuid(), os.Geteuid(), os.Getgid(), os.Getegid()} {
		if in(uint64(own)) {
			errs = append(errs, fmt.Errorf("the agent's own id %d is in the guest range", own))
		}
	}
	return errors.Join(errs...)
}

// acquire leases the next free uid: not held by another job and unknown
// to the user and group databases (NSS: LDAP and SSSD users too, which
// the files checked at start do not list).
func (p *idPool) acquire() (*Identity, error) {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return nil, fmt.Errorf("guest uid leases: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var known []string
	for i := uint32(0); i < p.count; i++ {
		off := (p.next + i) % p.count
		uid := p.first + off
		s := strconv.FormatUint(uint64(uid), 10)
		if u, err := user.LookupId(s); err == nil {
			known = append(known, fmt.Sprintf("%d is user %s", uid, u.Username))
			continue
		}
		if g, err := user.LookupGroupId(s); err == nil {
			known = append(known, fmt.Sprintf("%d is group %s", uid, g.Name))
			continue
		}
		f, err := os.OpenFile(filepath.Join(p.dir, s), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("guest uid lease: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue
			}
			return nil, fmt.Errorf("guest uid lease %d: %w", uid, err)
		}
		p.next = (off + 1) % p.count
		return &Identity{UID: uid, GID: uid, lock: f}, nil
	}
	if len(known) > 0 {
		return nil, fmt.Errorf("%w in %d-%d (skipped ids the user database knows: %s)", ErrNoFreeUID, p.first, p.first+p.count-1, strings.Join(known, ", "))
	}
	return nil, fmt.Errorf("%w in %d-%d: %d jobs hold one", ErrNoFreeUID, p.first, p.first+p.count-1, p.count)
}

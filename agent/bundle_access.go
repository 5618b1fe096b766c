package agent

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/reclaimnet/reclaimnet/ckpt"
)

// errNotReadable marks a bundle entry the submitting user could not have
// read: the agent reads the working directory as root, so without this
// check any local user could bundle files only root (or another user) may
// read and run a job over them.
var errNotReadable = errors.New("not readable by the submitting user")

// checkReadableBy proves that the caller could have read every entry of a
// bundle the agent has just stored from root: each directory opens for
// listing, each symlink is visible, and each regular file opens and has the
// content the bundle recorded, all with the caller's filesystem identity.
// Comparing content, not only permissions, closes the race of swapping a
// path between the agent's read and this check: a caller who can read the
// same bytes at the same path gains nothing from the bundle. Root and the
// agent's own user are not checked.
func checkReadableBy(who caller, root string, files []ckpt.File) error {
	if who.privileged() {
		return nil
	}
	groups := []uint32{uint32(who.GID)}
	if u, err := user.LookupId(strconv.Itoa(who.UID)); err == nil {
		if ids, err := u.GroupIds(); err == nil {
			for _, id := range ids {
				if g, err := strconv.ParseUint(id, 10, 32); err == nil {
					groups = append(groups, uint32(g))
				}
			}
		}
	}
	done := make(chan error, 1)
	go func() {
		// The thread takes the caller's filesystem identity and is never
		// handed back: a goroutine that exits locked takes its thread with
		// it, so no other goroutine ever runs with these credentials.
		runtime.LockOSThread()
		if err := becomeFS(who.UID, who.GID, groups); err != nil {
			done <- err
			return
		}
		done <- readAll(root, files)
	}()
	return <-done
}

// becomeFS sets this thread's supplementary groups, fsgid and fsuid. The
// raw setgroups call changes only the calling thread, unlike
// syscall.Setgroups, which changes every thread of the process.
func becomeFS(uid, gid int, groups []uint32) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if err := unix.Setfsgid(gid); err != nil {
		return fmt.Errorf("setfsgid: %w", err)
	}
	if err := unix.Setfsuid(uid); err != nil {
		return fmt.Errorf("setfsuid: %w", err)
	}
	// setfsuid reports no failure of its own: read the value back (an
	// invalid id changes nothing and returns the current one).
	if cur, _ := unix.SetfsuidRetUid(-1); cur != uid {
		return fmt.Errorf("setfsuid %d: still %d", uid, cur)
	}
	if cur, _ := unix.SetfsgidRetGid(-1); cur != gid {
		return fmt.Errorf("setfsgid %d: still %d", gid, cur)
	}
	return nil
}

// readAll checks every entry under root with the thread's identity.
func readAll(root string, files []ckpt.File) error {
	notReadable := func(rel string, err error) error {
		return fmt.Errorf("%s: %w (%v)", filepath.Join(root, rel), errNotReadable, err)
	}
	if err := openDir(root); err != nil {
		return notReadable(".", err)
	}
	for _, f := range files {
		p := filepath.Join(root, filepath.FromSlash(f.Path))
		switch {
		case f.IsDir():
			if err := openDir(p); err != nil {
				return notReadable(f.Path, err)
			}
		case f.IsSymlink():
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				return notReadable(f.Path, err)
			}
		default:
			sum, err := hashFile(p)
			if err != nil {
				return notReadable(f.Path, err)
			}
			if sum != f.Hash {
				return notReadable(f.Path, errors.New("its content changed while it was bundled"))
			}
		}
	}
	return nil
}

func openDir(p string) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

func hashFile(p string) (ckpt.Hash, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return ckpt.Hash{}, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ckpt.Hash{}, err
	}
	var sum ckpt.Hash
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

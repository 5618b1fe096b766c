package supervisor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Marker files a job writes into RECLAIMNET_CKPT_DIR.
const (
	// CompleteMarker says every checkpoint file is written and closed.
	CompleteMarker = ".complete"
	// FailedMarker says the checkpoint could not be written; its content
	// is the reason.
	FailedMarker = ".failed"
)

// ExitCheckpointed is the exit code of a job that wrote a checkpoint and
// asks to be restarted from it (HTCondor's convention).
const ExitCheckpointed = 85

// lowSpace is the free space below which a failed checkpoint is blamed on
// a full disk.
const lowSpace = 1 << 20

// ckptLayout names the directories under WorkDir/ckpt. With a confined
// job, uid and gid are its ids (else -1): the incoming directory is the
// job's, and a finished checkpoint is sealed before it is handed on.
type ckptLayout struct {
	root     string
	uid, gid int
}

func (c ckptLayout) incoming() string { return filepath.Join(c.root, "incoming") }
func (c ckptLayout) final(seq int) string {
	return filepath.Join(c.root, fmt.Sprintf("%06d", seq))
}

// nextSeq returns one more than the highest finished checkpoint number
// under root, so numbers stay unique across supervisor restarts.
func (c ckptLayout) nextSeq() (int, error) {
	entries, err := os.ReadDir(c.root)
	if err != nil {
		return 0, err
	}
	max := 0
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > max {
			max = n
		}
	}
	return max + 1, nil
}

// fresh makes the incoming directory exist and be empty.
func (c ckptLayout) fresh() error {
	if err := os.RemoveAll(c.incoming()); err != nil {
		return fmt.Errorf("clear checkpoint dir: %w", err)
	}
	if err := os.Mkdir(c.incoming(), 0o755); err != nil {
		return fmt.Errorf("create checkpoint dir: %w%s", err, diskHint(c.root))
	}
	if c.uid >= 0 {
		if err := os.Lchown(c.incoming(), c.uid, c.gid); err != nil {
			return fmt.Errorf("checkpoint dir: %w", err)
		}
	}
	return nil
}

// chownTree gives dir and everything in it to the job's uid (nothing
// with the sandbox off). Symlinks are changed, never followed.
func (c ckptLayout) chownTree(dir string) error {
	if c.uid < 0 {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, c.uid, c.gid)
	})
}

// seal makes a finished checkpoint of a confined job the supervisor's:
// every entry root's and readable (the job, as another uid, resumes from
// it), no set-id bits, nothing writable by others, and only regular files
// and directories. A directory is taken over before it is read, so the
// job, which may still hold it open, cannot slip a symlink to a host file
// into what the agent then reads as root.
func (c ckptLayout) seal(dir string) error {
	if c.uid < 0 {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return fmt.Errorf("%s is a %s: a checkpoint holds only files and directories", strings.TrimPrefix(p, dir+"/"), d.Type())
		}
		if err := os.Lchown(p, 0, 0); err != nil {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if !info.IsDir() && !info.Mode().IsRegular() {
			return fmt.Errorf("%s changed into a %s while it was sealed", strings.TrimPrefix(p, dir+"/"), info.Mode().Type())
		}
		mode := info.Mode().Perm()&^0o022 | 0o444
		if info.IsDir() {
			mode |= 0o555
		}
		return os.Chmod(p, mode)
	})
}

// finish moves the incoming directory to its final name. The rename is
// atomic, and a job that still holds the old path sees it vanish.
func (c ckptLayout) finish(seq int) (string, error) {
	dst := c.final(seq)
	if err := os.Rename(c.incoming(), dst); err != nil {
		return "", fmt.Errorf("finish checkpoint %d: %w", seq, err)
	}
	if err := c.seal(dst); err != nil {
		os.RemoveAll(dst)
		return "", fmt.Errorf("finish checkpoint %d: %w", seq, err)
	}
	return dst, nil
}

// abandon removes the incoming directory, first renaming it so that late
// writes by the job fail instead of landing in the next request's
// directory.
func (c ckptLayout) abandon(seq int) error {
	tmp := filepath.Join(c.root, fmt.Sprintf("abandoned-%06d", seq))
	src := c.incoming()
	if err := os.Rename(src, tmp); err == nil {
		src = tmp
	} else if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return os.RemoveAll(src)
}

// cleanStale removes leftovers of a previous supervisor on start.
func (c ckptLayout) cleanStale() error {
	entries, err := os.ReadDir(c.root)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == "incoming" || strings.HasPrefix(e.Name(), "abandoned-") {
			if err := os.RemoveAll(filepath.Join(c.root, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// hasContent reports whether the incoming directory holds anything but
// the markers.
func (c ckptLayout) hasContent() bool {
	entries, err := os.ReadDir(c.incoming())
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.Name() != CompleteMarker && e.Name() != FailedMarker {
			return true
		}
	}
	return false
}

// readMarker reads at most max bytes of a marker the job wrote, without
// following a symlink or blocking on a FIFO it may have put there instead.
func readMarker(path string, max int) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", filepath.Base(path))
	}
	b := make([]byte, max)
	n, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", err
	}
	return string(b[:n]), nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// dirBytes is the total size of the regular files under dir.
func dirBytes(dir string) int64 {
	var total int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

// freeBytes returns the space available to unprivileged writers on the
// filesystem holding path.
func freeBytes(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// diskFullError returns an error wrapping ENOSPC when the filesystem
// holding path is (nearly) full, else nil.
func diskFullError(path string) error {
	free, err := freeBytes(path)
	if err != nil || free >= lowSpace {
		return nil
	}
	return fmt.Errorf("filesystem holding %s has %d bytes free: %w", path, free, syscall.ENOSPC)
}

// diskHint is diskFullError as a suffix for an error message.
func diskHint(path string) string {
	if err := diskFullError(path); err != nil {
		return " (" + err.Error() + ")"
	}
	return ""
}

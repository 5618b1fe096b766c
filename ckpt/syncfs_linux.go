package ckpt

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncFS flushes the file system holding path (syncfs(2)).
func syncFS(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// startWriteback asks the kernel to start writing f's dirty pages now
// without waiting for them (sync_file_range(2), SYNC_FILE_RANGE_WRITE).
// Advisory: errors are ignored.
func startWriteback(f *os.File) {
	_ = unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}

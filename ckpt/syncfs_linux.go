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

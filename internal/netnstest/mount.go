package netnstest

import (
	"os"
	"syscall"
	"testing"
)

// Mount mounts fstype ("tmpfs" with opts, or a bind of src with
// syscall.MS_BIND) on dir for the test and unmounts it at the end: a small
// file system a test fills, or a directory put somewhere else. It needs
// root; a failure skips the test, or fails it with CI=true. Cleanups run
// last-registered first, so mount before starting what uses the mount.
func Mount(t testing.TB, src, dir, fstype string, flags uintptr, opts string) {
	t.Helper()
	if os.Geteuid() != 0 {
		FailOrSkip(t, "mounting %s on %s needs root", fstype, dir)
	}
	if err := syscall.Mount(src, dir, fstype, flags, opts); err != nil {
		FailOrSkip(t, "mount %s on %s: %v", fstype, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

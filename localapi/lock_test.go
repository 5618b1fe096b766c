package localapi

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestAgentHoldsDataDir: a data dir whose lock file a process holds
// counts as held, the same file unlocked (the agent exited) does not, nor
// a dir with no lock file; the probe takes no lock itself, so an agent
// locking the dir right after it succeeds.
func TestAgentHoldsDataDir(t *testing.T) {
	dir := t.TempDir()
	if AgentHoldsDataDir(dir) {
		t.Fatal("held with no lock file")
	}
	lock := func() *os.File {
		f, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			t.Fatalf("lock after the probe: %v", err)
		}
		return f
	}
	f := lock()
	if !AgentHoldsDataDir(dir) {
		t.Error("not held while a process holds the lock")
	}
	if !AgentHoldsDataDir(dir) {
		t.Error("not held on a second probe")
	}
	f.Close() // the process exits: the kernel drops its lock
	if AgentHoldsDataDir(dir) {
		t.Error("held after the lock was dropped")
	}
	lock().Close()
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, LockFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	g := lock()
	defer g.Close()
	if AgentHoldsDataDir(other) {
		t.Error("another dir's unheld lock file counts as held")
	}
}

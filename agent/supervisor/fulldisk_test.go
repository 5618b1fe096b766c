package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/netnstest"
)

// mountTmpfs mounts a tmpfs of size for the test (root only; under CI=true
// a failure to mount fails the test).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	netnstest.Mount(t, "tmpfs", dir, "tmpfs", 0, "size="+size)
	return dir
}

// TestFullDiskDuringCheckpoint runs a job whose work directory (checkpoints
// and log) is a 1 MiB tmpfs and whose checkpoints are 4 MiB.
//  1. It fills the disk and never completes: the timeout abandons it, the
//     error says the disk is full, the space comes back, the job runs on,
//     and its output (dropped while the disk was full) never blocked it.
//  2. It fills the disk, cleans up and reports .failed: the error carries
//     the job's reason and ENOSPC.
//  3. A small checkpoint then succeeds.
func TestFullDiskDuringCheckpoint(t *testing.T) {
	work := mountTmpfs(t, "1m")
	clock := newFakeClock()
	cfg := testConfig(t)
	cfg.Clock = clock
	s := newSupervisor(t, cfg)
	j := startJob(t, s, `
n=0
trap 'n=$((n+1)); D="$RECLAIMNET_CKPT_DIR"
case $n in
  1) dd if=/dev/zero of="$D/big" bs=64k count=64 2>/dev/null ;;
  2) if ! r=$(dd if=/dev/zero of="$D/big" bs=64k count=64 2>&1); then rm -f "$D/big"; echo "$r" > "$D/.failed"; fi ;;
  *) echo small > "$D/state"; touch "$D/.complete" ;;
esac' USR1
touch "$RECLAIMNET_READY_FILE"
while :; do echo "tick $n ........................................................................................................"; sleep 0.02; done`, func(sp *Spec) {
		sp.WorkDir = filepath.Join(work, "job")
		sp.CheckpointTimeout = time.Minute
	})
	waitFor(t, 10*time.Second, "job ready", func() bool { return j.Status().Ready })

	result := make(chan error, 1)
	go func() {
		_, err := j.RequestCheckpoint(context.Background())
		result <- err
	}()
	waitFor(t, 10*time.Second, "disk full", func() bool {
		free, err := freeBytes(work)
		return err == nil && free < 64<<10
	})
	waitFor(t, 10*time.Second, "job output dropped while the disk is full", func() bool { return j.Status().LogDropped > 0 })
	clock.Advance(time.Minute)
	err := <-result
	if !errors.Is(err, ErrCheckpointTimeout) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "bytes free") {
		t.Fatalf("full-disk timeout: got %v, want ErrCheckpointTimeout wrapping ENOSPC with the free space", err)
	}
	if free, _ := freeBytes(work); free < 512<<10 {
		t.Errorf("free space after abandoning: got %d bytes, want the partial checkpoint removed", free)
	}
	if j.Status().Done {
		t.Fatalf("job ended: %+v, want it running", j.Wait())
	}

	_, err = j.RequestCheckpoint(context.Background())
	if !errors.Is(err, ErrCheckpointFailed) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "No space left on device") {
		t.Fatalf("reported failure: got %v, want ErrCheckpointFailed wrapping ENOSPC with dd's message", err)
	}

	dir, err := j.RequestCheckpoint(context.Background())
	if err != nil {
		t.Fatalf("small checkpoint after the disk recovered: %v", err)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(dir, "state"))); got != "small" {
		t.Errorf("checkpoint content: got %q, want small", got)
	}
	// Output is logged again now that there is space.
	waitFor(t, 10*time.Second, "output logged after recovery", func() bool {
		b, _ := os.ReadFile(j.LogPath())
		return strings.Contains(string(b), "tick 3")
	})
}

package agent

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reclaimnet/reclaimnet/agent/jobs"
	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/internal/netnstest"
	"github.com/reclaimnet/reclaimnet/internal/testbin"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/transfer"
)

// purgedJob writes two outputs (one of 1 MiB) and exits 0.
const purgedJob = `#!/bin/sh
touch "$RECLAIMNET_READY_FILE"
echo kept > "$RECLAIMNET_OUTPUT_DIR/result.txt"
head -c 1048576 /dev/urandom > "$RECLAIMNET_OUTPUT_DIR/weights.bin"
`

// TestFetchAfterPurge runs a bundled job with a short --keep on a real
// agent until it exits and fetches its outputs with 'reclaimnet fetch'
// while they are kept: into a 256 KiB tmpfs the answer is a full disk
// (exit 1), with nothing at the destination and what arrived kept for the
// next try; elsewhere they arrive. Once the node purged them a fetch says
// they were purged and when (exit 1), and again nothing is left at the
// destination as if it were the outputs.
func TestFetchAfterPurge(t *testing.T) {
	bin := testbin.Binary(t, "RECLAIMNET_BINARY")
	small := t.TempDir()
	netnstest.Mount(t, "tmpfs", small, "tmpfs", 0, "size=256k,mode=0700")
	c := newTestCluster(t)
	c.load = func() float64 { return 0.25 }
	c.jobsConfig = func(jc *jobs.Config) { jc.PurgeEvery = 200 * time.Millisecond }
	cfg := c.config("solo")
	cfg.GPUs = []string{"RTX-4090:24GiB:8.9:x1"}
	n := c.start(cfg)
	wait.For(t, 30*time.Second, "a leader", func() bool { return n.agent.coord.IsLeader() })
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "job.sh"), []byte(purgedJob), 0o755); err != nil {
		t.Fatal(err)
	}
	const keep = 15 * time.Second
	submit(t, n, localapi.JobRequest{Name: "brief", Command: []string{"./job.sh"}, GPUs: 1, Workdir: src, Keep: keep})
	var info localapi.JobInfo
	wait.For(t, 60*time.Second, "job brief done with its results listed", func() bool {
		j, ok := findJob(call(t, n, localapi.Request{Op: localapi.OpJobs}).Jobs, "brief")
		info = j
		return ok && j.State == "done" && len(j.ResultsOn) > 0
	})
	full := filepath.Join(small, "out")
	if code, text := asUser(t, bin, 0, n.agent.DataDir(), "fetch", "brief", "--out", full); code != 1 ||
		!strings.Contains(text, "disk full") || !strings.Contains(text, transfer.StagingDir(full)) {
		t.Errorf("fetch onto a full disk: exit %d, %q; want 1 saying the disk is full and where what arrived is kept", code, text)
	}
	if _, err := os.Lstat(full); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s after a fetch onto a full disk: %v, want it absent", full, err)
	}
	out := filepath.Join(t.TempDir(), "out")
	if code, text := asUser(t, bin, 0, n.agent.DataDir(), "fetch", "brief", "--out", out); code != 0 {
		t.Fatalf("fetch while kept (until %v): exit %d: %s", info.KeptUntil, code, text)
	}
	if b, err := os.ReadFile(filepath.Join(out, "result.txt")); err != nil || string(b) != "kept\n" {
		t.Fatalf("fetched result.txt %q (%v)", b, err)
	}
	store := n.agent.jobs.store
	var purgedAt time.Time
	wait.For(t, keep+30*time.Second, "the results purged after --keep", func() bool {
		at, ok := store.Purged("brief")
		purgedAt = at
		return ok && len(store.Versions("brief")) == 0
	})
	if purgedAt.Before(info.KeptUntil) {
		t.Errorf("purged at %v, before the kept-until time %v", purgedAt, info.KeptUntil)
	}
	again := filepath.Join(t.TempDir(), "again")
	if code, text := asUser(t, bin, 0, n.agent.DataDir(), "fetch", "brief", "--out", again, "--checkpoint"); code != 1 ||
		!strings.Contains(text, "purged at "+purgedAt.UTC().Format("2006-01-02 15:04:05Z")) {
		t.Errorf("fetch after the purge: exit %d, %q; want 1 naming when they were purged", code, text)
	}
	for _, p := range []string{again, again + ".checkpoint", transfer.StagingDir(again), transfer.StagingDir(again + ".checkpoint")} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after a refused fetch: %v, want it absent", p, err)
		}
	}
}

// fullDiskJob writes 3 MiB of fresh random bytes, their hash and its
// checkpoint count into each checkpoint, and fails the checkpoint (with
// the shell's message) when it cannot write them.
const fullDiskJob = `#!/bin/sh
n=0
trap 'n=$((n+1)); D="$RECLAIMNET_CKPT_DIR"
if r=$( { head -c 3145728 /dev/urandom > "$D/blob"; } 2>&1 ); then
  sha256sum < "$D/blob" > "$D/sum"; echo $n > "$D/step"; touch "$D/.complete"
else
  rm -f "$D/blob"; echo "$r" > "$D/.failed"
fi' USR1
touch "$RECLAIMNET_READY_FILE"
while :; do sleep 0.1; done
`

// tmpfsDataDir returns a data directory on a 160 MiB tmpfs of its own,
// with Raft's log on another disk: what a consensus log does on a full
// disk is the library's, and these tests are about checkpoints and
// bundles. Call it before newTestCluster (see netnstest.Mount).
func tmpfsDataDir(t *testing.T) string {
	t.Helper()
	data := t.TempDir()
	netnstest.Mount(t, "tmpfs", data, "tmpfs", 0, "size=160m,mode=0700")
	if err := os.Mkdir(filepath.Join(data, "raft"), 0o700); err != nil {
		t.Fatal(err)
	}
	netnstest.Mount(t, t.TempDir(), filepath.Join(data, "raft"), "", syscall.MS_BIND, "")
	return data
}

// fill takes all but leave bytes of the file system holding dir and
// returns the file that holds them.
func fill(t *testing.T, dir string, leave int64) string {
	t.Helper()
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		t.Fatal(err)
	}
	ballast := filepath.Join(dir, "ballast")
	f, err := os.OpenFile(ballast, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(sfs.Bavail)*sfs.Bsize-leave); err != nil {
		t.Fatal(err)
	}
	return ballast
}

// verifyBlob restores version v of a fullDiskJob job from store and checks
// the blob against the hash the job wrote beside it.
func verifyBlob(t *testing.T, store *ckpt.Store, job string, v uint64) {
	t.Helper()
	dir := t.TempDir()
	if err := store.Restore(job, v, dir); err != nil {
		t.Errorf("restore %s v%d: %v", job, v, err)
		return
	}
	blob, err := os.ReadFile(filepath.Join(dir, "blob"))
	sum, err2 := os.ReadFile(filepath.Join(dir, "sum"))
	if err != nil || err2 != nil {
		t.Errorf("%s v%d: %v, %v", job, v, err, err2)
		return
	}
	h := sha256.Sum256(blob)
	if got := hex.EncodeToString(h[:]); !strings.HasPrefix(string(sum), got) {
		t.Errorf("%s v%d: blob hashes to %s, the job wrote %q", job, v, got, sum)
	}
}

// TestFullDataDisk gives a real agent a data directory on a 160 MiB tmpfs
// and fills it while a bundled job checkpoints there: the checkpoint that
// does not fit fails with an error that says the disk is full and is not
// committed, every committed version still restores exactly, the leader
// makes the node ineligible (docs/design.md P2.3's rule: a job submitted
// now waits, its pending reason naming the full data directory), and a
// bundle that does not fit is refused at submit with a clear disk-full
// answer and no job. With the space back the node takes the waiting job
// and the first job commits checkpoints again.
func TestFullDataDisk(t *testing.T) {
	data := tmpfsDataDir(t)
	c := newTestCluster(t)
	c.load = func() float64 { return 0.25 }
	c.raftConfig = func(rc *raft.Config) {
		rc.Params.Switches.P1 = false
		rc.Params.FixedInterval = time.Second
	}
	cfg := c.config("solo")
	cfg.DataDir = data
	cfg.GPUs = []string{"RTX-4090:24GiB:8.9:x2"}
	cfg.CacheSize = Size(48 << 20)
	n := c.start(cfg)
	wait.For(t, 30*time.Second, "a leader", func() bool { return n.agent.coord.IsLeader() })
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "job.sh"), []byte(fullDiskJob), 0o755); err != nil {
		t.Fatal(err)
	}
	submit(t, n, localapi.JobRequest{Name: "big", Command: []string{"./job.sh"}, GPUs: 1, Workdir: src})
	jobInfo := func(id string) localapi.JobInfo {
		j, _ := findJob(call(t, n, localapi.Request{Op: localapi.OpJobs}).Jobs, id)
		return j
	}
	wait.For(t, 60*time.Second, "two checkpoints of job big", func() bool { return jobInfo("big").LastVersion >= 2 })

	// Fill the disk but for 5 MiB: the job's 3 MiB fit, the store's copy
	// of them does not.
	ballast := fill(t, data, 5<<20)
	mgr := n.agent.Jobs()
	var lastErr string
	wait.For(t, 30*time.Second, "a checkpoint of job big failing on the full disk", func() bool {
		for _, v := range mgr.View() {
			if v.Job == "big" {
				lastErr = strings.ToLower(v.LastError)
			}
		}
		return strings.Contains(lastErr, "disk full") || strings.Contains(lastErr, "no space left on device")
	})
	t.Logf("the job's checkpoint on the full disk: %s", lastErr)
	wait.For(t, 30*time.Second, "the leader finding the node ineligible", func() bool {
		return slices.ContainsFunc(n.agent.coord.State().Decisions.Ineligible, func(v policy.NodeVerdict) bool {
			return v.Node == "solo" && strings.Contains(v.Reason, "data directory full")
		})
	})

	// Nothing committed is lost: every version the catalogue records
	// (committed to this node's store: it has no other) that the store
	// keeps restores with the bytes the job hashed.
	st := n.agent.coord.State()
	var committed []uint64
	for _, cp := range st.Checkpoints["big"] {
		if slices.Contains(n.agent.jobs.store.Versions("big"), cp.Version) {
			committed = append(committed, cp.Version)
		}
	}
	if len(committed) == 0 || committed[len(committed)-1] != st.Checkpoints["big"][len(st.Checkpoints["big"])-1].Version {
		t.Fatalf("the store holds versions %v of job big, want the catalogue's newest among them (catalogue %+v)", committed, st.Checkpoints["big"])
	}
	for _, v := range committed {
		verifyBlob(t, n.agent.jobs.store, "big", v)
	}

	// A bundle that does not fit: a clear answer, no job, no pin.
	bigSrc := t.TempDir()
	blob := make([]byte, 8<<20)
	rand.Read(blob)
	if err := os.WriteFile(filepath.Join(bigSrc, "data.bin"), blob, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bigSrc, "job.sh"), []byte(fullDiskJob), 0o755); err != nil {
		t.Fatal(err)
	}
	resp := call(t, n, localapi.Request{Op: localapi.OpRun, Job: &localapi.JobRequest{Name: "nofit", Command: []string{"./job.sh"}, GPUs: 1,
		Workdir: bigSrc, LossBudget: time.Hour}})
	if resp.Kind != localapi.KindDiskFull || !strings.Contains(resp.Error, "cannot hold the bundle") || !strings.Contains(resp.Error, "disk full") {
		t.Errorf("run with a bundle that does not fit: kind %q, %q; want %q saying the data directory cannot hold it", resp.Kind, resp.Error, localapi.KindDiskFull)
	}
	if _, ok := n.agent.coord.State().Jobs["nofit"]; ok {
		t.Errorf("job nofit was submitted although its bundle could not be stored")
	}

	// A job submitted now waits: the only node is not eligible.
	waiter := c.writeScript("wait.sh", "#!/bin/sh\ntouch \"$RECLAIMNET_READY_FILE\"\nwhile :; do sleep 0.1; done\n")
	submit(t, n, localapi.JobRequest{Name: "waiter", Command: []string{"/bin/sh", waiter}, GPUs: 1})
	wait.For(t, 30*time.Second, "job waiter pending because the data directory is full", func() bool {
		j := jobInfo("waiter")
		return j.State == "pending" && strings.Contains(j.Reason, "data directory full")
	})
	before := jobInfo("big").LastVersion

	// The space comes back.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 60*time.Second, "the node eligible, job waiter placed and job big committing again", func() bool {
		return len(n.agent.coord.State().Decisions.Ineligible) == 0 && jobInfo("waiter").State == "running" && jobInfo("big").LastVersion > before
	})
	verifyBlob(t, n.agent.jobs.store, "big", jobInfo("big").LastVersion)
	if j := n.agent.coord.State().Jobs["big"]; j.State != policy.JobRunning || j.Restarts != 0 {
		t.Errorf("job big: state %v, %d restarts; want it running through the full disk", j.State, j.Restarts)
	}
}

// TestFullStandbyDisk runs a bundled job on one of two GPU nodes whose data
// directories are 160 MiB tmpfs mounts and fills its standby's: the leader
// makes the standby ineligible (docs/design.md P2.3) and the job, running
// on, sends its checkpoints there no more (a push that reached the full
// disk first failed with "receiver disk full"); the versions committed
// before (on the host and the standby) still restore exactly. With the
// space back the standby takes the job's checkpoints again.
func TestFullStandbyDisk(t *testing.T) {
	disks := map[string]string{"node-01": tmpfsDataDir(t), "node-02": tmpfsDataDir(t)}
	c := newTestCluster(t)
	c.load = func() float64 { return 0.25 }
	c.raftConfig = func(rc *raft.Config) {
		rc.Params.Switches.P1 = false
		rc.Params.FixedInterval = time.Second
	}
	byName := map[string]*testNode{}
	for _, name := range []string{"node-00", "node-01", "node-02"} {
		cfg := c.config(name)
		if d, ok := disks[name]; ok {
			cfg.DataDir = d
			cfg.GPUs = []string{"RTX-4090:24GiB:8.9:x1"}
			cfg.CacheSize = Size(48 << 20)
		}
		byName[name] = c.start(cfg)
	}
	c.waitConfig(3, 3, 60*time.Second)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "job.sh"), []byte(fullDiskJob), 0o755); err != nil {
		t.Fatal(err)
	}
	submitter := byName["node-00"] // no GPU: the job runs on node-01 or node-02
	submit(t, submitter, localapi.JobRequest{Name: "big", Command: []string{"./job.sh"}, GPUs: 1, Workdir: src})
	jobInfo := func() localapi.JobInfo {
		j, _ := findJob(call(t, submitter, localapi.Request{Op: localapi.OpJobs}).Jobs, "big")
		return j
	}
	var info localapi.JobInfo
	wait.For(t, 90*time.Second, "job big running with a version committed on its standby", func() bool {
		info = jobInfo()
		return info.State == "running" && info.Standby != "" && info.LastCommitted > 0 && slices.Contains(info.Holders, info.Standby)
	})
	host, standby := byName[info.Node], byName[info.Standby]
	committed := info.LastCommitted

	ballast := fill(t, disks[info.Standby], 1<<20)
	wait.For(t, 30*time.Second, "the leader finding the standby ineligible and the job without it", func() bool {
		st := submitter.agent.coord.State()
		for _, jd := range st.Decisions.Jobs {
			if jd.Job == "big" && jd.Standby == policy.NodeID(info.Standby) {
				return false
			}
		}
		return slices.ContainsFunc(st.Decisions.Ineligible, func(v policy.NodeVerdict) bool {
			return v.Node == policy.NodeID(info.Standby) && strings.Contains(v.Reason, "data directory full")
		})
	})
	time.Sleep(3 * time.Second) // a few checkpoint intervals: every push there would fail
	for _, tv := range host.agent.Jobs().TransfersSince(time.Time{}) {
		if tv.To == policy.NodeID(info.Standby) && tv.Err != "" && !strings.Contains(tv.Err, "receiver disk full") {
			t.Errorf("push of v%d to the full standby failed unclearly: %s", tv.Version, tv.Err)
		}
	}
	cp, ok := submitter.agent.coord.State().CheckpointVersion("big", committed)
	if !ok || !cp.Committed || !slices.Contains(cp.Holders, policy.NodeID(info.Standby)) {
		t.Fatalf("v%d in the catalogue: %+v (%v), want it still committed on the standby %s", committed, cp, ok, info.Standby)
	}
	verifyBlob(t, standby.agent.jobs.store, "big", committed)
	verifyBlob(t, host.agent.jobs.store, "big", committed)

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 60*time.Second, "a newer version committed on the standby once it has room", func() bool {
		j := jobInfo()
		return j.LastCommitted > committed && slices.Contains(j.Holders, info.Standby)
	})
	if j := submitter.agent.coord.State().Jobs["big"]; j.State != policy.JobRunning || j.Restarts != 0 || j.Node != policy.NodeID(info.Node) {
		t.Errorf("job big: state %v on %s, %d restarts; want it running on %s throughout", j.State, j.Node, j.Restarts, info.Node)
	}
}

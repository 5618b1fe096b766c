package jobs

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// bundleJob is a bundle's entry point: it reads its input from the bundle
// (relative to its working directory), says where it ran, then runs the
// step job kept beside it.
const bundleJob = `#!/bin/sh
echo "$(cat input.txt) $(pwd) $(ls big.log 2>/dev/null || echo no-log)" >> "$INPUTLOG"
exec /bin/sh ./step.sh
`

// A job's bundle, stored on a node that never runs it and removed from
// disk there, reaches the node that runs it and the job's standby, is laid
// out as the job's working directory (the ignored file left out), and the
// job resumes from it on the standby after a scheduled hand-off.
func TestBundleTravelsWithJob(t *testing.T) {
	tc := newCluster(t, []int{0, 1, 1}, fastSupervisor())
	tc.waitVoters(3)
	src := t.TempDir()
	for name, body := range map[string]string{"job.sh": bundleJob, "step.sh": stepJob, "input.txt": "hello-bundle\n",
		ckpt.IgnoreFile: "*.log\n", "big.log": "left out\n"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// n00 has no GPU: the submitting node is never the one that runs it.
	b, err := tc.nodes["n00"].store.AddBundle(src, ckpt.BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(src); err != nil {
		t.Fatal(err)
	}
	inputLog := filepath.Join(t.TempDir(), "input.log")
	tc.submitSpec("train", state.JobSpec{Command: []string{"./job.sh"}, Env: []string{"STEPLOG=" + tc.stepLog, "INPUTLOG=" + inputLog},
		Bundle: b.ID.String(), BundleSize: b.Size})
	host := tc.waitRunning("train", "")
	other := policy.NodeID("n01")
	if host == other {
		other = "n02"
	}
	layout := filepath.Join(tc.nodes[host].work, "train", "bundle")
	lines := waitLines(t, inputLog, 1)
	if want := "hello-bundle " + layout + " no-log"; lines[0] != want {
		t.Fatalf("job on %s said %q, want %q (input from the bundle, cwd its layout, the ignored file absent)", host, lines[0], want)
	}
	if err := tc.nodes[host].store.VerifyLayout(b.ID, layout); err != nil {
		t.Fatalf("layout on %s: %v", host, err)
	}
	// The standby gets the bundle with the checkpoints, before any hand-off.
	wait.For(t, 30*time.Second, "the bundle on the standby "+string(other), func() bool {
		return tc.nodes[other].store.HasBundle(b.ID) == nil
	})
	cp := tc.waitCommitted("train", 1)
	if !slices.Contains(cp.Holders, other) {
		t.Fatalf("committed v%d held by %v, want the standby %s among them", cp.Version, cp.Holders, other)
	}
	if pins := tc.nodes[other].store.Pins(ckpt.BundleKey(b.ID)); len(pins) != 1 || pins[0].Name != "train" || !pins[0].Until.IsZero() {
		t.Errorf("standby's pins on the bundle %+v, want one without expiry named train", pins)
	}

	now := time.Now()
	tc.submitVia(host, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: host, Announced: now, Deadline: now.Add(15 * time.Second)}})
	if dest := tc.waitRunning("train", host); dest != other {
		t.Fatalf("job moved to %s, want the standby %s", dest, other)
	}
	lines = waitLines(t, inputLog, 2)
	if want := "hello-bundle " + filepath.Join(tc.nodes[other].work, "train", "bundle") + " no-log"; lines[1] != want {
		t.Fatalf("job after the hand-off said %q, want %q", lines[1], want)
	}
	if s := starts(readSteps(t, tc.stepLog)); len(s) != 2 || s[1].step == 0 {
		t.Errorf("starts %+v: want two, the second resuming from a checkpoint", s)
	}

	// Done: every node's pin on the bundle goes.
	tc.submit(state.CancelJob{Job: "train"})
	wait.For(t, 20*time.Second, "no pin on the bundle after the job ended", func() bool {
		for _, n := range tc.nodes {
			if len(n.store.Pins(ckpt.BundleKey(b.ID))) > 0 {
				return false
			}
		}
		return true
	})
}

// A job whose bundle no node holds is placed but never started: it waits
// for the bundle (state fetching); a bundle nobody uses is refused.
func TestJobWithoutItsBundleNeverStarts(t *testing.T) {
	tc := newCluster(t, []int{0, 1, 1}, fastSupervisor())
	tc.waitVoters(3)
	missing := ckpt.BundleID{1, 2, 3}
	tc.submitSpec("train", state.JobSpec{Command: []string{"/bin/sh", tc.script}, Env: []string{"STEPLOG=" + tc.stepLog},
		Bundle: missing.String(), BundleSize: 10})
	host := tc.waitRunning("train", "")
	wait.For(t, 10*time.Second, "the worker waiting for its bundle", func() bool {
		for _, v := range tc.nodes[host].mgr.View() {
			if v.Job == "train" && v.State == StateFetching {
				return true
			}
		}
		return false
	})
	time.Sleep(2 * time.Second)
	if evs := readSteps(t, tc.stepLog); len(evs) > 0 {
		t.Fatalf("the job ran without its bundle: %+v", evs)
	}
	hooks := tc.nodes[host].mgr.TransferHooks()
	if err := hooks.Authorize("n00", policy.ClassPresync, &ckpt.Manifest{JobID: ckpt.BundleKey(missing), Version: 1}); err != nil {
		t.Errorf("a bundle a running job uses refused: %v", err)
	}
	if err := hooks.Authorize("n00", policy.ClassPresync, &ckpt.Manifest{JobID: ckpt.BundleKey(ckpt.BundleID{9}), Version: 1}); err == nil {
		t.Error("a bundle no job uses accepted")
	}
}

// BundleCommand makes a program of the bundle absolute in the layout and
// leaves host programs alone.
func TestBundleCommand(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"./train.sh", "-x"}, []string{"/l/train.sh", "-x"}},
		{[]string{"./sub/run", "./arg"}, []string{"/l/sub/run", "./arg"}},
		{[]string{"python3", "train.py"}, []string{"python3", "train.py"}},
		{[]string{"/usr/bin/env"}, []string{"/usr/bin/env"}},
	} {
		if got := BundleCommand(c.in, "/l"); !slices.Equal(got, c.want) {
			t.Errorf("BundleCommand(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// waitLines waits until the file has at least n complete lines.
func waitLines(t *testing.T, path string, n int) []string {
	t.Helper()
	var lines []string
	wait.For(t, 30*time.Second, "line "+string(rune('0'+n))+" of "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		lines = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		return strings.HasSuffix(string(b), "\n") && len(lines) >= n
	})
	return lines
}

// outputsJob counts steps like stepJob and writes one line per step to its
// output directory; after a restart it finishes at step $STOPAT with a
// result file and exits 0. After the final checkpoint of a hand-off it
// pauses, so that checkpoint and outputs agree.
const outputsJob = `#!/bin/sh
step=0
if [ -n "$RECLAIMNET_RESTORE_DIR" ]; then step=$(cat "$RECLAIMNET_RESTORE_DIR/step"); fi
echo "$$ start $step $RECLAIMNET_RESTART_COUNT" >> "$STEPLOG"
ck=0
paused=
trap 'ck=1' USR1
trap 'exit 0' TERM
touch "$RECLAIMNET_READY_FILE"
while :; do
  if [ "$ck" = 1 ]; then
    ck=0
    echo "$step" > "$RECLAIMNET_CKPT_DIR/step"
    touch "$RECLAIMNET_CKPT_DIR/.complete"
    echo "$$ ckpt $step" >> "$STEPLOG"
    if [ -s "$RECLAIMNET_DEADLINE_FILE" ]; then paused=1; fi
  fi
  if [ -z "$paused" ]; then
    step=$((step+1))
    echo "line $step" >> "$RECLAIMNET_OUTPUT_DIR/lines.txt"
    if [ "$RECLAIMNET_RESTART_COUNT" -ge 1 ] && [ "$step" -ge "$STOPAT" ]; then
      echo "result $step" > "$RECLAIMNET_OUTPUT_DIR/result.txt"
      exit 0
    fi
  fi
  sleep 0.05
done
`

// What a job writes to RECLAIMNET_OUTPUT_DIR moves with its checkpoints:
// after a hand-off it resumes with the outputs of the version it resumes
// from (no line lost or repeated), its last outputs are stored and sent to
// the standby when it exits 0, every holder keeps them for the job's Keep
// from that version's writing, and then purges them.
func TestOutputsMoveWithTheJobAndAreKept(t *testing.T) {
	// Four nodes: after the hand-off the job still has a standby.
	tc := newCluster(t, []int{0, 1, 1, 1}, fastSupervisor())
	tc.waitVoters(3)
	script := filepath.Join(t.TempDir(), "out.sh")
	if err := os.WriteFile(script, []byte(outputsJob), 0o755); err != nil {
		t.Fatal(err)
	}
	const keep = 3 * time.Second
	tc.submitSpec("train", state.JobSpec{Command: []string{"/bin/sh", script}, Env: []string{"STEPLOG=" + tc.stepLog, "STOPAT=400"}, Keep: keep})
	host := tc.waitRunning("train", "")
	tc.waitCommitted("train", 2)
	now := time.Now()
	tc.submitVia(host, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: host, Announced: now, Deadline: now.Add(15 * time.Second)}})
	dest := tc.waitRunning("train", host)
	var cp state.Checkpoint
	var until time.Time
	wait.For(t, 60*time.Second, "the job done, its results listed", func() bool {
		var ok bool
		cp, until, ok = tc.state().Results("train")
		return ok
	})
	if s := starts(readSteps(t, tc.stepLog)); len(s) != 2 || s[1].step == 0 {
		t.Fatalf("starts %+v: want two, the second resuming from the hand-off's checkpoint", s)
	}
	if !slices.Contains(cp.Holders, dest) || len(cp.Holders) < 2 {
		t.Errorf("last version v%d held by %v, want %s and the standby", cp.Version, cp.Holders, dest)
	}
	if want := cp.Written.Add(keep); !until.Equal(want) {
		t.Errorf("kept until %v, want the version's writing %v + keep", until, cp.Written)
	}
	var lines []string
	for i := 1; i <= 400; i++ {
		lines = append(lines, "line "+strconv.Itoa(i))
	}
	wantLines := strings.Join(lines, "\n") + "\n"
	for _, h := range cp.Holders {
		s := tc.nodes[h].store
		wait.For(t, 10*time.Second, "the results retained on "+string(h), func() bool {
			return slices.ContainsFunc(s.Pins("train"), func(p ckpt.Pin) bool { return p.Name == ckpt.RetainPin && p.Until.Equal(until) })
		})
		mf, err := s.Manifest("train", cp.Version)
		if err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		out, ck := t.TempDir(), t.TempDir()
		if err := s.RestoreCheckpoint(mf, ck, out); err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		if b, _ := os.ReadFile(filepath.Join(out, "lines.txt")); string(b) != wantLines {
			t.Errorf("%s: outputs' lines.txt has %d bytes, want lines 1 to 400 once each (%d bytes)", h, len(b), len(wantLines))
		}
		if b, _ := os.ReadFile(filepath.Join(out, "result.txt")); string(b) != "result 400\n" {
			t.Errorf("%s: result.txt %q", h, b)
		}
		if b, err := os.ReadFile(filepath.Join(ck, "step")); err != nil || len(b) == 0 {
			t.Errorf("%s: the kept version lacks the last checkpoint's files: %v", h, err)
		}
	}
	for _, h := range cp.Holders {
		s := tc.nodes[h].store
		wait.For(t, 20*time.Second, "the results purged on "+string(h)+" after the keep time", func() bool {
			_, purged := s.Purged("train")
			return purged && len(s.Versions("train")) == 0
		})
	}
	if time.Now().Before(until) {
		t.Errorf("purged before %v", until)
	}
}

// A first placement's bundle copy is a decided flow (policy.BundlePrefix):
// the leader paces it from the node holding the bundle to the job's node
// within P3's ceilings, the holder's transfer carries that flow at the
// decided rate and is not faster than its ceiling allows, the job starts
// from the bundle once it landed, and the flow then ends.
func TestFirstPlacementBundleIsPaced(t *testing.T) {
	// Only n01 has a GPU: the job runs there, and has no standby.
	tc := newCluster(t, []int{0, 1, 0}, fastSupervisor())
	tc.gossip.mu.Lock()
	tc.gossip.access = 4e6 // 32 Mbit/s: 8 MiB take seconds at P3's share
	tc.gossip.mu.Unlock()
	tc.waitVoters(3)
	src := t.TempDir()
	data := make([]byte, 8<<20)
	rand.Read(data) // incompressible: the wire carries every byte
	for name, body := range map[string][]byte{"job.sh": []byte(stepJob), "data.bin": data} {
		if err := os.WriteFile(filepath.Join(src, name), body, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	holder := tc.nodes["n00"] // no GPU: the job runs on n01
	b, err := holder.store.AddBundle(src, ckpt.BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tc.submitSpec("train", state.JobSpec{Command: []string{"./job.sh"}, Env: []string{"STEPLOG=" + tc.stepLog},
		Bundle: b.ID.String(), BundleSize: b.Size, BundleFrom: "n00"})

	flowID := policy.BundlePrefix + "train"
	since := time.Now()
	var maxCeiling float64
	var decided bool
	var first, done time.Time
	var rates []float64
	wait.For(t, 60*time.Second, "the bundle's paced copy done", func() bool {
		if f, ok := tc.state().Flow(flowID); ok {
			if f.From != "n00" || f.To != "n01" || f.Class != policy.ClassMigration || f.Rate <= 0 || f.Ceiling < f.Rate {
				t.Fatalf("bundle flow %+v, want n00 → n01, migration, paced with a ceiling", f)
			}
			decided = true
			maxCeiling = max(maxCeiling, f.Ceiling)
		}
		for _, tv := range holder.mgr.TransfersSince(since) {
			if tv.Flow != flowID {
				continue
			}
			if first.IsZero() {
				first = time.Now()
			}
			rates = append(rates, tv.AssignedRate)
			if tv.Err != "" {
				t.Fatalf("bundle copy failed: %s", tv.Err)
			}
			if tv.Done {
				done = time.Now()
				return true
			}
		}
		return false
	})
	if !decided {
		t.Fatal("the copy ran without a decided bundle flow")
	}
	for _, r := range rates {
		if r <= 0 || r > maxCeiling {
			t.Fatalf("the copy's assigned rates %v: want each a decided rate, within the ceiling %g", rates, maxCeiling)
		}
	}
	// P3 charged the flow at its ceiling: the copy takes at least the
	// bundle's bytes at 1.5 × that (a generous bound for the pacing).
	took, least := done.Sub(first), time.Duration(float64(b.Size)/(1.5*maxCeiling)*float64(time.Second))
	t.Logf("%d bytes in %v at ceilings up to %g B/s (rates %v)", b.Size, took, maxCeiling, slices.Compact(rates))
	if took < least {
		t.Errorf("the %d-byte copy took %v, under the %v the flow's ceiling %g B/s allows", b.Size, took, least, maxCeiling)
	}
	wait.For(t, 30*time.Second, "the job started from its bundle and the flow ended", func() bool {
		_, ok := tc.state().Flow(flowID)
		return !ok && len(starts(readSteps(t, tc.stepLog))) == 1
	})
	if err := tc.nodes["n01"].store.VerifyLayout(b.ID, filepath.Join(tc.nodes["n01"].work, "train", "bundle")); err != nil {
		t.Errorf("layout on n01: %v", err)
	}
}

package jobs

import (
	"crypto/rand"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
	"github.com/reclaimnet/reclaimnet/transfer"
)

// growJob is a POSIX sh job whose state grows by one incompressible
// growBlock-byte block per checkpoint (blocks are never rewritten), so a
// version's delta over the one before it is that block and a small step
// file. With BASE set its state starts with BASE incompressible bytes. It
// keeps its state under $STATE/PID, restores it from the restore
// directory, logs like stepJob and keeps stepping after every checkpoint.
const growJob = `#!/bin/sh
s="$STATE/$$"
mkdir -p "$s"
step=0
if [ -n "$RECLAIMNET_RESTORE_DIR" ]; then cp "$RECLAIMNET_RESTORE_DIR"/* "$s"/; step=$(cat "$s/step");
elif [ -n "$BASE" ]; then head -c "$BASE" /dev/urandom > "$s/base"; fi
echo "$$ start $step $RECLAIMNET_RESTART_COUNT" >> "$STEPLOG"
ck=0
n=0
trap 'ck=1' USR1
trap 'echo "$$ term $step" >> "$STEPLOG"; exit 0' TERM
touch "$RECLAIMNET_READY_FILE"
while :; do
  if [ "$ck" = 1 ]; then
    ck=0
    n=$((n+1))
    head -c 262144 /dev/urandom > "$s/block.$$.$n"
    echo "$step" > "$s/step"
    cp "$s"/* "$RECLAIMNET_CKPT_DIR"/
    touch "$RECLAIMNET_CKPT_DIR/.complete"
    echo "$$ ckpt $step" >> "$STEPLOG"
  fi
  step=$((step+1)); echo "$$ step $step" >> "$STEPLOG"
  sleep 0.05
done
`

// growBlock is growJob's block size.
const growBlock = 256 << 10

// TestHandoffWaitKeepsDestinationFresh: while a hand-off waits for its
// final checkpoint's latest safe start (docs/design.md P3.8b), the job
// keeps checkpointing and every new committed version is pushed to the
// hand-off's destination as a delta, so the destination receives several
// versions during the notice and the final transfer moves only the last
// delta (one block), not what accumulated since the reclaim was announced.
func TestHandoffWaitKeepsDestinationFresh(t *testing.T) {
	tc := newCluster(t, []int{0, 1, 1}, fastSupervisor())
	tc.waitVoters(3)
	script := filepath.Join(t.TempDir(), "grow.sh")
	if err := os.WriteFile(script, []byte(growJob), 0o755); err != nil {
		t.Fatal(err)
	}
	tc.submitCommand("train", []string{"/bin/sh", script}, []string{"STEPLOG=" + tc.stepLog, "STATE=" + t.TempDir()})
	host := tc.waitRunning("train", "")
	// From v3 on, a version's new block is at most a third of it: the
	// versions share enough for checkpoints in the wait to pay.
	tc.waitCommitted("train", 3)

	announced := time.Now()
	const notice = 30 * time.Second
	tc.submitVia(host, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: host, Announced: announced, Deadline: announced.Add(notice)}})
	var h policy.HandoffDecision
	wait.For(t, 10*time.Second, "the admitted hand-off with its final checkpoint's start", func() bool {
		var ok bool
		h, ok = handoffFrom(tc.state(), "train", host)
		return ok && h.Admitted() && h.FinalCheckpoint && !h.FinalStart.IsZero()
	})
	dest := h.To
	// What the destination held of the job when the reclaim was announced.
	held := map[uint64]bool{}
	for _, v := range tc.nodes[dest].store.Versions("train") {
		held[v] = true
	}
	if wait := h.FinalStart.Sub(announced); wait < 5*testInterval {
		t.Fatalf("final checkpoint's start %v into the %v notice: too soon for checkpoints in the wait", wait, notice)
	}
	// The Tr the source reports (its checkpoints' write time is in it)
	// until the move, for the limit below.
	var maxTr time.Duration
	var moved policy.NodeID
	wait.For(t, notice+10*time.Second, "the job running on its destination", func() bool {
		j := tc.state().Jobs["train"]
		if j.Node == host {
			maxTr = max(maxTr, j.RestartTime)
		}
		moved = j.Node
		return j.State == policy.JobRunning && j.Node != host
	})
	if moved != dest {
		t.Fatalf("job moved to %s, the hand-off's destination was %s", moved, dest)
	}
	var final state.JobOutcome
	wait.For(t, 20*time.Second, "the move's version in the history", func() bool {
		final = tc.outcome(host, "train")
		return final.Version > 0
	})

	// The destination received versions made during the wait, before the
	// final one.
	var during []uint64
	for _, v := range tc.nodes[dest].store.Versions("train") {
		if !held[v] && v < final.Version {
			during = append(during, v)
		}
	}
	if len(during) < 2 {
		t.Errorf("destination %s received %v during the wait (final v%d, held before %v): want more than one version before the final one",
			dest, during, final.Version, held)
	}
	// Each went as a pre-sync to the destination, at the rate P3 gave the
	// hand-off (its reservation, docs/design.md P3.8c), not to another node.
	var finalPush *TransferView
	sent := tc.nodes[host].mgr.TransfersSince(announced)
	for i, tv := range sent {
		switch {
		case tv.Job != "train":
		case tv.Class == policy.ClassMigration:
			if tv.Version == final.Version {
				finalPush = &sent[i]
			}
		case tv.To != dest:
			t.Errorf("pre-sync of v%d during the wait went to %s, not the destination %s", tv.Version, tv.To, dest)
		case tv.AssignedRate <= 0 || tv.AssignedRate > h.FinalRate*2:
			t.Errorf("pre-sync of v%d during the wait paced at %.0f B/s, want the hand-off's %.0f B/s (within 2x: decisions drift)", tv.Version, tv.AssignedRate, h.FinalRate)
		}
	}
	if finalPush == nil {
		t.Fatalf("no final transfer of v%d among the source's transfers %+v", final.Version, sent)
	}
	// The final transfer sends the last delta: the final version's new
	// block (and its step file), out of a checkpoint of many blocks.
	t.Logf("final start %v into the %v notice; the destination received %d versions during the wait; the final transfer of v%d sent %d of %d bytes; limit %v",
		h.FinalStart.Sub(announced).Round(time.Millisecond), notice, len(during), final.Version, finalPush.BytesDone, finalPush.BytesTotal, final.Limit)
	if finalPush.BytesTotal < int64(len(during)+2)*growBlock {
		t.Errorf("final version of %d bytes: want the blocks of every checkpoint (≥ %d)", finalPush.BytesTotal, (len(during)+2)*growBlock)
	}
	if finalPush.BytesDone < growBlock || finalPush.BytesDone > 2*growBlock {
		t.Errorf("final transfer sent %d bytes of %d: want the last delta, one %d-byte block and the step file", finalPush.BytesDone, finalPush.BytesTotal, growBlock)
	}
	// The move's downtime limit (design P3.8d) counts what the destination
	// lacked at the final checkpoint, the delta, at the path's rate (within
	// 2x of the first decision's), plus Tr and one control period.
	if most := policy.DowntimeLimit(finalPush.BytesDone, h.FinalRate/2, maxTr, policy.ControlPeriod); final.Limit <= 0 || final.Limit > most {
		t.Errorf("move's limit %v, want at most %v: the final delta of %d bytes, not the version's %d, at the path's rate, + Tr ≤ %v + one period",
			final.Limit, most, finalPush.BytesDone, finalPush.BytesTotal, maxTr)
	}
	// And the job resumed at the step its final checkpoint holds.
	var evs []stepEvent
	wait.For(t, 30*time.Second, "the job's start at the destination", func() bool {
		evs = readSteps(t, tc.stepLog)
		return len(starts(evs)) >= 2
	})
	s := starts(evs)
	if len(s) != 2 {
		t.Fatalf("job started %d times, want twice: %+v", len(s), s)
	}
	last := -1
	for _, e := range evs {
		if e.pid == s[0].pid && e.kind == "ckpt" {
			last = e.step
		}
	}
	if s[1].step != last {
		t.Errorf("destination started at step %d; the source's last checkpoint holds %d", s[1].step, last)
	}
}

// TestHandoffWaitMovesFinalStartLater: the host reports what its pre-sync
// target holds (state.JobReport.Presync), so the leader times a hand-off's
// final checkpoint on the bytes its destination lacks (docs/design.md
// P3.8b). The destination here holds nothing when the reclaim comes: the
// first decision counts the whole checkpoint; once the wait's pre-syncs
// land there the destination becomes the standby with what it holds, the
// decided bytes fall to a delta and the final start moves later by about
// FinalSafety·(bytes saved)/rate. The
// job computes on the source until then, the hand-off lands before the
// deadline, and the final transfer sends only the last delta.
func TestHandoffWaitMovesFinalStartLater(t *testing.T) {
	// n02 has no GPU free until the reclaim: the job runs on n01 without
	// a standby (P1 is off, so no GPU-less node holds its copies), and
	// its hand-off goes to n02, which holds nothing of it.
	tc := newCluster(t, []int{0, 1, 1}, fastSupervisor())
	tc.gossip.mu.Lock()
	tc.gossip.access = 4e6 // 32 Mbit/s: the whole checkpoint takes seconds at P3's share
	tc.gossip.mu.Unlock()
	tc.gossip.setFree("n02", 0)
	tc.waitVoters(3)
	script := filepath.Join(t.TempDir(), "grow.sh")
	if err := os.WriteFile(script, []byte(growJob), 0o755); err != nil {
		t.Fatal(err)
	}
	const base = 6 << 20 // at P3's share on this path, about 3 s: twice the reported Tr's drift
	tc.submitCommand("train", []string{"/bin/sh", script},
		[]string{"STEPLOG=" + tc.stepLog, "STATE=" + t.TempDir(), fmt.Sprintf("BASE=%d", base)})
	host := tc.waitRunning("train", "")
	const dest = policy.NodeID("n02")
	if host != "n01" {
		t.Fatalf("job runs on %s, want n01 (n02 has no GPU free)", host)
	}
	// From v3 on a version's new block is a small share of it.
	wait.For(t, 30*time.Second, "three versions on the host", func() bool { return len(tc.nodes[host].store.Versions("train")) >= 3 })
	tc.gossip.setFree(dest, 1)

	announced := time.Now()
	const notice = 30 * time.Second
	deadline := announced.Add(notice)
	tc.submitVia(host, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: host, Announced: announced, Deadline: deadline}})
	// Each decision with the Tr on record beside it: the host's Tr
	// counts its slowest recent checkpoint, which drifts on a loaded
	// machine and moves the final start by FinalSafety times its change.
	var first policy.HandoffDecision
	var trFirst time.Duration
	wait.For(t, 10*time.Second, "the admitted hand-off with its final checkpoint's start", func() bool {
		st := tc.state()
		var ok bool
		first, ok = handoffFrom(st, "train", host)
		trFirst = st.Jobs["train"].RestartTime
		return ok && first.Admitted() && first.FinalCheckpoint && !first.FinalStart.IsZero()
	})
	if first.To != dest || first.Bytes < base {
		t.Fatalf("first hand-off decision to %s for %d bytes: want %s for the whole checkpoint (≥ %d)", first.To, first.Bytes, dest, base)
	}
	// Once pre-syncs land at dest, the leader's decision counts a delta.
	var late policy.HandoffDecision
	var lateHas int64
	var trLate time.Duration
	wait.For(t, notice, "a hand-off decision for a delta, timed later", func() bool {
		st := tc.state()
		h, ok := handoffFrom(st, "train", host)
		if j := st.Jobs["train"]; ok && h.Admitted() && j.Standby == dest && h.Bytes <= 3*growBlock {
			late, lateHas, trLate = h, j.StandbyHas, j.RestartTime
			return true
		}
		return st.Jobs["train"].Node != host
	})
	if late.FinalStart.IsZero() {
		t.Fatalf("no hand-off decision counted the destination's copy before the move (first: %d bytes)", first.Bytes)
	}
	if late.To != dest || !late.Deadline.Equal(first.Deadline) || lateHas <= 0 {
		t.Fatalf("later decision %+v (standby has %d): want the same hand-off to %s", late, lateHas, dest)
	}
	// Later by FinalSafety·(bytes saved)/rate, less FinalSafety times
	// the growth of Tr: at least half that, since the rate and Tr may
	// change between a decision and the read beside it.
	rate := max(first.FinalRate, late.FinalRate)
	want := time.Duration(float64(policy.FinalSafety) * float64(first.Bytes-late.Bytes) / rate * float64(time.Second))
	got := late.FinalStart.Sub(first.FinalStart) + policy.FinalSafety*(trLate-trFirst)
	t.Logf("first decision: %d bytes at %.0f B/s, Tr %v, final start %v into the notice; later: %d bytes at %.0f B/s, Tr %v, final start %v (%v later at the same Tr; FinalSafety·saved/rate %v)",
		first.Bytes, first.FinalRate, trFirst, first.FinalStart.Sub(announced).Round(time.Millisecond), late.Bytes, late.FinalRate, trLate,
		late.FinalStart.Sub(announced).Round(time.Millisecond), got.Round(time.Millisecond), want.Round(time.Millisecond))
	if got < want/2 {
		t.Errorf("final start moved %v later at the same Tr, want about FinalSafety·(%d − %d)/%.0f = %v", got, first.Bytes, late.Bytes, rate, want)
	}

	wait.For(t, notice+10*time.Second, "the job running on its destination", func() bool {
		j := tc.state().Jobs["train"]
		return j.State == policy.JobRunning && j.Node != host
	})
	var out state.JobOutcome
	wait.For(t, 20*time.Second, "the move's version in the history", func() bool {
		out = tc.outcome(host, "train")
		return out.Version > 0 && !out.Resumed.IsZero()
	})
	if out.To != dest || !out.HandedOff || out.NoFinalCheckpoint {
		t.Fatalf("outcome %+v: want a hand-off to %s with its final checkpoint", out, dest)
	}
	// The job computed on the source past the first decision's start (by
	// FinalSafety·saved/rate less Tr's growth), and the hand-off landed
	// before the deadline.
	if out.Stopped.Before(first.FinalStart) {
		t.Errorf("job stopped %v into the notice, before the whole checkpoint's start %v",
			out.Stopped.Sub(announced).Round(time.Millisecond), first.FinalStart.Sub(announced).Round(time.Millisecond))
	}
	if out.At.After(deadline) || out.Resumed.After(deadline) {
		t.Errorf("moved %v, resumed %v into the %v notice: after the deadline", out.At.Sub(announced), out.Resumed.Sub(announced), notice)
	}
	var finalPush *TransferView
	sent := tc.nodes[host].mgr.TransfersSince(announced)
	for i, tv := range sent {
		if tv.Job == "train" && tv.Class == policy.ClassMigration && tv.Version == out.Version {
			finalPush = &sent[i]
		}
	}
	if finalPush == nil {
		t.Fatalf("no final transfer of v%d among the source's transfers %+v", out.Version, sent)
	}
	if finalPush.BytesTotal < base || finalPush.BytesDone > 2*growBlock {
		t.Errorf("final transfer sent %d of %d bytes: want the last delta (≤ %d) of a checkpoint of ≥ %d", finalPush.BytesDone, finalPush.BytesTotal, 2*growBlock, base)
	}
}

// TestFinalDelta: the delta a checkpoint now would send a node holding a
// version is what the newest version adds to it plus the largest recent
// change between versions, and the whole checkpoint without a measured
// change or when versions share little.
func TestFinalDelta(t *testing.T) {
	store, err := ckpt.Open(ckpt.Config{Root: t.TempDir(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	block := func(n int) []byte {
		b := make([]byte, n)
		rand.Read(b)
		return b
	}
	files := map[string][]byte{"base": block(4 * growBlock)}
	add := func(v uint64, name string, data []byte) {
		if name != "" {
			files[name] = data
		}
		addVersion(t, store, v, files)
	}
	const size = 1 << 30 // the record's size caps the delta
	add(1, "", nil)
	if got := finalDelta(store, "job", 1, size); got != size {
		t.Errorf("one version: delta %d, want the whole %d", got, size)
	}
	add(2, "b2", block(growBlock))
	add(3, "b3", block(2*growBlock))
	add(4, "b4", block(growBlock))
	near := func(got, want int64) bool { return got >= want && got <= want+growBlock/8 } // chunk boundaries
	if got := finalDelta(store, "job", 4, size); !near(got, 2*growBlock) {
		t.Errorf("holds the newest: delta %d, want the largest recent change %d", got, 2*growBlock)
	}
	if got := finalDelta(store, "job", 3, size); !near(got, 3*growBlock) {
		t.Errorf("holds v3: delta %d, want v4's new block + the largest change = %d", got, 3*growBlock)
	}
	if got := finalDelta(store, "job", 4, growBlock); got != growBlock {
		t.Errorf("delta %d above the record's size %d", got, growBlock)
	}
	if got := finalDelta(store, "job", 9, size); got != size {
		t.Errorf("a version not here: delta %d, want the whole %d", got, size)
	}
	// A version that rewrites most of the state: the whole checkpoint.
	files = map[string][]byte{"new": block(8 * growBlock)}
	add(5, "", nil)
	if got := finalDelta(store, "job", 5, size); got != size {
		t.Errorf("after a version that changed nearly all: delta %d, want the whole %d", got, size)
	}
}

// TestWaitCheckpoint: during a hand-off's wait a checkpoint is due at the
// last decided interval only while consecutive versions share most of
// their bytes and it and the push of a whole version at the hand-off's
// rate land before the final checkpoint's start, with policy.FinalSafety's
// slack on both.
func TestWaitCheckpoint(t *testing.T) {
	t0 := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	final := t0.Add(20 * time.Second)
	at := presyncTarget{to: "d", rate: 1e6, by: final} // 1 MB/s
	cases := []struct {
		name     string
		interval time.Duration
		busy     bool
		write    time.Duration
		size     int64
		changed  float64
		p        presyncTarget
		due      time.Time
		ok       bool
	}{
		// 5 s + 2·1 s write + 2·2 s push = 11 s < 20 s.
		{"due at the interval", 5 * time.Second, false, time.Second, 2e6, 0.1, at, t0.Add(5 * time.Second), true},
		// 10 + 2·1 + 2·4 = 20 s: not before the final start.
		{"push would reach the final start", 10 * time.Second, false, time.Second, 4e6, 0.1, at, time.Time{}, false},
		{"lands just before", 9 * time.Second, false, time.Second, 4e6, 0.1, at, t0.Add(9 * time.Second), true},
		{"versions share little", 5 * time.Second, false, time.Second, 2e6, 0.9, at, time.Time{}, false},
		{"no interval decided", 0, false, 0, 1, 0, at, time.Time{}, false},
		{"checkpoint in flight", time.Second, true, 0, 1, 0, at, time.Time{}, false},
		{"no destination", time.Second, false, 0, 1, 0, presyncTarget{}, time.Time{}, false},
		{"held at no rate", time.Second, false, 0, 1, 0, presyncTarget{to: "d", by: final}, time.Time{}, false},
		{"unpaced lands at once", 19 * time.Second, false, 0, 1 << 40, 0, presyncTarget{to: "d", rate: transfer.Unlimited, by: final}, t0.Add(19 * time.Second), true},
	}
	for _, c := range cases {
		due, ok := waitCheckpoint(c.interval, c.busy, t0, c.write, c.size, c.changed, c.p)
		if ok != c.ok || !due.Equal(c.due) {
			t.Errorf("%s: got %v %v, want %v %v", c.name, due, ok, c.due, c.ok)
		}
	}
}

// TestChangedShare: the new share of a version is the bytes of its chunks
// the newest older version lacks, on a real store.
func TestChangedShare(t *testing.T) {
	store, err := ckpt.Open(ckpt.Config{Root: t.TempDir(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	block := func() []byte {
		b := make([]byte, growBlock)
		rand.Read(b)
		return b
	}
	a, b, c := block(), block(), block()
	add := func(v uint64, files map[string][]byte) { addVersion(t, store, v, files) }
	add(1, map[string][]byte{"a": a})
	add(2, map[string][]byte{"a": a, "b": b}) // half new
	add(4, map[string][]byte{"a": a, "b": b}) // nothing new against v2
	add(5, map[string][]byte{"c": c})         // all new
	for _, tc := range []struct {
		v    uint64
		want float64
	}{{1, 1}, {2, 0.5}, {4, 0}, {5, 1}, {9, 1}} {
		if got := changedShare(store, "job", tc.v); math.Abs(got-tc.want) > 0.01 {
			t.Errorf("v%d: changed share %.3f, want %.2f", tc.v, got, tc.want)
		}
	}
}

// addVersion commits version v of job "job" to store with these files.
func addVersion(t *testing.T, store *ckpt.Store, v uint64, files map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.AddCheckpoint("job", v, dir, "", time.Now()); err != nil {
		t.Fatal(err)
	}
}

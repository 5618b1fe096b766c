package jobs

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// Flows 2 and 3: periodic checkpoints at the decided interval reach the
// standby, which records ReplicaComplete; then a scheduled reclaim hands the
// job off with a final checkpoint and no lost step.
func TestPeriodicCheckpointsThenScheduledHandoff(t *testing.T) {
	t.Parallel()
	tc, host := newClusterWithJob(t)
	other := policy.NodeID("n01")
	if host == other {
		other = "n02"
	}

	// (a) Periodic checkpoints reach the standby and are committed there.
	cp := tc.waitCommitted("train", 3)
	if !slices.Contains(cp.Holders, other) || !slices.Contains(cp.Holders, host) || cp.Source != host {
		t.Fatalf("freshest committed v%d: source %s holders %v, want source %s and holders {%s, %s}", cp.Version, cp.Source, cp.Holders, host, host, other)
	}
	mf, err := tc.nodes[other].store.Manifest("train", cp.Version)
	if err != nil {
		t.Fatalf("standby %s does not hold v%d: %v", other, cp.Version, err)
	}
	if got := mf.Hash().String(); got != cp.ManifestHash {
		t.Fatalf("standby's v%d manifest %s, catalogue says %s", cp.Version, got, cp.ManifestHash)
	}
	// Spacing of the host's checkpoints: the decided interval, not faster.
	var created []time.Time
	for _, v := range tc.nodes[host].store.Versions("train") {
		m, err := tc.nodes[host].store.Manifest("train", v)
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, m.Created)
	}
	for i := 1; i < len(created); i++ {
		if gap := created[i].Sub(created[i-1]); gap < testInterval*8/10 {
			t.Errorf("checkpoints %d and %d only %v apart, want about the decided interval %v", i, i+1, gap, testInterval)
		}
	}
	var jv JobView
	for _, v := range tc.nodes[host].mgr.View() {
		if v.Job == "train" {
			jv = v
		}
	}
	if jv.Interval != testInterval || jv.Checkpoints < 3 || jv.Standby != other || jv.LastCommitted < 1 {
		t.Fatalf("host view %+v: want interval %v, >= 3 checkpoints, standby %s, a committed version", jv, testInterval, other)
	}
	if len(jv.Transfers) == 0 || jv.Transfers[0].Class != policy.ClassPresync || jv.Transfers[0].To != other || jv.Transfers[0].LocalPort == 0 {
		t.Fatalf("host view transfers %+v: want a pre-sync transfer to %s with its source port", jv.Transfers, other)
	}
	// Paced at the decided rate: the pre-sync flow's, else the job's b_i.
	st := tc.state()
	want := presyncRate(st, jobDecision(st, "train"), "train", host, other)
	if got := jv.Transfers[0].AssignedRate; want <= 0 || got < want/2 || got > want*2 {
		t.Errorf("pre-sync assigned rate %.0f B/s, want the decided %.0f B/s (within 2x: decisions drift)", got, want)
	}
	if tr := jv.Transfers[0]; tr.Done && tr.Err == "" && tr.BytesTotal <= 0 {
		t.Errorf("finished transfer %+v reports no size", tr)
	}
	wait.For(t, 10*time.Second, "flow progress for an admitted pre-sync flow", func() bool {
		ids := map[string]bool{}
		for _, f := range tc.state().Decisions.Flows {
			ids[f.ID] = true
		}
		for _, p := range tc.nodes[host].mgr.FlowProgress() {
			if ids[p.ID] {
				return true
			}
		}
		return false
	})

	// (c) Scheduled reclaim of the host: hand-off with a final checkpoint,
	// taken at its latest safe start (docs/design.md P3.8): the job computes on the
	// source until then, and is down for a small part of the notice.
	now := time.Now()
	const notice = 60 * time.Second
	tc.submitVia(host, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: host, Announced: now, Deadline: now.Add(notice)}})
	var finalStart, stopped, restarted time.Time
	wait.For(t, notice+10*time.Second, "the hand-off's stop on the source and start on the destination", func() bool {
		if finalStart.IsZero() {
			if h, ok := handoffFrom(tc.state(), "train", host); ok && h.Admitted() {
				finalStart = h.FinalStart
			}
		}
		evs := readSteps(t, tc.stepLog)
		s := starts(evs)
		if stopped.IsZero() && len(s) > 0 && slices.ContainsFunc(evs, func(e stepEvent) bool { return e.pid == s[0].pid && e.kind == "term" }) {
			stopped = time.Now()
		}
		if restarted.IsZero() && len(s) > 1 {
			restarted = time.Now()
		}
		return !stopped.IsZero() && !restarted.IsZero()
	})
	if finalStart.IsZero() || stopped.Before(finalStart.Add(-time.Second)) {
		t.Errorf("source stopped %v into the notice, before the final checkpoint's start %v", stopped.Sub(now), finalStart.Sub(now))
	}
	if down := restarted.Sub(stopped); down > notice/2 {
		t.Errorf("downtime %v (stopped %v, restarted %v into the notice), want under half the %v notice", down, stopped.Sub(now), restarted.Sub(now), notice)
	}
	dest := tc.waitRunning("train", host)
	if dest != other {
		t.Fatalf("job moved to %s, want the standby %s", dest, other)
	}
	var newStart stepEvent
	wait.For(t, 30*time.Second, "the job's start at the destination", func() bool {
		s := starts(readSteps(t, tc.stepLog))
		if len(s) < 2 {
			return false
		}
		newStart = s[len(s)-1]
		return true
	})
	evs := readSteps(t, tc.stepLog)
	if s := starts(evs); len(s) != 2 {
		t.Errorf("job started %d times, want twice (source, then destination): %+v", len(s), s)
	}
	first := starts(evs)[0]
	lastCkpt, term := -1, -1
	for _, e := range evs {
		if e.pid != first.pid {
			continue
		}
		switch e.kind {
		case "ckpt":
			lastCkpt = e.step
		case "term":
			term = e.step
		}
	}
	if term < 0 || lastCkpt < 0 {
		t.Fatalf("source process: last checkpoint %d, stopped at %d: want both", lastCkpt, term)
	}
	if term != lastCkpt {
		t.Errorf("source stopped at step %d but its final checkpoint holds step %d: %d steps lost", term, lastCkpt, term-lastCkpt)
	}
	if newStart.step != lastCkpt || newStart.extra != "1" {
		t.Errorf("destination started at step %d (restart count %s), want step %d (restart count 1)", newStart.step, newStart.extra, lastCkpt)
	}
	j := tc.state().Jobs["train"]
	if j.Restarts != 1 || j.Node != other {
		t.Errorf("job record after the move: node %s restarts %d, want %s and 1", j.Node, j.Restarts, other)
	}
	wait.For(t, 20*time.Second, "the restart time reported by the destination", func() bool {
		return tc.state().Jobs["train"].RestartTime > 0
	})
	// The history's outcome of the move: its downtime, its limit and the
	// split (design P3.8d), consistent with what the steps showed.
	_, o := historyOutcome(t, tc, host, "train")
	if down := o.Resumed.Sub(o.Stopped); down <= 0 || down > notice/2 || o.Limit <= 0 || o.Restored.IsZero() || o.Restored.After(o.Resumed) || o.Stopped.Before(finalStart.Add(-time.Second)) {
		t.Errorf("hand-off outcome %+v (downtime %v): want stopped at the final start %v, restored, resumed, a limit, and down under half the notice",
			o, down, finalStart.Sub(now))
	}
}

// historyOutcome waits for the history's outcome of job's move off node
// with its first step on the new node, and returns it with its entry.
func historyOutcome(t *testing.T, tc *testCluster, node policy.NodeID, job policy.JobID) (state.ReclaimReport, state.JobOutcome) {
	t.Helper()
	var entry state.ReclaimReport
	var out state.JobOutcome
	wait.For(t, 20*time.Second, "the move's outcome with its start in the history", func() bool {
		for _, e := range tc.state().ReclaimReports {
			for _, o := range e.Jobs {
				if e.Node == node && o.Job == job && !o.Resumed.IsZero() {
					entry, out = e, o
					return true
				}
			}
		}
		return false
	})
	return entry, out
}

// Flow 4: the host dies; the job is placed on a node without the replica,
// the holder pushes the freshest committed version, and the job resumes from
// it (its step counter continues).
func TestEmergencyRecoveryFetchesFromHolder(t *testing.T) {
	t.Parallel()
	tc := newCluster(t, []int{0, 1, 1, 1}, fastSupervisor())
	tc.waitVoters(3)
	tc.submitJob("train")
	host := tc.waitRunning("train", "")
	cp := tc.waitCommitted("train", 2)
	var holder policy.NodeID
	for _, h := range cp.Holders {
		if h != host {
			holder = h
		}
	}
	// The holder has no free GPU now: the job must go to the third node,
	// which has no copy, so the holder has to push it there.
	tc.gossip.setFree(holder, 0)
	tc.crash(host)
	cpAtCrash, _ := tc.state().FreshestCommitted("train")
	dest := tc.waitRunning("train", host)
	if dest == holder {
		t.Fatalf("job placed on the holder %s, whose GPU is busy", dest)
	}
	want := stepOf(t, tc.nodes[holder].store, "train", cpAtCrash.Version)
	if want == 0 {
		t.Fatalf("committed v%d holds step 0; the test proves nothing", cpAtCrash.Version)
	}
	var st stepEvent
	wait.For(t, 40*time.Second, "the job's start after recovery", func() bool {
		s := starts(readSteps(t, tc.stepLog))
		st = s[len(s)-1]
		return len(s) >= 2
	})
	if st.step != want {
		t.Errorf("recovered job started at step %d, want %d (freshest committed v%d)", st.step, want, cpAtCrash.Version)
	}
	if _, err := tc.nodes[dest].store.Manifest("train", cpAtCrash.Version); err != nil {
		t.Errorf("destination %s lacks v%d after recovery: %v", dest, cpAtCrash.Version, err)
	}
	wait.For(t, 20*time.Second, "the restart time reported", func() bool {
		j := tc.state().Jobs["train"]
		return j.RestartTime > 0 && j.Node == dest
	})
	var jv JobView
	for _, v := range tc.nodes[dest].mgr.View() {
		if v.Job == "train" {
			jv = v
		}
	}
	if jv.RestoredFrom != cpAtCrash.Version {
		t.Errorf("destination view restored from v%d, want v%d", jv.RestoredFrom, cpAtCrash.Version)
	}
	// Where the downtime went: detection, placement, the holder's push and
	// restore, the start (design P3.8d), in order, against a limit.
	e, o := historyOutcome(t, tc, host, "train")
	if o.Detected.Before(e.DowntimeStart(o)) || o.At.Before(o.Detected) || o.Restored.Before(o.At) || o.Resumed.Before(o.Restored) || o.Limit <= 0 || o.HandedOff {
		t.Errorf("recovery outcome %+v: want departure ≤ detection ≤ placement ≤ restore ≤ start and a limit", o)
	}
}

// A checkpoint that never completes is abandoned and never committed; the
// job keeps running.
func TestHungCheckpointNeverCommitted(t *testing.T) {
	t.Parallel()
	sc := fastSupervisor()
	sc.CheckpointTimeout = 500 * time.Millisecond
	tc := newCluster(t, []int{1}, sc)
	tc.submitJob("hang", "HANG=1")
	host := tc.waitRunning("hang", "")
	n := tc.nodes[host]
	var jv JobView
	wait.For(t, 30*time.Second, "two abandoned checkpoints", func() bool {
		for _, v := range n.mgr.View() {
			if v.Job == "hang" {
				jv = v
			}
		}
		return jv.CheckpointFailures >= 2
	})
	if vs := n.store.Versions("hang"); len(vs) != 0 {
		t.Errorf("store holds versions %v of a job that never completed a checkpoint", vs)
	}
	if cps := tc.state().Checkpoints["hang"]; len(cps) != 0 {
		t.Errorf("catalogue lists %+v for a job that never completed a checkpoint", cps)
	}
	if jv.Checkpoints != 0 || jv.State == StateFailed {
		t.Errorf("view %+v: want no checkpoints and a job still alive", jv)
	}
	before := len(readSteps(t, tc.stepLog))
	wait.For(t, 10*time.Second, "the job still stepping", func() bool { return len(readSteps(t, tc.stepLog)) > before+3 })

	// Cancelled: the manager stops the process.
	tc.submit(state.CancelJob{Job: "hang"})
	wait.For(t, 20*time.Second, "the cancelled job's process stopped", func() bool {
		for _, e := range readSteps(t, tc.stepLog) {
			if e.kind == "term" {
				return true
			}
		}
		return false
	})
	wait.For(t, 10*time.Second, "the cancelled job gone from the view", func() bool {
		for _, v := range n.mgr.View() {
			if v.Job == "hang" {
				return false
			}
		}
		return true
	})
}

// A corrupt chunk in the freshest committed version at restore: the
// previous version is used.
func TestCorruptChunkAtRestoreFallsBack(t *testing.T) {
	t.Parallel()
	tc, host := newClusterWithJob(t)
	other := policy.NodeID("n01")
	if host == other {
		other = "n02"
	}
	tc.waitCommitted("train", 2)
	// Stop the host first (no more checkpoints reach the standby), corrupt
	// the standby's newest version, and only then let gossip report the host
	// failed, so the recovery cannot start before the corruption.
	tc.nodes[host].stop(t)
	delete(tc.nodes, host)
	sb := tc.nodes[other].store
	vs := sb.Versions("train")
	if len(vs) < 2 {
		t.Fatalf("standby holds %v, want two versions", vs)
	}
	newest, prev := vs[len(vs)-1], vs[len(vs)-2]
	wantStep := stepOf(t, sb, "train", prev)
	if stepOf(t, sb, "train", newest) == wantStep {
		t.Fatalf("v%d and v%d hold the same step; the test cannot tell them apart", prev, newest)
	}
	m, err := sb.Manifest("train", newest)
	if err != nil {
		t.Fatal(err)
	}
	corruptChunk(t, tc.nodes[other].root, m)
	tc.gossip.fail(host)
	dest := tc.waitRunning("train", host)
	if dest != other {
		t.Fatalf("job recovered on %s, want %s", dest, other)
	}
	var st stepEvent
	wait.For(t, 30*time.Second, "the job's start after recovery", func() bool {
		s := starts(readSteps(t, tc.stepLog))
		st = s[len(s)-1]
		return len(s) >= 2
	})
	if st.step != wantStep {
		t.Errorf("job resumed at step %d, want %d from v%d (v%d is corrupt)", st.step, wantStep, prev, newest)
	}
	var jv JobView
	wait.For(t, 10*time.Second, "the view of the recovered job", func() bool {
		for _, v := range tc.nodes[dest].mgr.View() {
			if v.Job == "train" {
				jv = v
			}
		}
		return jv.RestoredFrom != 0
	})
	if jv.RestoredFrom != prev || jv.LastError == "" {
		t.Errorf("view %+v: want restored from v%d and the corruption reported", jv, prev)
	}
}

// corruptChunk flips the bytes of the first chunk of m in the store's
// directory (the layout is documented: chunks/ab/<sha256>).
func corruptChunk(t *testing.T, root string, m *ckpt.Manifest) {
	t.Helper()
	var h string
	for _, f := range m.Files {
		if f.Path == "step" {
			h = f.Chunks[0].Hash.String()
		}
	}
	if h == "" {
		t.Fatalf("manifest %+v has no step file", m.Files)
	}
	p := filepath.Join(root, "chunks", h[:2], h)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read chunk: %v", err)
	}
	for i := range b {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// sampleCommands is one command of every kind, in an order that applies
// cleanly to an empty state.
func sampleCommands() []Command {
	return []Command{
		UpsertNode{Node: NodeRecord{ID: "a", Building: "north", RaftAddr: "10.0.0.1:7947", GPUs: 2, GPU: policy.GPU{Model: "A100", VRAM: 80 << 30, Capability: 8}, Role: RoleVoter, Joined: t0}},
		UpsertNode{Node: NodeRecord{ID: "b", Building: "south", RaftAddr: "10.0.0.2:7947", GPUs: 1, Joined: t0}},
		SubmitJob{Job: JobRecord{Job: policy.Job{ID: "j1", CheckpointBytes: 3 << 30, GPUs: 1, LossBudget: time.Minute}, Spec: JobSpec{Command: []string{"python3", "train.py"}, Signal: "USR2", Grace: 5 * time.Second}, Owner: "alice", Submitted: t0}},
		SetDecisions{Decisions: DecisionRecord{At: t0.Add(time.Second), Leader: "a", Decisions: policy.Decisions{
			Placements: []policy.Placement{{Job: "j1", To: "a", Candidates: []policy.Candidate{{Node: "a", Score: math.Inf(1)}}}},
			Jobs:       []policy.JobDecision{{Job: "j1", Bandwidth: 1e6, Interval: 10 * time.Minute, Standby: "b"}},
			Flows:      []policy.FlowDecision{{ID: "f1", Job: "j1", From: "a", To: "b", Class: policy.ClassPresync, Rate: 1e6, Links: []string{"a-sw"}}},
		}}},
		JobReport{Job: "j1", Node: "a", CheckpointBytes: 2 << 30, RestartTime: 30 * time.Second, Remaining: time.Hour},
		ReplicaComplete{Job: "j1", Version: 1, ManifestHash: "sha256:aa", Size: 2 << 30, Source: "a", Holder: "a", At: t0.Add(2 * time.Second)},
		ReplicaComplete{Job: "j1", Version: 1, ManifestHash: "sha256:aa", Size: 2 << 30, Source: "a", Holder: "b", At: t0.Add(3 * time.Second)},
		PublishHazards{At: t0.Add(4 * time.Second), Hazards: map[policy.NodeID]policy.HazardEstimate{"a": {EmergencyUpper: policy.HazardProfile{Rates: []float64{1e-5, 2e-5}}}}},
		AnnounceReclaim{Reclaim: policy.Reclaim{Node: "a", Announced: t0.Add(5 * time.Second), Deadline: t0.Add(65 * time.Second)}},
		MoveJob{Job: "j1", From: "a", To: "b", At: t0.Add(40 * time.Second), Stopped: t0.Add(37 * time.Second)},
		RecordDeparture{Departure: Departure{Node: "a", At: t0.Add(65 * time.Second), Kind: DepartureScheduled}},
		RecordReclaimReport{Report: ReclaimReport{Node: "a", Kind: DepartureScheduled, Announced: t0.Add(5 * time.Second), Deadline: t0.Add(65 * time.Second),
			Completed: t0.Add(40 * time.Second), Isolate: 3 * time.Millisecond, Isolated: true, Moved: []policy.JobID{"j1"}, BytesSent: 2 << 30, UsedFor: 35 * time.Second}},
		RecordReclaimReport{Report: ReclaimReport{Node: "a", Kind: DepartureScheduled, Announced: t0.Add(5 * time.Second), Deadline: t0.Add(65 * time.Second),
			Completed: t0.Add(40 * time.Second), Isolate: 3 * time.Millisecond, Isolated: true, Moved: []policy.JobID{"j1"}, BytesSent: 2 << 30, UsedFor: 60 * time.Second, Left: t0.Add(65 * time.Second)}},
		AnnounceReclaim{Reclaim: policy.Reclaim{Node: "b", Announced: t0.Add(70 * time.Second), Deadline: t0.Add(70 * time.Second)}},
		CancelReclaim{Node: "b"},
		CancelJob{Job: "j1", By: "alice on a", At: t0.Add(80 * time.Second)},
	}
}

func applyEncoded(t *testing.T, f *Store, index uint64, cmd Command) any {
	t.Helper()
	b, err := EncodeCommand(cmd)
	if err != nil {
		t.Fatalf("encode %s: %v", cmd.Kind(), err)
	}
	if err := f.Apply(index, b); err != nil {
		return err
	}
	return nil
}

// TestCommandsAppliedTwiceAreIdempotent applies every command kind once
// (each must change the state) and then again (nothing may change).
func TestCommandsAppliedTwiceAreIdempotent(t *testing.T) {
	f := NewStore()
	idx := uint64(0)
	for _, cmd := range sampleCommands() {
		before := f.State()
		idx++
		if res := applyEncoded(t, f, idx, cmd); res != nil {
			t.Fatalf("%s: first apply: %v", cmd.Kind(), res)
		}
		after := f.State()
		if reflect.DeepEqual(before, after) {
			t.Fatalf("%s: first apply changed nothing", cmd.Kind())
		}
		if f.Index() != idx {
			t.Fatalf("%s: index got %d, want %d", cmd.Kind(), f.Index(), idx)
		}
		ch := f.Changed()
		idx++
		if res := applyEncoded(t, f, idx, cmd); res != nil {
			t.Fatalf("%s: second apply: %v", cmd.Kind(), res)
		}
		if again := f.State(); !reflect.DeepEqual(after, again) {
			t.Fatalf("%s: second apply changed the state:\n got %+v\nwant %+v", cmd.Kind(), again, after)
		}
		select {
		case <-ch:
			t.Fatalf("%s: second apply signalled a change", cmd.Kind())
		default:
		}
	}
	j, _ := f.Job("j1")
	if j.Restarts != 1 || j.State != policy.JobDone {
		t.Fatalf("job after the sequence: restarts %d state %s, want 1 done", j.Restarts, j.State)
	}
}

// TestFSMRecordsStartAndWriteTimes: the times the leader's exposure
// estimate reads: a job's last start (its placement's decision time, then
// the hand-off's MoveJob time) and a version's local write (its source's
// own ReplicaComplete, not a copy's); and the hand-off's stop on the
// source, which the destination measures the downtime from.
func TestFSMRecordsStartAndWriteTimes(t *testing.T) {
	f := NewStore()
	for i, c := range sampleCommands() {
		if res := applyEncoded(t, f, uint64(i+1), c); res != nil {
			t.Fatal(res)
		}
		j, _ := f.Job("j1")
		st := f.State()
		switch c := c.(type) {
		case SetDecisions:
			if !j.RunningSince.Equal(c.Decisions.At) {
				t.Errorf("after the placement: running since %v, want the decision's %v", j.RunningSince, c.Decisions.At)
			}
			if !j.HandoffStopped.IsZero() {
				t.Errorf("after the placement: hand-off stop %v, want none", j.HandoffStopped)
			}
		case ReplicaComplete:
			if w := st.Checkpoints["j1"][0].Written; !w.Equal(t0.Add(2 * time.Second)) {
				t.Errorf("after %s's completion: written %v, want the source's %v", c.Holder, w, t0.Add(2*time.Second))
			}
		case MoveJob:
			if !j.RunningSince.Equal(c.At) {
				t.Errorf("after the hand-off: running since %v, want the move's %v", j.RunningSince, c.At)
			}
			if !j.HandoffStopped.Equal(c.Stopped) {
				t.Errorf("after the hand-off: hand-off stop %v, want the move's %v", j.HandoffStopped, c.Stopped)
			}
		}
	}
}

func TestReplicaCompleteCommitsOnlyOffSource(t *testing.T) {
	f := NewStore()
	cmds := sampleCommands()
	for i, c := range cmds[:6] { // up to the source's own completion
		if res := applyEncoded(t, f, uint64(i+1), c); res != nil {
			t.Fatal(res)
		}
	}
	if _, ok := f.FreshestCommitted("j1"); ok {
		t.Fatal("version committed with only its source holding it")
	}
	if res := applyEncoded(t, f, 7, cmds[6]); res != nil {
		t.Fatal(res)
	}
	cp, ok := f.FreshestCommitted("j1")
	if !ok || cp.Version != 1 || !reflect.DeepEqual(cp.Holders, []policy.NodeID{"a", "b"}) {
		t.Fatalf("freshest committed got %+v ok=%v, want v1 held by a and b", cp, ok)
	}
	clash := cmds[6].(ReplicaComplete)
	clash.ManifestHash, clash.Holder = "sha256:bb", "c"
	if res := applyEncoded(t, f, 8, clash); !errors.Is(res.(error), ErrManifestClash) {
		t.Fatalf("clashing manifest got %v, want ErrManifestClash", res)
	}
}

func TestCatalogueKeepsFreshestCommitted(t *testing.T) {
	s := New()
	s.Jobs["j"] = JobRecord{Job: policy.Job{ID: "j"}}
	rc := func(v uint64, holder policy.NodeID) {
		t.Helper()
		if _, err := s.Apply(ReplicaComplete{Job: "j", Version: v, ManifestHash: "h", Source: "a", Holder: holder}); err != nil {
			t.Fatal(err)
		}
	}
	rc(1, "b") // committed
	for v := uint64(2); v <= 6; v++ {
		rc(v, "a") // source only: never committed
	}
	cp, ok := s.FreshestCommitted("j")
	if !ok || cp.Version != 1 {
		t.Fatalf("freshest committed got v%d ok=%v, want v1 kept", cp.Version, ok)
	}
	rc(6, "c")
	if got := len(s.Checkpoints["j"]); got != keepVersions {
		t.Fatalf("catalogue length got %d, want %d", got, keepVersions)
	}
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	f := NewStore()
	for i, c := range sampleCommands() {
		if res := applyEncoded(t, f, uint64(i+1), c); res != nil {
			t.Fatal(res)
		}
	}
	sink := &bytes.Buffer{}
	if err := f.Snapshot().Encode(sink); err != nil {
		t.Fatal(err)
	}
	g := NewStore()
	if err := g.Restore(bytes.NewReader(sink.Bytes())); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(Normalize(f.State()), g.State()) {
		t.Fatalf("restored state differs:\n got %+v\nwant %+v", g.State(), f.State())
	}
	if g.Index() != f.Index() {
		t.Fatalf("restored index got %d, want %d", g.Index(), f.Index())
	}
	bad := bytes.Replace(sink.Bytes(), []byte(`"Version":1`), []byte(`"Version":9`), 1)
	if err := g.Restore(bytes.NewReader(bad)); !errors.Is(err, ErrUnknownVersion) {
		t.Fatalf("restore of version 9 got %v, want ErrUnknownVersion", err)
	}
}

func TestReadsReturnCopies(t *testing.T) {
	f := NewStore()
	for i, c := range sampleCommands()[:7] {
		if res := applyEncoded(t, f, uint64(i+1), c); res != nil {
			t.Fatal(res)
		}
	}
	j, _ := f.Job("j1")
	j.Spec.Command[0] = "rm"
	d := f.Decisions()
	d.Flows[0].Links[0] = "changed"
	cps := f.Checkpoints("j1")
	cps[0].Holders[0] = "z"
	st := f.State()
	st.Jobs["j1"].Spec.Command[1] = "x"
	if j2, _ := f.Job("j1"); j2.Spec.Command[0] != "python3" || j2.Spec.Command[1] != "train.py" {
		t.Fatalf("job command changed through a copy: %v", j2.Spec.Command)
	}
	if f.Decisions().Flows[0].Links[0] != "a-sw" {
		t.Fatal("decisions changed through a copy")
	}
	if f.Checkpoints("j1")[0].Holders[0] != "a" {
		t.Fatal("catalogue changed through a copy")
	}
}

func TestDecodeRejects(t *testing.T) {
	good, err := EncodeCommand(CancelJob{Job: "j"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrInvalidCommand},
		{"future version", append([]byte{2}, good[1:]...), ErrUnknownVersion},
		{"unknown kind", append([]byte{1, 200}, good[2:]...), ErrUnknownCommand},
		{"unknown field", append([]byte{1, byte(KindCancelJob)}, []byte(`{"Job":"j","X":1}`)...), ErrInvalidCommand},
		{"invalid value", append([]byte{1, byte(KindCancelJob)}, []byte(`{"Job":""}`)...), ErrInvalidCommand},
		{"stopped after the move", append([]byte{1, byte(KindMoveJob)}, []byte(`{"Job":"j","From":"a","To":"b","At":"2026-01-01T00:00:00Z","Stopped":"2026-01-01T00:00:01Z"}`)...), ErrInvalidCommand},
		{"trailing", append(good, []byte(`{}`)...), ErrInvalidCommand},
		{"trailing brace", append(good, []byte(`}`)...), ErrInvalidCommand},
		{"trailing bracket", append(good, []byte(`]`)...), ErrInvalidCommand},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeCommand(tc.b)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	// The store answers an undecodable entry with the error and no change.
	f := NewStore()
	if res := f.Apply(1, []byte{9, 1}); !errors.Is(res, ErrUnknownVersion) {
		t.Fatalf("apply of version 9 got %v, want ErrUnknownVersion", res)
	}
	if f.Index() != 0 {
		t.Fatal("rejected entry changed the index")
	}
}

func FuzzDecodeCommand(f *testing.F) {
	for _, c := range sampleCommands() {
		b, err := EncodeCommand(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, c := range []Command{
		JobExited{Job: "j1", Exit: JobExit{Node: "a", At: t0, ExitCode: 3, LogTail: []string{"Traceback", "ValueError"}}},
		JobExited{Job: "j1", Exit: JobExit{Node: "a", At: t0, ExitCode: PreemptedExit}},
		JobExited{Job: "j1", Exit: JobExit{Node: "a", At: t0, ExitCode: -1, Signal: "SIGKILL", Reason: "out of memory"}},
		JobReport{Job: "j1", Node: "a", Presync: Presync{Node: "b", Version: 2, Delta: 1 << 20}},
	} {
		b, err := EncodeCommand(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{1, byte(KindSubmitJob), '{', '}'})
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, b []byte) {
		cmd, err := DecodeCommand(b)
		if err != nil {
			return
		}
		// What decodes must re-encode, decode to the same command, and
		// apply twice to the same state.
		b2, err := EncodeCommand(cmd)
		if err != nil {
			t.Fatalf("decoded %s does not re-encode: %v", cmd.Kind(), err)
		}
		cmd2, err := DecodeCommand(b2)
		if err != nil {
			t.Fatalf("re-encoded %s does not decode: %v", cmd.Kind(), err)
		}
		if !reflect.DeepEqual(Normalize(cmd), cmd2) {
			t.Fatalf("round trip changed the command:\n got %+v\nwant %+v", cmd2, cmd)
		}
		s := New()
		s.Jobs["j1"] = JobRecord{Job: policy.Job{ID: "j1", Node: "a", State: policy.JobRunning}}
		if _, err := s.Apply(cmd2); err != nil {
			return
		}
		once := s.clone()
		if _, err := s.Apply(cmd2); err != nil {
			t.Fatalf("second apply of %s failed: %v", cmd.Kind(), err)
		}
		if !reflect.DeepEqual(once, s) {
			t.Fatalf("second apply of %s changed the state", cmd.Kind())
		}
	})
}

func TestWaitAfterWakesOnChange(t *testing.T) {
	f := NewStore()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make(chan uint64, 1)
	go func() {
		idx, err := f.WaitAfter(ctx, 0)
		if err != nil {
			t.Error(err)
		}
		got <- idx
	}()
	if res := applyEncoded(t, f, 7, CancelReclaim{Node: "x"}); res != nil { // no change: no wake-up
		t.Fatal(res)
	}
	if res := applyEncoded(t, f, 8, sampleCommands()[0]); res != nil {
		t.Fatal(res)
	}
	if idx := <-got; idx != 8 {
		t.Fatalf("WaitAfter returned index %d, want 8 (the first change)", idx)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancelShort()
	if _, err := f.WaitAfter(short, 8); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitAfter with no change got %v, want the context's deadline", err)
	}
}

// TestReclaimReportHistory checks that a report replaces the one of the
// same node and announcement, that the history keeps only the newest
// maxReclaimReports, that reads are copies and that it survives a snapshot.
func TestReclaimReportHistory(t *testing.T) {
	f := NewStore()
	idx := uint64(0)
	report := func(i int) ReclaimReport {
		return ReclaimReport{Node: policy.NodeID(fmt.Sprintf("n%d", i%7)), Kind: DepartureEmergency,
			Announced: t0.Add(time.Duration(i) * time.Minute), Deadline: t0.Add(time.Duration(i) * time.Minute),
			Degraded: []policy.JobID{policy.JobID(fmt.Sprintf("j%d", i))}}
	}
	total := maxReclaimReports + 20
	for i := range total {
		idx++
		if res := applyEncoded(t, f, idx, RecordReclaimReport{Report: report(i)}); res != nil {
			t.Fatal(res)
		}
	}
	// Left set later on the newest: replaced, not appended.
	last := report(total - 1)
	last.Left = last.Deadline.Add(time.Second)
	idx++
	if res := applyEncoded(t, f, idx, RecordReclaimReport{Report: last}); res != nil {
		t.Fatal(res)
	}
	got := f.ReclaimReports()
	if len(got) != maxReclaimReports {
		t.Fatalf("history length got %d, want %d", len(got), maxReclaimReports)
	}
	if want := report(total - maxReclaimReports); !reflect.DeepEqual(got[0], want) {
		t.Fatalf("oldest kept got %+v, want %+v", got[0], want)
	}
	if !reflect.DeepEqual(got[len(got)-1], Normalize(last)) {
		t.Fatalf("newest got %+v, want %+v", got[len(got)-1], last)
	}
	got[0].Degraded[0] = "changed"
	if again := f.ReclaimReports(); again[0].Degraded[0] == "changed" {
		t.Fatal("ReclaimReports returned the FSM's own slice")
	}
	sink := &bytes.Buffer{}
	if err := f.Snapshot().Encode(sink); err != nil {
		t.Fatal(err)
	}
	g := NewStore()
	if err := g.Restore(bytes.NewReader(sink.Bytes())); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.ReclaimReports(), f.ReclaimReports()) {
		t.Fatalf("restored history differs:\n got %+v\nwant %+v", g.ReclaimReports(), f.ReclaimReports())
	}
	bad := report(1)
	bad.Kind = 0
	if _, err := EncodeCommand(RecordReclaimReport{Report: bad}); !errors.Is(err, ErrInvalidCommand) {
		t.Fatalf("report without kind got %v, want ErrInvalidCommand", err)
	}
}

package demo

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(s)
	f.Close()
}

// The follower reads only what was appended, keeps a partial last line for
// the next poll, and splits the job's life into segments.
func TestJobLogSegments(t *testing.T) {
	path := filepath.Join(t.TempDir(), "job.log")
	l := &jobLog{path: path}
	if evs := l.poll("a1"); evs != nil || l.current() != nil {
		t.Fatalf("missing log: events %v, segment %v; want none", evs, l.current())
	}
	appendFile(t, path, "step=0 loss=1.0\nstep=1 loss=0.9\ncheckpoint step=2 ok=True\nstep=2 loss=0.8\nste")
	evs := l.poll("a1")
	if len(evs) != 1 || !evs[0].started {
		t.Fatalf("first poll: events %+v, want one start", evs)
	}
	appendFile(t, path, "p=3\ncheckpoint step=4 ok=False\n")
	if evs := l.poll("a1"); len(evs) != 0 {
		t.Errorf("second poll: events %+v, want none", evs)
	}
	want := Segment{Node: "a1", Restored: -1, FirstStep: 0, LastStep: 3, Checkpoints: []int64{2}}
	if got := *l.current(); !reflect.DeepEqual(got, want) {
		t.Errorf("segment %+v, want %+v (failed checkpoints not counted)", got, want)
	}
	// The job comes back to this node later, restored.
	appendFile(t, path, "restored step=2 from /x (restart 2)\nstep=2 loss=0.8\nstep=3\n")
	evs = l.poll("a1")
	if len(evs) != 1 || evs[0].restored != 2 {
		t.Fatalf("restore poll: events %+v, want one restore at 2", evs)
	}
	if len(l.segs) != 2 || l.segs[1].Restored != 2 || l.segs[1].FirstStep != 2 || l.segs[1].LastStep != 3 {
		t.Errorf("segments %+v %+v, want a second one restored at 2 with steps 2..3", *l.segs[0], *l.segs[1])
	}
	// A fresh start (step 0 again, no restore) opens a new segment.
	appendFile(t, path, "step=0\n")
	if evs := l.poll("a1"); len(evs) != 1 || !evs[0].started || len(l.segs) != 3 {
		t.Errorf("fresh start: events %+v, %d segments; want a start and 3 segments", evs, len(l.segs))
	}
	// A truncated (rotated) log is read again from the start.
	os.WriteFile(path, []byte("step=9\n"), 0o644)
	l.poll("a1")
	if got := l.current().LastStep; got != 9 {
		t.Errorf("after truncation last step %d, want 9", got)
	}
}

package raft

import (
	"bytes"
	"io"
	"reflect"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// applyEncoded applies cmd as log entry index through the hashicorp/raft
// adapter, as Raft does, and returns what Raft would get back.
func applyEncoded(t *testing.T, s *state.Store, index uint64, cmd state.Command) any {
	t.Helper()
	b, err := state.EncodeCommand(cmd)
	if err != nil {
		t.Fatalf("encode %s: %v", cmd.Kind(), err)
	}
	return fsm{s}.Apply(&hraft.Log{Index: index, Type: hraft.LogCommand, Data: b})
}

type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

// TestFSMAdapter drives the store through hashicorp/raft's interface: a
// command entry applies (a rejected one comes back as the error), other
// entry types are ignored, and a persisted snapshot restores the same
// state and index.
func TestFSMAdapter(t *testing.T) {
	s := state.NewStore()
	node := state.UpsertNode{Node: state.NodeRecord{ID: "a", Building: "north", GPUs: 1, Joined: t0}}
	if res := applyEncoded(t, s, 1, node); res != nil {
		t.Fatalf("apply: %v", res)
	}
	if res := applyEncoded(t, s, 2, state.CancelJob{Job: "nope"}); res == nil {
		t.Fatal("cancel of an unknown job: want the error back")
	}
	if res := (fsm{s}).Apply(&hraft.Log{Index: 3, Type: hraft.LogNoop}); res != nil || s.Index() != 1 {
		t.Fatalf("no-op entry: got %v, index %d; want nil and index 1", res, s.Index())
	}
	if _, ok := s.Node("a"); !ok {
		t.Fatal("node a not recorded")
	}
	snap, err := fsm{s}.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	g := state.NewStore()
	if err := (fsm{g}).Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(state.Normalize(s.State()), g.State()) || g.Index() != s.Index() {
		t.Fatalf("restored state differs:\n got %+v (index %d)\nwant %+v (index %d)", g.State(), g.Index(), s.State(), s.Index())
	}
	_ = policy.NodeID("")
}

package state

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/policy"
)

func TestNodeHasPaths(t *testing.T) {
	n := NodeRecord{Paths: []string{"/datasets", "/scratch/shared"}}
	for _, c := range []struct {
		want []string
		has  bool
	}{
		{nil, true},
		{[]string{"/datasets"}, true},
		{[]string{"/datasets/imagenet", "/scratch/shared/x"}, true},
		{[]string{"/datasets2"}, false},
		{[]string{"/data"}, false},
		{[]string{"/datasets/imagenet", "/home"}, false},
		{[]string{"/scratch"}, false},
	} {
		if got := n.HasPaths(c.want); got != c.has {
			t.Errorf("HasPaths(%q) = %v, want %v", c.want, got, c.has)
		}
	}
	if !(NodeRecord{Paths: []string{"/"}}).HasPaths([]string{"/anything/at/all"}) {
		t.Error("/ does not hold every path")
	}
}

func TestJobSpecROPaths(t *testing.T) {
	for _, p := range []string{"datasets", "/datasets/", "/a/../b", ""} {
		if err := (JobSpec{ROPaths: []string{p}}).validate(); err == nil || !strings.Contains(err.Error(), "read-only path") {
			t.Errorf("read-only path %q: got %v, want it refused", p, err)
		}
	}
	if err := (JobSpec{ROPaths: []string{"/datasets/imagenet"}}).validate(); err != nil {
		t.Errorf("a clean absolute path refused: %v", err)
	}
	if err := (JobSpec{Bundle: "xyz"}).validate(); err == nil {
		t.Error("a bundle ID that is not 64 hex digits accepted")
	}
	if err := (JobSpec{Keep: -1}).validate(); err == nil {
		t.Error("a negative keep accepted")
	}
}

func TestBundleHoldersAndResults(t *testing.T) {
	now := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	active := func(id policy.NodeID) NodeRecord { return NodeRecord{ID: id, State: NodeActive} }
	s := &State{
		Nodes: map[policy.NodeID]NodeRecord{"a": active("a"), "b": active("b"), "c": active("c"), "d": active("d"),
			"gone": {ID: "gone", State: NodeLeft}},
		Jobs: map[policy.JobID]JobRecord{},
		Checkpoints: map[policy.JobID][]Checkpoint{"j": {
			{Job: "j", Version: 1, Holders: []policy.NodeID{"c", "gone"}, Committed: true},
			{Job: "j", Version: 2, Holders: []policy.NodeID{"d"}, Written: now}, // not committed: no bundle push yet
		}},
	}
	j := JobRecord{Job: policy.Job{ID: "j", State: policy.JobRunning, Node: "b", Standby: "a"},
		Spec: JobSpec{Bundle: strings.Repeat("ab", 32), BundleFrom: "gone", Keep: time.Hour}, RunningSince: now}
	s.Jobs["j"] = j
	if got := s.BundleHolders(j); !slices.Equal(got, []policy.NodeID{"a", "b", "c"}) {
		t.Errorf("BundleHolders = %v, want the standby, the running node and the committed holder (active ones)", got)
	}
	if _, _, ok := s.Results("j"); ok {
		t.Error("a running job has results")
	}
	j.State = policy.JobDone
	s.Jobs["j"] = j
	cp, until, ok := s.Results("j")
	if !ok || cp.Version != 2 || !until.Equal(now.Add(time.Hour)) {
		t.Errorf("Results = v%d until %v (%v), want v2 until an hour after it was written", cp.Version, until, ok)
	}
	j.Spec.Bundle = ""
	if got := s.BundleHolders(j); got != nil {
		t.Errorf("BundleHolders of a job without a bundle = %v", got)
	}
}

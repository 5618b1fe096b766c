package state

import (
	"strings"
	"testing"
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

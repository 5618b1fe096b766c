package ckpt

import (
	"errors"
	"testing"
	"time"
)

func TestEvictionLRUNeverEvictsLiveNewest(t *testing.T) {
	root := t.TempDir()
	const size = 64 << 10
	s := openStore(t, root, 5*size+size/2) // room for five 64 KiB versions
	src := t.TempDir()
	add := func(job string, v uint64, seed uint64) *Manifest {
		t.Helper()
		writeTree(t, src, map[string][]byte{"w": randBytes(seed, size)})
		// A chunker whose Max is 64 KiB keeps each version to one chunk.
		m, err := s.AddDir(job, v, src, time.Now())
		if err != nil {
			t.Fatalf("add %s v%d: %v", job, v, err)
		}
		return m
	}
	s.SetLive("live", true)
	add("live", 1, 100)
	add("old", 1, 101)
	add("old", 2, 102)
	live2 := add("live", 2, 103)
	add("old", 3, 104)
	// Use old v2 so it becomes recently used.
	if err := s.Restore("old", 2, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	// Each new version now forces an eviction.
	add("other", 1, 105)
	add("other", 2, 106)
	add("other", 3, 107)
	if s.Usage() > 5*size+size/2 {
		t.Fatalf("usage %d over cap %d", s.Usage(), 5*size+size/2)
	}
	if _, err := s.Manifest("live", 2); err != nil {
		t.Fatalf("newest version of live job evicted: %v", err)
	}
	if err := s.Restore("live", 2, t.TempDir()); err != nil {
		t.Fatalf("restore live v2: %v", err)
	}
	for _, gone := range []struct {
		job string
		v   uint64
	}{{"live", 1}, {"old", 1}} {
		if _, err := s.Manifest(gone.job, gone.v); !errors.Is(err, ErrNoVersion) {
			t.Errorf("%s v%d: got %v, want evicted (least recently used)", gone.job, gone.v, err)
		}
	}
	if _, err := s.Manifest("old", 2); err != nil {
		t.Errorf("old v2 was used recently but evicted: %v", err)
	}
	_ = live2
	// The cap cannot be met with only pinned data: ErrQuota, nothing evicted.
	s.SetLive("other", true)
	s.SetLive("old", true)
	writeTree(t, src, map[string][]byte{"w": randBytes(200, 5*size)})
	if _, err := s.AddDir("big", 1, src, time.Now()); !errors.Is(err, ErrQuota) {
		t.Fatalf("add beyond cap: got %v, want ErrQuota", err)
	}
	if err := s.Restore("live", 2, t.TempDir()); err != nil {
		t.Fatalf("live v2 damaged by failed add: %v", err)
	}
}

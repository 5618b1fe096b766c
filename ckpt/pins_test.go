package ckpt

import (
	"errors"
	"testing"
	"time"
)

// setClock is a clock the test sets.
type setClock struct{ t time.Time }

func (c *setClock) Now() time.Time { return c.t }

func TestRetainThenPurgeAfterKeep(t *testing.T) {
	root := t.TempDir()
	clk := &setClock{t: time.Unix(1_800_000_000, 0)}
	open := func() *Store {
		s, err := Open(Config{Root: root, Chunker: testChunker, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s := open()
	ck, out := t.TempDir(), t.TempDir()
	writeTree(t, ck, map[string][]byte{"w": randBytes(40, 64<<10)})
	writeTree(t, out, map[string][]byte{"result": randBytes(41, 32<<10)})
	s.SetLive("job", true)
	if _, err := s.AddCheckpoint("job", 1, ck, out, clk.t); err != nil {
		t.Fatal(err)
	}
	writeTree(t, out, map[string][]byte{"result": randBytes(42, 32<<10)})
	if _, err := s.AddCheckpoint("job", 2, ck, out, clk.t); err != nil {
		t.Fatal(err)
	}
	// The job ends: its last version is kept for DefaultKeep.
	ended := clk.t
	kept, err := s.Retain("job", ended.Add(DefaultKeep))
	if err != nil {
		t.Fatal(err)
	}
	if kept.Version != 2 || len(s.Versions("job")) != 1 {
		t.Fatalf("retained v%d, versions left %v; want v2 alone", kept.Version, s.Versions("job"))
	}
	// Kept across a restart, and not purged a second early.
	s.Close()
	s = open()
	if pins := s.Pins("job"); len(pins) != 1 || pins[0].Version != 2 || !pins[0].Until.Equal(ended.Add(DefaultKeep)) {
		t.Fatalf("pins after restart: %+v", pins)
	}
	clk.t = ended.Add(DefaultKeep - time.Second)
	if dropped, err := s.Purge(clk.t); err != nil || len(dropped) != 0 {
		t.Fatalf("purge before the keep ran out: dropped %d, %v", len(dropped), err)
	}
	if _, ok := s.Purged("job"); ok {
		t.Fatal("marked purged before its time")
	}
	clk.t = ended.Add(DefaultKeep)
	dropped, err := s.Purge(clk.t)
	if err != nil || len(dropped) != 1 || dropped[0].Version != 2 {
		t.Fatalf("purge at the end of the keep: dropped %v, %v", dropped, err)
	}
	if len(s.Versions("job")) != 0 || s.Usage() != 0 || len(s.Pins("job")) != 0 {
		t.Errorf("after purge: versions %v, %d bytes, pins %v", s.Versions("job"), s.Usage(), s.Pins("job"))
	}
	at, ok := s.Purged("job")
	if !ok || !at.Equal(clk.t) {
		t.Errorf("Purged: %v %v, want %v", at, ok, clk.t)
	}
	s.Close()
	s = open()
	if _, ok := s.Purged("job"); !ok {
		t.Error("the purge mark did not survive a restart")
	}
	// The job id used again: no longer purged.
	if _, err := s.AddCheckpoint("job", 3, ck, "", clk.t); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Purged("job"); ok {
		t.Error("a new version left the purge mark")
	}
}

func TestEvictionHonoursRetention(t *testing.T) {
	const size = 64 << 10 // one chunk per version with testChunker
	clk := &setClock{t: time.Unix(1_800_000_000, 0)}
	s, err := Open(Config{Root: t.TempDir(), MaxBytes: 3*size + size/2, Chunker: testChunker, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	src := t.TempDir()
	add := func(job string, seed uint64) {
		t.Helper()
		clk.t = clk.t.Add(time.Second)
		writeTree(t, src, map[string][]byte{"w": randBytes(seed, size)})
		if _, err := s.AddDir(job, 1, src, clk.t); err != nil {
			t.Fatalf("add %s: %v", job, err)
		}
	}
	has := func(job string) bool { return len(s.Versions(job)) > 0 }
	// Oldest first: two finished jobs retained, then a plain cached one.
	add("early", 1)
	add("late", 2)
	add("cached", 3)
	if _, err := s.Retain("early", clk.t.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Retain("late", clk.t.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	// Room for one more: the cached version goes, although the retained
	// ones were used longer ago.
	add("new1", 4)
	if has("cached") || !has("early") || !has("late") {
		t.Fatalf("first eviction: cached %v early %v late %v; want only cached gone", has("cached"), has("early"), has("late"))
	}
	// Nothing unpinned is left but new1 (LRU newest) ... it goes next.
	add("new2", 5)
	if has("new1") || !has("early") || !has("late") {
		t.Fatalf("second eviction: new1 %v early %v late %v", has("new1"), has("early"), has("late"))
	}
	// A hard pin on new2; now only retained data can yield, earliest
	// expiry first, and the job is marked purged.
	if err := s.Pin("new2", 1, "running", time.Time{}); err != nil {
		t.Fatal(err)
	}
	add("new3", 6)
	if has("early") || !has("late") || !has("new2") {
		t.Fatalf("third eviction: early %v late %v new2 %v; want early gone", has("early"), has("late"), has("new2"))
	}
	if _, ok := s.Purged("early"); !ok {
		t.Error("a retained job evicted early is not marked purged")
	}
	// An expired pin holds nothing: late, past its time, is plain LRU.
	clk.t = clk.t.Add(3 * time.Hour)
	if err := s.Pin("new3", 1, "running", time.Time{}); err != nil {
		t.Fatal(err)
	}
	add("new4", 7)
	if has("late") || !has("new2") || !has("new3") {
		t.Fatalf("fourth eviction: late %v new2 %v new3 %v", has("late"), has("new2"), has("new3"))
	}
	// Only hard-pinned data left: no room, ErrQuota, nothing lost.
	if err := s.Pin("new4", 1, "running", time.Time{}); err != nil {
		t.Fatal(err)
	}
	writeTree(t, src, map[string][]byte{"w": randBytes(8, size)})
	if _, err := s.AddDir("new5", 1, src, clk.t); !errors.Is(err, ErrQuota) {
		t.Fatalf("add with only hard pins: got %v, want ErrQuota", err)
	}
	for _, j := range []string{"new2", "new3", "new4"} {
		if !has(j) {
			t.Errorf("%s lost", j)
		}
	}
	// Unpin lets it go again.
	if err := s.Unpin("new2", 1, "running"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddDir("new5", 1, src, clk.t); err != nil || has("new2") {
		t.Fatalf("after unpin: %v, new2 kept %v", err, has("new2"))
	}
}

// A version that lands after the job's results were retained (the final
// outputs' copy reaching a holder after the end) is retained in turn: the
// older version gives up its RetainPin and goes, and one pin is left, on
// the newer version, with the newer expiry.
func TestRetainAgainMovesThePin(t *testing.T) {
	clk := &setClock{t: time.Unix(1_800_000_000, 0)}
	s, err := Open(Config{Root: t.TempDir(), Chunker: testChunker, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ck, out := t.TempDir(), t.TempDir()
	s.SetLive("job", true)
	for v := uint64(1); v <= 2; v++ {
		writeTree(t, ck, map[string][]byte{"w": randBytes(50+v, 64<<10)})
		if v == 2 {
			if _, err := s.Retain("job", clk.t.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.AddCheckpoint("job", v, ck, out, clk.t); err != nil {
			t.Fatal(err)
		}
	}
	until := clk.t.Add(2 * time.Hour)
	kept, err := s.Retain("job", until)
	if err != nil {
		t.Fatal(err)
	}
	if pins := s.Pins("job"); kept.Version != 2 || len(pins) != 1 || pins[0].Version != 2 || pins[0].Name != RetainPin || !pins[0].Until.Equal(until) {
		t.Fatalf("retained v%d, pins %+v: want one retain pin, on v2, until %v", kept.Version, pins, until)
	}
	if vs := s.Versions("job"); len(vs) != 1 || vs[0] != 2 {
		t.Errorf("versions %v: want v2 alone", vs)
	}
}

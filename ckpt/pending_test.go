package ckpt

import (
	"sync"
	"testing"
	"time"
)

func TestPendingAbortRemovesPartialData(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	src := t.TempDir()
	writeTree(t, src, map[string][]byte{"w": randBytes(40, 100<<10)})
	m1, err := s.AddDir("j", 1, src, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	usage1 := s.Usage()
	// Pending v2 shares v1's chunks plus a new one.
	extra := randBytes(41, 9000)
	f := m1.Files[0]
	f2 := File{Path: "x", Size: 9000, Mode: 0o644, Hash: Sum(extra), Chunks: []ChunkRef{{Sum(extra), 9000}}}
	m2 := &Manifest{JobID: "j", Version: 2, Files: []File{f, f2}}
	if err := s.BeginPending(m2); err != nil {
		t.Fatal(err)
	}
	if err := s.PutChunk(Sum(extra), extra); err != nil {
		t.Fatal(err)
	}
	if err := s.AbortPending("j", 2); err != nil {
		t.Fatal(err)
	}
	if s.Has(Sum(extra)) || s.Usage() != usage1 {
		t.Fatalf("after abort: usage %d (want %d), new chunk kept %v", s.Usage(), usage1, s.Has(Sum(extra)))
	}
	if err := s.Restore("j", 1, t.TempDir()); err != nil {
		t.Fatalf("v1 damaged by abort: %v", err)
	}
}

// stepClock is a clock a test moves by hand.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *stepClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestExpirePendingRemovesStaleVersions(t *testing.T) {
	root := t.TempDir()
	clk := &stepClock{t: time.Unix(1_800_000_000, 0)}
	s, err := Open(Config{Root: root, Chunker: testChunker, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	pend := func(version uint64, seed uint64) (*Manifest, []byte) {
		data := randBytes(seed, 5000)
		m := &Manifest{JobID: "j", Version: version, Files: []File{{Path: "x", Size: 5000, Mode: 0o644, Hash: Sum(data), Chunks: []ChunkRef{{Sum(data), 5000}}}}}
		if err := s.BeginPending(m); err != nil {
			t.Fatal(err)
		}
		if err := s.PutChunk(Sum(data), data); err != nil {
			t.Fatal(err)
		}
		return m, data
	}
	_, old := pend(1, 50)
	clk.Add(40 * time.Minute)
	_, fresh := pend(2, 51)
	_, busy := pend(3, 52)
	clk.Add(30 * time.Minute) // v1 is 70 min old, v2 and v3 30 min
	exp, err := s.ExpirePending(time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(exp) != 1 || exp[0].Version != 1 {
		t.Fatalf("expired %v, want only v1", versionsOf(exp))
	}
	if s.Has(Sum(old)) || !s.Has(Sum(fresh)) || !s.Has(Sum(busy)) {
		t.Fatalf("chunks after expiry: v1 %v (want false), v2 %v, v3 %v (want true)", s.Has(Sum(old)), s.Has(Sum(fresh)), s.Has(Sum(busy)))
	}
	// Activity restarts the age; a busy version is never expired.
	clk.Add(20 * time.Minute)
	s.TouchPending("j", 2)
	clk.Add(20 * time.Minute) // v2 touched 20 min ago, v3 70 min old but busy
	exp, err = s.ExpirePending(time.Hour, func(job string, v uint64) bool { return job == "j" && v == 3 })
	if err != nil {
		t.Fatal(err)
	}
	if len(exp) != 0 {
		t.Fatalf("expired %v, want none", versionsOf(exp))
	}
	s.Close()
	// After a restart a pending version counts from the open.
	s, err = Open(Config{Root: root, Chunker: testChunker, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if got := versionsOf(s.Pending()); len(got) != 2 {
		t.Fatalf("pending after restart %v, want [2 3]", got)
	}
	clk.Add(59 * time.Minute)
	if exp, _ := s.ExpirePending(time.Hour, nil); len(exp) != 0 {
		t.Fatalf("expired %v 59 min after restart, want none", versionsOf(exp))
	}
	clk.Add(time.Minute)
	if exp, _ := s.ExpirePending(time.Hour, nil); len(exp) != 2 {
		t.Fatalf("expired %v 60 min after restart, want [2 3]", versionsOf(exp))
	}
	if len(s.Pending()) != 0 || s.Has(Sum(fresh)) || s.Has(Sum(busy)) || s.Usage() != 0 {
		t.Fatalf("after expiry: pending %d, usage %d; want nothing left", len(s.Pending()), s.Usage())
	}
	if _, ok := s.PendingTouched("j", 2); ok {
		t.Fatal("PendingTouched still knows an expired version")
	}
}

func versionsOf(ms []*Manifest) []uint64 {
	var out []uint64
	for _, m := range ms {
		out = append(out, m.Version)
	}
	return out
}

package ckpt

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeClock advances one second per call so LRU order is the call order.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time { c.t = c.t.Add(time.Second); return c.t }

func openStore(t *testing.T, root string, max int64) *Store {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	s, err := Open(Config{Root: root, MaxBytes: max, Chunker: testChunker, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	// Background fsyncs hold files open until they finish (a test that
	// unmounts its file system needs them done).
	t.Cleanup(func() { s.Close() })
	return s
}

func writeTree(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, b := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

func checkTree(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("restored %s: %v", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("restored %s: %d bytes differ from the %d written", name, len(got), len(want))
		}
	}
}

func TestAddDirRestoreRoundTrip(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	src := t.TempDir()
	files := map[string][]byte{"model.pt": randBytes(10, 300<<10), "opt/state.pt": randBytes(11, 90<<10), "empty": {}}
	writeTree(t, src, files)
	m, err := s.AddDir("job1", 1, src, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if m.TotalSize() != 390<<10 {
		t.Errorf("manifest size: got %d, want %d", m.TotalSize(), 390<<10)
	}
	dst := t.TempDir()
	if err := s.Restore("job1", 1, dst); err != nil {
		t.Fatal(err)
	}
	checkTree(t, dst, files)
	st, _ := os.Stat(filepath.Join(dst, "model.pt"))
	if st.Mode().Perm() != 0o640 {
		t.Errorf("mode: got %o, want 640", st.Mode().Perm())
	}
}

func TestDedupeAcrossVersions(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	src := t.TempDir()
	base := randBytes(12, 1<<20)
	writeTree(t, src, map[string][]byte{"w": base})
	if _, err := s.AddDir("j", 1, src, time.Now()); err != nil {
		t.Fatal(err)
	}
	before := s.Usage()
	changed := append([]byte(nil), base...)
	copy(changed[500<<10:], randBytes(13, 1000))
	writeTree(t, src, map[string][]byte{"w": changed})
	if _, err := s.AddDir("j", 2, src, time.Now()); err != nil {
		t.Fatal(err)
	}
	added := s.Usage() - before
	if added <= 0 || added > 3*int64(testChunker.Max) {
		t.Fatalf("bytes added for a 1000-byte edit: got %d, want 1..%d", added, 3*testChunker.Max)
	}
}

func TestCorruptChunkFallsBackToPreviousVersion(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, root, 0)
	src := t.TempDir()
	v1 := map[string][]byte{"w": randBytes(20, 200<<10)}
	writeTree(t, src, v1)
	if _, err := s.AddDir("j", 1, src, time.Now()); err != nil {
		t.Fatal(err)
	}
	v2 := map[string][]byte{"w": randBytes(21, 200<<10)}
	writeTree(t, src, v2)
	m2, err := s.AddDir("j", 2, src, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte of a chunk only v2 has.
	p := s.chunkPath(m2.Files[0].Chunks[1].Hash)
	os.Chmod(p, 0o644)
	b, _ := os.ReadFile(p)
	b[10] ^= 0xff
	os.WriteFile(p, b, 0o444)

	if err := s.Restore("j", 2, t.TempDir()); !errors.Is(err, ErrCorruptChunk) {
		t.Fatalf("restore of corrupt v2: got %v, want ErrCorruptChunk", err)
	}
	dst := t.TempDir()
	m, skipped, err := s.RestoreNewest("j", dst)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != 1 || len(skipped) != 1 {
		t.Fatalf("RestoreNewest: got version %d with %d skipped, want version 1 with 1 skipped", m.Version, len(skipped))
	}
	checkTree(t, dst, v1)
	if _, err := os.Stat(filepath.Join(dst, ".restore")); err == nil {
		t.Error("temp file left behind")
	}
	if s.Has(m2.Files[0].Chunks[1].Hash) {
		t.Error("corrupt chunk still listed after detection")
	}
}

func TestCommitRefusesIncomplete(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	a, b := randBytes(30, 5000), randBytes(31, 6000)
	m := &Manifest{JobID: "j", Version: 1, Files: []File{{Path: "f", Size: 11000, Mode: 0o644,
		Hash: Sum(append(append([]byte(nil), a...), b...)), Chunks: []ChunkRef{{Sum(a), 5000}, {Sum(b), 6000}}}}}
	if err := s.PutChunk(Sum(a), a); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(m); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("commit with a chunk missing: got %v, want ErrIncomplete", err)
	}
	if len(s.Versions("j")) != 0 {
		t.Fatal("incomplete version listed as committed")
	}
	if err := s.PutChunk(Sum(a), b); !errors.Is(err, ErrHashMismatch) {
		t.Fatalf("put with wrong hash: got %v, want ErrHashMismatch", err)
	}
	if err := s.PutChunk(Sum(b), b); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(m); err != nil {
		t.Fatalf("commit complete version: %v", err)
	}
}

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

func TestSurvivesRestart(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, root, 0)
	src := t.TempDir()
	files := map[string][]byte{"w": randBytes(50, 150<<10)}
	writeTree(t, src, files)
	if _, err := s.AddDir("j", 3, src, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLive("j", true); err != nil {
		t.Fatal(err)
	}
	pm := &Manifest{JobID: "k", Version: 1, Files: []File{{Path: "p", Size: 4, Mode: 0o644, Hash: Sum([]byte("abcd")), Chunks: []ChunkRef{{Sum([]byte("abcd")), 4}}}}}
	if err := s.BeginPending(pm); err != nil {
		t.Fatal(err)
	}
	usage := s.Usage()
	s.Close()
	// Leftover temp from a crash must be cleaned.
	os.WriteFile(filepath.Join(root, "tmp", "w-crash"), []byte("junk"), 0o644)

	s2 := openStore(t, root, 0)
	if s2.Usage() != usage {
		t.Errorf("usage after reopen: got %d, want %d", s2.Usage(), usage)
	}
	if vs := s2.Versions("j"); len(vs) != 1 || vs[0] != 3 {
		t.Errorf("versions after reopen: got %v, want [3]", vs)
	}
	if p := s2.Pending(); len(p) != 1 || p[0].JobID != "k" {
		t.Errorf("pending after reopen: got %d manifests, want k v1", len(p))
	}
	if !s2.live["j"] {
		t.Error("live mark lost on reopen")
	}
	if s2.NextVersion("j") != 4 {
		t.Errorf("NextVersion: got %d, want 4", s2.NextVersion("j"))
	}
	if _, err := os.Stat(filepath.Join(root, "tmp", "w-crash")); !errors.Is(err, os.ErrNotExist) {
		t.Error("crash leftover in tmp/ not removed")
	}
	dst := t.TempDir()
	if err := s2.Restore("j", 3, dst); err != nil {
		t.Fatal(err)
	}
	checkTree(t, dst, files)
}

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

// TestDiskFull fills a small tmpfs: the write fails with ErrDiskFull, nothing
// is committed and the partial chunks are removed. Needs root (mount).
func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	if err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir).Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount tmpfs (needs root): %v", err)
		}
		t.Skipf("mount tmpfs needs root: %v", err)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	s := openStore(t, filepath.Join(dir, "store"), 0)
	src := t.TempDir()
	small := map[string][]byte{"w": randBytes(60, 200<<10)}
	writeTree(t, src, small)
	if _, err := s.AddDir("j", 1, src, time.Now()); err != nil {
		t.Fatal(err)
	}
	usage := s.Usage()
	writeTree(t, src, map[string][]byte{"w": randBytes(61, 2<<20)})
	_, err := s.AddDir("j", 2, src, time.Now())
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("add 2 MiB to a 1 MiB disk: got %v, want ErrDiskFull", err)
	}
	if vs := s.Versions("j"); len(vs) != 1 {
		t.Fatalf("versions after disk full: got %v, want [1]", vs)
	}
	if s.Usage() != usage {
		t.Fatalf("usage after disk full: got %d, want %d (partial data removed)", s.Usage(), usage)
	}
	tmps, _ := os.ReadDir(filepath.Join(dir, "store", "tmp"))
	if len(tmps) != 0 {
		t.Fatalf("temp files left after disk full: %d", len(tmps))
	}
	var onDisk int64
	filepath.Walk(filepath.Join(dir, "store", "chunks"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			onDisk += fi.Size()
		}
		return nil
	})
	if onDisk != usage {
		t.Fatalf("chunk bytes on disk: got %d, want %d", onDisk, usage)
	}
	dst := t.TempDir()
	if err := s.Restore("j", 1, dst); err != nil {
		t.Fatal(err)
	}
	checkTree(t, dst, small)
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

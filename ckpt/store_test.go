package ckpt

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
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

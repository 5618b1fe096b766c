package ckpt

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// eventLog records the store's durability steps in order.
type eventLog struct {
	mu     sync.Mutex
	events []string // "kind path"
}

func (l *eventLog) add(kind, path string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, kind+" "+path)
}

// index returns the position of the first event kind+path at or after
// from, or -1.
func (l *eventLog) index(kind, path string, from int) int {
	for i := from; i < len(l.events); i++ {
		if l.events[i] == kind+" "+path {
			return i
		}
	}
	return -1
}

// TestCommitCrashPoints receives a version chunk by chunk and records every
// durability step (fsync of a chunk file, of a directory, syncfs, the
// manifest landing). A crash can happen between any two steps: at each
// point, a manifest that may be on disk must only name chunks whose data
// and directory entries are already durable, so no crash point leaves a
// committed version with a torn or missing chunk. A transfer resumed after
// a restart commits chunks the previous process wrote: those are made
// durable by one syncfs before the manifest lands.
func TestCommitCrashPoints(t *testing.T) {
	src := t.TempDir()
	files := map[string][]byte{"model.pt": randBytes(90, 900<<10)}
	writeTree(t, src, files)
	sender := openStore(t, t.TempDir(), 0)
	m, err := sender.AddDir("j", 1, src, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	put := func(r *Store, refs []ChunkRef) {
		t.Helper()
		for _, c := range refs {
			b, err := sender.ReadChunk(c.Hash)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.PutChunk(c.Hash, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	all := m.Chunks()
	for _, tc := range []struct {
		name string
		// before is how many chunks a previous process stored before it
		// stopped; the rest are stored after the store is reopened.
		before int
	}{{"received", 0}, {"resumed after restart", len(all) / 2}} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.before > 0 {
				prev := openStore(t, root, 0)
				if err := prev.BeginPending(m); err != nil {
					t.Fatal(err)
				}
				put(prev, all[:tc.before])
				if err := prev.Close(); err != nil {
					t.Fatal(err)
				}
			}
			r := openStore(t, root, 0)
			log := &eventLog{}
			r.syncHook = log.add
			if err := r.BeginPending(m); err != nil {
				t.Fatal(err)
			}
			put(r, all[tc.before:])
			if err := r.Commit(m); err != nil {
				t.Fatal(err)
			}
			manifest := filepath.Join(root, "versions", "j", versionFile(1))
			at := log.index("manifest", manifest, 0)
			if at < 0 {
				t.Fatalf("no manifest step recorded; steps: %v", log.events)
			}
			if tc.before > 0 {
				if s := log.index("syncfs", root, 0); s < 0 || s > at {
					t.Fatalf("syncfs at step %d, manifest at %d: %d chunks found at Open are not known durable before the manifest", s, at, tc.before)
				}
			}
			if tc.before == 0 {
				// The first chunk creates a chunks/xx directory, so
				// chunks/ itself has a new entry to make durable.
				chunksDir := filepath.Join(root, "chunks")
				if d := log.index("dir", chunksDir, 0); d < 0 || d > at {
					t.Fatalf("chunks/ (new subdirectories) fsynced at step %d, manifest at %d: want before", d, at)
				}
			}
			for _, c := range all[tc.before:] {
				p := r.chunkPath(c.Hash)
				f := log.index("file", p, 0)
				if f < 0 || f > at {
					t.Fatalf("chunk %s fsynced at step %d, manifest at %d: a crash in between leaves a committed version with a torn chunk", c.Hash, f, at)
				}
				if d := log.index("dir", filepath.Dir(p), f); d < 0 || d > at {
					t.Fatalf("directory of chunk %s fsynced at step %d (file at %d), manifest at %d: its entry may be lost", c.Hash, d, f, at)
				}
			}
			if n := len(all) - tc.before; len(log.events) < n+2 {
				t.Fatalf("%d steps for %d chunks: want at least one fsync per chunk", len(log.events), n)
			}
			dst := t.TempDir()
			if err := r.Restore("j", 1, dst); err != nil {
				t.Fatal(err)
			}
			checkTree(t, dst, files)
		})
	}
}

// TestFsyncFailureCommitsNothing: a chunk whose fsync fails may never reach
// the disk, so the commit must fail, drop that chunk (a resume fetches it
// again) and commit nothing; once the chunk is stored again it commits.
func TestFsyncFailureCommitsNothing(t *testing.T) {
	src := t.TempDir()
	files := map[string][]byte{"model.pt": randBytes(91, 300<<10)}
	writeTree(t, src, files)
	sender := openStore(t, t.TempDir(), 0)
	m, err := sender.AddDir("j", 1, src, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r := openStore(t, t.TempDir(), 0)
	var calls int
	var mu sync.Mutex
	r.fsync = func(f *os.File) error {
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls == 3 {
			return syscall.EIO
		}
		return f.Sync()
	}
	if err := r.BeginPending(m); err != nil {
		t.Fatal(err)
	}
	put := func(refs []ChunkRef) {
		t.Helper()
		for _, c := range refs {
			b, err := sender.ReadChunk(c.Hash)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.PutChunk(c.Hash, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(m.Chunks())
	err = r.Commit(m)
	if !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "input/output error") {
		t.Fatalf("commit after a failed fsync: got %v, want ErrIncomplete with the I/O error", err)
	}
	if vs := r.Versions("j"); len(vs) != 0 {
		t.Fatalf("versions after a failed fsync: got %v, want none", vs)
	}
	missing := r.Missing(m.Chunks())
	if len(missing) != 1 {
		t.Fatalf("chunks missing after a failed fsync: got %d, want 1 (the one that failed)", len(missing))
	}
	put(missing)
	if err := r.Commit(m); err != nil {
		t.Fatalf("commit after storing the chunk again: %v", err)
	}
	dst := t.TempDir()
	if err := r.Restore("j", 1, dst); err != nil {
		t.Fatal(err)
	}
	checkTree(t, dst, files)
}

const killChildEnv = "RECLAIMNET_CKPT_KILL_CHILD"

// killVersionData is what the child commits as version v.
func killVersionData(v uint64) []byte { return randBytes(1000+v, 200<<10+int(v)*4099) }

// TestKillDuringCommits kills (SIGKILL) a process that commits versions
// back to back, at varying points, several times over the same store. After
// each kill the store reopens, every version the child reported committed
// is there, and every version present restores byte for byte: a killed
// commit leaves either a whole version or none.
func TestKillDuringCommits(t *testing.T) {
	if root := os.Getenv(killChildEnv); root != "" {
		killChild(t, root)
		return
	}
	// The child writes its source files next to the store, inside this
	// test's temp directory (a killed child cannot clean up its own).
	root := filepath.Join(t.TempDir(), "store")
	reported := map[uint64]bool{}
	for round := range 4 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringCommits$")
		cmd.Env = append(os.Environ(), killChildEnv+"="+root)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		// Kill after a few commits, a little later each round, so the kill
		// lands at different points of a commit.
		for n := 0; n < 2+round && sc.Scan(); {
			if v, ok := strings.CutPrefix(sc.Text(), "committed "); ok {
				x, _ := strconv.ParseUint(v, 10, 64)
				reported[x] = true
				n++
			}
		}
		time.Sleep(time.Duration(round*3) * time.Millisecond)
		cmd.Process.Kill()
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "committed "); ok {
				x, _ := strconv.ParseUint(v, 10, 64)
				reported[x] = true
			}
		}
		cmd.Wait()
		s, err := Open(Config{Root: root, Chunker: testChunker})
		if err != nil {
			t.Fatalf("round %d: reopen after kill: %v", round, err)
		}
		have := map[uint64]bool{}
		for _, v := range s.Versions("j") {
			have[v] = true
			dst := t.TempDir()
			if err := s.Restore("j", v, dst); err != nil {
				t.Fatalf("round %d: version %d present but does not restore: %v", round, v, err)
			}
			checkTree(t, dst, map[string][]byte{"w.bin": killVersionData(v)})
		}
		for v := range reported {
			if !have[v] {
				t.Fatalf("round %d: version %d was reported committed but is gone after the kill", round, v)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if len(reported) < 8 {
		t.Fatalf("child committed %d versions in 4 rounds: want at least 8", len(reported))
	}
}

// killChild commits new versions of job "j" until it is killed, printing
// "committed V" after each.
func killChild(t *testing.T, root string) {
	s, err := Open(Config{Root: root, Chunker: testChunker})
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(filepath.Dir(root), "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for range 10000 {
		v := s.NextVersion("j")
		if err := os.WriteFile(filepath.Join(src, "w.bin"), killVersionData(v), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddDir("j", v, src, time.Now()); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("committed %d\n", v)
	}
}

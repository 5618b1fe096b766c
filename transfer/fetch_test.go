package transfer

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/ckpt"
)

// treeHash hashes a directory tree: every path with its kind, mode and
// content (a symlink's target).
func treeHash(t testing.TB, dir string) [32]byte {
	t.Helper()
	h := sha256.New()
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%q %v\n", rel, info.Mode())
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			fmt.Fprintf(h, "-> %q\n", target)
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// jobWithOutputs commits a checkpoint with outputs of job on n and returns
// the two source directories.
func jobWithOutputs(t *testing.T, n *node, job string, outBytes int) (ckDir, outDir string) {
	t.Helper()
	ckDir, outDir = t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(ckDir, "state.pt"), fp32Bytes(50, 1<<20), 0o644)
	os.MkdirAll(filepath.Join(outDir, "models"), 0o755)
	os.Mkdir(filepath.Join(outDir, "plots"), 0o700)
	os.WriteFile(filepath.Join(outDir, "models", "final.pt"), randomBytes(51, outBytes), 0o644)
	os.WriteFile(filepath.Join(outDir, "metrics.csv"), []byte("step,loss\n1,0.9\n"), 0o600)
	os.Symlink("models/final.pt", filepath.Join(outDir, "latest.pt"))
	if _, err := n.store.AddCheckpoint(job, 1, ckDir, outDir, time.Now()); err != nil {
		t.Fatal(err)
	}
	return ckDir, outDir
}

// allowLaptop lets only the node "laptop" fetch.
func allowLaptop(peer, job string, checkpoint bool) error {
	if peer != "laptop" {
		return fmt.Errorf("%s may not have the outputs of %s", peer, job)
	}
	return nil
}

func TestFetchOutputsAndCheckpoint(t *testing.T) {
	checkNoLeak(t)
	dev := devCA(t)
	holder, laptop := newNode(t, dev, "holder", 0, ""), newNode(t, dev, "laptop", 0, "")
	srv := listen(t, holder, Hooks{AuthorizeFetch: allowLaptop})
	ckDir, outDir := jobWithOutputs(t, holder, "train", 3<<20)
	// A client without a store can fetch.
	laptop.cfg.Store = nil
	c := client(t, laptop)
	base := t.TempDir()
	dest, ckDest := filepath.Join(base, "results"), filepath.Join(base, "ckpt")
	os.Mkdir(dest, 0o755) // an empty destination is fine
	res, err := c.Fetch(context.Background(), FetchRequest{Addr: srv.Addr().String(), Node: "holder", JobID: "train", Dest: dest, CheckpointDest: ckDest})
	if err != nil {
		t.Fatal(err)
	}
	if treeHash(t, dest) != treeHash(t, outDir) {
		t.Error("fetched outputs differ from what the job wrote")
	}
	if treeHash(t, ckDest) != treeHash(t, ckDir) {
		t.Error("fetched checkpoint differs from the job's")
	}
	if res.Received != res.Chunks || res.AlreadyHad != 0 || res.Attempts != 1 || res.Manifest.Version != 1 {
		t.Errorf("result %+v: want every chunk received in one attempt", res)
	}
	ents, _ := os.ReadDir(base)
	if len(ents) != 2 {
		t.Errorf("beside the destinations: %v, want only them (no staging or partial directory)", ents)
	}
	// Outputs only: the checkpoint's chunks do not move.
	dest2 := filepath.Join(base, "again")
	res2, err := c.Fetch(context.Background(), FetchRequest{Addr: srv.Addr().String(), Node: "holder", JobID: "train", Dest: dest2})
	if err != nil {
		t.Fatal(err)
	}
	if res2.ReceivedBytes > 3<<20+1024 || treeHash(t, dest2) != treeHash(t, outDir) {
		t.Errorf("outputs-only fetch received %d bytes (outputs are %d)", res2.ReceivedBytes, 3<<20)
	}
}

func TestFetchResumesAfterKilledConnection(t *testing.T) {
	dev := devCA(t)
	t.Run("connection cut, same call resumes", func(t *testing.T) {
		checkNoLeak(t)
		holder, laptop := newNode(t, dev, "holder", 0, ""), newNode(t, dev, "laptop", 0, "")
		srv := listen(t, holder, Hooks{AuthorizeFetch: allowLaptop})
		_, outDir := jobWithOutputs(t, holder, "train", 12<<20)
		px := newProxy(t, srv.Addr())
		var stored atomic.Int64
		var cutAt int64
		laptop.cfg.chunkStored = func(int) {
			if stored.Add(1) == 8 {
				cutAt = stored.Load()
				px.blackout.Store(true) // the path dies mid-fetch
			}
		}
		laptop.cfg.fetchAttempt = func(n int) {
			if n == 2 {
				px.blackout.Store(false)
			}
		}
		c := client(t, laptop)
		dest := filepath.Join(t.TempDir(), "out")
		res, err := c.Fetch(context.Background(), FetchRequest{Addr: px.addr(), Node: "holder", JobID: "train", Dest: dest})
		if err != nil {
			t.Fatal(err)
		}
		if cutAt == 0 || res.Attempts < 2 {
			t.Fatalf("cut after %d chunks, %d attempts: the connection was never cut", cutAt, res.Attempts)
		}
		// What arrived before the cut was kept: no chunk came twice.
		if res.Received != res.Chunks || stored.Load() != int64(res.Chunks) {
			t.Errorf("received %d chunks (%d stored) of %d", res.Received, stored.Load(), res.Chunks)
		}
		if treeHash(t, dest) != treeHash(t, outDir) {
			t.Error("fetched outputs differ from what the job wrote")
		}
	})
	t.Run("fetch killed, a retry fetches the rest", func(t *testing.T) {
		checkNoLeak(t)
		holder, laptop := newNode(t, dev, "holder", 0, ""), newNode(t, dev, "laptop", 0, "")
		srv := listen(t, holder, Hooks{AuthorizeFetch: allowLaptop})
		_, outDir := jobWithOutputs(t, holder, "train", 12<<20)
		ctx, cancel := context.WithCancel(context.Background())
		var stored atomic.Int64
		laptop.cfg.chunkStored = func(int) {
			if stored.Add(1) == 10 {
				cancel()
			}
		}
		c := client(t, laptop)
		dest := filepath.Join(t.TempDir(), "out")
		req := FetchRequest{Addr: srv.Addr().String(), Node: "holder", JobID: "train", Dest: dest}
		if _, err := c.Fetch(ctx, req); !errors.Is(err, ErrCancelled) {
			t.Fatalf("killed fetch: got %v, want ErrCancelled", err)
		}
		if _, err := os.Stat(dest); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a killed fetch left its destination: %v", err)
		}
		if _, err := os.Stat(StagingDir(dest)); err != nil {
			t.Fatalf("a killed fetch kept nothing to resume from: %v", err)
		}
		laptop.cfg.chunkStored = nil
		c2 := client(t, laptop)
		res, err := c2.Fetch(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if res.AlreadyHad < 10 || res.AlreadyHad+res.Received != res.Chunks || res.Received == 0 {
			t.Errorf("retry: had %d, received %d, of %d chunks; want the first 10 or more kept and only the rest fetched", res.AlreadyHad, res.Received, res.Chunks)
		}
		if treeHash(t, dest) != treeHash(t, outDir) {
			t.Error("fetched outputs differ from what the job wrote")
		}
		if _, err := os.Stat(StagingDir(dest)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("staging directory left after success: %v", err)
		}
	})
}

func TestFetchRefusals(t *testing.T) {
	checkNoLeak(t)
	dev := devCA(t)
	holder, laptop, mallory := newNode(t, dev, "holder", 0, ""), newNode(t, dev, "laptop", 0, ""), newNode(t, dev, "mallory", 0, "")
	srv := listen(t, holder, Hooks{AuthorizeFetch: allowLaptop})
	jobWithOutputs(t, holder, "train", 1<<20)
	jobWithOutputs(t, holder, "old", 1<<20)
	now := time.Now()
	if _, err := holder.store.Retain("old", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.store.Purge(now.Add(2 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	c := client(t, laptop)
	fetch := func(c *Client, addr, job, dest string) error {
		_, err := c.Fetch(context.Background(), FetchRequest{Addr: addr, Node: "holder", JobID: job, Dest: dest})
		return err
	}
	base := t.TempDir()
	for _, tc := range []struct {
		name string
		err  error
		run  func(dest string) error
	}{
		{"unknown job", ErrUnknownJob, func(d string) error { return fetch(c, srv.Addr().String(), "nosuch", d) }},
		{"purged outputs", ErrPurged, func(d string) error { return fetch(c, srv.Addr().String(), "old", d) }},
		{"a peer the callback refuses", ErrRefused, func(d string) error { return fetch(client(t, mallory), srv.Addr().String(), "train", d) }},
		{"a server without a fetch callback", ErrRefused, func(d string) error {
			plain := listen(t, holder, Hooks{})
			return fetch(c, plain.Addr().String(), "train", d)
		}},
		{"a destination that is not empty", ErrDestExists, func(d string) error {
			os.MkdirAll(d, 0o755)
			os.WriteFile(filepath.Join(d, "precious"), []byte("x"), 0o644)
			return fetch(c, "127.0.0.1:1", "train", d) // refused before any packet
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := filepath.Join(base, strings.ReplaceAll(tc.name, " ", "-"))
			err := tc.run(dest)
			if !errors.Is(err, tc.err) {
				t.Fatalf("got %v, want %v", err, tc.err)
			}
			if tc.err != ErrDestExists {
				if _, serr := os.Stat(dest); !errors.Is(serr, os.ErrNotExist) {
					t.Errorf("a refused fetch created its destination")
				}
				if _, serr := os.Stat(StagingDir(dest)); !errors.Is(serr, os.ErrNotExist) {
					t.Errorf("a refused fetch left a staging directory")
				}
			}
		})
	}
}

// TestFetchDiskFull fetches into a 2 MiB tmpfs: a clear ErrDiskFull, and
// nothing there that looks like a result.
func TestFetchDiskFull(t *testing.T) {
	checkNoLeak(t)
	dir := t.TempDir()
	if err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", dir).Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount tmpfs (needs root): %v", err)
		}
		t.Skipf("mount tmpfs needs root: %v", err)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	dev := devCA(t)
	holder, laptop := newNode(t, dev, "holder", 0, ""), newNode(t, dev, "laptop", 0, "")
	srv := listen(t, holder, Hooks{AuthorizeFetch: allowLaptop})
	jobWithOutputs(t, holder, "train", 6<<20)
	c := client(t, laptop)
	dest := filepath.Join(dir, "results")
	_, err := c.Fetch(context.Background(), FetchRequest{Addr: srv.Addr().String(), Node: "holder", JobID: "train", Dest: dest})
	if !errors.Is(err, ckpt.ErrDiskFull) {
		t.Fatalf("fetch onto a full disk: got %v, want ErrDiskFull", err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != filepath.Base(StagingDir(dest)) {
			t.Errorf("left on the full disk: %s (only the hidden staging directory may stay)", e.Name())
		}
	}
}

package transfer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/policy"
)

// TestBundleReplicatesLikeCheckpoint sends a bundle as a checkpoint is
// sent: the receiver can lay out the exact bundle, a resend moves
// nothing, and a changed bundle moves only what the receiver lacks.
func TestBundleReplicatesLikeCheckpoint(t *testing.T) {
	checkNoLeak(t)
	dev := devCA(t)
	a, b := newNode(t, dev, "node-a", 0, ""), newNode(t, dev, "node-b", 0, "")
	var committed []string
	srv := listen(t, b, Hooks{OnCommit: func(_ string, _ policy.TrafficClass, m *ckpt.Manifest) { committed = append(committed, m.JobID) }})
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "train.py"), []byte("import torch\n"), 0o755)
	os.MkdirAll(filepath.Join(dir, "data"), 0o755)
	os.WriteFile(filepath.Join(dir, "data", "input.bin"), randomBytes(60, 6<<20), 0o644)
	os.Symlink("data/input.bin", filepath.Join(dir, "input"))
	b1, err := a.store.AddBundle(dir, ckpt.BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, a)
	send := func(bu *ckpt.Bundle) Stats {
		t.Helper()
		st, err := c.Send(context.Background(), Request{Addr: srv.Addr().String(), Node: "node-b", JobID: bu.Manifest.JobID, Version: bu.Manifest.Version, Class: policy.ClassMigration, Rate: Unlimited})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if lacks := b.store.MissingBytes(b1.Manifest); lacks != b1.Stored {
		t.Errorf("receiver lacks %d bytes before, want %d", lacks, b1.Stored)
	}
	st := send(b1)
	if st.RawBytes != b1.Stored {
		t.Errorf("first send moved %d bytes, want the bundle's %d", st.RawBytes, b1.Stored)
	}
	if err := b.store.HasBundle(b1.ID); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(t.TempDir(), "work")
	t.Cleanup(func() { ckpt.RemoveLayout(work) })
	if err := b.store.LayoutBundle(b1.ID, work); err != nil {
		t.Fatal(err)
	}
	if err := b.store.VerifyLayout(b1.ID, work); err != nil {
		t.Fatal(err)
	}
	if treeHashNoModes(t, work) != treeHashNoModes(t, dir) {
		t.Error("the bundle laid out on the receiver differs from the source directory")
	}
	if st := send(b1); st.ChunksSent != 0 {
		t.Errorf("resend of a bundle the receiver holds: %d chunks", st.ChunksSent)
	}
	// A small edit: only the changed file's bytes move.
	os.WriteFile(filepath.Join(dir, "train.py"), []byte("import torch  # v2\n"), 0o755)
	b2, err := a.store.AddBundle(dir, ckpt.BundleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lacks := b.store.MissingBytes(b2.Manifest)
	if st := send(b2); st.RawBytes != lacks || lacks != int64(len("import torch  # v2\n")) {
		t.Errorf("changed bundle: moved %d bytes, receiver lacked %d, want the one edited file", st.RawBytes, lacks)
	}
	if len(committed) != 3 || committed[0] != ckpt.BundleKey(b1.ID) {
		t.Errorf("receiver committed %v", committed)
	}
}

// TestOutputsSurviveAMove sends a checkpoint with outputs and restores
// both on the receiver.
func TestOutputsSurviveAMove(t *testing.T) {
	checkNoLeak(t)
	dev := devCA(t)
	a, b := newNode(t, dev, "node-a", 0, ""), newNode(t, dev, "node-b", 0, "")
	srv := listen(t, b, Hooks{})
	ckDir, outDir := jobWithOutputs(t, a, "train", 2<<20)
	if _, err := client(t, a).Send(context.Background(), Request{Addr: srv.Addr().String(), Node: "node-b", JobID: "train", Version: 1, Rate: Unlimited}); err != nil {
		t.Fatal(err)
	}
	m, err := b.store.Latest("train")
	if err != nil {
		t.Fatal(err)
	}
	ckDst, outDst := t.TempDir(), filepath.Join(t.TempDir(), "out")
	if err := b.store.RestoreCheckpoint(m, ckDst, outDst); err != nil {
		t.Fatal(err)
	}
	if treeHash(t, ckDst) != treeHash(t, ckDir) || treeHash(t, outDst) != treeHash(t, outDir) {
		t.Error("checkpoint or outputs restored on the receiver differ from the sender's")
	}
	// The job resumes there and ends: its last version is kept for its
	// time, then purged, and a fetch says so.
	now := time.Now()
	if _, err := b.store.Retain("train", now.Add(ckpt.DefaultKeep)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Purge(now.Add(ckpt.DefaultKeep)); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.store.Purged("train"); !ok || len(b.store.Versions("train")) != 0 {
		t.Error("not purged after the keep time")
	}
	if _, err := b.store.Latest("train"); !errors.Is(err, ckpt.ErrNoVersion) {
		t.Errorf("after purge: %v", err)
	}
}

// treeHashNoModes is treeHash without the modes (a layout has no write
// bits).
func treeHashNoModes(t *testing.T, dir string) [32]byte {
	t.Helper()
	cp := t.TempDir()
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		dst := filepath.Join(cp, rel)
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			os.Symlink(target, dst)
		case info.IsDir():
			os.Mkdir(dst, 0o755)
		default:
			data, _ := os.ReadFile(p)
			os.WriteFile(dst, data, 0o644)
		}
		return nil
	})
	return treeHash(t, cp)
}

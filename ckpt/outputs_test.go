package ckpt

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// treeOf reads a directory into path -> content ("->target" for a
// symlink, "/" for a directory).
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			t, _ := os.Readlink(p)
			out[rel] = "->" + t
		case info.IsDir():
			out[rel] = "/"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d entries, want %d (%v vs %v)", what, len(got), len(want), keys(got), keys(want))
	}
	for p, w := range want {
		if g, ok := got[p]; !ok || g != w {
			t.Errorf("%s: %s differs (present %v)", what, p, ok)
		}
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestOutputsCarriedThroughCheckpoint(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	ck, out := t.TempDir(), t.TempDir()
	writeTree(t, ck, map[string][]byte{"state.pt": randBytes(30, 150<<10)})
	writeTree(t, out, map[string][]byte{"metrics.csv": []byte("step,loss\n1,0.5\n"), "models/best.pt": randBytes(31, 90<<10)})
	os.Mkdir(filepath.Join(out, "plots"), 0o755)
	os.Symlink("models/best.pt", filepath.Join(out, "latest.pt"))
	m1, err := s.AddCheckpoint("job", 1, ck, out, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ckFiles, outFiles, has := SplitOutputs(m1.Files)
	if !has || len(ckFiles) != 1 || len(outFiles) != 5 {
		t.Fatalf("split: %d checkpoint files, %d outputs (has %v), want 1 and 5", len(ckFiles), len(outFiles), has)
	}

	// On another node (here: a restore into fresh directories) both come
	// back, apart.
	ckDst, outDst := t.TempDir(), filepath.Join(t.TempDir(), "out")
	if err := s.RestoreCheckpoint(m1, ckDst, outDst); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "checkpoint", treeOf(t, ckDst), treeOf(t, ck))
	sameTree(t, "outputs", treeOf(t, outDst), treeOf(t, out))
	// The job's restore directory holds its checkpoint only.
	only := t.TempDir()
	if err := s.Restore("job", 1, only); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "restore without outputs", treeOf(t, only), treeOf(t, ck))

	// The next checkpoint carries the outputs as they are then; unchanged
	// ones cost nothing.
	usage := s.Usage()
	os.WriteFile(filepath.Join(out, "metrics.csv"), []byte("step,loss\n1,0.5\n2,0.4\n"), 0o644)
	m2, err := s.AddCheckpoint("job", 2, ck, out, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if grew := s.Usage() - usage; grew != int64(len("step,loss\n1,0.5\n2,0.4\n")) {
		t.Errorf("second checkpoint stored %d new bytes, want only the changed metrics file", grew)
	}
	outDst2 := filepath.Join(t.TempDir(), "out")
	if err := s.RestoreCheckpoint(m2, "", outDst2); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "outputs v2", treeOf(t, outDst2), treeOf(t, out))

	// A final version with outputs only; an empty output directory counts.
	empty := t.TempDir()
	m3, err := s.AddCheckpoint("job", 3, "", empty, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if c, o, has := SplitOutputs(m3.Files); len(c) != 0 || len(o) != 0 || !has {
		t.Errorf("empty outputs: %d checkpoint files, %d outputs, has %v", len(c), len(o), has)
	}
	if _, _, has := SplitOutputs(ckFiles); has {
		t.Error("a version without the output directory says it has outputs")
	}
}

func TestCheckpointRefusals(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	ck := t.TempDir()
	writeTree(t, ck, map[string][]byte{OutputDir + "/x": []byte("sneaky")})
	if _, err := s.AddCheckpoint("job", 1, ck, "", time.Now()); err == nil {
		t.Error("a checkpoint holding the outputs' reserved name was accepted")
	}
	out := t.TempDir()
	syscall.Mkfifo(filepath.Join(out, "pipe"), 0o644)
	if _, err := s.AddCheckpoint("job", 1, "", out, time.Now()); !errors.Is(err, ErrUnsupportedEntry) {
		t.Errorf("a FIFO in the outputs: got %v, want ErrUnsupportedEntry", err)
	}
	out = t.TempDir()
	os.Symlink("/etc/shadow", filepath.Join(out, "l"))
	if _, err := s.AddCheckpoint("job", 1, "", out, time.Now()); !errors.Is(err, ErrLinkOutside) {
		t.Errorf("a symlink out of the outputs: got %v, want ErrLinkOutside", err)
	}
	if len(s.Jobs()) != 0 || s.Usage() != 0 {
		t.Errorf("refused checkpoints left %v, %d bytes", s.Jobs(), s.Usage())
	}
}

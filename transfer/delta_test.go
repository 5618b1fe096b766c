package transfer

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/ckpt"
)

// torchLikeZip writes the layout of torch.save output: a zip of stored
// (uncompressed) entries archive/data.pkl, archive/data/<n> (one per tensor
// storage) and archive/version.
func torchLikeZip(t testing.TB, tensors [][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(name string, b []byte) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
	}
	pkl := []byte("\x80\x02}q\x00(")
	for i, tt := range tensors {
		pkl = fmt.Appendf(pkl, "X\x06\x00\x00\x00layer%dq%d torch.FloatStorage %d", i, i, len(tt)/4)
	}
	add("archive/data.pkl", pkl)
	for i, tt := range tensors {
		add(fmt.Sprintf("archive/data/%d", i), tt)
	}
	add("archive/version", []byte("3\n"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// torchSave makes two real torch.save files with Debian's PyTorch: an
// embedding that changes and grows (shifting every later offset), a frozen
// block of tensors identical in both, and a head that changes.
func torchSave(t testing.TB, dir string, frozenMiB, changedMiB int) (old, cur string, ok bool) {
	t.Helper()
	script := `
import sys, torch
frozen_mib, changed_mib = int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
frozen = [torch.randn(256, 1024) for _ in range(frozen_mib)]
def model(seed, grow):
    g = torch.Generator().manual_seed(seed)
    d = {"embed": torch.randn(1000 + grow, 256, generator=g)}
    for i, f in enumerate(frozen):
        d["frozen.%d" % i] = f
    for i in range(changed_mib):
        d["head.%d" % i] = torch.randn(256, 1024, generator=g)
    return d
torch.save(model(1, 0), sys.argv[1])
torch.save(model(2, 333), sys.argv[2])
`
	// Same file name in both: torch names the archive's entries after it,
	// as a job writing model.pt every time does.
	os.MkdirAll(filepath.Join(dir, "1"), 0o755)
	os.MkdirAll(filepath.Join(dir, "2"), 0o755)
	old, cur = filepath.Join(dir, "1", "model.pt"), filepath.Join(dir, "2", "model.pt")
	cmd := exec.Command("/usr/bin/python3", "-c", script, old, cur, fmt.Sprint(frozenMiB), fmt.Sprint(changedMiB))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Logf("torch.save unavailable: %v: %s", err, out)
		return "", "", false
	}
	return old, cur, true
}

// TestDeltaTransfer: the second checkpoint shares a frozen block with the
// first but at shifted offsets; the hand-off must put at most 1.15 times the
// changed bytes on the wire (counted as UDP payload by a proxy: QUIC, TLS,
// manifest and the have-exchange included).
func TestDeltaTransfer(t *testing.T) {
	const frozenMiB, changedMiB = 32, 24
	t.Run("zip layout written in Go", func(t *testing.T) {
		var v1, v2 [][]byte
		v1 = append(v1, fp32Bytes(100, 1000*256*4))
		v2 = append(v2, fp32Bytes(101, 1333*256*4)) // grows: later offsets shift
		for i := 0; i < frozenMiB; i++ {
			f := fp32Bytes(uint64(200+i), 1<<20)
			v1, v2 = append(v1, f), append(v2, f)
		}
		for i := 0; i < changedMiB; i++ {
			v1 = append(v1, fp32Bytes(uint64(300+i), 1<<20))
			v2 = append(v2, fp32Bytes(uint64(400+i), 1<<20))
		}
		runDelta(t, torchLikeZip(t, v1), torchLikeZip(t, v2), frozenMiB<<20)
	})
	t.Run("torch.save", func(t *testing.T) {
		old, cur, ok := torchSave(t, t.TempDir(), frozenMiB, changedMiB)
		if !ok {
			if os.Getenv("CI") == "true" {
				t.Fatal("Debian python3-torch is required in CI (/usr/bin/python3 -c 'import torch')")
			}
			t.Skip("needs Debian python3-torch at /usr/bin/python3")
		}
		b1, _ := os.ReadFile(old)
		b2, _ := os.ReadFile(cur)
		runDelta(t, b1, b2, frozenMiB<<20)
	})
}

func runDelta(t *testing.T, v1, v2 []byte, frozenBytes int) {
	checkNoLeak(t)
	dev := devCA(t)
	a := newNodeChunker(t, dev, "a", 0, "", ckpt.DefaultChunker)
	b := newNodeChunker(t, dev, "b", 0, "", ckpt.DefaultChunker)
	srv := listen(t, b, Hooks{})
	px := newProxy(t, srv.Addr())
	c := client(t, a)
	start := time.Now()
	addCheckpoint(t, a, "j", 1, map[string][]byte{"model.pt": v1})
	t.Logf("stored v1 in %v", time.Since(start))
	if _, err := c.Send(context.Background(), Request{Addr: px.addr(), Node: "b", JobID: "j", Version: 1, Rate: Unlimited}); err != nil {
		t.Fatal(err)
	}
	t.Logf("sent v1 after %v", time.Since(start))
	files := map[string][]byte{"model.pt": v2}
	addCheckpoint(t, a, "j", 2, files)
	before := px.toServer.Load()
	st, err := c.Send(context.Background(), Request{Addr: px.addr(), Node: "b", JobID: "j", Version: 2, Rate: Unlimited})
	if err != nil {
		t.Fatal(err)
	}
	wire := px.toServer.Load() - before
	t.Logf("sent v2 after %v", time.Since(start))
	changed := len(v2) - frozenBytes
	ratio := float64(wire) / float64(changed)
	t.Logf("v2 %d bytes, changed %d, chunk payload %d raw %d, UDP bytes to receiver %d: %.3f x changed", len(v2), changed, st.WireBytes, st.RawBytes, wire, ratio)
	if ratio > 1.15 {
		t.Errorf("wire bytes for the delta: got %.3f x changed bytes, want <= 1.15", ratio)
	}
	// Check it really reused the frozen block rather than compressing it away.
	if st.RawBytes > int64(changed)+int64(8<<20) {
		t.Errorf("raw bytes of chunks sent: got %d, want <= changed %d + 8 MiB of boundary chunks", st.RawBytes, changed)
	}
	checkRestored(t, b, "j", 2, files)
}

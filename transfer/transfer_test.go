package transfer

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"

	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/policy"
)

func devCA(t testing.TB) *pki.Dev {
	t.Helper()
	d, err := pki.NewDev()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRoundTrip(t *testing.T) {
	checkNoLeak(t)
	size := 200 << 20
	if testing.Short() {
		size = 24 << 20
	}
	dev := devCA(t)
	a, b := newNode(t, dev, "node-a", 0, ""), newNode(t, dev, "node-b", 0, "")
	var committed atomic.Int64
	srv := listen(t, b, Hooks{OnCommit: func(peer string, class policy.TrafficClass, m *ckpt.Manifest) {
		if peer == "node-a" && class == policy.ClassMigration {
			committed.Add(1)
		}
	}})
	files := map[string][]byte{
		"archive/data/0":   fp32Bytes(1, size/2),
		"archive/data/1":   randomBytes(2, size/2-12345),
		"archive/data.pkl": []byte("pickle"),
	}
	m := addCheckpoint(t, a, "job1", 1, files)
	c := client(t, a)
	tr, err := c.Start(context.Background(), Request{Addr: srv.Addr().String(), Node: "node-b", JobID: "job1", Version: 1, Class: policy.ClassMigration, Rate: Unlimited})
	if err != nil {
		t.Fatal(err)
	}
	if tr.LocalPort() == 0 || tr.LocalPort() == srv.Addr().Port {
		t.Errorf("transfer local port %d: want its own ephemeral port", tr.LocalPort())
	}
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	st := tr.Stats()
	if st.RawBytes != m.TotalSize() || st.Attempts != 1 {
		t.Errorf("stats: raw %d in %d attempts, want %d in 1", st.RawBytes, st.Attempts, m.TotalSize())
	}
	if st.Shuffled == 0 || st.WireBytes >= st.RawBytes {
		t.Errorf("fp32 half: %d chunks shuffled, wire %d of raw %d; want shuffle used and fewer bytes", st.Shuffled, st.WireBytes, st.RawBytes)
	}
	if committed.Load() != 1 {
		t.Errorf("OnCommit calls with peer and class: got %d, want 1", committed.Load())
	}
	checkRestored(t, b, "job1", 1, files)

	// A second send of the same version moves no chunk.
	st2, err := c.Send(context.Background(), Request{Addr: srv.Addr().String(), Node: "node-b", JobID: "job1", Version: 1, Rate: Unlimited})
	if err != nil {
		t.Fatal(err)
	}
	if st2.ChunksSent != 0 {
		t.Errorf("resend of a version the receiver holds: sent %d chunks, want 0", st2.ChunksSent)
	}
}

func TestCorruptionDetectedAndRefetched(t *testing.T) {
	dev := devCA(t)
	files := map[string][]byte{"w": randomBytes(3, 6<<20)}

	t.Run("bytes flipped in UDP datagrams", func(t *testing.T) {
		checkNoLeak(t)
		a, b := newNode(t, dev, "a", 0, ""), newNode(t, dev, "b", 0, "")
		srv := listen(t, b, Hooks{})
		px := newProxy(t, srv.Addr())
		px.flipOne.Store(50)
		addCheckpoint(t, a, "j", 1, files)
		c := client(t, a)
		if _, err := c.Send(context.Background(), Request{Addr: px.addr(), Node: "b", JobID: "j", Version: 1, Rate: Unlimited}); err != nil {
			t.Fatal(err)
		}
		if px.flipped.Load() == 0 {
			t.Fatal("proxy flipped nothing: the test did not test")
		}
		// QUIC's AEAD drops every damaged datagram and retransmits; the
		// chunk hashes confirm the result end to end.
		checkRestored(t, b, "j", 1, files)
	})

	t.Run("chunk damaged before encryption", func(t *testing.T) {
		checkNoLeak(t)
		a, b := newNode(t, dev, "a", 0, ""), newNode(t, dev, "b", 0, "")
		srv := listen(t, b, Hooks{})
		m := addCheckpoint(t, a, "j", 1, files)
		victims := map[ckpt.Hash]*atomic.Int64{m.Files[0].Chunks[1].Hash: {}, m.Files[0].Chunks[4].Hash: {}}
		a.cfg.corruptChunk = func(h ckpt.Hash, payload []byte) {
			if n, ok := victims[h]; ok && n.Add(1) == 1 {
				payload[len(payload)/2] ^= 0xff // first send only
			}
		}
		c := client(t, a)
		st, err := c.Send(context.Background(), Request{Addr: srv.Addr().String(), Node: "b", JobID: "j", Version: 1, Rate: Unlimited})
		if err != nil {
			t.Fatal(err)
		}
		if st.Resent != 2 {
			t.Errorf("chunks asked for again: got %d, want 2", st.Resent)
		}
		for h, n := range victims {
			if n.Load() != 2 {
				t.Errorf("chunk %s sent %d times, want 2", h, n.Load())
			}
		}
		checkRestored(t, b, "j", 1, files)
	})

	t.Run("chunk always damaged", func(t *testing.T) {
		checkNoLeak(t)
		a, b := newNode(t, dev, "a", 0, ""), newNode(t, dev, "b", 0, "")
		srv := listen(t, b, Hooks{})
		m := addCheckpoint(t, a, "j", 1, files)
		victim := m.Files[0].Chunks[2].Hash
		a.cfg.corruptChunk = func(h ckpt.Hash, payload []byte) {
			if h == victim {
				payload[0] ^= 1
			}
		}
		c := client(t, a)
		_, err := c.Send(context.Background(), Request{Addr: srv.Addr().String(), Node: "b", JobID: "j", Version: 1, Rate: Unlimited})
		if !errors.Is(err, ErrCorruptInTransit) {
			t.Fatalf("got %v, want ErrCorruptInTransit", err)
		}
		if vs := b.store.Versions("j"); len(vs) != 0 {
			t.Fatalf("receiver committed %v despite a corrupt chunk", vs)
		}
		if u := b.store.Usage(); u != 0 {
			t.Errorf("receiver kept %d bytes of the failed version, want 0", u)
		}
	})
}

func TestResumeAfterBrokenConnection(t *testing.T) {
	checkNoLeak(t)
	dev := devCA(t)
	a, b := newNode(t, dev, "a", 0, ""), newNode(t, dev, "b", 0, "")
	a.cfg.IdleTimeout = time.Second
	b.cfg.IdleTimeout = time.Second
	srv := listen(t, b, Hooks{})
	px := newProxy(t, srv.Addr())
	const size = 32 << 20
	files := map[string][]byte{"w": randomBytes(4, size)}
	m := addCheckpoint(t, a, "j", 1, files)
	c := client(t, a)
	// Pace so the cut lands mid-transfer: about 2.5 s in all.
	tr, err := c.Start(context.Background(), Request{Addr: px.addr(), Node: "b", JobID: "j", Version: 1, Rate: 12 << 20})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "half the data at the receiver", func() bool { return b.store.Usage() >= size/2 })
	px.blackout.Store(true)
	atCut := b.store.Usage()
	wait.For(t, 20*time.Second, "the sender to notice and retry", func() bool { return tr.Stats().Attempts >= 2 })
	px.blackout.Store(false)
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	st := tr.Stats()
	if st.Attempts != 2 {
		t.Errorf("attempts: got %d, want 2", st.Attempts)
	}
	// Everything the receiver held at the cut must not be sent again; the
	// chunks in flight at the cut (bounded by the windows and the pacer) may.
	resentBound := m.TotalSize() + 4<<20
	if st.RawBytes > resentBound {
		t.Errorf("raw bytes sent: got %d, want <= %d (receiver held %d at the cut)", st.RawBytes, resentBound, atCut)
	}
	if atCut >= size {
		t.Fatalf("cut came after the end (%d bytes held)", atCut)
	}
	checkRestored(t, b, "j", 1, files)
}

func TestForeignCARefused(t *testing.T) {
	checkNoLeak(t)
	good, evil := devCA(t), devCA(t)
	a, b := newNode(t, good, "a", 0, ""), newNode(t, good, "b", 0, "")
	// The intruder trusts the real CA (its certificate is public) but holds
	// a certificate from another CA.
	intruder, err := evil.Node("a")
	if err != nil {
		t.Fatal(err)
	}
	fake := *a.tls
	fake.Cert, fake.Leaf = intruder.Cert, intruder.Leaf
	a.cfg.TLS = &fake
	srv := listen(t, b, Hooks{})
	addCheckpoint(t, a, "j", 1, map[string][]byte{"w": randomBytes(5, 1<<20)})
	c := client(t, a)
	st, err := c.Send(context.Background(), Request{Addr: srv.Addr().String(), Node: "b", JobID: "j", Version: 1, Rate: Unlimited})
	if err == nil {
		t.Fatal("a sender with a certificate from another CA was accepted")
	}
	t.Logf("intruder refused: %v", err)
	if st.Attempts != 1 || st.ChunksSent != 0 {
		t.Errorf("after a TLS refusal: %d attempts, %d chunks; want 1 attempt, 0 chunks", st.Attempts, st.ChunksSent)
	}
	if vs := b.store.Versions("j"); len(vs) != 0 || b.store.Usage() != 0 || len(b.store.Pending()) != 0 {
		t.Fatalf("receiver took data from a foreign peer: versions %v, %d bytes", vs, b.store.Usage())
	}

	// The other way round: a receiver with a foreign certificate.
	a2, b2 := newNode(t, good, "a", 0, ""), newNode(t, evil, "b", 0, "")
	srv2 := listen(t, b2, Hooks{})
	addCheckpoint(t, a2, "j", 1, map[string][]byte{"w": randomBytes(5, 1<<20)})
	c2 := client(t, a2)
	st, err = c2.Send(context.Background(), Request{Addr: srv2.Addr().String(), Node: "b", JobID: "j", Version: 1, Rate: Unlimited})
	if err == nil || !errors.Is(err, pki.ErrForeignCA) {
		t.Fatalf("sending to a foreign receiver: got %v, want an error wrapping pki.ErrForeignCA", err)
	}
	if st.Attempts != 1 || st.ChunksSent != 0 {
		t.Errorf("after a TLS refusal: %d attempts, %d chunks; want 1 attempt, 0 chunks", st.Attempts, st.ChunksSent)
	}
}

func TestCancelRemovesPartialData(t *testing.T) {
	checkNoLeak(t)
	dev := devCA(t)
	a, b := newNode(t, dev, "a", 0, ""), newNode(t, dev, "b", 0, "")
	srv := listen(t, b, Hooks{})
	addCheckpoint(t, a, "j", 1, map[string][]byte{"w": randomBytes(6, 16<<20)})
	c := client(t, a)
	tr, err := c.Start(context.Background(), Request{Addr: srv.Addr().String(), Node: "b", JobID: "j", Version: 1, Rate: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "some data at the receiver", func() bool { return b.store.Usage() > 2<<20 })
	tr.Cancel()
	if err := tr.Wait(); !errors.Is(err, ErrCancelled) {
		t.Fatalf("Wait after Cancel: got %v, want ErrCancelled", err)
	}
	wait.For(t, 10*time.Second, "receiver to drop the partial data", func() bool {
		return b.store.Usage() == 0 && len(b.store.Pending()) == 0
	})
	if vs := b.store.Versions("j"); len(vs) != 0 {
		t.Fatalf("cancelled version committed: %v", vs)
	}
}

func TestReceiverQuota(t *testing.T) {
	checkNoLeak(t)
	dev := devCA(t)
	a, b := newNode(t, dev, "a", 0, ""), newNode(t, dev, "b", 2<<20, "")
	srv := listen(t, b, Hooks{})
	addCheckpoint(t, a, "j", 1, map[string][]byte{"w": randomBytes(7, 8<<20)})
	c := client(t, a)
	_, err := c.Send(context.Background(), Request{Addr: srv.Addr().String(), Node: "b", JobID: "j", Version: 1, Rate: Unlimited})
	if !errors.Is(err, ErrRemoteQuota) {
		t.Fatalf("got %v, want ErrRemoteQuota", err)
	}
	if b.store.Usage() != 0 || len(b.store.Pending()) != 0 {
		t.Fatalf("receiver kept %d bytes / %d pending after refusing", b.store.Usage(), len(b.store.Pending()))
	}
}

// TestReceiverDiskFull puts the receiver's store on a 6 MiB tmpfs and sends
// 16 MiB: clear error, partial data removed, nothing committed. Needs root.
func TestReceiverDiskFull(t *testing.T) {
	checkNoLeak(t)
	dir := t.TempDir()
	if err := exec.Command("mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", dir).Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount tmpfs (needs root): %v", err)
		}
		t.Skipf("mount tmpfs needs root: %v", err)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	dev := devCA(t)
	a, b := newNode(t, dev, "a", 0, ""), newNode(t, dev, "b", 0, filepath.Join(dir, "store"))
	srv := listen(t, b, Hooks{})
	addCheckpoint(t, a, "j", 1, map[string][]byte{"w": randomBytes(8, 16<<20)})
	c := client(t, a)
	_, err := c.Send(context.Background(), Request{Addr: srv.Addr().String(), Node: "b", JobID: "j", Version: 1, Rate: Unlimited})
	if !errors.Is(err, ErrRemoteDiskFull) {
		t.Fatalf("got %v, want ErrRemoteDiskFull", err)
	}
	wait.For(t, 10*time.Second, "receiver to remove the partial data", func() bool {
		return b.store.Usage() == 0 && len(b.store.Pending()) == 0
	})
	var onDisk int64
	filepath.Walk(filepath.Join(dir, "store", "chunks"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			onDisk += fi.Size()
		}
		return nil
	})
	if onDisk != 0 {
		t.Errorf("chunk bytes left on the full disk: %d, want 0", onDisk)
	}
	if vs := b.store.Versions("j"); len(vs) != 0 {
		t.Fatalf("version committed on a full disk: %v", vs)
	}
}

func TestBusyReceiverRefuses(t *testing.T) {
	checkNoLeak(t)
	dev := devCA(t)
	a, b := newNode(t, dev, "a", 0, ""), newNode(t, dev, "b", 0, "")
	b.cfg.MaxTransfers = 1
	srv := listen(t, b, Hooks{})
	addCheckpoint(t, a, "j", 1, map[string][]byte{"w": randomBytes(9, 8<<20)})
	addCheckpoint(t, a, "k", 1, map[string][]byte{"w": randomBytes(10, 1<<20)})
	c := client(t, a)
	slow, err := c.Start(context.Background(), Request{Addr: srv.Addr().String(), Node: "b", JobID: "j", Version: 1, Rate: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the first transfer to start", func() bool { return b.store.Usage() > 0 })
	_, err = c.Send(context.Background(), Request{Addr: srv.Addr().String(), Node: "b", JobID: "k", Version: 1, Rate: Unlimited})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("second transfer while the only slot is taken: got %v, want ErrRefused", err)
	}
	slow.SetRate(Unlimited)
	if err := slow.Wait(); err != nil {
		t.Fatalf("first transfer: %v", err)
	}
}

// TestPacing checks the sender holds an assigned rate and follows a change
// (generous bounds: the machine is shared; precise figures are in the
// benchmarks).
func TestPacing(t *testing.T) {
	checkNoLeak(t)
	dev := devCA(t)
	a, b := newNode(t, dev, "a", 0, ""), newNode(t, dev, "b", 0, "")
	a.cfg.Compression = CompressOff
	srv := listen(t, b, Hooks{})
	addCheckpoint(t, a, "j", 1, map[string][]byte{"w": randomBytes(11, 40<<20)})
	c := client(t, a)
	const r1, r2 = 4 << 20, 16 << 20
	tr, err := c.Start(context.Background(), Request{Addr: srv.Addr().String(), Node: "b", JobID: "j", Version: 1, Rate: r1})
	if err != nil {
		t.Fatal(err)
	}
	measure := func(d time.Duration) float64 {
		w0, t0 := tr.Stats().WireBytes, time.Now()
		time.Sleep(d) // measuring a rate over a window, not synchronising
		return float64(tr.Stats().WireBytes-w0) / time.Since(t0).Seconds()
	}
	measure(300 * time.Millisecond) // warm-up
	got1 := measure(1500 * time.Millisecond)
	tr.SetRate(r2)
	measure(200 * time.Millisecond)
	got2 := measure(1000 * time.Millisecond)
	tr.SetRate(Unlimited)
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	// Generous: the test machine is shared; precise figures are benchmarks.
	if got1 > 1.25*r1 || got1 < 0.5*r1 {
		t.Errorf("at %d B/s: measured %.0f B/s, want within [0.5, 1.25]x", r1, got1)
	}
	if got2 > 1.25*r2 || got2 < 0.5*r2 {
		t.Errorf("after SetRate(%d): measured %.0f B/s, want within [0.5, 1.25]x", r2, got2)
	}
}

// TestResumeAfterReceiverRestart: the receiver stops mid-transfer and comes
// back with the same store directory; the next send moves only what it
// still lacks.
func TestResumeAfterReceiverRestart(t *testing.T) {
	checkNoLeak(t)
	dev := devCA(t)
	root := t.TempDir()
	a, b := newNode(t, dev, "a", 0, ""), newNode(t, dev, "b", 0, root)
	a.cfg.Attempts = 1
	srv, err := Listen("127.0.0.1:0", b.cfg, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	const size = 24 << 20
	files := map[string][]byte{"w": randomBytes(12, size)}
	m := addCheckpoint(t, a, "j", 1, files)
	c := client(t, a)
	tr, err := c.Start(context.Background(), Request{Addr: srv.Addr().String(), Node: "b", JobID: "j", Version: 1, Rate: 12 << 20})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "half the data at the receiver", func() bool { return b.store.Usage() >= size/2 })
	srv.Close()
	if err := tr.Wait(); err == nil {
		t.Fatal("transfer succeeded although the receiver stopped half-way")
	}
	b.store.Close()
	held := b.store.Usage()

	st2, err := ckpt.Open(ckpt.Config{Root: root, Chunker: testChunker})
	if err != nil {
		t.Fatal(err)
	}
	if p := st2.Pending(); len(p) != 1 || p[0].Hash() != m.Hash() {
		t.Fatalf("pending after restart: got %d manifests, want the interrupted one", len(p))
	}
	if st2.Usage() != held {
		t.Fatalf("chunk bytes after restart: got %d, want %d", st2.Usage(), held)
	}
	b.store, b.cfg.Store = st2, st2
	srv2 := listen(t, b, Hooks{})
	st, err := c.Send(context.Background(), Request{Addr: srv2.Addr().String(), Node: "b", JobID: "j", Version: 1, Rate: Unlimited})
	if err != nil {
		t.Fatal(err)
	}
	if want := m.TotalSize() - held; st.RawBytes != want {
		t.Errorf("bytes sent after the restart: got %d, want exactly the %d still missing", st.RawBytes, want)
	}
	checkRestored(t, b, "j", 1, files)
}

// A rate of 0 (the policy left the flow no room) holds the transfer at
// PausedRate instead of letting it run unpaced; Unlimited then lets it
// finish.
func TestZeroRateHoldsAtPausedRate(t *testing.T) {
	checkNoLeak(t)
	dev := devCA(t)
	a, b := newNode(t, dev, "a", 0, ""), newNode(t, dev, "b", 0, "")
	srv := listen(t, b, Hooks{})
	addCheckpoint(t, a, "j", 1, map[string][]byte{"w": randomBytes(7, 8<<20)})
	c := client(t, a)
	tr, err := c.Start(context.Background(), Request{Addr: srv.Addr().String(), Node: "b", JobID: "j", Version: 1, Rate: 0})
	if err != nil {
		t.Fatal(err)
	}
	const window = time.Second
	time.Sleep(window) // a rate is measured over time
	// The bucket's burst (two pieces) plus the window at PausedRate, with
	// room for the first piece in flight.
	limit := int64(4*pieceSize + PausedRate*window.Seconds())
	if sent := tr.Stats().RawBytes; sent > limit {
		t.Errorf("rate 0: %d bytes sent in %v, want at most %d (PausedRate)", sent, window, limit)
	}
	tr.SetRate(Unlimited)
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(context.Background(), Request{Addr: srv.Addr().String(), Node: "b", JobID: "j", Version: 1, Rate: -1}); err == nil {
		t.Error("a negative rate was accepted")
	}
}

package transfer

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"

	"github.com/quic-go/quic-go"
	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/policy"
)

// rawSender speaks the wire protocol by hand, so a test controls exactly
// which streams are opened, which chunks are sent and how the connection
// ends.
type rawSender struct {
	conn *quic.Conn
	ctl  *quic.Stream
	need []ckpt.Hash
}

// dialRaw connects from node a to srv (node "b") and offers m; the
// receiver's first answer must be NEED.
func dialRaw(t *testing.T, a *node, srv *Server, m *ckpt.Manifest) *rawSender {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, srv.Addr().String(), a.tls.ClientTLS("b", ALPN), a.cfg.quicConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(codeFailed, "test over") })
	ctl, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFrame(ctl, frameOffer, encodeOffer(policy.ClassMigration, m)); err != nil {
		t.Fatal(err)
	}
	f, err := readFrame(ctl, maxControlFrame)
	if err != nil {
		t.Fatal(err)
	}
	if f.typ != frameNeed {
		t.Fatalf("answer to OFFER: got %v, want NEED", f.typ)
	}
	need, err := parseHashes(f.payload)
	if err != nil {
		t.Fatal(err)
	}
	return &rawSender{conn: conn, ctl: ctl, need: need}
}

// sendChunks writes the chunks raw, in order, on one new data stream.
func (r *rawSender) sendChunks(t *testing.T, from *ckpt.Store, hs []ckpt.Hash) {
	t.Helper()
	st, err := r.conn.OpenUniStream()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		raw, err := from.ReadChunk(h)
		if err != nil {
			t.Fatal(err)
		}
		b := appendFrameHeader(nil, frameChunk, chunkHeaderLen+len(raw))
		b = appendChunkHeader(b, h, len(raw), encRaw)
		if _, err := st.Write(append(b, raw...)); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
}

// waitDone reads the receiver's next control frame, which must be DONE.
func (r *rawSender) waitDone(t *testing.T) {
	t.Helper()
	f, err := readFrame(r.ctl, maxControlFrame)
	if err != nil {
		t.Fatal(err)
	}
	if f.typ != frameDone {
		t.Fatalf("after the last chunk: got %v, want DONE", f.typ)
	}
}

func TestStreamLimitPerConnection(t *testing.T) {
	checkNoLeak(t)
	dev := devCA(t)
	a, b := newNode(t, dev, "a", 0, ""), newNode(t, dev, "b", 0, "")
	b.cfg.Streams = 2
	srv := listen(t, b, Hooks{})
	files := map[string][]byte{"w": randomBytes(20, 3<<20)}
	m := addCheckpoint(t, a, "j", 1, files)
	if len(m.Chunks()) < 4 {
		t.Fatalf("test checkpoint has %d chunks, want at least 4", len(m.Chunks()))
	}
	r := dialRaw(t, a, srv, m)
	if len(r.need) != len(m.Chunks()) {
		t.Fatalf("NEED lists %d chunks, want all %d", len(r.need), len(m.Chunks()))
	}
	// The receiver grants exactly Streams data streams and one control
	// stream per connection; quic-go refuses the next open at once.
	var open []*quic.SendStream
	for i := 0; i < 2; i++ {
		st, err := r.conn.OpenUniStream()
		if err != nil {
			t.Fatalf("data stream %d of 2: %v", i+1, err)
		}
		open = append(open, st)
	}
	var limit *quic.StreamLimitReachedError
	if _, err := r.conn.OpenUniStream(); !errors.As(err, &limit) {
		t.Fatalf("third data stream: got %v, want StreamLimitReachedError", err)
	}
	if _, err := r.conn.OpenStream(); !errors.As(err, &limit) {
		t.Fatalf("second bidirectional stream: got %v, want StreamLimitReachedError", err)
	}
	// The granted streams carry the whole checkpoint.
	half := len(r.need) / 2
	for i, hs := range [][]ckpt.Hash{r.need[:half], r.need[half:]} {
		for _, h := range hs {
			raw, err := a.store.ReadChunk(h)
			if err != nil {
				t.Fatal(err)
			}
			frame := appendChunkHeader(appendFrameHeader(nil, frameChunk, chunkHeaderLen+len(raw)), h, len(raw), encRaw)
			if _, err := open[i].Write(append(frame, raw...)); err != nil {
				t.Fatal(err)
			}
		}
		open[i].Close()
	}
	r.waitDone(t)
	checkRestored(t, b, "j", 1, files)

	// A sender configured for more streams than the receiver grants still
	// completes on the streams it gets.
	c := func() *Client { a.cfg.Streams = 8; return client(t, a) }()
	files2 := map[string][]byte{"w": randomBytes(21, 3<<20)}
	addCheckpoint(t, a, "j", 2, files2)
	if _, err := c.Send(context.Background(), Request{Addr: srv.Addr().String(), Node: "b", JobID: "j", Version: 2, Rate: Unlimited}); err != nil {
		t.Fatalf("8-stream sender to a 2-stream receiver: %v", err)
	}
	checkRestored(t, b, "j", 2, files2)
}

// stepClock is a clock a test moves by hand.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *stepClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestStalePendingVersionExpires(t *testing.T) {
	checkNoLeak(t)
	dev := devCA(t)
	a := newNode(t, dev, "a", 0, "")
	clk := &stepClock{t: time.Unix(1_800_000_000, 0)}
	st, err := ckpt.Open(ckpt.Config{Root: t.TempDir(), Chunker: testChunker, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	b := newNode(t, dev, "b", 0, "")
	b.store, b.cfg.Store = st, st
	b.cfg.PendingMaxAge = time.Hour
	srv := listen(t, b, Hooks{})
	m := addCheckpoint(t, a, "j", 1, map[string][]byte{"w": randomBytes(22, 2<<20)})

	// A sender delivers part of the version and vanishes (no cancel).
	r := dialRaw(t, a, srv, m)
	r.sendChunks(t, a.store, r.need[:2])
	wait.For(t, 10*time.Second, "two chunks stored", func() bool { return st.Has(r.need[0]) && st.Has(r.need[1]) })
	// While its connection is open the version is busy, however old.
	clk.add(3 * time.Hour)
	srv.expireStale(time.Hour)
	if len(st.Pending()) != 1 {
		t.Fatalf("pending versions while a connection holds one: got %d, want 1", len(st.Pending()))
	}
	r.conn.CloseWithError(codeFailed, "sender gone")
	wait.For(t, 10*time.Second, "receiver to release the connection", func() bool {
		srv.vmu.Lock()
		defer srv.vmu.Unlock()
		return len(srv.versions) == 0
	})
	// The age counts from the connection's end.
	clk.add(59 * time.Minute)
	srv.expireStale(time.Hour)
	if len(st.Pending()) != 1 || !st.Has(r.need[0]) {
		t.Fatalf("after 59 min idle: pending %d, chunk kept %v; want 1, true", len(st.Pending()), st.Has(r.need[0]))
	}
	clk.add(time.Minute)
	srv.expireStale(time.Hour)
	if len(st.Pending()) != 0 || st.Has(r.need[0]) || st.Has(r.need[1]) || st.Usage() != 0 {
		t.Fatalf("after 60 min idle: pending %d, usage %d; want 0, 0", len(st.Pending()), st.Usage())
	}
	// The next transfer of the version starts afresh and completes.
	c := client(t, a)
	if _, err := c.Send(context.Background(), Request{Addr: srv.Addr().String(), Node: "b", JobID: "j", Version: 1, Rate: Unlimited}); err != nil {
		t.Fatal(err)
	}
	if vs := st.Versions("j"); len(vs) != 1 {
		t.Fatalf("committed versions: got %v, want [1]", vs)
	}
}

func TestConcurrentConnectionsSameVersion(t *testing.T) {
	checkNoLeak(t)
	dev := devCA(t)
	a, b := newNode(t, dev, "a", 0, ""), newNode(t, dev, "b", 0, "")
	srv := listen(t, b, Hooks{})
	files := map[string][]byte{"w": randomBytes(23, 3<<20)}
	m := addCheckpoint(t, a, "j", 1, files)

	// Connection 1 stores two chunks; connection 2 offers the same version
	// and is asked only for the rest.
	r1 := dialRaw(t, a, srv, m)
	r1.sendChunks(t, a.store, r1.need[:2])
	wait.For(t, 10*time.Second, "two chunks stored", func() bool { return b.store.Has(r1.need[0]) && b.store.Has(r1.need[1]) })
	r2 := dialRaw(t, a, srv, m)
	if len(r2.need) != len(r1.need)-2 {
		t.Fatalf("second connection's NEED: got %d chunks, want %d", len(r2.need), len(r1.need)-2)
	}
	// Connection 1 is cancelled: connection 2 still receives the version,
	// so nothing may be removed.
	r1.conn.CloseWithError(codeCancelled, "cancelled")
	wait.For(t, 10*time.Second, "receiver to release connection 1", func() bool {
		srv.vmu.Lock()
		defer srv.vmu.Unlock()
		vs := srv.versions[versionKey{"j", 1}]
		return vs != nil && vs.refs == 1
	})
	if !b.store.Has(r1.need[0]) || !b.store.Has(r1.need[1]) || len(b.store.Pending()) != 1 {
		t.Fatalf("after cancelling one of two connections: chunks kept %v %v, pending %d; want true true 1",
			b.store.Has(r1.need[0]), b.store.Has(r1.need[1]), len(b.store.Pending()))
	}
	r2.sendChunks(t, a.store, r2.need)
	r2.waitDone(t)
	checkRestored(t, b, "j", 1, files)

	// A different manifest under the same (job, version) while one is being
	// received is refused.
	files3 := map[string][]byte{"w": randomBytes(24, 1<<20)}
	m3 := addCheckpoint(t, a, "k", 1, map[string][]byte{"w": randomBytes(25, 1<<20)})
	r3 := dialRaw(t, a, srv, m3)
	other := addCheckpoint(t, newNode(t, dev, "c", 0, ""), "k", 1, files3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, srv.Addr().String(), a.tls.ClientTLS("b", ALPN), a.cfg.quicConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(codeFailed, "test over")
	ctl, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFrame(ctl, frameOffer, encodeOffer(policy.ClassMigration, other)); err != nil {
		t.Fatal(err)
	}
	f, err := readFrame(ctl, maxControlFrame)
	if err != nil {
		t.Fatal(err)
	}
	if f.typ != frameFail {
		t.Fatalf("offer of a different manifest for a version in progress: got %v, want FAIL", f.typ)
	}
	if fe := failError(f.payload); !errors.Is(fe, ErrRefused) {
		t.Fatalf("FAIL: got %v, want ErrRefused", fe)
	}
	r3.conn.CloseWithError(codeCancelled, "cancelled")
	wait.For(t, 10*time.Second, "the cancelled version's data removed", func() bool {
		return len(b.store.Pending()) == 0 && !b.store.Has(r3.need[0])
	})
}

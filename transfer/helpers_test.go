package transfer

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"

	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/pki"
)

// testChunker keeps test checkpoints to many small chunks.
var testChunker = ckpt.Chunker{Min: 64 << 10, Avg: 256 << 10, Max: 1 << 20}

type node struct {
	name  string
	store *ckpt.Store
	tls   *pki.Bundle
	cfg   Config
}

func newNode(t testing.TB, dev *pki.Dev, name string, maxBytes int64, root string) *node {
	t.Helper()
	return newNodeChunker(t, dev, name, maxBytes, root, testChunker)
}

func newNodeChunker(t testing.TB, dev *pki.Dev, name string, maxBytes int64, root string, chunker ckpt.Chunker) *node {
	t.Helper()
	b, err := dev.Node(name)
	if err != nil {
		t.Fatal(err)
	}
	if root == "" {
		root = t.TempDir()
	}
	st, err := ckpt.Open(ckpt.Config{Root: root, MaxBytes: maxBytes, Chunker: chunker})
	if err != nil {
		t.Fatal(err)
	}
	// The store's background fsyncs hold chunk files open: close it
	// before the test's directory (or a tmpfs mounted there) goes away.
	t.Cleanup(func() { st.Close() })
	cfg := DefaultLocalConfig()
	cfg.TLS, cfg.Store = b, st
	return &node{name: name, store: st, tls: b, cfg: cfg}
}

func listen(t testing.TB, n *node, hooks Hooks) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", n.cfg, hooks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func client(t testing.TB, n *node) *Client {
	t.Helper()
	c, err := NewClient(n.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// fp32Bytes returns n bytes of normally distributed float32 values, like
// trained weights.
func fp32Bytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := 0; i+4 <= n; i += 4 {
		binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(r.NormFloat64()*0.02)))
	}
	return b
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 9))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b
}

// addCheckpoint writes files into a temp dir and commits them to n's store.
func addCheckpoint(t testing.TB, n *node, job string, version uint64, files map[string][]byte) *ckpt.Manifest {
	t.Helper()
	dir := t.TempDir()
	for name, b := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := n.store.AddDir(job, version, dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkRestored restores (job, version) from n and compares with files.
func checkRestored(t testing.TB, n *node, job string, version uint64, files map[string][]byte) {
	t.Helper()
	dst := t.TempDir()
	if err := n.store.Restore(job, version, dst); err != nil {
		t.Fatalf("restore on %s: %v", n.name, err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(got) != sha256.Sum256(want) {
			t.Fatalf("%s restored on %s differs from the source", name, n.name)
		}
	}
}

// checkNoLeak fails if goroutines started during the test outlive it.
func checkNoLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		if _, ok := wait.Until(10*time.Second, func() (bool, string) { return runtime.NumGoroutine() <= base, "" }); ok {
			return
		}
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("goroutines: got %d after close, want <= %d\n%s", runtime.NumGoroutine(), base, buf)
	})
}

// udpProxy forwards datagrams between clients and a server, counting bytes
// and optionally flipping bytes or dropping everything.
type udpProxy struct {
	conn     *net.UDPConn
	upstream *net.UDPAddr

	toServer atomic.Int64 // UDP payload bytes client → server
	blackout atomic.Bool  // drop every datagram both ways
	flipOne  atomic.Int64 // flip a byte in one of every N datagrams to the server (0 = never)
	flipped  atomic.Int64

	mu    sync.Mutex
	peers map[string]*net.UDPConn
	wg    sync.WaitGroup
	done  chan struct{}
}

func newProxy(t testing.TB, upstream *net.UDPAddr) *udpProxy {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := &udpProxy{conn: c, upstream: upstream, peers: map[string]*net.UDPConn{}, done: make(chan struct{})}
	p.wg.Go(p.run)
	t.Cleanup(p.close)
	return p
}

func (p *udpProxy) addr() string { return p.conn.LocalAddr().String() }

func (p *udpProxy) close() {
	select {
	case <-p.done:
		return
	default:
	}
	close(p.done)
	p.conn.Close()
	p.mu.Lock()
	for _, u := range p.peers {
		u.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *udpProxy) run() {
	buf := make([]byte, 65536)
	var count int64
	for {
		n, from, err := p.conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if p.blackout.Load() {
			continue
		}
		p.mu.Lock()
		up, ok := p.peers[from.String()]
		if !ok {
			up, err = net.DialUDP("udp", nil, p.upstream)
			if err != nil {
				p.mu.Unlock()
				continue
			}
			p.peers[from.String()] = up
			p.wg.Go(func() { p.back(up, from) })
		}
		p.mu.Unlock()
		count++
		if k := p.flipOne.Load(); k > 0 && count%k == 0 && n > 40 {
			buf[n-20] ^= 0x5a
			p.flipped.Add(1)
		}
		p.toServer.Add(int64(n))
		up.Write(buf[:n])
	}
}

func (p *udpProxy) back(up *net.UDPConn, client *net.UDPAddr) {
	buf := make([]byte, 65536)
	for {
		n, err := up.Read(buf)
		if err != nil {
			return
		}
		if p.blackout.Load() {
			continue
		}
		p.conn.WriteToUDP(buf[:n], client)
	}
}

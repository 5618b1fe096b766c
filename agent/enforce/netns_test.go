package enforce

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"math/big"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netPair is two network namespaces joined by a veth pair: A (the peer
// that connects or sends) and B (the node under test), created for one
// test and deleted at its end.
type netPair struct {
	nameA, nameB string // namespace names
	ifA, ifB     string
	nsA, nsB     netns.NsHandle
	a4, b4       netip.Addr
	a6, b6       netip.Addr
}

func sh(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		failOrSkip(t, "%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func newNetPair(t testing.TB) *netPair {
	t.Helper()
	requirePrivileged(t)
	s := randomSuffix(t)
	p := &netPair{
		nameA: "rnA-" + s, nameB: "rnB-" + s, ifA: "rna" + s, ifB: "rnb" + s,
		a4: netip.MustParseAddr("10.77.0.1"), b4: netip.MustParseAddr("10.77.0.2"),
		a6: netip.MustParseAddr("fd77::1"), b6: netip.MustParseAddr("fd77::2"),
	}
	// Named namespaces (as `ip netns add` makes them), so `ip -n` and
	// `tc -n` can reach them too.
	p.nsA = newNamedNS(t, p.nameA)
	p.nsB = newNamedNS(t, p.nameB)
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: p.ifA, Namespace: netlink.NsFd(p.nsA)},
		PeerName:  p.ifB, PeerNamespace: netlink.NsFd(p.nsB),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		failOrSkip(t, "create veth pair: %v", err)
	}
	for _, side := range []struct {
		ns     netns.NsHandle
		dev    string
		v4, v6 string
	}{
		{p.nsA, p.ifA, "10.77.0.1/24", "fd77::1/64"},
		{p.nsB, p.ifB, "10.77.0.2/24", "fd77::2/64"},
	} {
		h, err := netlink.NewHandleAt(side.ns)
		if err != nil {
			t.Fatalf("netlink in namespace: %v", err)
		}
		defer h.Close()
		link, err := h.LinkByName(side.dev)
		if err != nil {
			t.Fatalf("find %s: %v", side.dev, err)
		}
		for _, a := range []string{side.v4, side.v6} {
			addr, err := netlink.ParseAddr(a)
			if err != nil {
				t.Fatal(err)
			}
			addr.Flags = unix.IFA_F_NODAD // no duplicate address detection delay
			if err := h.AddrAdd(link, addr); err != nil {
				t.Fatalf("add %s to %s: %v", a, side.dev, err)
			}
		}
		lo, err := h.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		// No duplicate address detection on the link-local address either:
		// while it is tentative, neighbour discovery can stall the first
		// IPv6 connection for a second.
		var serr error
		in(t, side.ns, func() {
			serr = os.WriteFile("/proc/sys/net/ipv6/conf/"+side.dev+"/accept_dad", []byte("0"), 0o644)
		})
		if serr != nil {
			t.Fatalf("disable DAD on %s: %v", side.dev, serr)
		}
		for _, l := range []netlink.Link{link, lo} {
			if err := h.LinkSetUp(l); err != nil {
				t.Fatalf("set %s up: %v", l.Attrs().Name, err)
			}
		}
		waitIPv6Ready(t, h, link)
	}
	return p
}

// waitIPv6Ready polls until no IPv6 address on link is tentative (even
// with NODAD a kernel may hold one back briefly).
func waitIPv6Ready(t testing.TB, h *netlink.Handle, link netlink.Link) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		addrs, err := h.AddrList(link, netlink.FAMILY_V6)
		if err != nil {
			t.Fatalf("list addresses: %v", err)
		}
		ready := len(addrs) > 0
		for _, a := range addrs {
			if a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
				ready = false
			}
		}
		if ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("IPv6 addresses on %s still tentative after 5 s: %v", link.Attrs().Name, addrs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newNamedNS creates a named network namespace, deleted at test end.
func newNamedNS(t testing.TB, name string) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatalf("get netns: %v", err)
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name) // also moves this thread into it
	if rerr := netns.Set(orig); rerr != nil {
		runtime.LockOSThread() // keep the thread out of the pool: it is in the wrong namespace
		t.Fatalf("restore netns: %v", rerr)
	}
	if err != nil {
		failOrSkip(t, "create network namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ns.Close()
		netns.DeleteNamed(name)
	})
	return ns
}

// in runs f on a thread switched into ns. Sockets created by f stay in
// ns afterwards, whichever thread uses them.
func in(t testing.TB, ns netns.NsHandle, f func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("get netns: %v", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("enter netns: %v", err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: the runtime discards it with this
			// goroutine rather than reuse a thread in the wrong namespace.
			t.Errorf("restore netns: %v", err)
			return
		}
		runtime.UnlockOSThread()
	}()
	f()
}

// selfSignedTLS returns a server config with a fresh self-signed
// certificate and a client config that trusts it.
func selfSignedTLS(t testing.TB) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "reclaimnet-test"},
		DNSNames: []string{"reclaimnet-test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, NextProtos: []string{"rn-test"}}
	client = &tls.Config{RootCAs: pool, ServerName: "reclaimnet-test", NextProtos: []string{"rn-test"}}
	return server, client
}

var testQUICConfig = &quic.Config{
	MaxIdleTimeout:  30 * time.Second,
	KeepAlivePeriod: time.Second,
}

// quicServer accepts connections and streams and echoes every stream
// (or, with sink, counts the bytes it receives). It stops at test end.
type quicServer struct {
	addr     *net.UDPAddr
	received atomic.Int64 // with sink: bytes received on all streams
}

func startQUICServer(t testing.TB, ns netns.NsHandle, ip netip.Addr, tlsConf *tls.Config, sink bool) *quicServer {
	t.Helper()
	var (
		udp *net.UDPConn
		err error
	)
	in(t, ns, func() { udp, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0))) })
	if err != nil {
		t.Fatalf("listen udp: %v", err)
	}
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.Listen(tlsConf, &quic.Config{MaxIdleTimeout: 30 * time.Second, InitialStreamReceiveWindow: 8 << 20, MaxStreamReceiveWindow: 32 << 20, InitialConnectionReceiveWindow: 16 << 20, MaxConnectionReceiveWindow: 64 << 20})
	if err != nil {
		t.Fatalf("quic listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &quicServer{addr: udp.LocalAddr().(*net.UDPAddr)}
	var wg sync.WaitGroup
	serveStream := func(st *quic.Stream) {
		buf := make([]byte, 64<<10)
		for {
			n, err := st.Read(buf)
			if n > 0 {
				if sink {
					s.received.Add(int64(n))
				} else if _, werr := st.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	wg.Go(func() {
		for {
			conn, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			wg.Go(func() {
				for {
					st, err := conn.AcceptStream(ctx)
					if err != nil {
						return
					}
					wg.Go(func() { serveStream(st) })
				}
			})
		}
	})
	t.Cleanup(func() {
		cancel()
		ln.Close()
		tr.Close() // closes every connection, ending the stream readers
		wg.Wait()
	})
	return s
}

// dialQUIC dials from a fresh UDP socket in ns; the transport closes at
// test end.
func dialQUIC(t testing.TB, ns netns.NsHandle, local netip.Addr, to *net.UDPAddr, tlsConf *tls.Config, timeout time.Duration) (*quic.Conn, *net.UDPConn, error) {
	t.Helper()
	var (
		udp *net.UDPConn
		err error
	)
	in(t, ns, func() { udp, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0))) })
	if err != nil {
		t.Fatalf("listen udp: %v", err)
	}
	tr := &quic.Transport{Conn: udp}
	t.Cleanup(func() { tr.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conf := testQUICConfig.Clone()
	conf.HandshakeIdleTimeout = timeout // a starved CPU can take a while over the handshake
	conn, err := tr.Dial(ctx, to, tlsConf, conf)
	if err == nil {
		t.Cleanup(func() { conn.CloseWithError(0, "") })
	}
	return conn, udp, err
}

// quicEcho opens a stream on conn, writes a message and waits for the
// echo.
func quicEcho(conn *quic.Conn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	st.SetDeadline(time.Now().Add(timeout))
	msg := []byte("ping")
	if _, err := st.Write(msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	_, err = readFull(st, buf)
	return err
}

type reader interface{ Read([]byte) (int, error) }

func readFull(r reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// startTCPEcho listens in ns and echoes each connection until test end.
func startTCPEcho(t testing.TB, ns netns.NsHandle, ip netip.Addr) *net.TCPAddr {
	t.Helper()
	var (
		ln  net.Listener
		err error
	)
	in(t, ns, func() { ln, err = net.Listen("tcp", netip.AddrPortFrom(ip, 0).String()) })
	if err != nil {
		t.Fatalf("listen tcp: %v", err)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  []net.Conn // guarded by mu
		closed bool       // guarded by mu
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				c.Close()
			}
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						c.Write(buf[:n])
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().(*net.TCPAddr)
}

func dialTCP(t testing.TB, ns netns.NsHandle, to *net.TCPAddr, timeout time.Duration) (net.Conn, error) {
	t.Helper()
	var (
		c   net.Conn
		err error
	)
	in(t, ns, func() { c, err = net.DialTimeout("tcp", to.String(), timeout) })
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func tcpEcho(c net.Conn, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	_, err := readFull(c, buf)
	return err
}

// requirePrivileged skips (or, with CI=true, fails) a test that needs root
// and a kernel with BPF and network namespaces.
func requirePrivileged(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this test needs root (BPF, TC, network namespaces) and CI=true: it must run here")
	}
	t.Skip("needs root (BPF, TC, network namespaces); run as root to exercise the kernel")
}

// failOrSkip reports a missing kernel capability: a failure in CI, a skip
// elsewhere.
func failOrSkip(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format+" (root/kernel capability missing; fails under CI=true)", args...)
}

func randomSuffix(t testing.TB) string {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// testPinDir returns a fresh pin directory under bpffs, removed at the end.
func testPinDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join("/sys/fs/bpf/reclaimnet-test", "enf"+randomSuffix(t))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

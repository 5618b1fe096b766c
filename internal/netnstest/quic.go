package netnstest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/vishvananda/netns"
)

// SelfSignedTLS returns a server config with a fresh self-signed
// certificate and a client config that trusts it (ALPN "rn-test").
func SelfSignedTLS(t testing.TB) (server, client *tls.Config) {
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

// clientQUICConfig is the base of every client connection's config.
var clientQUICConfig = &quic.Config{
	MaxIdleTimeout:  30 * time.Second,
	KeepAlivePeriod: time.Second,
}

// QUICServer accepts connections and streams until test end, and either
// echoes every stream (StartQUICEcho) or counts the bytes it receives
// (StartQUICSink).
type QUICServer struct {
	Addr     *net.UDPAddr
	Received atomic.Int64 // sink only: bytes received on all streams
}

// StartQUICEcho starts a QUIC server in ns on ip (port 0) that echoes
// every stream back; it stops at test end.
func StartQUICEcho(t testing.TB, ns netns.NsHandle, ip netip.Addr, tlsConf *tls.Config) *QUICServer {
	t.Helper()
	return startQUICServer(t, ns, ip, tlsConf, false)
}

// StartQUICSink starts a QUIC server in ns on ip (port 0) that reads
// every stream and counts the bytes in Received; it stops at test end.
func StartQUICSink(t testing.TB, ns netns.NsHandle, ip netip.Addr, tlsConf *tls.Config) *QUICServer {
	t.Helper()
	return startQUICServer(t, ns, ip, tlsConf, true)
}

func startQUICServer(t testing.TB, ns netns.NsHandle, ip netip.Addr, tlsConf *tls.Config, sink bool) *QUICServer {
	t.Helper()
	udp := listenUDP(t, ns, ip)
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.Listen(tlsConf, &quic.Config{MaxIdleTimeout: 30 * time.Second, InitialStreamReceiveWindow: 8 << 20, MaxStreamReceiveWindow: 32 << 20, InitialConnectionReceiveWindow: 16 << 20, MaxConnectionReceiveWindow: 64 << 20})
	if err != nil {
		t.Fatalf("quic listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &QUICServer{Addr: udp.LocalAddr().(*net.UDPAddr)}
	var wg sync.WaitGroup
	serveStream := func(st *quic.Stream) {
		buf := make([]byte, 64<<10)
		for {
			n, err := st.Read(buf)
			if n > 0 {
				if sink {
					s.Received.Add(int64(n))
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

// DialQUIC dials to from a fresh UDP socket in ns bound to local (port
// 0), giving the handshake timeout; it returns the connection and its
// socket (whose port identifies the flow). The transport closes at test
// end.
func DialQUIC(t testing.TB, ns netns.NsHandle, local netip.Addr, to *net.UDPAddr, tlsConf *tls.Config, timeout time.Duration) (*quic.Conn, *net.UDPConn, error) {
	t.Helper()
	udp := listenUDP(t, ns, local)
	tr := &quic.Transport{Conn: udp}
	t.Cleanup(func() { tr.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conf := clientQUICConfig.Clone()
	conf.HandshakeIdleTimeout = timeout // a starved CPU can take a while over the handshake
	conn, err := tr.Dial(ctx, to, tlsConf, conf)
	if err == nil {
		t.Cleanup(func() { conn.CloseWithError(0, "") })
	}
	return conn, udp, err
}

// QUICEcho opens a stream on conn, writes a message and waits for the
// echo, all within timeout.
func QUICEcho(conn *quic.Conn, timeout time.Duration) error {
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

package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func mustCA(t *testing.T, name string) *CA {
	t.Helper()
	ca, err := NewCA(name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustBundle(t *testing.T, ca *CA, node string) *Bundle {
	t.Helper()
	nc, err := ca.Issue(node, nil, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := nc.Bundle(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestWriteLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t, "lab")
	if err := ca.Write(dir); err != nil {
		t.Fatal(err)
	}
	ca2, err := LoadCA(dir)
	if err != nil {
		t.Fatalf("LoadCA: %v", err)
	}
	if !ca2.Cert.Equal(ca.Cert) || !ca2.Key.Equal(ca.Key) {
		t.Fatal("LoadCA returned a different CA than was written")
	}
	nc, err := ca2.Issue("node-a", []string{"10.1.2.3", "node-a.lab"}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Write(dir); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, NodeKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Errorf("node key mode: got %o, want 600", got)
	}
	b, err := LoadNode(dir)
	if err != nil {
		t.Fatalf("LoadNode: %v", err)
	}
	if b.Node != "node-a" {
		t.Errorf("node: got %q, want node-a", b.Node)
	}
	for _, h := range []string{"node-a", "node-a.lab", "10.1.2.3", "127.0.0.1", "localhost"} {
		if err := b.Leaf.VerifyHostname(h); err != nil {
			t.Errorf("certificate does not cover %q: %v", h, err)
		}
	}
	if b.Leaf.NotAfter.Sub(b.Leaf.NotBefore) > time.Hour+clockSkew+time.Second {
		t.Errorf("validity: got %v, want about 1h", b.Leaf.NotAfter.Sub(b.Leaf.NotBefore))
	}
}

// handshake runs a real mutual TLS handshake on loopback TCP and returns the
// client's and the server's errors.
func handshake(t *testing.T, server, client *tls.Config) (clientErr, serverErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvDone := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvDone <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		err = tc.Handshake()
		if err == nil {
			// Read one byte so a client-side rejection reaches us as an alert.
			_, err = io.ReadFull(tc, make([]byte, 1))
		}
		srvDone <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := tls.Client(c, client)
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	clientErr = tc.Handshake()
	if clientErr == nil {
		_, clientErr = tc.Write([]byte{1})
		if clientErr == nil {
			// TLS 1.3: a server-side rejection of the client cert arrives on read.
			_, clientErr = tc.Read(make([]byte, 1))
			if errors.Is(clientErr, io.EOF) {
				clientErr = nil
			}
		}
	}
	tc.Close()
	return clientErr, <-srvDone
}

func TestHandshakeSameCA(t *testing.T) {
	ca := mustCA(t, "lab")
	a, b := mustBundle(t, ca, "node-a"), mustBundle(t, ca, "node-b")
	cerr, serr := handshake(t, b.ServerTLS("x"), a.ClientTLS("node-b", "x"))
	if cerr != nil || serr != nil {
		t.Fatalf("handshake between nodes of one CA: client %v, server %v; want both nil", cerr, serr)
	}
}

func TestHandshakeForeignCARefused(t *testing.T) {
	ca, other := mustCA(t, "lab"), mustCA(t, "evil")
	good := mustBundle(t, ca, "node-a")
	foreign := mustBundle(t, other, "node-a") // same name, wrong CA

	t.Run("foreign client", func(t *testing.T) {
		// The attacker trusts the real CA (its certificate is public) and
		// presents its own certificate even though the server asks for the
		// cluster CA's.
		cfg := good.ClientTLS("node-a", "x")
		cfg.Certificates = nil
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &foreign.Cert, nil
		}
		_, serr := handshake(t, good.ServerTLS("x"), cfg)
		if serr == nil || !errors.Is(serr, ErrForeignCA) {
			t.Fatalf("server error: got %v, want ErrForeignCA", serr)
		}
	})
	t.Run("foreign server", func(t *testing.T) {
		cerr, _ := handshake(t, foreign.ServerTLS("x"), good.ClientTLS("node-a", "x"))
		if cerr == nil || !errors.Is(cerr, ErrForeignCA) {
			t.Fatalf("client error: got %v, want ErrForeignCA", cerr)
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		cfg := good.ClientTLS("node-a", "x")
		cfg.Certificates = nil
		_, serr := handshake(t, good.ServerTLS("x"), cfg)
		if serr == nil {
			t.Fatal("server accepted a client without a certificate")
		}
	})
}

func TestHandshakeWrongPeerName(t *testing.T) {
	ca := mustCA(t, "lab")
	a, b := mustBundle(t, ca, "node-a"), mustBundle(t, ca, "node-b")
	cerr, _ := handshake(t, b.ServerTLS("x"), a.ClientTLS("node-c", "x"))
	if cerr == nil || !strings.Contains(cerr.Error(), `want "node-c"`) {
		t.Fatalf("client error: got %v, want a peer-name mismatch", cerr)
	}
}

func TestLoadErrors(t *testing.T) {
	ca, other := mustCA(t, "lab"), mustCA(t, "other")
	write := func(t *testing.T, issuer *CA, caFile *CA) string {
		dir := t.TempDir()
		nc, err := issuer.Issue("node-a", nil, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		nc.CAPEM = caFile.CertPEM
		if err := nc.Write(dir); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Run("missing key", func(t *testing.T) {
		dir := write(t, ca, ca)
		os.Remove(filepath.Join(dir, NodeKeyFile))
		if _, err := LoadNode(dir); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), NodeKeyFile) {
			t.Fatalf("got %v, want ErrMissing naming %s", err, NodeKeyFile)
		}
	})
	t.Run("missing ca", func(t *testing.T) {
		dir := write(t, ca, ca)
		os.Remove(filepath.Join(dir, CAFile))
		if _, err := LoadNode(dir); !errors.Is(err, ErrMissing) {
			t.Fatalf("got %v, want ErrMissing", err)
		}
	})
	for _, f := range []string{CAFile, NodeFile, NodeKeyFile} {
		t.Run("corrupt "+f, func(t *testing.T) {
			dir := write(t, ca, ca)
			path := filepath.Join(dir, f)
			b, _ := os.ReadFile(path)
			// Flip bytes in the middle of the base64 body.
			mid := len(b) / 2
			copy(b[mid:], "!!!!")
			os.WriteFile(path, b, 0o600)
			if _, err := LoadNode(dir); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want ErrCorrupt", err)
			}
		})
	}
	t.Run("garbage ca", func(t *testing.T) {
		dir := write(t, ca, ca)
		os.WriteFile(filepath.Join(dir, CAFile), []byte("hello"), 0o644)
		if _, err := LoadNode(dir); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("got %v, want ErrCorrupt", err)
		}
	})
	t.Run("foreign ca", func(t *testing.T) {
		dir := write(t, other, ca)
		if _, err := LoadNode(dir); !errors.Is(err, ErrForeignCA) {
			t.Fatalf("got %v, want ErrForeignCA", err)
		}
	})
	t.Run("key of another cert", func(t *testing.T) {
		dir := write(t, ca, ca)
		nc2, _ := ca.Issue("node-b", nil, time.Hour, time.Now())
		os.WriteFile(filepath.Join(dir, NodeKeyFile), nc2.KeyPEM, 0o600)
		if _, err := LoadNode(dir); !errors.Is(err, ErrKeyMismatch) {
			t.Fatalf("got %v, want ErrKeyMismatch", err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		dir := t.TempDir()
		nc, err := ca.Issue("node-a", nil, time.Hour, time.Now().Add(-48*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(dir)
		if _, err := LoadNode(dir); !errors.Is(err, ErrExpired) {
			t.Fatalf("got %v, want ErrExpired", err)
		}
	})
	t.Run("ca key mismatch", func(t *testing.T) {
		dir := t.TempDir()
		ca.Write(dir)
		d2 := t.TempDir()
		other.Write(d2)
		k, _ := os.ReadFile(filepath.Join(d2, CAKeyFile))
		os.WriteFile(filepath.Join(dir, CAKeyFile), k, 0o600)
		if _, err := LoadCA(dir); !errors.Is(err, ErrKeyMismatch) {
			t.Fatalf("got %v, want ErrKeyMismatch", err)
		}
	})
}

func TestIssueRejectsBadNames(t *testing.T) {
	ca := mustCA(t, "lab")
	for _, n := range []string{"", "a b", "nodé", strings.Repeat("x", 254)} {
		if _, err := ca.Issue(n, nil, time.Hour, time.Now()); err == nil {
			t.Errorf("Issue(%q): got nil error, want rejection", n)
		}
	}
	if _, err := ca.Issue("ok", nil, 0, time.Now()); err == nil {
		t.Error("Issue with zero validity: got nil error")
	}
}

func TestDev(t *testing.T) {
	d, err := NewDev()
	if err != nil {
		t.Fatal(err)
	}
	a, err := d.Node("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Node("b")
	if err != nil {
		t.Fatal(err)
	}
	cerr, serr := handshake(t, a.ServerTLS("p"), b.ClientTLS("a", "p"))
	if cerr != nil || serr != nil {
		t.Fatalf("dev handshake: client %v, server %v", cerr, serr)
	}
}

// A certificate the cluster CA signed for another purpose is not a node's:
// with only code signing, neither NewBundle nor a handshake accepts it.
func TestCertificateForOtherUsageRefused(t *testing.T) {
	ca := mustCA(t, "lab")
	good := mustBundle(t, ca, "node-a")
	for _, usages := range [][]x509.ExtKeyUsage{
		{x509.ExtKeyUsageCodeSigning},
		{x509.ExtKeyUsageServerAuth}, // a server-only certificate cannot dial peers
	} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(42),
			Subject:      pkix.Name{CommonName: "node-b"},
			DNSNames:     []string{"node-b"},
			NotBefore:    now.Add(-time.Minute),
			NotAfter:     now.Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usages,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certPEM, keyPEM := pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER)
		if _, err := NewBundle(ca.CertPEM, certPEM, keyPEM, now); err == nil {
			t.Errorf("NewBundle accepted a certificate with usages %v", usages)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg := good.ClientTLS("node-a", "x")
		cfg.Certificates = []tls.Certificate{pair}
		if _, serr := handshake(t, good.ServerTLS("x"), cfg); serr == nil || !errors.Is(serr, ErrForeignCA) {
			t.Errorf("usages %v: server error %v, want ErrForeignCA", usages, serr)
		}
	}
}

package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// File names inside a --tls-dir.
const (
	CAFile      = "ca.pem"
	CAKeyFile   = "ca-key.pem"
	NodeFile    = "node.pem"
	NodeKeyFile = "node-key.pem"
)

// DefaultValidity is how long a node certificate is valid unless told otherwise:
// short enough that a stolen key expires, long enough for a lab term.
const DefaultValidity = 90 * 24 * time.Hour

// CAValidity is how long a cluster CA certificate is valid.
const CAValidity = 10 * 365 * 24 * time.Hour

// clockSkew backdates NotBefore so nodes with slightly different clocks accept
// a certificate issued a moment ago.
const clockSkew = 5 * time.Minute

// Errors callers can match with errors.Is.
var (
	// ErrMissing: a required file is absent.
	ErrMissing = errors.New("pki: file missing")
	// ErrCorrupt: a file is not the PEM/DER it should be.
	ErrCorrupt = errors.New("pki: file corrupt")
	// ErrForeignCA: a certificate was not signed by the cluster CA.
	ErrForeignCA = errors.New("pki: certificate not signed by the cluster CA")
	// ErrExpired: a certificate is outside its validity period.
	ErrExpired = errors.New("pki: certificate expired or not yet valid")
	// ErrKeyMismatch: a private key does not belong to its certificate.
	ErrKeyMismatch = errors.New("pki: private key does not match certificate")
)

// CA is a cluster certificate authority: its certificate and private key.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	Key     *ecdsa.PrivateKey
}

// NodeCert is a node certificate with its private key, as issued by a CA.
type NodeCert struct {
	Node    string
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
	// CAPEM is the issuing CA's certificate, written along as ca.pem.
	CAPEM []byte
}

// NewCA creates a fresh cluster CA named name, valid from now for CAValidity.
func NewCA(name string, now time.Time) (*CA, error) {
	if name == "" {
		return nil, errors.New("pki: empty CA name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"ReclaimNet"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &CA{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), Key: key}, nil
}

// Issue makes a key for node and signs a certificate for it, valid from now
// for validity. hosts are extra IP addresses or DNS names the node is reached
// by; 127.0.0.1, ::1 and localhost are always added for single-machine
// development clusters.
func (ca *CA) Issue(node string, hosts []string, validity time.Duration, now time.Time) (*NodeCert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate node key: %w", err)
	}
	cert, certPEM, err := ca.IssueFor(&key.PublicKey, node, hosts, validity, now)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal node key: %w", err)
	}
	return &NodeCert{
		Node:    node,
		Cert:    cert,
		CertPEM: certPEM,
		KeyPEM:  pemBlock("EC PRIVATE KEY", keyDER),
		CAPEM:   ca.CertPEM,
	}, nil
}

// IssueFor signs a certificate for node's public key pub (ECDSA P-256),
// which is how a joining node gets one without its private key ever leaving
// it. hosts and validity are as for [CA.Issue]. It returns the certificate
// and its PEM.
func (ca *CA) IssueFor(pub *ecdsa.PublicKey, node string, hosts []string, validity time.Duration, now time.Time) (*x509.Certificate, []byte, error) {
	if err := ValidNodeName(node); err != nil {
		return nil, nil, err
	}
	if validity <= 0 {
		return nil, nil, fmt.Errorf("pki: validity %v must be positive", validity)
	}
	if pub == nil || pub.Curve != elliptic.P256() {
		return nil, nil, errors.New("pki: node key must be ECDSA P-256")
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: node, Organization: []string{"ReclaimNet"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	addHost := func(h string) {
		if ip := net.ParseIP(h); ip != nil {
			for _, have := range tmpl.IPAddresses {
				if have.Equal(ip) {
					return
				}
			}
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			return
		}
		for _, have := range tmpl.DNSNames {
			if strings.EqualFold(have, h) {
				return
			}
		}
		tmpl.DNSNames = append(tmpl.DNSNames, h)
	}
	addHost(node)
	for _, h := range hosts {
		if h = strings.TrimSpace(h); h != "" {
			addHost(h)
		}
	}
	for _, h := range []string{"localhost", "127.0.0.1", "::1"} {
		addHost(h)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign node certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parse node certificate: %w", err)
	}
	return cert, pemBlock("CERTIFICATE", der), nil
}

// Fingerprint is the hex SHA-256 of a certificate's DER: how a join token
// names the cluster CA, and so the cluster.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// Serial is a certificate's serial number in hex, as deny lists and
// listings spell it.
func Serial(cert *x509.Certificate) string {
	return cert.SerialNumber.Text(16)
}

// ValidNodeName checks that a node name can be a DNS SAN: letters, digits,
// '-', '.' and '_', 1..253 bytes.
func ValidNodeName(node string) error {
	if node == "" || len(node) > 253 {
		return fmt.Errorf("pki: node name %q must be 1..253 bytes", node)
	}
	for _, r := range node {
		ok := r == '-' || r == '.' || r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return fmt.Errorf("pki: node name %q has character %q (want letters, digits, '-', '.', '_')", node, r)
		}
	}
	return nil
}

// Write stores ca.pem and ca-key.pem (0600) in dir, creating dir.
func (ca *CA) Write(dir string) error {
	keyDER, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return fmt.Errorf("marshal CA key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create tls dir: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, CAFile), ca.CertPEM, 0o644, true); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, CAKeyFile), pemBlock("EC PRIVATE KEY", keyDER), 0o600, true)
}

// WriteCA is ca.Write(dir).
func WriteCA(ca *CA, dir string) error { return ca.Write(dir) }

// LoadCA reads ca.pem and ca-key.pem from dir.
func LoadCA(dir string) (*CA, error) {
	certPEM, cert, err := readCert(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%s: not a CA certificate: %w", filepath.Join(dir, CAFile), ErrCorrupt)
	}
	_, key, err := readKey(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, err
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, CAKeyFile), ErrKeyMismatch)
	}
	return &CA{Cert: cert, CertPEM: certPEM, Key: key}, nil
}

// Write stores ca.pem, node.pem and node-key.pem (0600) in dir, creating dir.
func (nc *NodeCert) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create tls dir: %w", err)
	}
	if len(nc.CAPEM) > 0 {
		if err := writeFileAtomic(filepath.Join(dir, CAFile), nc.CAPEM, 0o644, true); err != nil {
			return err
		}
	}
	if err := writeFileAtomic(filepath.Join(dir, NodeFile), nc.CertPEM, 0o644, true); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, NodeKeyFile), nc.KeyPEM, 0o600, true)
}

// Bundle is what a node needs for mutual TLS: the cluster CA pool and its own
// certificate and key.
type Bundle struct {
	// Node is the node name from the certificate's CommonName.
	Node string
	// CA is the cluster CA certificate; Roots holds only it.
	CA    *x509.Certificate
	Roots *x509.CertPool
	// Cert is the node's certificate chain and key for crypto/tls.
	Cert tls.Certificate
	// Leaf is the parsed node certificate.
	Leaf *x509.Certificate
	// Deny, when set, is consulted on every peer certificate by the TLS
	// configurations made from this bundle: a revoked peer is refused as a
	// client and as a server.
	Deny *DenyList
}

// LoadNode reads ca.pem, node.pem and node-key.pem from dir and checks that
// the node certificate is signed by that CA, matches its key and is valid now.
func LoadNode(dir string) (*Bundle, error) {
	return loadNodeAt(dir, time.Now())
}

func loadNodeAt(dir string, now time.Time) (*Bundle, error) {
	caPEM, _, err := readCert(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, err
	}
	certPEM, _, err := readCert(filepath.Join(dir, NodeFile))
	if err != nil {
		return nil, err
	}
	keyPEM, _, err := readKey(filepath.Join(dir, NodeKeyFile))
	if err != nil {
		return nil, err
	}
	return NewBundle(caPEM, certPEM, keyPEM, now)
}

// NewBundle builds a Bundle from PEM bytes and verifies it at now.
func NewBundle(caPEM, certPEM, keyPEM []byte, now time.Time) (*Bundle, error) {
	caCert, err := parseCertPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return nil, fmt.Errorf("node certificate and key: %w", ErrKeyMismatch)
		}
		return nil, fmt.Errorf("node certificate and key: %w: %v", ErrCorrupt, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("node certificate: %w: %v", ErrCorrupt, err)
		}
		pair.Leaf = leaf
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	b := &Bundle{Node: leaf.Subject.CommonName, CA: caCert, Roots: roots, Cert: pair, Leaf: leaf}
	if err := b.Verify(leaf, now); err != nil {
		return nil, fmt.Errorf("node certificate %q: %w", b.Node, err)
	}
	return b, nil
}

// Verify checks that cert is a node certificate of the cluster at now:
// signed by the cluster CA, in its validity period, valid for both TLS
// usages. It does not consult the deny list.
func (b *Bundle) Verify(cert *x509.Certificate, now time.Time) error {
	return verifyChain(b.Roots, cert, now)
}

func verifyChain(roots *x509.CertPool, cert *x509.Certificate, now time.Time) error {
	if now.Before(cert.NotBefore) || now.After(cert.NotAfter) {
		return fmt.Errorf("%w: valid %s to %s, now %s", ErrExpired,
			cert.NotBefore.UTC().Format(time.RFC3339), cert.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	// Every node is both a TLS server and a TLS client (raft, transfers), so
	// its certificate must be valid for both usages: a certificate the CA
	// signed for something else (code signing, say) is not a node's.
	var err error
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err = cert.Verify(x509.VerifyOptions{
			Roots:       roots,
			CurrentTime: now,
			KeyUsages:   []x509.ExtKeyUsage{usage},
		}); err != nil {
			break
		}
	}
	if err != nil {
		var ce x509.CertificateInvalidError
		if errors.As(err, &ce) && ce.Reason == x509.Expired {
			return fmt.Errorf("%w: %v", ErrExpired, err)
		}
		return fmt.Errorf("%w: %v", ErrForeignCA, err)
	}
	return nil
}

// ServerTLS returns a server configuration that presents the node certificate
// and requires a client certificate from the cluster CA (TLS 1.3 only).
func (b *Bundle) ServerTLS(nextProtos ...string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{b.Cert},
		// RequireAnyClientCert plus checkPeer is RequireAndVerifyClientCert
		// with errors that name the cause (ErrForeignCA, ErrExpired): the
		// chain is verified against the cluster CA in checkPeer.
		ClientAuth: tls.RequireAnyClientCert,
		ClientCAs:  b.Roots,
		NextProtos: append([]string(nil), nextProtos...),
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			return b.checkPeer(raw, "")
		},
	}
}

// ClientTLS returns a client configuration that presents the node certificate
// and accepts only a server certificate from the cluster CA naming serverNode.
// An empty serverNode accepts any node of the cluster (use only where the
// peer's name is not known, e.g. dialing a bare address on join).
func (b *Bundle) ClientTLS(serverNode string, nextProtos ...string) *tls.Config {
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{b.Cert},
		RootCAs:      b.Roots,
		ServerName:   serverNode,
		NextProtos:   append([]string(nil), nextProtos...),
	}
	// Verification is done by checkPeer so an address dial (no name) still
	// checks the chain, and so errors say what was wrong.
	cfg.InsecureSkipVerify = true
	cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		return b.checkPeer(raw, serverNode)
	}
	return cfg
}

// checkPeer verifies a peer's chain against the cluster CA, that it is not
// on the deny list and, if wantNode is set, that it belongs to that node.
func (b *Bundle) checkPeer(raw [][]byte, wantNode string) error {
	if len(raw) == 0 {
		return errors.New("pki: peer sent no certificate")
	}
	leaf, err := x509.ParseCertificate(raw[0])
	if err != nil {
		return fmt.Errorf("pki: peer certificate: %w: %v", ErrCorrupt, err)
	}
	// Intermediates are not part of this design: only the leaf is checked,
	// directly against the cluster CA, so a peer cannot extend the chain.
	if err := verifyChain(b.Roots, leaf, time.Now()); err != nil {
		return fmt.Errorf("pki: peer %q: %w", leaf.Subject.CommonName, err)
	}
	if wantNode != "" {
		if err := leaf.VerifyHostname(wantNode); err != nil || leaf.Subject.CommonName != wantNode {
			return fmt.Errorf("pki: peer is %q, want %q", leaf.Subject.CommonName, wantNode)
		}
	}
	if b.Deny != nil {
		if err := b.Deny.Check(leaf); err != nil {
			return fmt.Errorf("pki: peer %q: %w", leaf.Subject.CommonName, err)
		}
	}
	return nil
}

// PeerNode returns the node name of the peer of a completed handshake.
func PeerNode(cs tls.ConnectionState) (string, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", errors.New("pki: no peer certificate")
	}
	return cs.PeerCertificates[0].Subject.CommonName, nil
}

// Dev is an in-memory throwaway CA for --dev and tests.
type Dev struct {
	CA *CA
}

// NewDev creates a throwaway CA named "reclaimnet-dev".
func NewDev() (*Dev, error) {
	ca, err := NewCA("reclaimnet-dev", time.Now())
	if err != nil {
		return nil, err
	}
	return &Dev{CA: ca}, nil
}

// Node issues a bundle for node, valid for a day, signed by the dev CA.
func (d *Dev) Node(node string, hosts ...string) (*Bundle, error) {
	now := time.Now()
	nc, err := d.CA.Issue(node, hosts, 24*time.Hour, now)
	if err != nil {
		return nil, err
	}
	return nc.Bundle(now)
}

// Bundle turns an issued certificate into a ready Bundle, verified at now.
func (nc *NodeCert) Bundle(now time.Time) (*Bundle, error) {
	return NewBundle(nc.CAPEM, nc.CertPEM, nc.KeyPEM, now)
}

func randomSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certificate serial: %w", err)
	}
	return n, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: no PEM CERTIFICATE block", ErrCorrupt)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return c, nil
}

func parseKeyPEM(b []byte) (*ecdsa.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%w: no PEM key block", ErrCorrupt)
	}
	switch blk.Type {
	case "EC PRIVATE KEY":
		k, err := x509.ParseECPrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		return k, nil
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("%w: key is %T, want ECDSA", ErrCorrupt, k)
		}
		return ek, nil
	}
	return nil, fmt.Errorf("%w: PEM block %q is not a private key", ErrCorrupt, blk.Type)
}

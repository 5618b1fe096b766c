package enroll

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"time"

	"github.com/reclaimnet/reclaimnet/pki"
)

// Client asks a peer's enrollment service for a certificate (join, renew)
// or for the voter keys. The zero value dials with a net.Dialer.
type Client struct {
	// Dial opens the TCP connection (nil: a net.Dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Timeout bounds one request when ctx has no earlier deadline (0:
	// DefaultTimeout).
	Timeout time.Duration
}

// Result is what a join brings back: the node's certificate with the key
// the joiner made (ready for [pki.NodeCert.Write]) and the gossip keyring,
// primary key first.
type Result struct {
	Cert       *pki.NodeCert
	GossipKeys [][]byte
	// GossipAddr is the gossip address of the member that answered
	// (empty if it did not say).
	GossipAddr string
}

// Join enrolls node through the peer at addr with tok. It makes the node's
// key (which never leaves this process but in the returned Result), checks
// that the peer's certificate chain ends in the CA whose fingerprint the
// token carries (refusing any other peer with ErrPeerCA before the token is
// sent), and sends a signing request for node with ips as extra addresses.
// A refusal is a *RefusedError that unwraps to the peer's reason
// (ErrWrongToken, ErrTokenExpired, ErrNameTaken, ...).
func (c *Client) Join(ctx context.Context, addr string, tok Token, node string, ips []net.IP) (*Result, error) {
	if err := pki.ValidNodeName(node); err != nil {
		return nil, err
	}
	key, csr, err := newCSR(node, ips)
	if err != nil {
		return nil, err
	}
	var pinned *x509.Certificate
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{ALPN},
		// The chain is checked against the pinned fingerprint in
		// VerifyPeerCertificate, which runs before the handshake ends and
		// so before a byte of the token is written.
		InsecureSkipVerify:    true,
		VerifyPeerCertificate: pinCA(tok.CA, &pinned),
	}
	resp, err := c.do(ctx, addr, cfg, &request{V: wireVersion, Op: opJoin, Token: tok.Encode(), CSR: csr})
	if err != nil {
		return nil, err
	}
	if pinned == nil {
		return nil, fmt.Errorf("%w: handshake finished without the pinned CA", ErrPeerCA)
	}
	nc, err := issued(resp, pinned, node, key)
	if err != nil {
		return nil, fmt.Errorf("join via %s: %w", addr, err)
	}
	if len(resp.GossipKeys) == 0 {
		return nil, fmt.Errorf("join via %s: the answer has no gossip key", addr)
	}
	return &Result{Cert: nc, GossipKeys: resp.GossipKeys, GossipAddr: resp.GossipAddr}, nil
}

// Renew asks the peer at addr, over mutual TLS with the node's current
// certificate b, for a certificate on a fresh key for the same node name
// and addresses. The caller writes the result and makes it current
// ([pki.Identity.Replace]).
func (c *Client) Renew(ctx context.Context, addr string, b *pki.Bundle) (*pki.NodeCert, error) {
	var ips []net.IP
	for _, ip := range b.Leaf.IPAddresses {
		if !ip.IsLoopback() { // loopback addresses the CA adds itself
			ips = append(ips, ip)
		}
	}
	key, csr, err := newCSR(b.Node, ips)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, addr, b.ClientTLS("", ALPN), &request{V: wireVersion, Op: opRenew, CSR: csr})
	if err != nil {
		return nil, err
	}
	nc, err := issued(resp, b.CA, b.Node, key)
	if err != nil {
		return nil, fmt.Errorf("renew via %s: %w", addr, err)
	}
	return nc, nil
}

// VoterKeys asks the peer at addr, over mutual TLS with b, for the voter
// keys, which arrive sealed to b's certificate.
func (c *Client) VoterKeys(ctx context.Context, addr string, b *pki.Bundle) (*pki.VoterKeys, error) {
	resp, err := c.do(ctx, addr, b.ClientTLS("", ALPN), &request{V: wireVersion, Op: opVoterKeys})
	if err != nil {
		return nil, err
	}
	v, err := b.OpenVoterKeys(resp.Sealed)
	if err != nil {
		return nil, fmt.Errorf("voter keys from %s: %w", addr, err)
	}
	return v, nil
}

// JobSecret asks the voter at addr, over mutual TLS with b, for job's
// secret name, which arrives resealed to b's certificate, and opens it.
func (c *Client) JobSecret(ctx context.Context, addr string, b *pki.Bundle, job, name string) ([]byte, error) {
	resp, err := c.do(ctx, addr, b.ClientTLS("", ALPN), &request{V: wireVersion, Op: opJobSecret, Job: job, Name: name})
	if err != nil {
		return nil, err
	}
	v, err := b.OpenJobSecret(job, name, resp.Sealed)
	if err != nil {
		return nil, fmt.Errorf("secret %s of job %s from %s: %w", name, job, addr, err)
	}
	return v, nil
}

// do sends one request and reads its answer; a refusal becomes a
// *RefusedError.
func (c *Client) do(ctx context.Context, addr string, cfg *tls.Config, req *request) (*response, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dial := c.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	raw, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("enroll: dial %s: %w", addr, err)
	}
	conn := tls.Client(raw, cfg)
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if err := conn.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("enroll: TLS with %s: %w", addr, err)
	}
	if !IsEnrollment(conn.ConnectionState()) {
		return nil, fmt.Errorf("%w: %s did not agree to %s", ErrNotServed, addr, ALPN)
	}
	if err := writeFrame(conn, req); err != nil {
		return nil, fmt.Errorf("enroll: send to %s: %w", addr, err)
	}
	b, err := readFrame(conn)
	if err != nil {
		return nil, fmt.Errorf("enroll: answer from %s: %w", addr, err)
	}
	resp, err := decodeResponse(b)
	if err != nil {
		return nil, fmt.Errorf("enroll: answer from %s: %w", addr, err)
	}
	if resp.Code != "" {
		return nil, &RefusedError{Peer: addr, Op: req.Op, Code: resp.Code, Message: resp.Message, err: errOfCode(resp.Code)}
	}
	return resp, nil
}

// pinCA returns a VerifyPeerCertificate that accepts only a chain whose
// last certificate has fingerprint fp, is a CA, and signed the leaf for
// server use; it stores that CA in *out.
func pinCA(fp string, out **x509.Certificate) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) < 2 {
			return fmt.Errorf("%w: the peer sent no CA certificate with its own (is it a ReclaimNet node that serves joins?)", ErrPeerCA)
		}
		ca, err := x509.ParseCertificate(raw[len(raw)-1])
		if err != nil {
			return fmt.Errorf("%w: the peer's CA certificate: %v", ErrPeerCA, err)
		}
		if got := pki.Fingerprint(ca); got != fp {
			return fmt.Errorf("%w: the peer's CA is %s, the token pins %s: the token is for another cluster, or the peer is not a member of it",
				ErrPeerCA, short(got), short(fp))
		}
		if !ca.IsCA {
			return fmt.Errorf("%w: the pinned certificate is not a CA", ErrPeerCA)
		}
		leaf, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return fmt.Errorf("%w: the peer's certificate: %v", ErrPeerCA, err)
		}
		roots := x509.NewCertPool()
		roots.AddCert(ca)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return fmt.Errorf("%w: the peer's certificate is not signed by the pinned CA: %v", ErrPeerCA, err)
		}
		*out = ca
		return nil
	}
}

// issued checks an answer's certificate: from ca, for node, over the key
// this node made, valid now; and the CA the answer names is ca.
func issued(resp *response, ca *x509.Certificate, node string, key *ecdsa.PrivateKey) (*pki.NodeCert, error) {
	if !equalPEMCert(resp.CA, ca) {
		return nil, fmt.Errorf("%w: the answer names another CA than the peer's", ErrPeerCA)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	b, err := pki.NewBundle(resp.CA, resp.Cert, keyPEM, time.Now())
	if err != nil {
		return nil, fmt.Errorf("issued certificate: %w", err)
	}
	if b.Node != node {
		return nil, fmt.Errorf("issued certificate is for %q, not %q", b.Node, node)
	}
	return &pki.NodeCert{Node: node, Cert: b.Leaf, CertPEM: resp.Cert, KeyPEM: keyPEM, CAPEM: resp.CA}, nil
}

func equalPEMCert(p []byte, want *x509.Certificate) bool {
	blk, _ := pem.Decode(p)
	return blk != nil && blk.Type == "CERTIFICATE" && want != nil && string(blk.Bytes) == string(want.Raw)
}

// newCSR makes a P-256 key and a signing request for node with ips.
func newCSR(node string, ips []net.IP) (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("enroll: generate node key: %w", err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: node},
		DNSNames:    []string{node},
		IPAddresses: ips,
	}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("enroll: signing request: %w", err)
	}
	return key, csr, nil
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

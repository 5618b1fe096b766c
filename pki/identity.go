package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync/atomic"
	"time"
)

// Identity is a node's certificate as it renews. TLS configurations made
// from it present whichever certificate is current at each handshake, so a
// renewal reaches listeners that are already open; a Bundle's own
// configurations keep the certificate they were made with.
type Identity struct {
	cur atomic.Pointer[Bundle]
}

// NewIdentity starts an identity at b; b's deny list stays the identity's
// across renewals.
func NewIdentity(b *Bundle) *Identity {
	id := &Identity{}
	id.cur.Store(b)
	return id
}

// Bundle returns the current bundle.
func (id *Identity) Bundle() *Bundle { return id.cur.Load() }

// Node returns the node name, which renewals never change.
func (id *Identity) Node() string { return id.cur.Load().Node }

// Replace makes nb current. It refuses a bundle for another node or another
// CA, and one that expires before the current one (a stale renewal that
// arrived late). nb is not modified; the identity keeps its deny list.
func (id *Identity) Replace(nb *Bundle) error {
	cur := id.cur.Load()
	switch {
	case nb.Node != cur.Node:
		return fmt.Errorf("pki: renewed certificate is for node %q, not %q", nb.Node, cur.Node)
	case !nb.CA.Equal(cur.CA):
		return fmt.Errorf("pki: renewed certificate is from CA %s, not %s: %w", Fingerprint(nb.CA), Fingerprint(cur.CA), ErrForeignCA)
	case nb.Leaf.NotAfter.Before(cur.Leaf.NotAfter):
		return fmt.Errorf("pki: renewed certificate expires %s, before the current one (%s)",
			nb.Leaf.NotAfter.UTC().Format(time.RFC3339), cur.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	next := *nb
	next.Deny = cur.Deny
	id.cur.Store(&next)
	return nil
}

// ServerTLS is [Bundle.ServerTLS] presenting the current certificate.
func (id *Identity) ServerTLS(nextProtos ...string) *tls.Config {
	cfg := id.Bundle().ServerTLS(nextProtos...)
	cfg.Certificates = nil
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &id.Bundle().Cert, nil }
	cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		return id.Bundle().checkPeer(raw, "")
	}
	return cfg
}

// ClientTLS is [Bundle.ClientTLS] presenting the current certificate.
func (id *Identity) ClientTLS(serverNode string, nextProtos ...string) *tls.Config {
	cfg := id.Bundle().ClientTLS(serverNode, nextProtos...)
	cfg.Certificates = nil
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &id.Bundle().Cert, nil }
	cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		return id.Bundle().checkPeer(raw, serverNode)
	}
	return cfg
}

// TLSSource makes a node's TLS configurations: a [Bundle] (the
// certificate it was made with) or an [Identity] (the current one, as it
// renews).
type TLSSource interface {
	ServerTLS(nextProtos ...string) *tls.Config
	ClientTLS(serverNode string, nextProtos ...string) *tls.Config
}

var (
	_ TLSSource = (*Bundle)(nil)
	_ TLSSource = (*Identity)(nil)
)

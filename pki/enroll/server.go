package enroll

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"time"

	"github.com/reclaimnet/reclaimnet/pki"
)

// DefaultTimeout bounds one enrollment connection, from handshake to
// answer, on both sides: a join may wait for the leader to commit.
const DefaultTimeout = 30 * time.Second

// maxIPs bounds the addresses a joiner may ask to have in its certificate.
const maxIPs = 16

// ServerTLS extends base, the coordinator port's mutual-TLS configuration,
// with enrollment. A ClientHello that offers ALPN gets enrollment's own
// configuration: it presents id's current certificate followed by the CA
// certificate (so a joiner can check the chain against the fingerprint in
// its token), asks for a client certificate without requiring one (a
// joiner has none yet; a renewing node's is verified against the cluster
// CA), and negotiates ALPN only. Any other ClientHello gets base (or what
// base's own GetConfigForClient returns).
//
// A connection that negotiated ALPN ([IsEnrollment]) may carry no client
// certificate: the transport must hand it to [Handler.ServeConn] and to
// nothing else, never read a Raft or forwarded-command byte from it.
// base is not modified.
func ServerTLS(base *tls.Config, id *pki.Identity) *tls.Config {
	enroll := &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{ALPN},
		ClientAuth: tls.RequestClientCert,
		// One request per connection; and no session minted here should
		// ever resume into another configuration.
		SessionTicketsDisabled: true,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			b := id.Bundle()
			c := b.Cert
			if last := c.Certificate[len(c.Certificate)-1]; !bytes.Equal(last, b.CA.Raw) {
				c.Certificate = append(slices.Clip(c.Certificate), b.CA.Raw)
			}
			return &c, nil
		},
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return nil
			}
			leaf, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return fmt.Errorf("enroll: client certificate: %w: %v", pki.ErrCorrupt, err)
			}
			// The deny list is the handler's to check, so a removed node
			// hears why rather than a bare TLS alert.
			return id.Bundle().Verify(leaf, time.Now())
		},
	}
	outer := base.Clone()
	inner := base.GetConfigForClient
	outer.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if slices.Contains(hello.SupportedProtos, ALPN) {
			return enroll, nil
		}
		if inner != nil {
			return inner(hello)
		}
		return nil, nil
	}
	return outer
}

// IsEnrollment reports whether a server-side connection negotiated the
// enrollment protocol.
func IsEnrollment(cs tls.ConnectionState) bool {
	return cs.NegotiatedProtocol == ALPN
}

// SignRequest is what [Handler.Sign] signs: a certificate for Node over
// PublicKey, with IPs as extra addresses.
type SignRequest struct {
	Node      string
	PublicKey *ecdsa.PublicKey
	IPs       []net.IP
	Renewal   bool
	Now       time.Time
}

// CASigner returns a Sign callback that issues certificates from ca, valid
// for validity (pki.DefaultValidity if 0).
func CASigner(ca *pki.CA, validity time.Duration) func(context.Context, SignRequest) (*x509.Certificate, error) {
	if validity == 0 {
		validity = pki.DefaultValidity
	}
	return func(_ context.Context, r SignRequest) (*x509.Certificate, error) {
		hosts := make([]string, len(r.IPs))
		for i, ip := range r.IPs {
			hosts[i] = ip.String()
		}
		cert, _, err := ca.IssueFor(r.PublicKey, r.Node, hosts, validity, r.Now)
		return cert, err
	}
}

// Handler serves enrollment connections. Its callbacks are how the cluster
// decides; the agent backs them with the replicated state (a [Registry])
// and forwards what must be committed to the leader. A callback returns an
// error wrapping one of this package's sentinels to refuse with that
// reason; any other error is logged and the peer hears ErrInternal.
type Handler struct {
	// Identity is this node's certificate and CA.
	Identity *pki.Identity
	// Sign issues a certificate (join and renewal). Required.
	Sign func(ctx context.Context, r SignRequest) (*x509.Certificate, error)
	// CheckJoin refuses, from this node's copy of the state and consuming
	// nothing, a join Admit would refuse: wrong tokens cost no signature
	// and no log entry. Optional.
	CheckJoin func(ctx context.Context, a Admission) error
	// Admit atomically checks and consumes the token and records the node
	// under its name with cert (see [Registry.Admit]); it refuses a name
	// already taken. The join's one commit. Required for joins.
	Admit func(ctx context.Context, a Admission, cert CertInfo) error
	// GossipKeys returns the gossip keyring, primary key first, that a
	// joiner receives. Required for joins.
	GossipKeys func(ctx context.Context) ([][]byte, error)
	// GossipAddr returns this member's gossip address, which a joiner
	// joins gossip through. Optional.
	GossipAddr func() string
	// Renewed records a renewed certificate (see [Registry.Renewed]); nil
	// refuses renewals.
	Renewed func(ctx context.Context, node string, cert CertInfo) error
	// VoterKeys returns the voter keys sealed to peer (see
	// [pki.VoterKeys.SealFor]) after checking that peer's node is a voter;
	// nil refuses voter-keys requests.
	VoterKeys func(ctx context.Context, peer *x509.Certificate) ([]byte, error)
	// JobSecret returns job's sealed secret name resealed to peer (see
	// [pki.SecretsKey.ResealSecret]) after checking that peer's node hosts
	// the job; nil refuses job-secret requests.
	JobSecret func(ctx context.Context, peer *x509.Certificate, job, name string) ([]byte, error)
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Timeout bounds a connection (0: DefaultTimeout).
	Timeout time.Duration
	// Logger receives refusals (nil: discarded).
	Logger *slog.Logger
}

// ServeConn serves one enrollment connection, from the handshake (if not
// yet done) to the answer, and closes it.
func (h *Handler) ServeConn(ctx context.Context, conn *tls.Conn) {
	defer conn.Close()
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	logger := h.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := conn.HandshakeContext(ctx); err != nil {
		logger.Warn("enroll: TLS handshake failed", "remote", conn.RemoteAddr(), "err", err)
		return
	}
	cs := conn.ConnectionState()
	if !IsEnrollment(cs) {
		logger.Warn("enroll: connection did not negotiate enrollment", "remote", conn.RemoteAddr(), "alpn", cs.NegotiatedProtocol)
		return
	}
	var resp *response
	b, err := readFrame(conn)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return // a client that pinned another CA hangs up here
		}
		resp = h.refuse(logger, conn, "", "", err)
	} else if req, err := decodeRequest(b); err != nil {
		resp = h.refuse(logger, conn, "", "", err)
	} else {
		var node string
		resp, node, err = h.serve(ctx, req, cs.PeerCertificates)
		if err != nil {
			resp = h.refuse(logger, conn, req.Op, node, err)
		} else {
			logger.Info("enroll: served", "op", req.Op, "node", node, "remote", conn.RemoteAddr())
		}
	}
	resp.V = wireVersion
	if err := writeFrame(conn, resp); err != nil {
		logger.Warn("enroll: write answer", "remote", conn.RemoteAddr(), "err", err)
	}
}

// refuse turns err into the answer the peer gets; errors that name no
// sentinel are logged in full and answered as ErrInternal.
func (h *Handler) refuse(logger *slog.Logger, conn net.Conn, op, node string, err error) *response {
	code, known := codeOf(err)
	msg := err.Error()
	if !known {
		logger.Error("enroll: request failed", "op", op, "node", node, "remote", conn.RemoteAddr(), "err", err)
		msg = ErrInternal.Error() + ": see the log of the node that was asked"
	} else {
		logger.Warn("enroll: refused", "op", op, "node", node, "remote", conn.RemoteAddr(), "code", code, "err", err)
	}
	return &response{Code: code, Message: msg}
}

func (h *Handler) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// serve answers a well-formed request; node is the node it concerns, for
// the log.
func (h *Handler) serve(ctx context.Context, req *request, peer []*x509.Certificate) (*response, string, error) {
	switch req.Op {
	case opJoin:
		return h.join(ctx, req)
	case opRenew:
		return h.renew(ctx, req, peer)
	case opJobSecret:
		return h.jobSecret(ctx, req, peer)
	default:
		return h.voterKeys(ctx, peer)
	}
}

func (h *Handler) join(ctx context.Context, req *request) (*response, string, error) {
	if h.Admit == nil || h.GossipKeys == nil || h.Sign == nil {
		return nil, "", fmt.Errorf("%w: this node does not admit joins", ErrNotServed)
	}
	b := h.Identity.Bundle()
	tok, err := ParseToken(req.Token)
	if err != nil {
		return nil, "", err
	}
	if ca := pki.Fingerprint(b.CA); tok.CA != ca {
		return nil, "", fmt.Errorf("%w: the token names the cluster of CA %s; this node belongs to the cluster of CA %s",
			ErrForeignCluster, short(tok.CA), short(ca))
	}
	csr, err := parseCSR(req.CSR)
	if err != nil {
		return nil, "", err
	}
	now := h.now()
	a := Admission{TokenID: tok.ID, SecretHash: tok.SecretHash(), CA: tok.CA, Node: csr.node, Now: now}
	if h.CheckJoin != nil {
		if err := h.CheckJoin(ctx, a); err != nil {
			return nil, csr.node, err
		}
	}
	keys, err := h.GossipKeys(ctx)
	if err != nil {
		return nil, csr.node, fmt.Errorf("gossip keys: %w", err)
	}
	cert, err := h.sign(ctx, csr, false, now)
	if err != nil {
		return nil, csr.node, err
	}
	if err := h.Admit(ctx, a, certInfo(cert)); err != nil {
		return nil, csr.node, err
	}
	resp := &response{Cert: pemCert(cert), CA: pemCert(b.CA), GossipKeys: keys}
	if h.GossipAddr != nil {
		resp.GossipAddr = h.GossipAddr()
	}
	return resp, csr.node, nil
}

func (h *Handler) renew(ctx context.Context, req *request, peer []*x509.Certificate) (*response, string, error) {
	cur, err := h.member(peer, "a renewal")
	if err != nil {
		return nil, "", err
	}
	node := cur.Subject.CommonName
	if h.Renewed == nil || h.Sign == nil {
		return nil, node, fmt.Errorf("%w: this node does not renew certificates", ErrNotServed)
	}
	csr, err := parseCSR(req.CSR)
	if err != nil {
		return nil, node, err
	}
	if csr.node != node {
		return nil, node, fmt.Errorf("%w: a node renews only its own certificate: the request names %q, the certificate %q", ErrBadRequest, csr.node, node)
	}
	cert, err := h.sign(ctx, csr, true, h.now())
	if err != nil {
		return nil, node, err
	}
	if err := h.Renewed(ctx, node, certInfo(cert)); err != nil {
		return nil, node, err
	}
	return &response{Cert: pemCert(cert), CA: pemCert(h.Identity.Bundle().CA)}, node, nil
}

func (h *Handler) voterKeys(ctx context.Context, peer []*x509.Certificate) (*response, string, error) {
	cur, err := h.member(peer, "voter keys")
	if err != nil {
		return nil, "", err
	}
	node := cur.Subject.CommonName
	if h.VoterKeys == nil {
		return nil, node, fmt.Errorf("%w: this node does not hand out voter keys", ErrNotServed)
	}
	sealed, err := h.VoterKeys(ctx, cur)
	if err != nil {
		return nil, node, err
	}
	return &response{Sealed: sealed}, node, nil
}

func (h *Handler) jobSecret(ctx context.Context, req *request, peer []*x509.Certificate) (*response, string, error) {
	cur, err := h.member(peer, "a job's secret")
	if err != nil {
		return nil, "", err
	}
	node := cur.Subject.CommonName
	if h.JobSecret == nil {
		return nil, node, fmt.Errorf("%w: this node does not release job secrets", ErrNotServed)
	}
	sealed, err := h.JobSecret(ctx, cur, req.Job, req.Name)
	if err != nil {
		return nil, node, err
	}
	return &response{Sealed: sealed}, node, nil
}

// member returns the peer's certificate (its chain was verified in the
// handshake) after checking the deny list, for requests only members make.
func (h *Handler) member(peer []*x509.Certificate, what string) (*x509.Certificate, error) {
	if len(peer) == 0 {
		return nil, fmt.Errorf("%w: %s needs the node's current certificate; a node without one joins with a token", ErrNotEnrolled, what)
	}
	if deny := h.Identity.Bundle().Deny; deny != nil {
		if err := deny.Check(peer[0]); err != nil {
			return nil, err
		}
	}
	return peer[0], nil
}

// sign has the callback sign csr and checks what came back: the node's
// name, the joiner's key, a chain to the cluster CA.
func (h *Handler) sign(ctx context.Context, csr *csrInfo, renewal bool, now time.Time) (*x509.Certificate, error) {
	cert, err := h.Sign(ctx, SignRequest{Node: csr.node, PublicKey: csr.pub, IPs: csr.ips, Renewal: renewal, Now: now})
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %q: %w", csr.node, err)
	}
	if cert.Subject.CommonName != csr.node || !csr.pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("signed certificate for %q does not match the request", csr.node)
	}
	b := h.Identity.Bundle()
	if err := b.Verify(cert, now); err != nil {
		return nil, fmt.Errorf("signed certificate for %q: %w", csr.node, err)
	}
	// A name's removal denies certificates issued up to its time; one
	// signed by a clock not yet past it would be refused all its life.
	if b.Deny != nil {
		if err := b.Deny.Check(cert); err != nil {
			return nil, fmt.Errorf("signed certificate for %q would be refused by the deny list (the signer's clock is not past the removal; try again): %v", csr.node, err)
		}
	}
	return cert, nil
}

// csrInfo is what a CSR asks for, once checked.
type csrInfo struct {
	node string
	pub  *ecdsa.PublicKey
	ips  []net.IP
}

// parseCSR checks a PKCS#10 request: signed by its own key (the joiner
// holds it), an ECDSA P-256 key, a valid node name, and beyond that name
// only IP addresses: no other DNS names, e-mail addresses or URIs, which
// would let one node's certificate pass for another's.
func parseCSR(der []byte) (*csrInfo, error) {
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("%w: CSR: %v", ErrBadRequest, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: CSR signature: %v", ErrBadRequest, err)
	}
	pub, ok := csr.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%w: CSR key must be ECDSA P-256", ErrBadRequest)
	}
	node := csr.Subject.CommonName
	if err := pki.ValidNodeName(node); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	for _, d := range csr.DNSNames {
		if d != node {
			return nil, fmt.Errorf("%w: CSR for %q asks for DNS name %q; a node's certificate names only the node", ErrBadRequest, node, d)
		}
	}
	if len(csr.EmailAddresses) > 0 || len(csr.URIs) > 0 {
		return nil, fmt.Errorf("%w: CSR for %q asks for e-mail addresses or URIs", ErrBadRequest, node)
	}
	if len(csr.IPAddresses) > maxIPs {
		return nil, fmt.Errorf("%w: CSR for %q asks for %d IP addresses (at most %d)", ErrBadRequest, node, len(csr.IPAddresses), maxIPs)
	}
	return &csrInfo{node: node, pub: pub, ips: csr.IPAddresses}, nil
}

func certInfo(c *x509.Certificate) CertInfo {
	return CertInfo{Serial: pki.Serial(c), NotAfter: c.NotAfter}
}

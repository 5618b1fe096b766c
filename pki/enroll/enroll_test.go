package enroll

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/pki"
)

const alpnRaft = "reclaimnet-raft/1" // what the coordinator port speaks besides enrollment

// cluster is one member serving enrollment on a real loopback listener,
// its callbacks backed by a Registry as the replicated state will be.
type cluster struct {
	t       *testing.T
	ca      *pki.CA
	member  *pki.Identity // lab-a, with a hand-made certificate
	deny    *pki.DenyList
	gossip  [][]byte
	voters  map[string]bool
	keys    *pki.VoterKeys
	addr    string
	handler *Handler
	logs    *syncBuffer

	mu      sync.Mutex
	reg     *Registry
	hosts   map[string]string // job → the node that runs it; guarded by mu
	secrets map[string][]byte // job/name → sealed value; guarded by mu
	now     time.Time         // the registry's clock; guarded by mu

	checks, admits atomic.Int32 // callback calls
	raftConns      atomic.Int32 // connections handed to the non-enrollment path
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newCluster(t *testing.T, name string) *cluster {
	t.Helper()
	ca, err := pki.NewCA(name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := ca.Issue("lab-a", nil, pki.DefaultValidity, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := nc.Bundle(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, ca: ca, deny: pki.NewDenyList(), reg: NewRegistry(), now: time.Now(),
		voters: map[string]bool{}, logs: &syncBuffer{}, hosts: map[string]string{}, secrets: map[string][]byte{}}
	b.Deny = c.deny
	c.member = pki.NewIdentity(b)
	key := make([]byte, 32)
	rand.Read(key)
	c.gossip = [][]byte{key}
	secrets, err := pki.NewSecretsKey()
	if err != nil {
		t.Fatal(err)
	}
	c.keys = &pki.VoterKeys{CA: ca, Secrets: secrets}
	c.handler = &Handler{
		Identity: c.member,
		Sign:     CASigner(ca, 0),
		CheckJoin: func(_ context.Context, a Admission) error {
			c.checks.Add(1)
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.reg.CheckJoin(a)
		},
		Admit: func(_ context.Context, a Admission, cert CertInfo) error {
			c.admits.Add(1)
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.reg.Admit(a, cert)
		},
		GossipKeys: func(context.Context) ([][]byte, error) { return c.gossip, nil },
		GossipAddr: func() string { return "192.0.2.1:7946" },
		Renewed: func(_ context.Context, node string, cert CertInfo) error {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.reg.Renewed(node, cert, c.now)
		},
		VoterKeys: func(_ context.Context, peer *x509.Certificate) ([]byte, error) {
			c.mu.Lock()
			voter := c.voters[peer.Subject.CommonName]
			c.mu.Unlock()
			if !voter {
				return nil, ErrNotVoter
			}
			return c.keys.SealFor(peer)
		},
		JobSecret: func(_ context.Context, peer *x509.Certificate, job, name string) ([]byte, error) {
			c.mu.Lock()
			host, sealed := c.hosts[job], c.secrets[job+"/"+name]
			c.mu.Unlock()
			if host != peer.Subject.CommonName {
				return nil, fmt.Errorf("%w: %s runs on %q", ErrNotHost, job, host)
			}
			return c.keys.Secrets.ResealSecret(job, name, sealed, peer)
		},
		Now: func() time.Time {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.now
		},
		Logger: slog.New(slog.NewTextHandler(c.logs, nil)),
	}
	c.addr = c.serve(ServerTLS(c.member.ServerTLS(alpnRaft), c.member))
	return c
}

// serve runs the coordinator port's accept loop as the transport will:
// enrollment connections to the handler, any other to the Raft path.
func (c *cluster) serve(cfg *tls.Config) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	var wg sync.WaitGroup
	c.t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				conn := tls.Server(raw, cfg)
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				if err := conn.Handshake(); err != nil {
					return
				}
				if IsEnrollment(conn.ConnectionState()) {
					c.handler.ServeConn(context.Background(), conn)
					return
				}
				c.raftConns.Add(1)
				conn.Write([]byte("R"))
			})
		}
	})
	return ln.Addr().String()
}

func (c *cluster) token(ttl time.Duration, uses int) Token {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	tok, rec, err := NewToken(pki.Fingerprint(c.ca.Cert), ttl, uses, c.now)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := c.reg.AddToken(rec); err != nil {
		c.t.Fatal(err)
	}
	return tok
}

func (c *cluster) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *cluster) tokenUses(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reg.Tokens[id].Used
}

// mutualTLS runs a Raft-path handshake from b to the member and reports
// the server's verdict: nil if the member served it.
func (c *cluster) mutualTLS(b *pki.Bundle) error {
	c.t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", c.addr, b.ClientTLS("lab-a", alpnRaft))
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	var got [1]byte
	if _, err := io.ReadFull(conn, got[:]); err != nil {
		return err
	}
	if got[0] != 'R' {
		c.t.Fatalf("raft path answered %q", got[:])
	}
	return nil
}

var loopback = []net.IP{net.ParseIP("10.1.2.3")}

func TestJoin(t *testing.T) {
	c := newCluster(t, "lab-cluster")
	tok := c.token(time.Hour, 2)
	var cl Client
	res, err := cl.Join(context.Background(), c.addr, tok, "lab-b", loopback)
	if err != nil {
		t.Fatal(err)
	}
	cert := res.Cert.Cert
	if cert.Subject.CommonName != "lab-b" {
		t.Errorf("certificate for %q, want lab-b", cert.Subject.CommonName)
	}
	for _, h := range []string{"lab-b", "10.1.2.3", "127.0.0.1"} {
		if err := cert.VerifyHostname(h); err != nil {
			t.Errorf("certificate does not cover %s: %v", h, err)
		}
	}
	if err := cert.VerifyHostname("lab-a"); err == nil {
		t.Error("lab-b's certificate also passes for lab-a")
	}
	if !bytes.Equal(res.GossipKeys[0], c.gossip[0]) || len(res.GossipKeys) != 1 {
		t.Error("the joiner did not receive the gossip keyring")
	}
	if res.GossipAddr != "192.0.2.1:7946" {
		t.Errorf("gossip address %q, want the serving member's 192.0.2.1:7946", res.GossipAddr)
	}
	// The key is the joiner's: the certificate is over the key it kept.
	b, err := res.Cert.Bundle(time.Now())
	if err != nil {
		t.Fatalf("the joiner's files do not form a bundle: %v", err)
	}
	if pki.Fingerprint(b.CA) != tok.CA {
		t.Error("the joiner's CA is not the pinned one")
	}
	// The new certificate is a member's: mutual TLS to lab-a works.
	if err := c.mutualTLS(b); err != nil {
		t.Errorf("mutual TLS with the joined node's certificate: %v", err)
	}
	c.mu.Lock()
	n, ok := c.reg.Nodes["lab-b"]
	c.mu.Unlock()
	if !ok || n.Serial != pki.Serial(cert) || n.Token != tok.ID {
		t.Errorf("registry node: %+v (present %v), want serial %s", n, ok, pki.Serial(cert))
	}
	if got := c.tokenUses(tok.ID); got != 1 {
		t.Errorf("token uses: got %d, want 1", got)
	}

	// Written out, the files pass LoadNode's checks (key 0600).
	dir := t.TempDir()
	if err := res.Cert.Write(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.LoadNode(dir); err != nil {
		t.Errorf("LoadNode of the joined node's files: %v", err)
	}
}

// Every refusal, over real TLS, with the sentinel on the joiner's side and
// the message that says which; no refused join consumes a use.
func TestJoinRefused(t *testing.T) {
	c := newCluster(t, "lab-cluster")
	var cl Client
	ctx := context.Background()
	join := func(tok Token, node string) error {
		_, err := cl.Join(ctx, c.addr, tok, node, nil)
		return err
	}

	good := c.token(time.Hour, 1)
	if err := join(good, "lab-b"); err != nil {
		t.Fatal(err)
	}
	wrong := good
	wrong.Secret = strings.Repeat("0", 32)
	unknown := c.token(time.Hour, 0)
	unknown.ID = strings.Repeat("f", 16)
	expiring := c.token(time.Minute, 0)
	revoked := c.token(time.Hour, 0)
	c.mu.Lock()
	c.reg.RevokeToken(revoked.ID, c.now)
	c.mu.Unlock()
	spare := c.token(time.Hour, 0)
	c.advance(2 * time.Minute)

	for _, tc := range []struct {
		name string
		tok  Token
		node string
		want error
		msg  string
	}{
		{"wrong secret", wrong, "lab-c", ErrWrongToken, "this cluster made no such token"},
		{"unknown ID", unknown, "lab-c", ErrWrongToken, "this cluster made no such token"},
		{"expired", expiring, "lab-c", ErrTokenExpired, "token " + expiring.ID + " expired at"},
		{"revoked", revoked, "lab-c", ErrTokenRevoked, "token " + revoked.ID + " was revoked at"},
		{"used up", good, "lab-c", ErrTokenUsedUp, "has no joins left (it allowed 1: lab-b)"},
		{"name taken", spare, "lab-b", ErrNameTaken, `"lab-b" joined at`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := c.tokenUses(tc.tok.ID)
			err := join(tc.tok, tc.node)
			var refused *RefusedError
			if !errors.Is(err, tc.want) || !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want %v saying %q", err, tc.want, tc.msg)
			}
			if refused.Peer != c.addr || refused.Op != opJoin {
				t.Errorf("refusal from %q for %q, want %q for join", refused.Peer, refused.Op, c.addr)
			}
			if got := c.tokenUses(tc.tok.ID); got != before {
				t.Errorf("a refused join consumed a use: %d → %d", before, got)
			}
			t.Logf("refused: %v", err)
		})
	}
	// The fast local check caught them all: nothing reached the commit
	// but the one good join.
	if got := c.admits.Load(); got != 1 {
		t.Errorf("Admit called %d times, want 1 (refusals stop at CheckJoin)", got)
	}
}

// A joiner that bypasses pinning and sends another cluster's token is
// refused by the member with ErrForeignCluster.
func TestJoinForeignClusterTokenRefusedByMember(t *testing.T) {
	c, other := newCluster(t, "lab-cluster"), newCluster(t, "physics-cluster")
	tok := other.token(time.Hour, 0)
	_, csr, err := newCSR("lab-z", nil)
	if err != nil {
		t.Fatal(err)
	}
	var cl Client
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{ALPN}, InsecureSkipVerify: true}
	_, err = cl.do(context.Background(), c.addr, cfg, &request{V: wireVersion, Op: opJoin, Token: tok.Encode(), CSR: csr})
	if !errors.Is(err, ErrForeignCluster) || !strings.Contains(err.Error(), "the token names the cluster of CA sha256:"+tok.CA[:16]) {
		t.Fatalf("got %v, want ErrForeignCluster naming the token's CA", err)
	}
	if c.checks.Load() != 0 {
		t.Error("a foreign token reached the registry")
	}
}

// The joiner pins the CA: a peer of another cluster, or one presenting the
// real CA over a leaf the CA did not sign, is refused before the token is
// sent. The attacker's peer records what it receives: nothing.
func TestJoinRefusesPeerOutsidePinnedCA(t *testing.T) {
	c := newCluster(t, "lab-cluster")
	tok := c.token(time.Hour, 0)
	evilCA, err := pki.NewCA("lab-cluster", time.Now()) // same name, other key
	if err != nil {
		t.Fatal(err)
	}
	evilNC, err := evilCA.Issue("lab-a", nil, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	evil, err := evilNC.Bundle(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	mitm := evil.Cert
	mitm.Certificate = [][]byte{evil.Cert.Certificate[0], c.ca.Cert.Raw} // claims the real CA
	leafOnly := c.member.Bundle().Cert                                   // a real member that sends no CA

	for _, tc := range []struct {
		name  string
		chain tls.Certificate
		msg   string
	}{
		{"another cluster's CA", func() tls.Certificate {
			ch := evil.Cert
			ch.Certificate = [][]byte{evil.Cert.Certificate[0], evilCA.Cert.Raw}
			return ch
		}(), "the peer's CA is sha256:" + pki.Fingerprint(evilCA.Cert)[:16] + ", the token pins sha256:" + tok.CA[:16]},
		{"real CA, forged leaf", mitm, "not signed by the pinned CA"},
		{"no CA in the chain", leafOnly, "sent no CA certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			received := make(chan []byte, 1)
			go func() {
				raw, err := ln.Accept()
				if err != nil {
					received <- nil
					return
				}
				conn := tls.Server(raw, &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{ALPN}, Certificates: []tls.Certificate{tc.chain}})
				conn.SetDeadline(time.Now().Add(5 * time.Second))
				conn.Handshake()
				b, _ := io.ReadAll(conn)
				raw.Close()
				received <- b
			}()
			var cl Client
			_, err = cl.Join(context.Background(), ln.Addr().String(), tok, "lab-b", nil)
			if !errors.Is(err, ErrPeerCA) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want ErrPeerCA saying %q", err, tc.msg)
			}
			if got := <-received; len(got) != 0 {
				t.Fatalf("the peer received %d bytes of application data (%q)", len(got), got)
			}
		})
	}
}

func TestRenew(t *testing.T) {
	c := newCluster(t, "lab-cluster")
	var cl Client
	ctx := context.Background()
	res, err := cl.Join(ctx, c.addr, c.token(time.Hour, 0), "lab-b", loopback)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := res.Cert.Bundle(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id := pki.NewIdentity(cur)
	nc, err := cl.Renew(ctx, c.addr, id.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	if nc.Node != "lab-b" || pki.Serial(nc.Cert) == pki.Serial(cur.Leaf) {
		t.Errorf("renewed: node %q serial %s (was %s)", nc.Node, pki.Serial(nc.Cert), pki.Serial(cur.Leaf))
	}
	if cur.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(nc.Cert.PublicKey) {
		t.Error("the renewal kept the old key")
	}
	if err := nc.Cert.VerifyHostname("10.1.2.3"); err != nil {
		t.Errorf("renewal dropped the node's address: %v", err)
	}
	next, err := nc.Bundle(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Replace(next); err != nil {
		t.Fatalf("the renewed certificate does not replace the current one: %v", err)
	}
	c.mu.Lock()
	n := c.reg.Nodes["lab-b"]
	c.mu.Unlock()
	if n.Serial != pki.Serial(nc.Cert) || n.Renewed.IsZero() {
		t.Errorf("registry after renewal: %+v, want serial %s", n, pki.Serial(nc.Cert))
	}
	if err := c.mutualTLS(next); err != nil {
		t.Errorf("mutual TLS with the renewed certificate: %v", err)
	}
}

func TestRenewRefused(t *testing.T) {
	c := newCluster(t, "lab-cluster")
	var cl Client
	ctx := context.Background()
	res, err := cl.Join(ctx, c.addr, c.token(time.Hour, 0), "lab-b", nil)
	if err != nil {
		t.Fatal(err)
	}
	joined, err := res.Cert.Bundle(time.Now())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("another node's name", func(t *testing.T) {
		_, csr, err := newCSR("lab-a", nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.do(ctx, c.addr, joined.ClientTLS("", ALPN), &request{V: wireVersion, Op: opRenew, CSR: csr})
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), `renews only its own certificate: the request names "lab-a", the certificate "lab-b"`) {
			t.Fatalf("got %v, want ErrBadRequest for a renewal under another name", err)
		}
	})
	t.Run("no certificate", func(t *testing.T) {
		_, csr, err := newCSR("lab-b", nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{ALPN}, InsecureSkipVerify: true}
		_, err = cl.do(ctx, c.addr, cfg, &request{V: wireVersion, Op: opRenew, CSR: csr})
		if !errors.Is(err, ErrNotEnrolled) || !strings.Contains(err.Error(), "joins with a token") {
			t.Fatalf("got %v, want ErrNotEnrolled", err)
		}
	})
	t.Run("not enrolled by token", func(t *testing.T) {
		// lab-a's certificate was made by hand: renewal is its PKI's job.
		_, err := cl.Renew(ctx, c.addr, c.member.Bundle())
		if !errors.Is(err, ErrNotEnrolled) || !strings.Contains(err.Error(), "did not join with a token") {
			t.Fatalf("got %v, want ErrNotEnrolled", err)
		}
	})
	t.Run("foreign certificate", func(t *testing.T) {
		other := newCluster(t, "physics-cluster")
		_, err := cl.Renew(ctx, c.addr, other.member.Bundle())
		if err == nil {
			t.Fatal("a certificate of another CA renewed")
		}
	})
	t.Run("removed node coming back", func(t *testing.T) {
		c.mu.Lock()
		e := c.reg.RemoveNode("lab-b", c.now)
		c.deny.Replace(c.reg.Deny)
		c.mu.Unlock()
		if e.Node != "lab-b" {
			t.Fatalf("deny entry %+v", e)
		}
		// A join signed at the instant of the removal would be denied
		// for its whole life: the member refuses to hand it out.
		_, err := cl.Join(ctx, c.addr, c.token(time.Hour, 0), "lab-b", nil)
		if !errors.Is(err, ErrInternal) {
			t.Fatalf("join signed at the removal's instant: got %v, want ErrInternal", err)
		}
		if !strings.Contains(c.logs.String(), "would be refused by the deny list") {
			t.Error("the member's log does not say why it refused")
		}
		c.advance(time.Second)
		// Refused on the mutual-TLS path by the member...
		if err := c.mutualTLS(joined); err == nil {
			t.Error("the removed node's certificate still passes mutual TLS")
		}
		// ...and its renewal is refused with the reason.
		_, err = cl.Renew(ctx, c.addr, joined)
		if !errors.Is(err, pki.ErrRevoked) || !strings.Contains(err.Error(), `node "lab-b" was removed at`) {
			t.Fatalf("renewal by a removed node: got %v, want pki.ErrRevoked with the reason", err)
		}
		// The name joins again with a new token and a fresh certificate.
		res, err := cl.Join(ctx, c.addr, c.token(time.Hour, 0), "lab-b", nil)
		if err != nil {
			t.Fatalf("join after removal: %v", err)
		}
		fresh, err := res.Cert.Bundle(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.mutualTLS(fresh); err != nil {
			t.Errorf("the re-joined node's certificate: %v", err)
		}
	})
}

func TestVoterKeys(t *testing.T) {
	c := newCluster(t, "lab-cluster")
	var cl Client
	ctx := context.Background()
	res, err := cl.Join(ctx, c.addr, c.token(time.Hour, 0), "lab-b", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := res.Cert.Bundle(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.VoterKeys(ctx, c.addr, b); !errors.Is(err, ErrNotVoter) {
		t.Fatalf("non-voter: got %v, want ErrNotVoter", err)
	}
	c.mu.Lock()
	c.voters["lab-b"] = true
	c.mu.Unlock()
	keys, err := cl.VoterKeys(ctx, c.addr, b)
	if err != nil {
		t.Fatal(err)
	}
	if !keys.CA.Key.Equal(c.ca.Key) || !bytes.Equal(keys.Secrets.PublicKey(), c.keys.Secrets.PublicKey()) {
		t.Error("the new voter received other keys than the cluster's")
	}
	// With the CA key, the new voter can sign joins itself.
	if _, _, err := keys.CA.IssueFor(b.Leaf.PublicKey.(*ecdsa.PublicKey), "lab-c", nil, time.Hour, time.Now()); err != nil {
		t.Errorf("signing with the received CA key: %v", err)
	}
}

// TestJobSecret: a voter releases a job's secret, resealed, only to the
// node that runs the job; another member, or a stranger without a
// certificate, gets nothing.
func TestJobSecret(t *testing.T) {
	c := newCluster(t, "lab-cluster")
	var cl Client
	ctx := context.Background()
	bundle := func(node string) *pki.Bundle {
		res, err := cl.Join(ctx, c.addr, c.token(time.Hour, 0), node, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := res.Cert.Bundle(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	host, other := bundle("lab-b"), bundle("lab-c")
	sealed, err := pki.SealSecret(c.keys.Secrets.PublicKey(), "train", "API_KEY", []byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.hosts["train"], c.secrets["train/API_KEY"] = "lab-b", sealed
	c.mu.Unlock()
	v, err := cl.JobSecret(ctx, c.addr, host, "train", "API_KEY")
	if err != nil || string(v) != "s3cret" {
		t.Fatalf("host: got %q, %v", v, err)
	}
	if _, err := cl.JobSecret(ctx, c.addr, other, "train", "API_KEY"); !errors.Is(err, ErrNotHost) {
		t.Errorf("another member: got %v, want ErrNotHost", err)
	}
	stranger := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{ALPN}, MinVersion: tls.VersionTLS13}
	if _, err := cl.do(ctx, c.addr, stranger, &request{V: wireVersion, Op: opJobSecret, Job: "train", Name: "API_KEY"}); !errors.Is(err, ErrNotEnrolled) {
		t.Errorf("a client without a certificate: got %v, want ErrNotEnrolled", err)
	}
}

// The coordinator port serves both protocols: without a certificate only
// enrollment is reachable, whatever ALPN list a stranger offers.
func TestPortMux(t *testing.T) {
	c := newCluster(t, "lab-cluster")
	dial := func(protos ...string) (*tls.Conn, error) {
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: protos, InsecureSkipVerify: true}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", c.addr, cfg)
		if err != nil {
			return nil, err
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		return conn, nil
	}

	// Raft without a certificate: refused (TLS 1.3 reports it on read).
	conn, err := dial(alpnRaft)
	if err == nil {
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil {
		t.Error("a client without a certificate reached the Raft path")
	}
	// Offering both: enrollment is chosen, never Raft.
	conn, err = dial(alpnRaft, ALPN)
	if err != nil {
		t.Fatal(err)
	}
	if got := conn.ConnectionState().NegotiatedProtocol; got != ALPN {
		t.Errorf("negotiated %q, want %q", got, ALPN)
	}
	if err := writeFrame(conn, &request{V: wireVersion, Op: opVoterKeys}); err != nil {
		t.Fatal(err)
	}
	b, err := readFrame(conn)
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := decodeResponse(b); err != nil || resp.Code != "not-enrolled" {
		t.Errorf("voter keys without a certificate: %+v, %v; want code not-enrolled", resp, err)
	}
	// An oversized frame is answered, not read.
	conn, err = dial(ALPN)
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte{0xff, 0xff, 0xff, 0xff})
	b, err = readFrame(conn)
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := decodeResponse(b); err != nil || resp.Code != "bad-request" {
		t.Errorf("oversized frame: %+v, %v; want code bad-request", resp, err)
	}
	if got := c.raftConns.Load(); got != 0 {
		t.Errorf("%d connections without a certificate reached the Raft path", got)
	}
	// A member still reaches Raft.
	if err := c.mutualTLS(c.member.Bundle()); err != nil {
		t.Errorf("member on the Raft path: %v", err)
	}
	if got := c.raftConns.Load(); got != 1 {
		t.Errorf("Raft path connections: got %d, want 1", got)
	}
	if !strings.Contains(c.logs.String(), "code=bad-request") {
		t.Error("the refusal of the oversized frame is not in the member's log")
	}
}

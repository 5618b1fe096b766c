package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/pki/enroll"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
)

// identityConfig is a loopback configuration without TLS material or a
// gossip key: --bootstrap or --token makes them in the data dir.
func (c *testCluster) identityConfig(name string) Config {
	c.t.Helper()
	cfg := c.config(name)
	cfg.TLSDir, cfg.GossipKey = "", ""
	return cfg
}

// bootstrap starts the first node of a new cluster.
func (c *testCluster) bootstrap(name string) *testNode {
	c.t.Helper()
	cfg := c.identityConfig(name)
	cfg.Bootstrap = true
	return c.start(cfg)
}

// tokenConfig is a configuration that joins through peer's coordinator
// port with tok.
func (c *testCluster) tokenConfig(name, tok string, peer *testNode) Config {
	c.t.Helper()
	cfg := c.identityConfig(name)
	cfg.Token, cfg.Join = tok, []string{peer.info.RaftAddr}
	return cfg
}

// createToken makes a join token through n's control socket.
func createToken(t *testing.T, n *testNode, ttl time.Duration, uses int) string {
	t.Helper()
	resp := call(t, n, localapi.Request{Op: localapi.OpTokenCreate, TTL: ttl, Uses: uses})
	if resp.Error != "" || resp.Token == "" {
		t.Fatalf("token create on %s: %q (%s)", n.info.Node, resp.Error, resp.Kind)
	}
	return resp.Token
}

// nodeRecord is node's registry entry in n's copy of the state.
func nodeRecord(n *testNode, node string) (state.NodeRecord, bool) {
	if n == nil { // no leader at this moment: an election is under way
		return state.NodeRecord{}, false
	}
	rec, ok := n.agent.Coordinator().State().Nodes[policy.NodeID(node)]
	return rec, ok
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestTokenJoin: the first machine bootstraps the cluster (CA and gossip
// key 0600 in its data dir), two more join with a token and become voters
// holding the CA key; with the first machine stopped, a fourth still joins
// through another member. Every member is admitted only after the leader
// verified its certificate.
func TestTokenJoin(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	a := c.bootstrap("lab-a")
	dir := a.agent.DataDir()
	for _, f := range []string{"tls/ca-key.pem", "tls/node-key.pem", "tls/secrets-key.pem", "gossip.key"} {
		if m := fileMode(t, filepath.Join(dir, f)); m != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, m)
		}
	}
	tok := createToken(t, a, time.Hour, 0)
	parsed, err := enroll.ParseToken(tok)
	if err != nil {
		t.Fatal(err)
	}
	if parsed.CA != pki.Fingerprint(a.agent.tls.CA) {
		t.Errorf("token pins CA %s, the cluster's is %s", parsed.CA, pki.Fingerprint(a.agent.tls.CA))
	}
	// The replicated state holds the token's hash, never its secret.
	rec := a.agent.Coordinator().State().Enrollment.Tokens[parsed.ID]
	if len(rec.SecretHash) == 0 || strings.Contains(string(rec.SecretHash), parsed.Secret) {
		t.Errorf("token record %+v: want the hash only", rec)
	}
	b := c.start(c.tokenConfig("lab-b", tok, a))
	cc := c.start(c.tokenConfig("lab-c", tok, a))
	c.waitConfig(3, 3, 60*time.Second)
	for _, n := range []*testNode{b, cc} {
		if _, err := os.Stat(filepath.Join(n.agent.DataDir(), "tls", "node.pem")); err != nil {
			t.Errorf("%s: no certificate after joining: %v", n.info.Node, err)
		}
		if m := fileMode(t, filepath.Join(n.agent.DataDir(), "gossip.key")); m != 0o600 {
			t.Errorf("%s: gossip key mode %v, want 0600", n.info.Node, m)
		}
		wait.For(t, 30*time.Second, n.info.Node+" holds the voter keys", func() bool {
			vk := n.agent.voterKeys.Load()
			return vk != nil && vk.CA != nil
		})
	}
	for _, name := range []string{"lab-a", "lab-b", "lab-c"} {
		wait.For(t, 30*time.Second, name+" admitted", func() bool {
			r, ok := nodeRecord(c.leader(), name)
			return ok && r.Admitted && r.Refused == ""
		})
	}

	a.stop(t, false)
	d := c.start(c.tokenConfig("lab-d", tok, b))
	wait.For(t, 60*time.Second, "lab-d admitted through lab-b with lab-a gone", func() bool {
		r, ok := nodeRecord(b, "lab-d")
		return ok && r.Admitted && r.State == state.NodeActive
	})
	if d.agent.tls.CA.Equal(a.agent.tls.CA) == false {
		t.Error("lab-d's CA is not the cluster's")
	}
	list := call(t, b, localapi.Request{Op: localapi.OpTokenList}).Tokens
	if len(list) != 1 || list[0].Used != 3 || !slices.Equal(list[0].Nodes, []string{"lab-b", "lab-c", "lab-d"}) {
		t.Errorf("token list: %+v, want one token used by lab-b, lab-c, lab-d", list)
	}
}

// TestTokenRefusals: every refused join says why, and leaves nothing in
// the cluster: no certificate, no node record.
func TestTokenRefusals(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	a := c.bootstrap("lab-a")

	refused := func(name, tok string, want error, text string) {
		t.Helper()
		cfg := c.tokenConfig(name, tok, a)
		_, err := New(cfg, testLogger())
		if !errors.Is(err, want) || !strings.Contains(err.Error(), text) {
			t.Errorf("%s: got %v, want %v saying %q", name, err, want, text)
		}
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "tls", pki.NodeFile)); err == nil {
			t.Errorf("%s: a refused join left a certificate", name)
		}
		if rec, ok := a.agent.Coordinator().State().Enrollment.Nodes[name]; ok && !errors.Is(want, enroll.ErrNameTaken) {
			t.Errorf("%s: a refused join is in the registry: %+v", name, rec)
		}
	}

	good := createToken(t, a, time.Hour, 0)
	tok, _ := enroll.ParseToken(good)
	wrong := tok
	wrong.Secret = strings.Repeat("0", len(tok.Secret))
	refused("lab-w", wrong.Encode(), enroll.ErrWrongToken, "made no such token")

	revoked := createToken(t, a, time.Hour, 0)
	rt, _ := enroll.ParseToken(revoked)
	if r := call(t, a, localapi.Request{Op: localapi.OpTokenRevoke, TokenID: rt.ID}); r.Error != "" {
		t.Fatal(r.Error)
	}
	refused("lab-r", revoked, enroll.ErrTokenRevoked, "was revoked")

	expiring := createToken(t, a, time.Second, 0)
	time.Sleep(1500 * time.Millisecond)
	refused("lab-e", expiring, enroll.ErrTokenExpired, "expired")

	once := createToken(t, a, time.Hour, 1)
	c.start(c.tokenConfig("lab-u", once, a))
	refused("lab-v", once, enroll.ErrTokenUsedUp, "no joins left")

	foreign, _, err := enroll.NewToken(strings.Repeat("ab", 32), time.Hour, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	refused("lab-f", foreign.Encode(), enroll.ErrPeerCA, "the token pins")

	first := a.agent.Coordinator().State().Enrollment.Nodes["lab-u"]
	refused("lab-u", good, enroll.ErrNameTaken, `"lab-u" joined`)
	if now := a.agent.Coordinator().State().Enrollment.Nodes["lab-u"]; now.Serial != first.Serial {
		t.Errorf("a second lab-u replaced the first one's certificate: %s, was %s", now.Serial, first.Serial)
	}

	if r := call(t, a, localapi.Request{Op: localapi.OpTokenRevoke, TokenID: "0000000000000000"}); r.Kind != localapi.KindUnknownToken {
		t.Errorf("revoking an unknown token: %+v", r)
	}
	states := map[string]string{}
	for _, ti := range call(t, a, localapi.Request{Op: localapi.OpTokenList}).Tokens {
		states[ti.ID] = ti.State
	}
	if states[rt.ID] != "revoked" || states[tok.ID] != "active" {
		t.Errorf("token states %v", states)
	}
}

// TestRemovedNode: 'node remove' revokes a node: every member refuses its
// certificate, it is not admitted again however long it gossips, and its
// name joins again with a new token and a new certificate.
func TestRemovedNode(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	a := c.bootstrap("lab-a")
	tok := createToken(t, a, time.Hour, 0)
	b := c.start(c.tokenConfig("lab-b", tok, a))
	wait.For(t, 30*time.Second, "lab-b admitted", func() bool {
		r, ok := nodeRecord(a, "lab-b")
		return ok && r.Admitted
	})
	if r := call(t, a, localapi.Request{Op: localapi.OpNodeRemove, Node: "lab-b"}); r.Error != "" {
		t.Fatalf("node remove: %s", r.Error)
	}
	wait.For(t, 30*time.Second, "lab-b gone from the registry and the Raft configuration", func() bool {
		r, ok := nodeRecord(a, "lab-b")
		servers, _ := a.agent.Coordinator().Servers()
		inCfg := slices.ContainsFunc(servers, func(s raft.Server) bool { return s.ID == "lab-b" })
		return ok && r.State == state.NodeLeft && !r.Admitted && !inCfg
	})
	if err := a.agent.tls.Deny.Check(b.agent.tls.Leaf); !errors.Is(err, pki.ErrRevoked) {
		t.Errorf("lab-a's deny list on lab-b's certificate: %v, want pki.ErrRevoked", err)
	}
	// It keeps gossiping (it has the gossip key) but stays out.
	time.Sleep(2 * time.Second)
	if r, _ := nodeRecord(a, "lab-b"); r.State != state.NodeLeft || r.Admitted {
		t.Errorf("removed lab-b came back: %+v", r)
	}
	for _, m := range call(t, a, localapi.Request{Op: localapi.OpMembers}).Status.Members {
		if m.Name == "lab-b" && m.State == "alive" {
			t.Errorf("members shows removed lab-b as %+v", m)
		}
	}
	b.stop(t, false) // gossip hears it leave: the name is free at once
	again := c.start(c.tokenConfig("lab-b", createToken(t, a, time.Hour, 0), a))
	wait.For(t, 60*time.Second, "lab-b admitted again with a new certificate", func() bool {
		r, ok := nodeRecord(a, "lab-b")
		return ok && r.Admitted && r.State == state.NodeActive
	})
	if again.agent.tls.Leaf.SerialNumber.Cmp(b.agent.tls.Leaf.SerialNumber) == 0 {
		t.Error("the rejoined node kept its revoked certificate")
	}
}

// TestForeignCertificateRefused: a machine with the real gossip key but a
// certificate from another CA gossips its way in and is shown refused
// with the reason; it gets no vote and no work, while a job waits for a
// node that is admitted.
func TestForeignCertificateRefused(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	c.load = func() float64 { return 0.25 }
	a := c.bootstrap("lab-a")
	key, err := ReadGossipKeyFile(filepath.Join(a.agent.DataDir(), gossipKeyName))
	if err != nil {
		t.Fatal(err)
	}
	intruder := c.config("intruder") // a certificate of the test's own CA, not the cluster's
	intruder.GossipKey = key
	intruder.Join = []string{a.info.GossipAddr}
	intruder.GPUs = []string{"A100-80GB:80GiB:8.0:x4"}
	c.start(intruder)
	wait.For(t, 30*time.Second, "intruder shown refused", func() bool {
		r, ok := nodeRecord(a, "intruder")
		return ok && !r.Admitted && r.Refused != ""
	})
	r, _ := nodeRecord(a, "intruder")
	if !strings.Contains(r.Refused, "certificate") {
		t.Errorf("refusal reason %q does not name the certificate", r.Refused)
	}
	script := c.writeScript("sleep.sh", "#!/bin/sh\nsleep 300\n")
	if resp := call(t, a, localapi.Request{Op: localapi.OpRun, Job: &localapi.JobRequest{Name: "j", Command: []string{"/bin/sh", script}, GPUs: 1}}); resp.Error != "" {
		t.Fatal(resp.Error)
	}
	// An admitted node with a GPU takes the job: placement works, and
	// went past the intruder's four GPUs.
	tok := createToken(t, a, time.Hour, 0)
	cfg := c.tokenConfig("lab-g", tok, a)
	cfg.GPUs = []string{"RTX-4090:24GiB:8.9:x1"}
	c.start(cfg)
	wait.For(t, 60*time.Second, "job placed on lab-g", func() bool {
		j, ok := a.agent.Coordinator().Store().Job("j")
		return ok && j.Node == "lab-g"
	})
	servers, _ := a.agent.Coordinator().Servers()
	for _, s := range servers {
		if s.ID == "intruder" {
			t.Errorf("intruder is in the Raft configuration as %v", s.Role)
		}
	}
	for _, d := range a.agent.Coordinator().State().Decisions.Placements {
		if d.To == "intruder" {
			t.Errorf("a placement on the intruder: %+v", d)
		}
	}
}

// TestCertificateRenewal: a node renews its certificate through a voter
// on a fresh key; its listeners present the new one without a restart,
// the file on disk and the registry follow.
func TestCertificateRenewal(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	a := c.bootstrap("lab-a")
	b := c.start(c.tokenConfig("lab-b", createToken(t, a, time.Hour, 0), a))
	wait.For(t, 30*time.Second, "lab-b admitted", func() bool {
		r, ok := nodeRecord(a, "lab-b")
		return ok && r.Admitted
	})
	old := b.agent.identity.Bundle().Leaf
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.agent.renewCertificate(ctx); err != nil {
		t.Fatal(err)
	}
	cur := b.agent.identity.Bundle().Leaf
	if cur.SerialNumber.Cmp(old.SerialNumber) == 0 || cur.Subject.CommonName != "lab-b" || cur.PublicKey.(*ecdsa.PublicKey).Equal(old.PublicKey) {
		t.Fatalf("renewed certificate %s for %s: want a new serial and key for lab-b", pki.Serial(cur), cur.Subject.CommonName)
	}
	onDisk, err := pki.LoadNode(filepath.Join(b.agent.DataDir(), "tls"))
	if err != nil || !onDisk.Leaf.Equal(cur) {
		t.Errorf("node.pem on disk is not the renewed certificate (%v)", err)
	}
	wait.For(t, 10*time.Second, "the registry records the renewal", func() bool {
		return a.agent.Coordinator().State().Enrollment.Nodes["lab-b"].Serial == pki.Serial(cur)
	})
	// The coordinator listener presents the new certificate at once.
	conn, err := tls.Dial("tcp", b.info.RaftAddr, a.agent.identity.ClientTLS("lab-b", "reclaimnet-raft/1"))
	if err != nil {
		t.Fatal(err)
	}
	presented := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if !presented.Equal(cur) {
		t.Errorf("lab-b's listener presents %s, want the renewed %s", pki.Serial(presented), pki.Serial(cur))
	}
	// The bootstrap node, which joined by no token, renews too.
	if err := a.agent.renewCertificate(ctx); err != nil {
		t.Errorf("lab-a: %v", err)
	}
}

// TestInsecureKeyFilesRefused: a gossip key or node key other users may
// read stops the agent at start with the command that fixes it.
func TestInsecureKeyFilesRefused(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	a := c.bootstrap("lab-a")
	dir := a.agent.DataDir()
	a.stop(t, false)
	cfg := c.identityConfig("lab-a")
	cfg.DataDir, cfg.Bootstrap = dir, true
	for _, f := range []string{gossipKeyName, "tls/node-key.pem"} {
		p := filepath.Join(dir, f)
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := New(cfg, testLogger())
		if !errors.Is(err, pki.ErrInsecureFile) || !strings.Contains(err.Error(), "chmod 600 "+p) {
			t.Errorf("%s readable by others: got %v, want pki.ErrInsecureFile naming 'chmod 600 %s'", f, err, p)
		}
		os.Chmod(p, 0o600)
	}
	// Fixed, it starts again with the same cluster.
	n := c.start(cfg)
	if !n.agent.tls.CA.Equal(a.agent.tls.CA) {
		t.Error("the restarted bootstrap node made a new CA")
	}
}

// TestEnrollThenStart: 'reclaimnet join PEER --token T' enrolls a data
// dir with no agent running; the agent started later with that data dir
// alone (no TLS dir, gossip key or peer given) is a member.
func TestEnrollThenStart(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	a := c.bootstrap("lab-a")
	cfg := c.tokenConfig("lab-e", createToken(t, a, time.Hour, 1), a)
	if err := Enroll(cfg, testLogger()); err != nil {
		t.Fatal(err)
	}
	if err := Enroll(cfg, testLogger()); err == nil || !strings.Contains(err.Error(), "already holds a certificate") {
		t.Errorf("enrolling twice: %v", err)
	}
	plain := c.identityConfig("lab-e")
	plain.DataDir, plain.Join = cfg.DataDir, []string{} // no peer: the one recorded at enrollment
	n := c.start(plain)
	wait.For(t, 30*time.Second, "lab-e admitted", func() bool {
		r, ok := nodeRecord(a, "lab-e")
		return ok && r.Admitted && r.State == state.NodeActive
	})
	if n.agent.cfg.TLSDir != filepath.Join(cfg.DataDir, "tls") || !slices.Equal(n.agent.cfg.Join, []string{a.info.GossipAddr}) {
		t.Errorf("TLS dir %q, join %v: want the data dir's and lab-a's gossip address %s", n.agent.cfg.TLSDir, n.agent.cfg.Join, a.info.GossipAddr)
	}
	// An agent running on the data dir keeps its identity.
	if err := Enroll(cfg, testLogger()); !errors.Is(err, ErrDataDirLocked) {
		t.Errorf("enrolling the data dir of a running agent: %v, want ErrDataDirLocked", err)
	}
}

// TestDemotedVoterDeletesVoterKeys: three voters hold the CA and secrets
// keys; one of them is reclaimed (with notice, so it still runs) and the
// leader demotes it, promoting the fourth member. The new voter fetches
// the keys and the demoted one deletes its own, from memory and from its
// TLS directory, while it keeps running and keeps its certificate.
func TestDemotedVoterDeletesVoterKeys(t *testing.T) {
	c := newTestCluster(t)
	a := c.bootstrap("lab-a")
	tok := createToken(t, a, time.Hour, 0)
	b := c.start(c.tokenConfig("lab-b", tok, a))
	cc := c.start(c.tokenConfig("lab-c", tok, a))
	c.waitConfig(3, 3, 60*time.Second)
	holds := func(n *testNode) bool {
		vk := n.agent.voterKeys.Load()
		return vk != nil && vk.CA != nil
	}
	for _, n := range []*testNode{b, cc} {
		wait.For(t, 30*time.Second, n.info.Node+" holds the voter keys", func() bool { return holds(n) })
	}
	d := c.start(c.tokenConfig("lab-d", tok, a))
	c.waitConfig(4, 3, 60*time.Second)
	var x *testNode
	for _, n := range []*testNode{b, cc} {
		if !n.agent.Coordinator().IsLeader() {
			x = n
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	now := time.Now().UTC()
	if _, err := x.agent.Coordinator().Submit(ctx, state.AnnounceReclaim{Reclaim: policy.Reclaim{Node: policy.NodeID(x.info.Node), Announced: now, Deadline: now.Add(time.Hour)}}); err != nil {
		t.Fatalf("announce the reclaim of %s: %v", x.info.Node, err)
	}
	wait.For(t, 60*time.Second, x.info.Node+" demoted and lab-d a voter holding the keys", func() bool {
		rx, _ := nodeRecord(x, x.info.Node)
		rd, _ := nodeRecord(x, "lab-d")
		return rx.Role == state.RoleNonvoter && rd.Role == state.RoleVoter && holds(d)
	})
	tlsDir := filepath.Join(x.agent.DataDir(), "tls")
	wait.For(t, 30*time.Second, x.info.Node+" deletes its voter keys", func() bool {
		_, caErr := os.Stat(filepath.Join(tlsDir, pki.CAKeyFile))
		_, secErr := os.Stat(filepath.Join(tlsDir, pki.SecretsKeyFile))
		return x.agent.voterKeys.Load() == nil && errors.Is(caErr, os.ErrNotExist) && errors.Is(secErr, os.ErrNotExist)
	})
	for _, f := range []string{pki.CAFile, pki.NodeFile, pki.NodeKeyFile} {
		if _, err := os.Stat(filepath.Join(tlsDir, f)); err != nil {
			t.Errorf("%s: the demoted node lost %s: %v", x.info.Node, f, err)
		}
	}
	for _, n := range []*testNode{a, d} {
		if !holds(n) {
			t.Errorf("voter %s lost the voter keys", n.info.Node)
		}
	}
	select {
	case err := <-x.done:
		t.Errorf("%s stopped (%v): want it running through its notice", x.info.Node, err)
	default:
	}
}

package agent

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/pki/enroll"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/raft"
	"github.com/reclaimnet/reclaimnet/state"
)

// Files --bootstrap and --join with a token keep in the data dir.
const (
	// tlsDirName holds ca.pem, node.pem, node-key.pem and, on voters,
	// ca-key.pem and secrets-key.pem.
	tlsDirName = "tls"
	// gossipKeyName is the gossip key (base64, 0600).
	gossipKeyName = "gossip.key"
	// enrolledName records where a node that joined by token gossips
	// next time it starts (the peer it was given is a coordinator port).
	enrolledName = "enrolled.json"
)

// enrolled is what enrolledName holds.
type enrolled struct {
	GossipPeers []string `json:"gossip_peers"`
}

// identityDefaults points TLSDir and the gossip key file into the data dir
// for --bootstrap and --join with a token, unless they were given; without
// either, it does so where an earlier bootstrap or join left them there.
func (c *Config) identityDefaults() error {
	if !c.Bootstrap && c.Token == "" {
		if c.DataDir == "" || c.Dev {
			return nil
		}
		if _, err := os.Stat(filepath.Join(c.DataDir, tlsDirName, pki.NodeFile)); c.TLSDir == "" && err == nil {
			c.TLSDir = filepath.Join(c.DataDir, tlsDirName)
		}
		if _, err := os.Stat(filepath.Join(c.DataDir, gossipKeyName)); c.GossipKey == "" && c.GossipKeyFile == "" && err == nil {
			c.GossipKeyFile = filepath.Join(c.DataDir, gossipKeyName)
		}
		return nil
	}
	if c.Bootstrap && c.Token != "" {
		return errors.New("--bootstrap starts a new cluster, --token joins one: give one of them")
	}
	if c.Dev {
		return errors.New("--dev makes a throwaway identity: it does not take --bootstrap or --token")
	}
	if c.DataDir == "" {
		return errors.New("data dir is empty (set --data-dir): the cluster's keys are kept there")
	}
	if c.Token != "" && len(c.Join) == 0 {
		return errors.New("--token needs --join PEER: a member's coordinator address (host or host:port, default port 7947)")
	}
	if c.TLSDir == "" {
		c.TLSDir = filepath.Join(c.DataDir, tlsDirName)
	}
	if c.GossipKey == "" && c.GossipKeyFile == "" {
		c.GossipKeyFile = filepath.Join(c.DataDir, gossipKeyName)
	}
	return nil
}

// prepareIdentity creates the cluster (--bootstrap) or joins one with a
// token, once: a node that already has its certificate starts with it.
func (a *Agent) prepareIdentity() error {
	c := &a.cfg
	_, err := os.Stat(filepath.Join(c.TLSDir, pki.NodeFile))
	have := err == nil
	switch {
	case c.Bootstrap && !have:
		return a.bootstrap()
	case c.Token != "" && !have:
		return a.joinByToken()
	case c.Token != "" || len(c.Join) == 0:
		// Joined by token before (a --join given with the token names a
		// coordinator port): gossip through the peers recorded then.
		b, err := os.ReadFile(filepath.Join(c.DataDir, enrolledName))
		if err == nil {
			var e enrolled
			if json.Unmarshal(b, &e) == nil && len(e.GossipPeers) > 0 {
				c.Join = e.GossipPeers
			}
		}
	}
	return nil
}

// Enroll joins a cluster by token into cfg.DataDir without starting the
// agent ('reclaimnet join PEER --token T'): the certificate, the gossip
// key and the peers to gossip through are left where a later
// 'reclaimnet agent --data-dir DIR' finds them. It refuses a data dir an
// agent runs on or one that already has a certificate.
func Enroll(cfg Config, logger *slog.Logger) error {
	if cfg.Token == "" || len(cfg.Join) == 0 {
		return errors.New("enroll: needs a token and a peer")
	}
	if err := pki.ValidNodeName(cfg.Name); err != nil {
		return err
	}
	a := &Agent{cfg: cfg, logger: logger}
	if err := a.cfg.identityDefaults(); err != nil {
		return err
	}
	lock, err := lockDataDir(a.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("%w (a running agent keeps the identity it has)", err)
	}
	defer lock.release()
	if _, err := os.Stat(filepath.Join(a.cfg.TLSDir, pki.NodeFile)); err == nil {
		return fmt.Errorf("%s already holds a certificate; remove the node ('reclaimnet node remove %s') and its data dir to join again", a.cfg.TLSDir, cfg.Name)
	}
	return a.joinByToken()
}

// bootstrap creates a new cluster's CA, this node's certificate, the
// secrets key and the gossip key, each key 0600 in the data dir.
func (a *Agent) bootstrap() error {
	c := &a.cfg
	now := time.Now()
	ca, err := pki.NewCA("ReclaimNet cluster CA (bootstrapped by "+c.Name+")", now)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	nc, err := ca.Issue(c.Name, certHosts(c), pki.DefaultValidity, now)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	sk, err := pki.NewSecretsKey()
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	vk := &pki.VoterKeys{CA: ca, Secrets: sk}
	if err := vk.Write(c.TLSDir); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if err := nc.Write(c.TLSDir); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if c.GossipKeyFile != "" {
		if _, err := os.Stat(c.GossipKeyFile); errors.Is(err, os.ErrNotExist) {
			k := make([]byte, 32)
			rand.Read(k)
			if err := pki.CreateSecretFile(c.GossipKeyFile, []byte(base64.StdEncoding.EncodeToString(k)+"\n")); err != nil {
				return fmt.Errorf("bootstrap: gossip key: %w", err)
			}
		}
	}
	a.logger.Info("bootstrapped a new cluster", "ca", pki.Fingerprint(ca.Cert), "tls_dir", c.TLSDir, "gossip_key_file", c.GossipKeyFile)
	return nil
}

// joinByToken enrolls this node through the first peer that answers: its
// own key, a signing request, the peer's CA pinned by the token; it keeps
// the certificate and the gossip key it receives. A refusal ends it with
// the peer's reason; an unreachable peer moves on to the next.
func (a *Agent) joinByToken() error {
	c := &a.cfg
	tok, err := enroll.ParseToken(c.Token)
	if err != nil {
		return fmt.Errorf("--token: %w", err)
	}
	var ips []net.IP
	for _, h := range certHosts(c) {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	for _, peer := range c.Join {
		addr := enrollAddr(peer)
		res, err := (&enroll.Client{}).Join(ctx, addr, tok, c.Name, ips)
		if err != nil {
			var refused *enroll.RefusedError
			if errors.As(err, &refused) || errors.Is(err, enroll.ErrPeerCA) {
				return fmt.Errorf("join by token via %s refused: %w", addr, err)
			}
			errs = append(errs, err)
			continue
		}
		if err := res.Cert.Write(c.TLSDir); err != nil {
			return fmt.Errorf("join by token: %w", err)
		}
		if c.GossipKeyFile != "" {
			key := base64.StdEncoding.EncodeToString(res.GossipKeys[0]) + "\n"
			if err := pki.WriteSecretFile(c.GossipKeyFile, []byte(key)); err != nil {
				return fmt.Errorf("join by token: gossip key: %w", err)
			}
		}
		if res.GossipAddr != "" {
			c.Join = []string{res.GossipAddr}
			b, _ := json.Marshal(enrolled{GossipPeers: c.Join})
			if err := os.WriteFile(filepath.Join(c.DataDir, enrolledName), b, 0o600); err != nil {
				return fmt.Errorf("join by token: %w", err)
			}
		}
		a.logger.Info("joined by token", "via", addr, "token", tok.ID, "ca", tok.CA, "gossip", res.GossipAddr)
		return nil
	}
	return fmt.Errorf("join by token: no peer answered: %w", errors.Join(errs...))
}

// recordPeers keeps, in a node that joined by token, the members it
// gossips through at its next start: the peer it enrolled through may be
// gone by then.
func (a *Agent) recordPeers(peers []string) error {
	path := filepath.Join(a.cfg.DataDir, enrolledName)
	if _, err := os.Stat(path); err != nil {
		return nil // not joined by token: its --join says where to go
	}
	b, _ := json.Marshal(enrolled{GossipPeers: peers})
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// enrollAddr is a peer's coordinator address: host:port as given, the
// default coordinator port for a bare host.
func enrollAddr(peer string) string {
	if _, _, err := net.SplitHostPort(peer); err == nil {
		return peer
	}
	return net.JoinHostPort(peer, strconv.Itoa(localapi.DefaultRaftPort))
}

// certHosts are the addresses a node certificate names besides the
// loopback ones the CA adds: the advertise and bind addresses when they
// are specific.
func certHosts(c *Config) []string {
	var out []string
	for _, h := range []string{c.AdvertiseAddr, c.BindAddr} {
		if ip := net.ParseIP(h); ip != nil && !ip.IsUnspecified() && !ip.IsLoopback() && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// loadVoterKeys reads the voter keys from the TLS dir, if this node holds
// them (the bootstrap node, or a voter that fetched them).
func (a *Agent) loadVoterKeys() error {
	if a.cfg.TLSDir == "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join(a.cfg.TLSDir, pki.SecretsKeyFile)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	vk, err := pki.LoadVoterKeys(a.cfg.TLSDir)
	if err != nil {
		return fmt.Errorf("voter keys in %s: %w", a.cfg.TLSDir, err)
	}
	if vk.CA != nil && !vk.CA.Cert.Equal(a.tls.CA) {
		return fmt.Errorf("voter keys in %s belong to another CA than %s", a.cfg.TLSDir, pki.CAFile)
	}
	a.voterKeys.Store(vk)
	return nil
}

// enrollHandler serves joins, renewals and voter keys on the coordinator
// port, backed by the replicated state and the voter keys this node holds.
func (a *Agent) enrollHandler() *enroll.Handler {
	return &enroll.Handler{
		Identity: a.identity,
		Sign: func(ctx context.Context, r enroll.SignRequest) (*x509.Certificate, error) {
			vk := a.voterKeys.Load()
			if vk == nil || vk.CA == nil {
				return nil, fmt.Errorf("%w: node %s holds no CA key (only voters do); join through a voter ('reclaimnet members' shows them)", enroll.ErrNotServed, a.cfg.Name)
			}
			return enroll.CASigner(vk.CA, 0)(ctx, r)
		},
		CheckJoin: func(_ context.Context, adm enroll.Admission) error {
			c, err := a.enrollCoordinator()
			if err != nil {
				return err
			}
			st := c.State()
			return st.Enrollment.CheckJoin(adm)
		},
		Admit: func(ctx context.Context, adm enroll.Admission, cert enroll.CertInfo) error {
			c, err := a.enrollCoordinator()
			if err != nil {
				return err
			}
			_, err = c.Submit(ctx, state.EnrollNode{Admission: adm, Cert: cert})
			return err
		},
		GossipKeys: func(context.Context) ([][]byte, error) { return a.gossipKeys, nil },
		GossipAddr: func() string {
			ip, port := a.mesh.LocalAddr()
			adv := ip.String()
			if a.cfg.AdvertiseAddr != "" {
				adv = a.cfg.AdvertiseAddr
			}
			return net.JoinHostPort(adv, strconv.Itoa(int(port)))
		},
		Renewed: func(ctx context.Context, node string, cert enroll.CertInfo) error {
			c, err := a.enrollCoordinator()
			if err != nil {
				return err
			}
			if _, enrolled := c.State().Enrollment.Nodes[node]; !enrolled {
				// Not joined by token (the bootstrap node, or a certificate
				// made with 'tls cert create' and the cluster's CA key):
				// its current certificate verified; there is no record.
				return nil
			}
			_, err = c.Submit(ctx, state.RenewCert{Node: node, Cert: cert, At: time.Now()})
			return err
		},
		VoterKeys: func(_ context.Context, peer *x509.Certificate) ([]byte, error) {
			vk := a.voterKeys.Load()
			if vk == nil {
				return nil, fmt.Errorf("%w: node %s holds no voter keys", enroll.ErrNotServed, a.cfg.Name)
			}
			c, err := a.enrollCoordinator()
			if err != nil {
				return nil, err
			}
			servers, err := c.Servers()
			if err != nil {
				return nil, err
			}
			for _, s := range servers {
				if string(s.ID) == peer.Subject.CommonName && s.Role == state.RoleVoter {
					return vk.SealFor(peer)
				}
			}
			return nil, fmt.Errorf("%w: %q is not a voter in the Raft configuration", enroll.ErrNotVoter, peer.Subject.CommonName)
		},
		JobSecret: func(_ context.Context, peer *x509.Certificate, job, name string) ([]byte, error) {
			c, err := a.enrollCoordinator()
			if err != nil {
				return nil, err
			}
			return a.releaseSecret(c, peer, job, name)
		},
		Logger: a.logger.With("subsystem", "enroll"),
	}
}

// enrollCoordinator is the coordinator for enrollment requests, which the
// coordinator port accepts while raft.Open is still under way.
func (a *Agent) enrollCoordinator() (*raft.Coordinator, error) {
	if c := a.enrollCoord.Load(); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("%w: node %s is starting; try again", enroll.ErrNotServed, a.cfg.Name)
}

// identityLoop keeps the node's deny list equal to the replicated one, on
// a voter without them fetches the voter keys from another voter, and on
// a node demoted to non-voter deletes them.
func (a *Agent) identityLoop(ctx context.Context) {
	var seen []pki.DenyEntry
	var lastTry time.Time
	var demoted time.Time // since when this node holds voter keys as a non-voter
	var recorded []string
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		st := a.coord.State()
		if !slices.Equal(seen, st.Enrollment.Deny) {
			a.tls.Deny.Replace(st.Enrollment.Deny)
			seen = slices.Clone(st.Enrollment.Deny)
		}
		if vk := a.voterKeys.Load(); vk != nil && vk.Secrets != nil && len(st.SecretsKey) == 0 && a.coord.IsLeader() {
			// The bootstrap node publishes the key every node seals to.
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if _, err := a.coord.Submit(sctx, state.SetSecretsKey{Public: vk.Secrets.PublicKey()}); err != nil {
				a.logger.Warn("publish the secrets key", "err", err)
			}
			cancel()
		}
		if peers := a.knownPeers(); len(peers) > 0 && !slices.Equal(peers, recorded) {
			if err := a.recordPeers(peers); err != nil {
				a.logger.Warn("record gossip peers", "err", err)
			}
			recorded = peers
		}
		role := st.Nodes[policy.NodeID(a.cfg.Name)].Role
		if a.voterKeys.Load() == nil && role == state.RoleVoter && time.Since(lastTry) >= voterKeysRetry {
			lastTry = time.Now()
			if err := a.fetchVoterKeys(ctx); err != nil {
				a.logger.Warn("voter keys not fetched yet", "err", err)
			}
		}
		switch {
		case role != state.RoleNonvoter || a.voterKeys.Load() == nil:
			demoted = time.Time{}
		case demoted.IsZero():
			demoted = time.Now()
		case time.Since(demoted) >= a.voterKeysGrace() && otherVoters(st, a.cfg.Name) > 0:
			if err := a.dropVoterKeys(); err != nil {
				a.logger.Warn("delete the voter keys of a demoted voter", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-a.coord.Store().Changed():
		case <-t.C:
		}
	}
}

// votersLeaderFirst lists the voters of the Raft configuration, the
// leader first: who holds the voter keys.
func (a *Agent) votersLeaderFirst() []raft.Server {
	servers, err := a.coord.Servers()
	if err != nil {
		return nil
	}
	servers = slices.DeleteFunc(servers, func(s raft.Server) bool { return s.Role != state.RoleVoter })
	slices.SortStableFunc(servers, func(x, y raft.Server) int {
		switch {
		case x.Leader == y.Leader:
			return 0
		case x.Leader:
			return -1
		}
		return 1
	})
	return servers
}

// voterKeysRetry is the pause between attempts to fetch the voter keys (a
// campus with its own PKI has none to give).
const voterKeysRetry = 5 * time.Second

// fetchVoterKeys asks the other voters, the leader first, for the voter
// keys and keeps them 0600 in the TLS dir.
func (a *Agent) fetchVoterKeys(ctx context.Context) error {
	var errs []error
	for _, s := range a.votersLeaderFirst() {
		if string(s.ID) == a.cfg.Name {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		vk, err := (&enroll.Client{}).VoterKeys(cctx, s.Addr, a.identity.Bundle())
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := vk.Write(a.cfg.TLSDir); err != nil {
			return err
		}
		a.voterKeys.Store(vk)
		a.logger.Info("voter keys received", "from", s.ID, "ca_key", vk.CA != nil)
		return nil
	}
	if len(errs) == 0 {
		return errors.New("no other voter to ask")
	}
	return errors.Join(errs...)
}

// voterKeysGrace is how long a demoted voter keeps the voter keys: time
// for the voter promoted in its place to fetch them (it asks every
// voterKeysRetry).
func (a *Agent) voterKeysGrace() time.Duration {
	if a.cfg.LocalTimings {
		return 2 * time.Second
	}
	return time.Minute
}

// otherVoters counts the voters of the registry other than self.
func otherVoters(st *state.State, self string) int {
	n := 0
	for id, r := range st.Nodes {
		if string(id) != self && r.Role == state.RoleVoter {
			n++
		}
	}
	return n
}

// dropVoterKeys deletes the voter keys of a node that is no longer a
// voter, from memory and from the TLS dir: the CA and secrets keys stay on
// the voters only (docs/trust.md), and a promotion fetches them again.
func (a *Agent) dropVoterKeys() error {
	vk := a.voterKeys.Swap(nil)
	if vk == nil {
		return nil
	}
	files := []string{pki.SecretsKeyFile}
	if vk.CA != nil {
		files = append(files, pki.CAKeyFile)
	}
	var errs []error
	for _, f := range files {
		if err := os.Remove(filepath.Join(a.cfg.TLSDir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if d, err := os.Open(a.cfg.TLSDir); err == nil {
		d.Sync()
		d.Close()
	}
	a.logger.Info("voter keys deleted: this node is no longer a voter", "files", files)
	return errors.Join(errs...)
}

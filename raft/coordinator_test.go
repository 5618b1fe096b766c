package raft

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/state"

	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/policy"
)

func TestConfigValidate(t *testing.T) {
	dev, err := pki.NewDev()
	if err != nil {
		t.Fatal(err)
	}
	b, err := dev.Node("a")
	if err != nil {
		t.Fatal(err)
	}
	good := DefaultLocalConfig()
	good.NodeID, good.TLS = "a", b
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	if err := func() error { c := DefaultConfig(); c.NodeID, c.TLS = "a", b; return c.Validate() }(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	cases := map[string]func(*Config){
		"no id":          func(c *Config) { c.NodeID = "" },
		"no tls":         func(c *Config) { c.TLS = nil },
		"foreign name":   func(c *Config) { c.NodeID = "b" },
		"even voters":    func(c *Config) { c.Voters = 4 },
		"no clock":       func(c *Config) { c.Clock = nil },
		"lease > beat":   func(c *Config) { c.LeaderLeaseTimeout = time.Hour },
		"bad advertise":  func(c *Config) { c.AdvertiseAddr = "nohost" },
		"zero period":    func(c *Config) { c.ControlPeriod = 0 },
		"no bind":        func(c *Config) { c.BindAddr = "" },
		"large < normal": func(c *Config) { c.LargeVoters = 1 },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			c := good
			mutate(&c)
			if err := c.Validate(); err == nil {
				t.Fatal("got nil, want an error")
			}
			if _, err := Open(c); err == nil {
				t.Fatal("Open accepted an invalid config")
			}
		})
	}
}

func TestDataDirLocked(t *testing.T) {
	dev, err := pki.NewDev()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := dev.Node("a")
	cfg := DefaultLocalConfig()
	cfg.NodeID, cfg.TLS, cfg.DataDir, cfg.Bootstrap = "a", b, t.TempDir(), true
	c, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	if _, err := Open(cfg); !errors.Is(err, ErrDataDirLocked) {
		t.Fatalf("second open got %v, want ErrDataDirLocked", err)
	}
}

// TestRestartRestoresState stops a 3-node cluster with a snapshot on one
// node and log entries after it, restarts every node on its data dir and
// address, and checks the replicated state came back.
func TestRestartRestoresState(t *testing.T) {
	tc := newTestCluster(t, 3, localConfig(), true)
	l := tc.waitConfigured(3, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, id := range []string{"j1", "j2"} {
		if _, err := l.Submit(ctx, testJob(id)); err != nil {
			t.Fatal(err)
		}
	}
	tc.waitJob("j2", 10*time.Second)
	for _, c := range tc.nodes {
		if err := c.raft.Snapshot().Error(); err != nil {
			t.Fatalf("snapshot on %s: %v", c.ID(), err)
		}
	}
	// Entries after the snapshot come back from the log.
	rc := state.ReplicaComplete{Job: "j1", Version: 3, ManifestHash: "sha256:r", Size: 5, Source: "n00", Holder: "n01", At: time.Now()}
	if _, err := l.Submit(ctx, rc); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Submit(ctx, testJob("j3")); err != nil {
		t.Fatal(err)
	}
	tc.waitJob("j3", 10*time.Second)
	want := l.State()
	addrs := map[policy.NodeID]string{}
	for id, c := range tc.nodes {
		addrs[id] = c.Addr()
	}
	tc.shutdownAll()

	for id, addr := range addrs {
		cfg := tc.config(id, id == "n00") // the bootstrap flag must be ignored now
		cfg.BindAddr = addr
		c, err := Open(cfg)
		if err != nil {
			t.Fatalf("reopen %s: %v", id, err)
		}
		tc.nodes[id] = c
	}
	l = tc.leader(20 * time.Second)
	tc.waitJob("j3", 10*time.Second)
	for id, c := range tc.nodes {
		got := c.State()
		for jid, j := range want.Jobs {
			gj, ok := got.Jobs[jid]
			if !ok || gj.Owner != j.Owner || !gj.Submitted.Equal(j.Submitted) {
				t.Errorf("%s: job %s after restart got %+v, want %+v", id, jid, gj, j)
			}
		}
		cp, ok := got.FreshestCommitted("j1")
		if !ok || cp.Version != 3 || cp.Holders[0] != "n01" {
			t.Errorf("%s: catalogue after restart got %+v ok=%v, want v3 held by n01", id, cp, ok)
		}
	}
	servers, err := l.Servers()
	if err != nil || len(servers) != 3 {
		t.Fatalf("configuration after restart got %v (%v), want 3 servers", servers, err)
	}
}

// TestForeignCertificateCannotJoin adds a node whose certificate comes from
// another CA: the leader registers it as refused (gossip said it is there,
// its certificate did not verify), never adds it to the Raft configuration,
// it never receives the state, it cannot forward a command, and a client
// presenting a foreign certificate is refused by the listener.
func TestForeignCertificateCannotJoin(t *testing.T) {
	tc := newTestCluster(t, 2, localConfig(), false)
	tc.waitConfigured(1, 20*time.Second)
	other, err := pki.NewDev()
	if err != nil {
		t.Fatal(err)
	}
	fb, err := other.Node("intruder")
	if err != nil {
		t.Fatal(err)
	}
	cfg := tc.base
	cfg.NodeID, cfg.TLS = "intruder", fb
	evil, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer evil.Shutdown()
	tc.gossip.set(Member{ID: "intruder", RaftAddr: evil.Addr(), Building: "b9", Status: MemberAlive, Since: time.Now()})

	l := tc.leader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Submit(ctx, testJob("secret")); err != nil {
		t.Fatal(err)
	}
	tc.waitJob("secret", 10*time.Second)
	wait.For(tc.t, 10*time.Second, "the intruder registered as refused", func() bool {
		n, ok := l.Store().Node("intruder")
		return ok && !n.Admitted && strings.Contains(n.Refused, "certificate")
	})
	// Let the leader reconcile for a while (many ticks): the intruder
	// never enters the Raft configuration.
	ticks := l.Ticks()
	wait.For(tc.t, 10*time.Second, "ten more ticks", func() bool { return l.Ticks() >= ticks+10 })
	servers, _ := l.Servers()
	for _, s := range servers {
		if s.ID == "intruder" {
			t.Fatalf("the intruder is in the Raft configuration as %v", s.Role)
		}
	}
	if _, ok := evil.Store().Job("secret"); ok || evil.Store().Index() != 0 {
		t.Fatalf("intruder received replicated state (index %d)", evil.Store().Index())
	}
	if id, _ := evil.Leader(); id != "" {
		t.Fatalf("intruder knows leader %s", id)
	}
	// As the third member it would make the voter set 3 (and be the pick
	// for building spread); failing heartbeats keep it from a vote, so the
	// two legitimate nodes keep one voter.
	if v := tc.voters(l); slices.Contains(v, "intruder") || len(v) != 1 {
		t.Fatalf("voters got %v, want 1 without the intruder", v)
	}

	// The intruder's own dial to the leader fails verification of the
	// leader's certificate.
	leaderAddr := l.Addr()
	if _, err := evil.mux.dialKind(leaderAddr, muxForward, 2*time.Second); !errors.Is(err, pki.ErrForeignCA) {
		t.Fatalf("intruder dial got %v, want pki.ErrForeignCA", err)
	}
	// A client that trusts the cluster CA but presents a foreign
	// certificate is refused by the leader.
	cb, _ := tc.dev.Node("n00")
	conf := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{fb.Cert}, RootCAs: cb.Roots,
		ServerName: string(l.ID()), NextProtos: []string{alpnRaft}}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", leaderAddr, conf)
	if err == nil {
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err = conn.Write([]byte{muxForward}); err == nil {
			cmd, _ := state.EncodeCommand(testJob("evil"))
			_ = writeFrame(conn, cmd)
			_, err = bufio.NewReader(conn).ReadByte()
		}
		conn.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("foreign client got %v, want a certificate error", err)
	}
	if _, ok := l.Store().Job("evil"); ok {
		t.Fatal("command from a foreign certificate was applied")
	}
}

func TestSubmitRejectsInvalidCommandLocally(t *testing.T) {
	dev, _ := pki.NewDev()
	b, _ := dev.Node("solo")
	cfg := DefaultLocalConfig()
	cfg.NodeID, cfg.TLS, cfg.Bootstrap = "solo", b, true
	c, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Submit(ctx, state.SubmitJob{Job: state.JobRecord{Job: policy.Job{ID: "x"}}}); !errors.Is(err, state.ErrInvalidCommand) {
		t.Fatalf("job without a command got %v, want ErrInvalidCommand", err)
	}
	if _, err := c.Submit(ctx, testJob("ok")); err != nil {
		t.Fatalf("single-node submit: %v", err)
	}
	if _, ok := c.Store().Job("ok"); !ok {
		t.Fatal("job not in the state machine after Submit returned")
	}
	st := c.Status()
	if st.RaftState != "Leader" || st.Role != state.RoleVoter || st.LeaderID != "solo" || st.Term == 0 || st.StateIndex == 0 || len(st.Servers) != 1 {
		t.Fatalf("status got %+v, want the single voter leading", st)
	}
}

func FuzzForwardFrame(f *testing.F) {
	ok, _ := state.EncodeCommand(state.CancelJob{Job: "j"})
	var buf bytes.Buffer
	_ = writeFrame(&buf, ok)
	f.Add(buf.Bytes())
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte(`{"Index":3,"Code":"unknown-job","Error":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		frame, err := readFrame(bytes.NewReader(b), 1024)
		if err == nil && len(frame) > 1024 {
			t.Fatalf("frame of %d bytes passed a 1024-byte limit", len(frame))
		}
		if err == nil {
			_, _ = state.DecodeCommand(frame)
		}
		r, err := decodeReply(b)
		if err != nil {
			return
		}
		if e := r.err("l"); e != nil && (r.Error == "" && r.Code == "") {
			t.Fatal("empty reply decoded as an error")
		}
	})
}

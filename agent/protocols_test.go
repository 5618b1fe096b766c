package agent

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
)

// syncBuffer is a log sink goroutines may write to while the test reads.
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

// TestProtocolsFlagAppliesClusterWide: node-00 (which bootstraps and
// leads) runs with --protocols p2,p3 --fixed-interval 3m, node-01 with the
// defaults. The leader's settings are in force on both nodes' status
// (which names the leader and this node's own setting), the job's interval
// is the fixed one, and node-01 warns in its log that it disagrees.
func TestProtocolsFlagAppliesClusterWide(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	c.load = func() float64 { return 0.25 }
	var logs syncBuffer
	c.logger = func(name string) *slog.Logger {
		if name == "node-01" {
			return slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		}
		return testLogger().With("node", name)
	}
	cfg := c.config("node-00")
	cfg.Protocols, cfg.FixedInterval = "p2,p3", Duration(3*time.Minute)
	cfg.GPUs = []string{"RTX-4090:24GiB:8.9:x1"}
	lead := c.start(cfg)
	cfg1 := c.config("node-01")
	cfg1.GPUs = []string{"RTX-4090:24GiB:8.9:x1"}
	other := c.start(cfg1)
	wait.For(t, 30*time.Second, "node-01 registered", func() bool {
		_, ok := lead.agent.Coordinator().State().Nodes["node-01"]
		return ok
	})
	resp := call(t, lead, localapi.Request{Op: localapi.OpRun, Job: &localapi.JobRequest{Name: "fixed", Command: []string{"sleep", "600"}, GPUs: 1, LossBudget: time.Hour}})
	if resp.Error != "" {
		t.Fatalf("run: %s", resp.Error)
	}
	wait.For(t, 30*time.Second, "the fixed interval decided for the job", func() bool {
		for _, jd := range other.agent.Coordinator().State().Decisions.Jobs {
			if jd.Job == "fixed" {
				return jd.Interval == 3*time.Minute
			}
		}
		return false
	})
	p := other.agent.view.Web(time.Now()).Cluster.Protocols
	if p.P1 || !p.P2 || !p.P3 || p.FixedInterval != 3*time.Minute || p.DecidedBy != "node-00" || p.Agree || p.Local != "p1,p2,p3" ||
		!strings.Contains(p.Summary, "fixed interval 3m0s") {
		t.Errorf("node-01's protocols %+v: want node-00's p2,p3 with a 3m fixed interval, not agreeing with its own p1,p2,p3", p)
	}
	if p := lead.agent.view.Web(time.Now()).Cluster.Protocols; !p.Agree || p.DecidedBy != "node-00" {
		t.Errorf("node-00's protocols %+v: want its own, agreeing", p)
	}
	wait.For(t, 10*time.Second, "node-01's warning about the leader's settings", func() bool {
		return strings.Contains(logs.String(), "other protocol settings") && strings.Contains(logs.String(), "leader=node-00")
	})
	if n := strings.Count(logs.String(), "other protocol settings"); n != 1 {
		t.Errorf("node-01 warned %d times, want once per leader and setting", n)
	}
}

// TestGossipKeyFile: an agent given its gossip key in a file (not on the
// command line) joins the cluster; a bad file, or a key given both ways,
// stops it at start with a clear error.
func TestGossipKeyFile(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	first := c.start(c.config("node-00"))
	path := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(path, []byte(c.key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := c.config("node-01")
	cfg.GossipKey, cfg.GossipKeyFile = "", path
	second := c.start(cfg)
	wait.For(t, 30*time.Second, "node-01 (key from a file) seen alive by node-00", func() bool {
		for _, m := range first.agent.Status().Members {
			if m.Name == "node-01" && m.State == "alive" {
				return true
			}
		}
		return false
	})
	if !second.agent.Status().Encrypted {
		t.Error("node-01's gossip is not encrypted")
	}
	both := c.config("node-02")
	both.GossipKeyFile = path
	if _, err := New(both, testLogger()); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("key and key file: got %v, want an error saying not both", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.key")
	os.WriteFile(bad, []byte("not base64!"), 0o600)
	for _, p := range []string{bad, filepath.Join(t.TempDir(), "missing.key")} {
		cfg := c.config("node-03")
		cfg.GossipKey, cfg.GossipKeyFile = "", p
		if _, err := New(cfg, testLogger()); err == nil || !strings.Contains(err.Error(), "gossip key file") {
			t.Errorf("key file %s: got %v, want a gossip key file error", p, err)
		}
	}
}

package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
	"github.com/reclaimnet/reclaimnet/localapi"
)

// startIdentityAgent starts an agent process that keeps its identity in
// its data dir (--bootstrap or --token among extra).
func (c *processCluster) startIdentityAgent(name string, extra ...string) localapi.Info {
	c.t.Helper()
	args := append([]string{"agent", "--name", name, "--data-dir", c.dataDir(name), "--bind", "127.0.0.1", "--http", "",
		"--gossip-port", "0", "--raft-port", "0", "--transfer-port", "0", "--local-timings", "--log-level", "debug"}, extra...)
	return c.spawn(name, args, 60*time.Second)
}

// voters is the Raft voters as name's agent sees them.
func (c *processCluster) voters(name string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := localapi.Call(ctx, c.dataDir(name), localapi.Request{Op: localapi.OpMembers})
	if err != nil || resp.Status == nil {
		return nil
	}
	v := slices.Clone(resp.Status.Raft.Voters)
	slices.Sort(v)
	return v
}

// TestTokenJoinProcesses: real agent processes: the first bootstraps the
// cluster, two join with a token printed by 'token create' and become
// voters; with the first stopped, a fourth enrolls through another with
// 'join --token' and starts from its data dir alone, and a
// wrong token stops an agent with the reason and exit 1. A member
// restarted after the peer it joined through is gone finds the cluster
// from its own state.
func TestTokenJoinProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs four processes")
	}
	c := newProcessCluster(t)
	a := c.startIdentityAgent("lab-a", "--bootstrap")
	tok := strings.TrimSpace(c.mustRun("token", "create", "--ttl", "1h", "--data-dir", c.dataDir("lab-a")))
	if !strings.HasPrefix(tok, "rn1.") {
		t.Fatalf("token create printed %q", tok)
	}
	c.startIdentityAgent("lab-b", "--join", a.RaftAddr, "--token", tok)
	c.startIdentityAgent("lab-c", "--join", a.RaftAddr, "--token", tok)
	wait.For(t, 90*time.Second, "three voters", func() bool {
		return slices.Equal(c.voters("lab-b"), []string{"lab-a", "lab-b", "lab-c"})
	})
	// Voters fetch the CA key; then lab-a may go.
	for _, n := range []string{"lab-b", "lab-c"} {
		wait.For(t, 30*time.Second, n+" holds the CA key", func() bool {
			_, err := os.Stat(filepath.Join(c.dataDir(n), "tls", "ca-key.pem"))
			return err == nil
		})
	}
	pa := c.proc["lab-a"]
	pa.Process.Signal(syscall.SIGTERM)
	pa.Wait()
	delete(c.proc, "lab-a")

	binfo, err := os.ReadFile(filepath.Join(c.dataDir("lab-b"), localapi.InfoFile))
	if err != nil {
		t.Fatal(err)
	}
	var b localapi.Info
	json.Unmarshal(binfo, &b)
	// lab-d enrolls with 'join --token' before its agent starts, which
	// then needs nothing but its data dir.
	if out, err := c.run("join", "--token", tok, "--name", "lab-d", "--data-dir", c.dataDir("lab-d"), b.RaftAddr); err != nil || !strings.Contains(out, "enrolled") {
		t.Fatalf("join --token: %v: %s", err, out)
	}
	if _, err := c.run("join", "--token", tok, "--name", "lab-x", "--data-dir", c.dataDir("lab-b"), b.RaftAddr); err == nil || !strings.Contains(err.Error(), "keeps the identity") {
		t.Errorf("join --token into a running agent's data dir: %v", err)
	}
	c.startIdentityAgent("lab-d")
	wait.For(t, 90*time.Second, "lab-d a member seen by lab-c", func() bool {
		out, err := c.run("members", "--data-dir", c.dataDir("lab-c"))
		return err == nil && strings.Contains(out, "lab-d") && !strings.Contains(out, "refused")
	})

	// A wrong token: the agent exits 1 and says why.
	bad := tok[:len(tok)-1] + "0"
	if bad == tok {
		bad = tok[:len(tok)-1] + "1"
	}
	cmd := exec.Command(c.bin, "agent", "--name", "lab-e", "--data-dir", c.dataDir("lab-e"), "--bind", "127.0.0.1", "--http", "",
		"--gossip-port", "0", "--raft-port", "0", "--transfer-port", "0", "--join", b.RaftAddr, "--token", bad)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != ExitError || !strings.Contains(string(out), "the token pins") {
		t.Errorf("agent with a token naming another CA: %v, output %s", err, out)
	}

	// lab-b restarts; the peer it joined through (lab-a) is gone.
	pb := c.proc["lab-b"]
	pb.Process.Signal(syscall.SIGTERM)
	pb.Wait()
	c.startIdentityAgent("lab-b", "--join", a.RaftAddr, "--token", tok)
	wait.For(t, 90*time.Second, "restarted lab-b back among the voters", func() bool {
		v := c.voters("lab-b")
		return slices.Contains(v, "lab-b") && len(v) == 3 && !slices.Contains(v, "lab-a")
	})
}

package cli

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
)

// TestReclaimedAgentStaysUp runs the real binary as a service would (no
// --dev, the default --on-reclaim stay): a followed 'reclaim --notice'
// ends once the node has left, the agent process stays up, reclaimed
// (lend --status says so, cluster commands refuse), 'lend' brings the node
// back into its cluster, and SIGTERM still stops it with exit 0.
func TestReclaimedAgentStaysUp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs an agent process")
	}
	c := newProcessCluster(t)
	c.key = strings.TrimSpace(c.mustRun("keygen"))
	c.mustRun("tls", "ca", "create", "--dir", "ca")
	c.mustRun("tls", "cert", "create", "--node", "solo", "--ca-dir", "ca", "--out", filepath.Join("solo", "tls"))
	c.startAgent("solo", "--gossip-port", "0", "--raft-port", "0", "--enforce", "off", "--owner-check", "200ms")
	dir := c.dataDir("solo")
	proc := c.proc["solo"]
	exited := make(chan error, 1)
	go func() { exited <- proc.Wait() }()
	c.proc = map[string]*exec.Cmd{} // waited for here; killed below if still running
	t.Cleanup(func() { proc.Process.Kill() })
	wait.For(t, 60*time.Second, "solo leads its cluster", func() bool {
		out, err := c.run("members", "--data-dir", dir)
		return err == nil && strings.Contains(out, " leader ")
	})

	out := c.mustRun("reclaim", "--notice", "2s", "--data-dir", dir)
	if !strings.Contains(out, "its agent holds it reclaimed") || !strings.Contains(out, "why:               reclaimed by the owner (reclaimnet reclaim)") {
		t.Errorf("followed reclaim:\n%s", out)
	}
	select {
	case err := <-exited:
		t.Fatalf("the agent exited after the reclaim (%v); it must stay up", err)
	case <-time.After(time.Second):
	}
	if out := c.mustRun("lend", "--status", "--data-dir", dir); !strings.Contains(out, "state: reclaimed: reclaimed by the owner") ||
		!strings.Contains(out, "lendable again: only by reclaimnet lend") {
		t.Errorf("lend --status while reclaimed:\n%s", out)
	}
	if _, err := c.run("members", "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "is reclaimed, out of the cluster") {
		t.Errorf("members while reclaimed: %v, want the node reclaimed", err)
	}
	if out := c.mustRun("reclaim", "--status", "--data-dir", dir); !strings.Contains(out, "solo is reclaimed") || !strings.Contains(out, "owner's report") {
		t.Errorf("reclaim --status while reclaimed:\n%s", out)
	}

	if out := c.mustRun("reclaim", "--now", "--data-dir", dir, "--pin-dir", t.TempDir()); !strings.Contains(out, "solo is already reclaimed") {
		t.Errorf("reclaim --now while reclaimed:\n%s", out)
	}
	if out := c.mustRun("reclaim", "--notice", "1m", "--data-dir", dir); !strings.Contains(out, "solo is already reclaimed") {
		t.Errorf("reclaim --notice while reclaimed:\n%s", out)
	}
	if out := c.mustRun("lend", "--data-dir", dir); !strings.Contains(out, "state: lent: lent by the owner") {
		t.Errorf("lend:\n%s", out)
	}
	wait.For(t, 60*time.Second, "solo leads its cluster again", func() bool {
		out, err := c.run("members", "--data-dir", dir)
		return err == nil && strings.Contains(out, " leader ")
	})
	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the agent did not stop on SIGTERM")
	}
}
